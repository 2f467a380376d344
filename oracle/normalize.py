"""Named, justified normalizations. Values may be masked; keys, types, order and presence never are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Normalization:
    name: str
    paths: tuple[str, ...]  # JSON paths; "$.timings.*" masks every value under timings
    reason: str
    text: tuple[tuple[str, str], ...] = ()  # (regex, replacement) pairs for a body that is not JSON
    within: tuple[str, ...] = ()  # JSON paths of strings the text pairs are applied inside, instead of a mask
    any_type: bool = False  # the type masked too: only for what the reference reads from memory it never wrote


REGISTRY: dict[str, Normalization] = {n.name: n for n in (
    Normalization("timings", ("$.timings.*", "$[*].timings.*"), "wall-clock durations and rates"),
    Normalization("clocks", tuple(f"$.timings.{k}" for k in ("prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                                               "predicted_ms", "predicted_per_token_ms",
                                                               "predicted_per_second")),
                  "wall-clock durations and rates only: the token counts in timings stay compared"),
    Normalization("id_slot", ("$.id_slot", "$[*].id_slot"),
                  "b10621 picks a slot by prompt similarity, else least recently used; mlxcel the lowest free one"),
    Normalization("progress_time", ("$.prompt_progress.time_ms",), "a clock"),
    Normalization("created", ("$.created",), "a clock"),
    Normalization("models_created", ("$.data[*].created",), "GET /v1/models stamps each model with the clock"),
    Normalization("router_args", ("$.data[*].status.args",),
                  "the command line a router model is served with names the server's own program (and, while a "
                  "child runs, its port): b10621 spawns itself, mlxcel serves the model in process"),
    Normalization("completion_id", ("$.id", "$.message.id"), "random per response"),
    Normalization("system_fingerprint", ("$.system_fingerprint",), "the build's identity string"),
    Normalization("model_path", ("$.model_path",), "the GGUF path versus the MLX checkpoint path"),
    Normalization("probs", tuple(f"$.completion_probabilities[*].{k}" for k in (
        "logprob", "prob", "top_logprobs[*].logprob", "top_probs[*].prob")),
                  "the twins' logits differ ~1e-5: probability values are compared to 1e-3 by "
                  "conformance/test_probabilities.py, ids, text and order here"),
    Normalization("build_info", ("$.build_info",), "the build's identity string (b<build>-<commit> upstream)"),
    Normalization("chat_probs", ("$.choices[*].logprobs.content[*].logprob",
                                 "$.choices[*].logprobs.content[*].top_logprobs[*].logprob"),
                  "the twins' logits differ ~1e-5: ids, text, bytes and order are compared, the values are not"),
    Normalization("anthropic_cache_usage", ("$.usage.cache_read_input_tokens", "$.usage.input_tokens",
                                            "$.message.usage.cache_read_input_tokens", "$.message.usage.input_tokens"),
                  "how much of the prompt the cache served: b10621 reuses any common prefix, mlxcel whole 64-token "
                  "chunks (--cache-prompt's recorded divergence); an Anthropic body cannot turn the cache off"),
    Normalization("responses_ids", ("$.output[*].id", "$.created_at", "$.completed_at", "$.response.id",
                                    "$.response.created_at", "$.response.output[*].id", "$.item_id", "$.item.id",
                                    "$.timings.*"),
                  "the Responses API's random resp_/msg_ ids, its clocks and timings"),
    Normalization("tool_call_ids", ("$.choices[*].message.tool_calls[*].id", "$.choices[*].delta.tool_calls[*].id",
                                    "$.content[*].id", "$.content_block.id", "$.output[*].call_id",
                                    "$.item.call_id", "$.response.output[*].call_id"),
                  "b10621 hands every parsed tool call a random 32-character id (gen_tool_call_id)"),
    Normalization("verbose_echo", ("$.__verbose.id_slot", "$.__verbose.timings.*"),
                  "the native result a verbose chat answer embeds: its slot choice and clocks, as id_slot and timings"),
    Normalization("embedding_values", ("$[*].embedding[*][*]", "$.data[*].embedding[*]"),
                  "the twins' vectors differ ~1e-5 (ggml's fp16 GELU table turns float rounding into whole fp16 "
                  "steps): every component is compared within 1e-4 of the vector's length by "
                  "conformance/test_embeddings.py; count, shape, types and order here"),
    Normalization("rank_pooled_embedding", ("$[*].embedding[*][*]",),
                  "b10621's /embeddings under --reranking returns n_embd floats of which its rank head wrote the "
                  "first: the rest is whatever the output buffer held (zeros, denormals, or a NaN it prints as "
                  "null), so each component is masked with its type; the vector's count and length stay compared",
                  any_type=True),
    Normalization("embedding_base64", ("$.data[*].embedding",),
                  "a base64 vector holds the same ~1e-5 differences in its bytes: its JSON type and place compared"),
    Normalization("rerank_scores", ("$.results[*].relevance_score", "$[*].score"),
                  "the twins' scores differ ~1e-5: compared within 1e-4, with the order, by "
                  "conformance/test_embeddings.py; indices, order and keys here"),
    Normalization("template_date", (),
                  "a chat template that renders today's date (gpt-oss's strftime_now): a recording made on another "
                  "day differs there only; live, both servers render the same day",
                  text=((r"Current date: \d{4}-\d{2}-\d{2}", "Current date: <date>"),),
                  within=("$.__verbose.prompt",)),
    Normalization("stream_lookup_clocks", ("$[*].total_bytes", "$[*].started_at", "$[*].completed_at"),
                  "a stream session's clocks, and its size, which holds the stream's own clocks (timings digits)"),
    Normalization("vertex_predictions", ("$.predictions[*].timings.*", "$.predictions[*].id_slot"),
                  "POST /predict's answers hold each dispatched route's own clocks and slot choice (timings, id_slot)"),
    Normalization("slot_file_bytes", ("$.n_written", "$.n_read", "$.timings.*"),
                  "a slot file's size (b10621 writes its KV cache, mlxcel the tokens: POST /slots/:id_slot's recorded "
                  "divergence) and the action's clock"),
    Normalization("metrics_clocks", (),
                  "GET /metrics: the seconds counters and the tokens/s gauges are clocks; every count is compared",
                  text=((r"(\nllamacpp:(?:prompt_seconds_total|tokens_predicted_seconds_total|prompt_tokens_seconds|"
                         r"predicted_tokens_seconds) )[^\n]+", r"\1<clock>"),)),
    Normalization("mlxcel_metric_families", (),
                  "mlxcel's own families, which follow b10621's (GET /metrics's recorded divergence): dropped so "
                  "that b10621's are compared byte for byte",
                  text=((r"# HELP mlxcel:[^\n]*\n# TYPE mlxcel:[^\n]*\nmlxcel:[^\n]*\n", ""),)),
    Normalization("ui_build_ids", (),
                  "the reference's web UI is built with npm when the reference is built: its assets' content hashes "
                  "and SvelteKit's runtime id change from one build to the next, the page around them does not",
                  text=((r"(_app/immutable/(?:[\w.-]+/)*[\w-]+)\.[A-Za-z0-9_-]{8}\.(js|css)", r"\1.<hash>.\2"),
                        (r"__sveltekit_[a-z0-9]+", "__sveltekit_<id>"))),
)}
MASK = "<masked>"


@lru_cache(maxsize=None)
def _regex(pattern: str) -> re.Pattern:
    """"[*]" stands for any array index; a trailing ".*" for anything below the path."""
    body = pattern[:-2] if pattern.endswith(".*") else pattern
    rx = re.escape(body).replace(r"\[\*\]", r"\[\d+\]")
    return re.compile(rx + (r"[.\[].*" if pattern.endswith(".*") else ""))


def _matches(path: str, pattern: str) -> bool:
    return _regex(pattern).fullmatch(path) is not None


def normalize(value: Any, names: tuple[str, ...], fired: set[str] | None = None, path: str = "$") -> Any:
    """Mask the values the named rules cover; a masked value keeps its JSON type as a marker.

    `fired` collects the names of the rules that masked something.
    """
    for name in names:
        if any(_matches(path, p) for p in REGISTRY[name].paths):
            if fired is not None:
                fired.add(name)
            return [MASK, "any" if REGISTRY[name].any_type else type(value).__name__]
        if isinstance(value, str) and any(_matches(path, p) for p in REGISTRY[name].within):
            value = _substituted(value, name, fired)
    if isinstance(value, dict):
        return {k: normalize(v, names, fired, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, names, fired, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


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
