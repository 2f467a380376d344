"""The native /completion request as mlxcel reads it: the prompt plus b10621's resolved task parameters,
and the declared list of the fields mlxcel acts on (the claims gate reads it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import MISSING_PROMPT, ErrorKind, UpstreamError
from .task_params import TaskParams, Vocab, evaluate

log = logging.getLogger("mlxcel.api")

# Fields mlxcel serves as b10621 does (inert ones included where upstream's are). Every other schema field is
# type-checked, limited and echoed in generation_settings like b10621, but not acted on yet (its manifest
# entry says which issue owns it).
ACTED_ON: tuple[str, ...] = (
    "prompt",
    "n_predict",
    "ignore_eos",
    "return_tokens",
    "stream",
    "stop",
    "cache_prompt",
    "n_cache_reuse",
    "timings_per_token",
    "response_fields",
    "n_indent",
    "t_max_predict_ms",
    "return_progress",
    "n_keep",
    "n_discard",
    "n_cmpl",
    "id_slot",
    "sse_ping_interval",
    "verbose",
    "stream_options",
    "preserved_tokens",
    "grammar",
    "json_schema",
    "grammar_lazy",
    "grammar_triggers",
    "generation_prompt",
    # chat plumbing, acted on as upstream: none of it changes a native answer there either (the parser's
    # format index, a flag no parser reads, spans that only place context checkpoints, the stream switches)
    "chat_format",
    "parse_tool_calls",
    "message_delimiters",
    "chat_parser",
    "echo",
    "continue_final_message",
    "reasoning_format",
    "reasoning_budget_tokens",
    "reasoning_budget_start_tag",
    "reasoning_budget_end_tags",
    "reasoning_budget_message",
    "reasoning_control",
    # the sampler chain
    "seed",
    "temperature",
    "dynatemp_range",
    "dynatemp_exponent",
    "top_k",
    "top_p",
    "min_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "typical_p",
    "repeat_last_n",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "min_keep",
    "samplers",
    "logit_bias",
    "n_probs",
    "post_sampling_probs",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "adaptive_target",
    "adaptive_decay",
)
# Spellings of acted-on fields, and fields whose only effect is the echo or that change nothing b10621 shows
_QUIET = {"max_tokens", "max_completion_tokens", "n", "logprobs", "grammar_type"}


@dataclass(frozen=True)
class NativeCompletionRequest:
    prompt: Any
    params: TaskParams

    @classmethod
    def parse(
        cls,
        body: dict,
        n_slots: int = 1,
        vocab: Vocab | None = None,
        base: TaskParams | None = None,
        also_acted_on: frozenset[str] | None = None,
        route: str = "/completion",
    ) -> "NativeCompletionRequest":
        params = evaluate(body, n_slots, vocab, base)  # upstream's type checks and limits, in its order
        if "prompt" not in body:
            raise UpstreamError(MISSING_PROMPT, ErrorKind.INVALID_REQUEST)
        known = also_acted_on or frozenset()
        ignored = sorted(
            k for k in body if k not in ACTED_ON and k not in _QUIET and k not in known and body[k] is not None
        )
        if ignored:  # never silently: b10621 would act on these
            log.warning("%s: mlxcel does not act on the request field(s) %s yet", route, ", ".join(ignored))
        return cls(prompt=body["prompt"], params=params)


def native_completion_fields() -> list[str]:
    return list(ACTED_ON)
