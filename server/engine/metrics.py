"""b10621's server_metrics: cumulative counters since start, two buckets reset at every scrape (the gauges are
averaged over the window between two scrapes), and their Prometheus text (server_task_result_metrics)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    count: int = 0  # tokens
    steps: int = 0  # decode steps (the first generated token comes free with the prompt's logits)
    time_us: int = 0

    def add(self, n: int, steps: int, t_us: int) -> None:
        self.count += n
        self.steps += steps
        self.time_us += t_us

    def per_second(self) -> float:
        return self.steps / self.time_us * 1e6 if self.time_us > 0 else 0.0


@dataclass
class ServerMetrics:
    # b10621's t_start is ggml_time_us(): CLOCK_MONOTONIC in microseconds, what Process-Start-Time-Unix carries
    t_start: int = field(default_factory=lambda: time.monotonic_ns() // 1000)
    prompt: Bucket = field(default_factory=Bucket)
    predict: Bucket = field(default_factory=Bucket)
    prompt_bucket: Bucket = field(default_factory=Bucket)
    predict_bucket: Bucket = field(default_factory=Bucket)
    n_prompt_cached: int = 0
    n_tokens_max: int = 0
    n_decode: int = 0
    n_busy_slots: int = 0
    n_draft_tokens: int = 0
    n_draft_accepted: int = 0
    n_draft_verif_steps: int = 0
    n_accepted_per_pos: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_prompt(self, n: int, t_us: int) -> None:
        with self.lock:
            self.prompt.add(n, n, t_us)
            self.prompt_bucket.add(n, n, t_us)

    def add_prompt_cached(self, n: int) -> None:
        with self.lock:
            self.n_prompt_cached += n

    def post_decode(self, n_busy: int, slot_tokens: list[int]) -> None:
        """One llama_decode(): the slots processing in it, and every slot's token count."""
        with self.lock:
            self.n_decode += 1
            self.n_busy_slots += n_busy
            self.n_tokens_max = max([self.n_tokens_max, *slot_tokens])

    def on_prediction(self, n_gen: int, t_gen_us: int) -> None:
        steps = n_gen - 1 if n_gen > 0 else 0
        with self.lock:
            self.predict.add(n_gen, steps, t_gen_us)
            self.predict_bucket.add(n_gen, steps, t_gen_us)

    def on_drafts(self, n_draft: int, n_accepted: int, n_rounds: int, per_pos: list[int]) -> None:
        """A finished request's speculative counts (b10621's metrics_on_prediction)."""
        with self.lock:
            self.n_draft_tokens += n_draft
            self.n_draft_accepted += n_accepted
            self.n_draft_verif_steps += n_rounds
            if len(self.n_accepted_per_pos) < len(per_pos):
                self.n_accepted_per_pos += [0] * (len(per_pos) - len(self.n_accepted_per_pos))
            for i, n in enumerate(per_pos):
                self.n_accepted_per_pos[i] += n

    def scrape(self, n_processing: int, n_deferred: int) -> str:
        """The Prometheus text, then the buckets start over (b10621's metrics_reset_bucket)."""
        with self.lock:
            text = render(self, n_processing, n_deferred)
            self.prompt_bucket, self.predict_bucket = Bucket(), Bucket()
        return text


COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", lambda m: m.prompt.count),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", lambda m: m.n_prompt_cached),
    ("prompt_seconds_total", "Total time spent processing prompts", lambda m: m.prompt.time_us / 1e6),
    ("tokens_predicted_total", "Number of generation tokens processed", lambda m: m.predict.count),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens", lambda m: m.predict.time_us / 1e6),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
     lambda m: m.n_decode),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)", lambda m: m.n_tokens_max),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", lambda m: m.n_draft_tokens),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
     lambda m: m.n_draft_accepted),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
     lambda m: m.n_draft_verif_steps),
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
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
         m.n_busy_slots / max(m.n_decode, 1.0)),
    )
    lines = []
    for kind, items in (("counter", [(n, h, f(m)) for n, h, f in COUNTERS]), ("gauge", gauges)):
        for name, help_text, value in items:
            lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {_number(value)}"]
    if m.n_accepted_per_pos:  # a labeled counter: one series per draft position
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {n}' for i, n in enumerate(m.n_accepted_per_pos)]
    return "\n".join(lines) + "\n"
