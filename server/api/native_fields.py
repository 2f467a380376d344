"""b10621's native /completion schema (tools/server/server-schema.cpp), as data: the typed fields, their
aliases and hard limits, in declaration order. Requests are type-checked against it exactly as upstream
evaluates it: the first offending field answers 400 naming it; null means absent; soft limits clamp."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ErrorKind, UpstreamError, json_type_name, type_error

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "bool" | "int" | "float"
    aliases: tuple[str, ...] = ()
    hard: tuple[float, float] | None = None  # inclusive; out of range is a 400

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# Only the fields upstream checks by type alone (no custom handler); declaration order matters.
SCHEMA: tuple[Field, ...] = (
    Field("verbose", "bool"), Field("timings_per_token", "bool"), Field("stream", "bool"),
    Field("cache_prompt", "bool"), Field("return_tokens", "bool"), Field("return_progress", "bool"),
    Field("sse_ping_interval", "int", hard=(-1, INT32_MAX)),
    Field("n_predict", "int", ("max_completion_tokens", "max_tokens"), hard=(-1, INT32_MAX)),
    Field("n_indent", "int", hard=(0, INT32_MAX)), Field("n_keep", "int", hard=(-1, INT32_MAX)),
    Field("n_discard", "int", hard=(0, INT32_MAX)),
    Field("n_cmpl", "int", ("n",)),  # hard limits 1..--parallel, checked against the slot count
    Field("n_cache_reuse", "int", hard=(0, INT32_MAX)), Field("t_max_predict_ms", "int", hard=(-1, INT64_MAX)),
    Field("top_k", "int"), Field("top_p", "float"), Field("min_p", "float"), Field("top_n_sigma", "float"),
    Field("xtc_probability", "float"), Field("xtc_threshold", "float"), Field("typical_p", "float"),
    Field("temperature", "float"), Field("dynatemp_range", "float"), Field("dynatemp_exponent", "float"),
    Field("repeat_last_n", "int", hard=(0, INT32_MAX)), Field("repeat_penalty", "float"),
    Field("frequency_penalty", "float"), Field("presence_penalty", "float"), Field("dry_multiplier", "float"),
    Field("dry_allowed_length", "int", hard=(0, INT32_MAX)), Field("dry_penalty_last_n", "int", hard=(0, INT32_MAX)),
    Field("mirostat", "int"), Field("mirostat_tau", "float"), Field("mirostat_eta", "float"),
    Field("adaptive_target", "float"), Field("adaptive_decay", "float", hard=(0.0, 0.99)),
    Field("seed", "int"), Field("n_probs", "int", ("logprobs",)), Field("min_keep", "int", hard=(0, INT32_MAX)),
    Field("backend_sampling", "bool"), Field("post_sampling_probs", "bool"), Field("grammar_lazy", "bool"),
    Field("parse_tool_calls", "bool"), Field("echo", "bool"), Field("reasoning_control", "bool"),
    Field("reasoning_budget_tokens", "int", hard=(-1, INT32_MAX)), Field("ignore_eos", "bool"),
)
BY_NAME = {f.name: f for f in SCHEMA}


def _fmt(kind: str, value) -> str:
    """std::to_string of the field's C++ type."""
    return f"{value:f}" if kind == "float" else str(int(value))


def present(body: dict, f: Field) -> tuple[str, object] | None:
    """(the spelling used, its value) for the first non-null spelling, as upstream's eval picks it."""
    for n in f.names:
        if body.get(n) is not None:
            return n, body[n]
    return None


def check_value(f: Field, name: str, value):
    """The value as upstream reads it, or its 400."""
    if f.kind == "bool":
        if not isinstance(value, bool):
            raise UpstreamError(f"Field '{name}': {type_error('boolean', value)}", ErrorKind.INVALID_REQUEST)
        return value
    if json_type_name(value) not in ("number", "boolean"):  # nlohmann converts a boolean to a number
        raise UpstreamError(f"Field '{name}': {type_error('number', value)}", ErrorKind.INVALID_REQUEST)
    value = float(value) if f.kind == "float" else int(value)  # get<int>() truncates a fraction
    if f.hard is not None and not f.hard[0] <= value <= f.hard[1]:
        lo, hi = f.hard
        raise UpstreamError(f"Field '{name}': Value must be between {_fmt(f.kind, lo)} <= value <= "
                            f"{_fmt(f.kind, hi)}, but got {_fmt(f.kind, value)}", ErrorKind.INVALID_REQUEST)
    return value


def check_request(body: dict, n_slots: int) -> dict[str, object]:
    """Type-check every schema field in declaration order; returns {field name: value} of those present."""
    out: dict[str, object] = {}
    for f in SCHEMA:
        got = present(body, f)
        if got is None:
            continue
        name, value = got
        value = check_value(f, name, value)
        if f.name == "n_cmpl" and not 1 <= value <= n_slots:
            raise UpstreamError(f"Field '{name}': Value must be between 1 <= value <= {n_slots}, but got {value}",
                                ErrorKind.INVALID_REQUEST)
        out[f.name] = value
    return out
