"""b10621's Prometheus text for GET /metrics (server_task_result_metrics), then mlxcel's own families."""

from __future__ import annotations

from ..engine.commands import MetricsSnapshot
from ..engine.metrics import ServerMetrics

COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", lambda m: m.prompt.count),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", lambda m: m.n_prompt_cached),
    ("prompt_seconds_total", "Total time spent processing prompts", lambda m: m.prompt.time_us / 1e6),
    ("tokens_predicted_total", "Number of generation tokens processed", lambda m: m.predict.count),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens", lambda m: m.predict.time_us / 1e6),
    (
        "n_decode_total",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
        lambda m: m.n_decode,
    ),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)", lambda m: m.n_tokens_max),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", lambda m: m.n_draft_tokens),
    (
        "spec_decode_num_accepted_tokens_total",
        "Speculative: Total draft tokens accepted by the target model",
        lambda m: m.n_draft_accepted,
    ),
    (
        "spec_decode_num_drafts_total",
        "Speculative: Total speculative decoding verification steps",
        lambda m: m.n_draft_verif_steps,
    ),
)


def _number(value: float) -> str:
    """A double as C++'s ostream << writes it: %g with six significant digits."""
    return f"{float(value):g}"


def render(m: ServerMetrics, n_processing: int, n_deferred: int) -> str:
    gauges = (
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", m.prompt_bucket.per_second()),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", m.predict_bucket.per_second()),
        ("requests_processing", "Number of requests processing", n_processing),
        ("requests_deferred", "Number of requests deferred", n_deferred),
        (
            "n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call",
            m.n_busy_slots / max(m.n_decode, 1.0),
        ),
    )
    lines = []
    for kind, items in (("counter", [(n, h, f(m)) for n, h, f in COUNTERS]), ("gauge", gauges)):
        for name, help_text, value in items:
            lines += [
                f"# HELP llamacpp:{name} {help_text}",
                f"# TYPE llamacpp:{name} {kind}",
                f"llamacpp:{name} {_number(value)}",
            ]
    if m.n_accepted_per_pos:  # a labeled counter: one series per draft position
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {n}' for i, n in enumerate(m.n_accepted_per_pos)]
    return "\n".join(lines) + "\n"


def render_own(snapshot: MetricsSnapshot) -> str:
    """mlxcel's families, after b10621's: the prompt cache."""
    if snapshot.prompt_cache_bytes is None:
        return ""
    lines = [
        "# HELP mlxcel:prompt_cache_bytes Bytes held by the prompt cache",
        "# TYPE mlxcel:prompt_cache_bytes gauge",
        f"mlxcel:prompt_cache_bytes {snapshot.prompt_cache_bytes}",
        "# HELP mlxcel:prompt_cache_entries Prompts held by the prompt cache",
        "# TYPE mlxcel:prompt_cache_entries gauge",
        f"mlxcel:prompt_cache_entries {snapshot.prompt_cache_entries}",
    ]
    return "\n".join(lines) + "\n"


def render_snapshot(snapshot: MetricsSnapshot) -> str:
    return render(snapshot.counters, snapshot.n_processing, snapshot.n_deferred) + render_own(snapshot)


def render_ranks(seconds: list[float]) -> str:
    """A model split over ranks: each rank's time for the same probe product (distributed.probe_seconds), and that
    against the fastest rank's; a rank far above 1 holds every pass's collectives (a slower or busier machine)."""
    if not seconds:
        return ""
    fastest = min(seconds) or 1e-9
    lines = [
        "# HELP mlxcel:rank_probe_seconds Seconds each rank took for the same product, measured at this scrape",
        "# TYPE mlxcel:rank_probe_seconds gauge",
        *(f'mlxcel:rank_probe_seconds{{rank="{r}"}} {_number(s)}' for r, s in enumerate(seconds)),
        "# HELP mlxcel:rank_slowdown Each rank's probe time over the fastest rank's",
        "# TYPE mlxcel:rank_slowdown gauge",
        *(f'mlxcel:rank_slowdown{{rank="{r}"}} {_number(s / fastest)}' for r, s in enumerate(seconds)),
    ]
    return "\n".join(lines) + "\n"
