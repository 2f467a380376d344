"""Named, justified normalizations. Values may be masked; keys, types, order and presence never are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .jsonspans import Span, spans, splice


@dataclass(frozen=True)
class Normalization:
    name: str
    paths: tuple[str, ...]  # JSON paths; "$.timings.*" masks every value under timings
    reason: str
    text: tuple[tuple[str, str], ...] = ()  # (regex, replacement) pairs for a body that is not JSON
    within: tuple[str, ...] = ()  # JSON paths of strings the text pairs are applied inside, instead of a mask
    any_type: bool = False  # the type masked too: only for what the reference reads from memory it never wrote
    tolerance: float | None = None  # the numbers at `paths` compared within this, not masked
    flag_lists: tuple[str, ...] = ()  # JSON paths of argument lists in which the value after a `flags` item is masked
    flags: tuple[str, ...] = ()


# The one tolerance every probability value is compared within (`probs`, `chat_probs`): the twins' logits differ
# ~1e-5 on F32 (the dot products' summation order), a few 1e-4 on Q4_1 (the quantized kernels' rounding); 1e-3
# in logprob and in prob keeps the comparison far above that noise yet fails a wrong softmax, temperature or
# candidate set, whose errors are 1e-2 and more.
PROB_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Approx:
    """A number compared within a tolerance (its rule's), not byte for byte."""

    value: float
    tolerance: float


# the clocks and rates in a `timings` object; its counts (prompt_n, cache_n, predicted_n, draft_n, ...) are not
CLOCK_KEYS = (
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "save_ms",
    "restore_ms",
)  # the last two: a slot action's

REGISTRY: dict[str, Normalization] = {
    n.name: n
    for n in (
        Normalization(
            "clocks",
            tuple(f"{at}.timings.{k}" for at in ("$", "$[*]") for k in CLOCK_KEYS),
            "wall-clock durations and rates only: the token counts in timings stay compared",
        ),
        Normalization(
            "id_slot",
            ("$.id_slot", "$[*].id_slot"),
            "b10621 picks a slot by prompt similarity, else least recently used; mlxcel the lowest free one",
        ),
        Normalization("progress_time", ("$.prompt_progress.time_ms",), "a clock"),
        Normalization("created", ("$.created",), "a clock"),
        Normalization("models_created", ("$.data[*].created",), "GET /v1/models stamps each model with the clock"),
        Normalization(
            "router_args",
            ("$.data[*].status.args[0]",),
            "the command line a router model is served with names the server's own program (and, while a "
            "child runs, its port): b10621 spawns itself, mlxcel serves the model in process; every other "
            "argument is compared",
            flag_lists=("$.data[*].status.args",),
            flags=("--port",),
        ),
        Normalization("completion_id", ("$.id", "$.message.id"), "random per response"),
        Normalization("system_fingerprint", ("$.system_fingerprint",), "the build's identity string"),
        Normalization("model_path", ("$.model_path",), "the GGUF path versus the MLX checkpoint path"),
        Normalization(
            "probs",
            tuple(
                f"$.completion_probabilities[*].{k}"
                for k in ("logprob", "prob", "top_logprobs[*].logprob", "top_probs[*].prob")
            ),
            "the twins' logits differ: probability values compared within PROB_TOLERANCE; ids, text, bytes "
            "and order exactly",
            tolerance=PROB_TOLERANCE,
        ),
        Normalization("build_info", ("$.build_info",), "the build's identity string (b<build>-<commit> upstream)"),
        Normalization(
            "chat_probs",
            ("$.choices[*].logprobs.content[*].logprob", "$.choices[*].logprobs.content[*].top_logprobs[*].logprob"),
            "the twins' logits differ: logprob values compared within PROB_TOLERANCE; ids, text, bytes and "
            "order exactly",
            tolerance=PROB_TOLERANCE,
        ),
        Normalization(
            "responses_ids",
            (
                "$.output[*].id",
                "$.created_at",
                "$.completed_at",
                "$.response.id",
                "$.response.created_at",
                "$.response.output[*].id",
                "$.item_id",
                "$.item.id",
                *(f"$.timings.{k}" for k in CLOCK_KEYS),
            ),
            "the Responses API's random resp_/msg_ ids and its clocks (its timings' counts stay compared)",
        ),
        Normalization(
            "tool_call_ids",
            (
                "$.choices[*].message.tool_calls[*].id",
                "$.choices[*].delta.tool_calls[*].id",
                "$.content[*].id",
                "$.content_block.id",
                "$.output[*].call_id",
                "$.item.call_id",
                "$.response.output[*].call_id",
            ),
            "b10621 hands every parsed tool call a random 32-character id (gen_tool_call_id)",
        ),
        Normalization(
            "verbose_echo",
            ("$.__verbose.id_slot", *(f"$.__verbose.timings.{k}" for k in CLOCK_KEYS)),
            "the native result a verbose chat answer embeds: its slot choice and clocks, as id_slot and timings",
        ),
        Normalization(
            "embedding_values",
            ("$[*].embedding[*][*]", "$.data[*].embedding[*]"),
            "the twins' vectors differ ~1e-5 (ggml's fp16 GELU table turns float rounding into whole fp16 "
            "steps): every component is compared within 1e-4 of the vector's length by "
            "conformance/test_embeddings.py; count, shape, types and order here",
        ),
        Normalization(
            "rank_pooled_embedding",
            ("$[*].embedding[*][*]",),
            "b10621's /embeddings under --reranking returns n_embd floats of which its rank head wrote the "
            "first: the rest is whatever the output buffer held (zeros, denormals, or a NaN it prints as "
            "null), so each component is masked with its type; the vector's count and length stay compared",
            any_type=True,
        ),
        Normalization(
            "embedding_base64",
            ("$.data[*].embedding",),
            "a base64 vector holds the same ~1e-5 differences in its bytes: its JSON type and place compared",
        ),
        Normalization(
            "rerank_scores",
            ("$.results[*].relevance_score", "$[*].score"),
            "the twins' scores differ ~1e-5: compared within 1e-4, with the order, by "
            "conformance/test_embeddings.py; indices, order and keys here",
        ),
        Normalization(
            "template_date",
            (),
            "a chat template that renders today's date (gpt-oss's strftime_now): a recording made on another "
            "day differs there only; live, both servers render the same day",
            text=((r"Current date: \d{4}-\d{2}-\d{2}", "Current date: <date>"),),
            within=("$.__verbose.prompt",),
        ),
        Normalization(
            "stream_lookup_clocks",
            ("$[*].total_bytes", "$[*].started_at", "$[*].completed_at"),
            "a stream session's clocks, and its size, which holds the stream's own clocks (timings digits)",
        ),
        Normalization(
            "vertex_predictions",
            ("$.predictions[*].id_slot", *(f"$.predictions[*].timings.{k}" for k in CLOCK_KEYS)),
            "POST /predict's answers hold each dispatched route's own clocks and slot choice (timings, id_slot)",
        ),
        Normalization(
            "slot_file_bytes",
            ("$.n_written", "$.n_read", *(f"$.timings.{k}" for k in ("save_ms", "restore_ms"))),
            "a slot file's size (b10621 writes its KV cache, mlxcel the tokens: POST /slots/:id_slot's recorded "
            "divergence) and the action's clock",
        ),
        Normalization(
            "metrics_clocks",
            (),
            "GET /metrics: the seconds counters and the tokens/s gauges are clocks; every count is compared",
            text=(
                (
                    r"(\nllamacpp:(?:prompt_seconds_total|tokens_predicted_seconds_total|prompt_tokens_seconds|"
                    r"predicted_tokens_seconds) )[^\n]+",
                    r"\1<clock>",
                ),
            ),
        ),
        Normalization(
            "mlxcel_metric_families",
            (),
            "mlxcel's own families, which follow b10621's (GET /metrics's recorded divergence): dropped so "
            "that b10621's are compared byte for byte",
            text=((r"# HELP mlxcel:[^\n]*\n# TYPE mlxcel:[^\n]*\nmlxcel:[^\n]*\n", ""),),
        ),
        Normalization(
            "ui_build_ids",
            (),
            "the reference's web UI is built with npm when the reference is built: its assets' content hashes "
            "and SvelteKit's runtime id change from one build to the next, the page around them does not",
            text=(
                (r"(_app/immutable/(?:[\w.-]+/)*[\w-]+)\.[A-Za-z0-9_-]{8}\.(js|css)", r"\1.<hash>.\2"),
                (r"__sveltekit_[a-z0-9]+", "__sveltekit_<id>"),
            ),
        ),
    )
}
MASK = "<masked>"


@lru_cache(maxsize=None)
def _regex(pattern: str) -> re.Pattern:
    """ "[*]" stands for any array index; a trailing ".*" for anything below the path."""
    body = pattern[:-2] if pattern.endswith(".*") else pattern
    rx = re.escape(body).replace(r"\[\*\]", r"\[\d+\]")
    return re.compile(rx + (r"[.\[].*" if pattern.endswith(".*") else ""))


def _matches(path: str, pattern: str) -> bool:
    return _regex(pattern).fullmatch(path) is not None


def normalize(value: Any, names: tuple[str, ...], fired: set[str] | None = None, path: str = "$") -> Any:
    """Mask the values the named rules cover; a masked value keeps its JSON type as a marker, a number a rule
    compares within a tolerance becomes an `Approx`.

    `fired` collects the names of the rules that masked something.
    """
    for name in names:
        rule = REGISTRY[name]
        if any(_matches(path, p) for p in rule.paths):
            if rule.tolerance is not None:
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue  # not a number: compared exactly
                if fired is not None:
                    fired.add(name)
                return Approx(value, rule.tolerance)
            if fired is not None:
                fired.add(name)
            return [MASK, "any" if rule.any_type else type(value).__name__]
        if isinstance(value, str) and any(_matches(path, p) for p in rule.within):
            value = _substituted(value, name, fired)
    if isinstance(value, dict):
        return {k: normalize(v, names, fired, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        flagged = _flag_values(value, names, path, fired)
        return [
            [MASK, type(v).__name__] if i in flagged else normalize(v, names, fired, f"{path}[{i}]")
            for i, v in enumerate(value)
        ]
    return value


def _flag_values(items: list, names: tuple[str, ...], path: str, fired: set[str] | None) -> set[int]:
    """The indices of an argument list whose values follow a flag a rule masks the value of (--port N)."""
    out: set[int] = set()
    for name in names:
        rule = REGISTRY[name]
        if rule.flags and any(_matches(path, p) for p in rule.flag_lists):
            hits = {i + 1 for i, v in enumerate(items[:-1]) if v in rule.flags}
            if hits and fired is not None:
                fired.add(name)
            out |= hits
    return out


def is_mask(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and value[0] == MASK


def masked_bytes(raw: bytes, original: Any, normalized: Any, names: tuple[str, ...]) -> bytes:
    """The wire bytes of a JSON body with only what the rules masked cut out: every other byte (escaping, float
    spelling, spacing) stays as the server wrote it, for a byte comparison after masking."""
    if normalized == original:  # nothing masked (an Approx never equals its number)
        return raw
    edits: list[tuple[int, int, bytes]] = []
    _edits(spans(raw), raw, original, normalized, names, edits)
    return splice(raw, edits)


def _edits(
    span: Span, raw: bytes, original: Any, normalized: Any, names: tuple[str, ...], edits: list[tuple[int, int, bytes]]
) -> None:
    if isinstance(normalized, Approx):
        edits.append((span.start, span.end, b"\x00~number\x00"))
    elif is_mask(normalized) and normalized != original:
        edits.append((span.start, span.end, f"\x00{MASK}:{normalized[1]}\x00".encode()))
    elif isinstance(normalized, str) and normalized != original:  # a `within` rule rewrote part of the string
        edits.append(
            (
                span.start,
                span.end,
                normalize_text(raw[span.start : span.end], tuple(n for n in names if REGISTRY[n].within)),
            )
        )
    elif isinstance(normalized, dict):
        for k, v in normalized.items():
            _edits(span.children[k], raw, original[k], v, names, edits)
    elif isinstance(normalized, list):
        for child, o, v in zip(span.children, original, normalized, strict=False):
            _edits(child, raw, o, v, names, edits)


def _substituted(text: str, name: str, fired: set[str] | None) -> str:
    for pattern, replacement in REGISTRY[name].text:
        new = re.sub(pattern, replacement, text)
        if new != text and fired is not None:
            fired.add(name)
        text = new
    return text


def normalize_text(body: bytes, names: tuple[str, ...], fired: set[str] | None = None) -> bytes:
    """A non-JSON body with the named rules' text patterns replaced."""
    for name in names:
        for pattern, replacement in REGISTRY[name].text:
            new = re.sub(pattern.encode(), replacement.encode(), body)
            if new != body and fired is not None:
                fired.add(name)
            body = new
    return body
