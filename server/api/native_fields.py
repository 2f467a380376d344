"""b10621's native /completion schema (tools/server/server-schema.cpp), as data: every field in declaration
order with its spellings, C++ type and limits. Upstream evaluates the fields in this order, so the first
offending field answers 400 naming the spelling used; null means absent; soft limits clamp, hard ones refuse.
How each value is read lives in task_params.py."""

from __future__ import annotations

from dataclasses import dataclass

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLT_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Field:
    name: str
    # "bool" | "int" (int32_t) | "int64" | "uint32" | "float" | "str" | "json" (a custom handler) | "nested"
    kind: str
    aliases: tuple[str, ...] = ()
    hard: tuple[float, float] | None = None  # inclusive; out of range is a 400
    soft: tuple[float, float] | None = None  # inclusive; out of range is clamped

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _f(name: str, kind: str, *aliases: str, hard=None, soft=None) -> Field:
    return Field(name, kind, aliases, hard, soft)


SCHEMA: tuple[Field, ...] = (
    _f("verbose", "bool"),
    _f("timings_per_token", "bool"),
    _f("stream", "bool"),
    _f("stream_options", "nested"),  # its one subfield: include_usage (bool)
    _f("cache_prompt", "bool"),
    _f("return_tokens", "bool"),
    _f("return_progress", "bool"),
    _f("sse_ping_interval", "int", hard=(-1, INT32_MAX)),
    _f("n_predict", "int", "max_completion_tokens", "max_tokens", hard=(-1, INT32_MAX)),
    _f("n_indent", "int", hard=(0, INT32_MAX)),
    _f("n_keep", "int", hard=(-1, INT32_MAX)),
    _f("n_discard", "int", hard=(0, INT32_MAX)),
    _f("n_cmpl", "int", "n"),  # hard limits 1..--parallel: the slot count is known per server
    _f("n_cache_reuse", "int", hard=(0, INT32_MAX)),
    _f("t_max_predict_ms", "int64", hard=(-1, INT64_MAX)),
    _f("response_fields", "json"),
    _f("top_k", "int", soft=(0, INT32_MAX)),
    _f("top_p", "float", soft=(0.0, 1.0)),
    _f("min_p", "float", soft=(0.0, 1.0)),
    _f("top_n_sigma", "float"),
    _f("xtc_probability", "float", soft=(0.0, 1.0)),
    _f("xtc_threshold", "float", soft=(0.0, 1.0)),
    _f("typical_p", "float"),
    _f("temperature", "float", soft=(0.0, float("inf"))),
    _f("dynatemp_range", "float"),
    _f("dynatemp_exponent", "float"),
    _f("repeat_last_n", "int", hard=(0, INT32_MAX)),
    _f("repeat_penalty", "float"),
    _f("frequency_penalty", "float"),
    _f("presence_penalty", "float"),
    _f("dry_multiplier", "float"),
    _f("dry_base", "json"),  # a float; below 1.0 means the server default
    _f("dry_allowed_length", "int", hard=(0, INT32_MAX)),
    _f("dry_penalty_last_n", "int", hard=(0, INT32_MAX)),
    _f("mirostat", "int", soft=(0, 2)),
    _f("mirostat_tau", "float"),
    _f("mirostat_eta", "float"),
    _f("adaptive_target", "float", soft=(-FLT_MAX, 1.0)),
    _f("adaptive_decay", "float", hard=(0.0, 0.99)),
    _f("seed", "uint32"),
    _f("n_probs", "int", "logprobs"),
    _f("min_keep", "int", hard=(0, INT32_MAX)),
    _f("backend_sampling", "bool"),
    _f("post_sampling_probs", "bool"),
    _f("lora", "json"),
    _f("dry_sequence_breakers", "json"),
    _f("json_schema", "json", "grammar"),
    _f("grammar_lazy", "bool"),
    _f("chat_format", "json"),
    _f("reasoning_format", "str"),
    _f("generation_prompt", "str"),
    _f("parse_tool_calls", "bool"),
    _f("chat_parser", "str"),
    _f("continue_final_message", "json"),
    _f("echo", "bool"),
    _f("preserved_tokens", "json"),
    _f("grammar_triggers", "json"),
    _f("reasoning_control", "bool"),
    _f("reasoning_budget_tokens", "int", hard=(-1, INT32_MAX)),
    _f("reasoning_budget_start_tag", "str"),
    _f("reasoning_budget_end_tags", "json", "reasoning_budget_end_tag"),
    _f("reasoning_budget_message", "str"),
    _f("logit_bias", "json"),
    _f("ignore_eos", "bool"),
    _f("stop", "json"),
    _f("samplers", "json"),
)
BY_NAME = {f.name: f for f in SCHEMA}


def present(body: dict, f: Field) -> tuple[str, object] | None:
    """(the spelling used, its value) for the first non-null spelling, as upstream's eval picks it."""
    for n in f.names:
        if body.get(n) is not None:
            return n, body[n]
    return None
