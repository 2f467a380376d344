"""A completion request's resolved parameters, as b10621's eval_llama_cmpl_schema computes them.

`evaluate` walks native_fields.SCHEMA in declaration order over the request body, starting from the
server's defaults (`TaskParams()`, b10621's common_params defaults): typed fields are converted and
limited the way nlohmann::json and field_num<T> do it, custom fields by a handler per field with upstream's
rules and error wording. `generation_settings` renders the result as task_params::to_json() does.
The sampling values are recorded and echoed; which of them mlxcel acts on is schemas.ACTED_ON.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from ..chat.formats import CHAT_FORMATS, REASONING_FORMATS
from ..engine.rng import LLAMA_DEFAULT_SEED
from ..engine.types import SamplingParams
from ..errors import ErrorKind, UpstreamError, json_type_name, type_error
from ..grammar.json_schema import json_schema_to_grammar
from ..peg import load as load_arena
from .native_fields import SCHEMA, Field, present

DEFAULT_SAMPLERS = SamplingParams().samplers
DEFAULT_DRY_BREAKERS = ("\n", ":", '"', "*")
GRAMMAR_TRIGGER_TOKEN, GRAMMAR_TRIGGER_WORD = 0, 1

# common_sampler_type names, their one-letter spellings and the accepted aliases (common/sampling.cpp)
SAMPLER_CHARS = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}
SAMPLER_NAMES: dict[str, str] = {n: n for n in SAMPLER_CHARS.values()}
for _n in list(SAMPLER_NAMES):
    if "_" in _n:
        SAMPLER_NAMES[_n.replace("_", "-")] = _n
        SAMPLER_NAMES[_n.replace("_", "")] = _n
SAMPLER_NAMES.update({"nucleus": "top_p", "temp": "temperature", "typ": "typ_p"})


_S = SamplingParams()


def f32(x: float) -> float:
    """A C++ float, as a Python float (what nlohmann prints when it widens it to double)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


@dataclass
class TaskParams:
    """task_params with b10621's defaults; the plain data the engine and the response read."""

    verbose: bool = False
    timings_per_token: bool = False
    stream: bool = False
    include_usage: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    return_progress: bool = False
    sse_ping_interval: int = 30
    n_predict: int = -1
    n_indent: int = 0
    n_keep: int = 0
    n_discard: int = 0
    n_cmpl: int = 1
    n_cache_reuse: int = 0
    t_max_predict_ms: int = -1
    response_fields: list[str] = field(default_factory=list)
    # sampling: common_params_sampling's defaults (kept once, in SamplingParams), as C++ floats
    top_k: int = _S.top_k
    top_p: float = f32(_S.top_p)
    min_p: float = f32(_S.min_p)
    top_n_sigma: float = f32(_S.top_n_sigma)
    xtc_probability: float = f32(_S.xtc_probability)
    xtc_threshold: float = f32(_S.xtc_threshold)
    typical_p: float = f32(_S.typical_p)
    temperature: float = f32(_S.temperature)
    dynatemp_range: float = f32(_S.dynatemp_range)
    dynatemp_exponent: float = f32(_S.dynatemp_exponent)
    repeat_last_n: int = _S.repeat_last_n
    repeat_penalty: float = f32(_S.repeat_penalty)
    frequency_penalty: float = f32(_S.frequency_penalty)
    presence_penalty: float = f32(_S.presence_penalty)
    dry_multiplier: float = f32(_S.dry_multiplier)
    dry_base: float = f32(_S.dry_base)
    dry_allowed_length: int = _S.dry_allowed_length
    dry_penalty_last_n: int = _S.dry_penalty_last_n
    mirostat: int = _S.mirostat
    mirostat_tau: float = f32(_S.mirostat_tau)
    mirostat_eta: float = f32(_S.mirostat_eta)
    adaptive_target: float = f32(_S.adaptive_target)
    adaptive_decay: float = f32(_S.adaptive_decay)
    seed: int = LLAMA_DEFAULT_SEED
    n_probs: int = 0
    min_keep: int = 0
    backend_sampling: bool = False
    speculative_types: str = "none"  # --spec-type as b10621 accumulates it ("none" first), comma-joined
    post_sampling_probs: bool = False
    lora: dict[int, float] = field(default_factory=dict)
    dry_sequence_breakers: list[str] = field(default_factory=lambda: list(DEFAULT_DRY_BREAKERS))
    grammar: str = ""
    grammar_lazy: bool = False
    chat_format: int = 0
    reasoning_format: str = "deepseek"
    reasoning_in_content: bool = False
    generation_prompt: str = ""
    grammar_type: str = "user"  # common_grammar_type: user, output_format (a schema) or tool_calls (chat's)
    parse_tool_calls: bool = False
    chat_parser: str = ""
    is_continuation: bool = False
    echo: bool = False
    preserved_tokens: set[int] = field(default_factory=set)
    grammar_triggers: list[dict] = field(default_factory=list)
    reasoning_control: bool = False
    reasoning_budget_tokens: int = -1
    reasoning_budget_start_tag: str = ""
    reasoning_budget_end_tags: list[str] = field(default_factory=list)
    reasoning_budget_message: str | None = None  # None: absent, nothing is forced when the budget is spent
    logit_bias: list[tuple[int, float]] = field(default_factory=list)
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)  # the antiprompt
    samplers: list[str] = field(default_factory=lambda: list(DEFAULT_SAMPLERS))


class Vocab(Protocol):
    vocab_size: int
    eog_ids: frozenset[int]

    def tokenize_mixed(self, prompt, add_special: bool, parse_special: bool) -> list[int]: ...


def _invalid(message: str) -> UpstreamError:
    return UpstreamError(message, ErrorKind.INVALID_REQUEST)


# --- nlohmann::json get<T>() ---------------------------------------------------------------------------


def get_bool(v) -> bool:
    if not isinstance(v, bool):
        raise _invalid(type_error("boolean", v))
    return v


def get_str(v) -> str:
    if not isinstance(v, str):
        raise _invalid(type_error("string", v))
    return v


def get_number(v) -> int | float:
    if json_type_name(v) not in ("number", "boolean"):  # nlohmann converts a boolean to a number
        raise _invalid(type_error("number", v))
    return v


def get_int(v, bits: int = 32, signed: bool = True) -> int:
    """static_cast to an integer type: fractions truncate, integers wrap, out-of-range floats are x86's."""
    v = get_number(v)
    if isinstance(v, float):
        if not math.isfinite(v) or abs(v) >= 2.0**63:
            return -(2 ** (bits - 1)) if signed else 0
        v = int(v)  # truncation toward zero
    v = int(v) % (1 << bits)
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def get_str_list(v) -> list[str]:
    if not isinstance(v, list):
        raise _invalid(type_error("array", v))
    return [get_str(x) for x in v]


def _elements(v) -> list:
    """Range-for over a json value: an array's or object's elements, or the primitive itself."""
    if isinstance(v, list):
        return v
    if isinstance(v, dict):
        return list(v.values())
    return [v]


def _std_to_string(kind: str, value) -> str:
    return f"{value:f}" if kind == "float" else str(int(value))


def convert(f: Field, value):
    """The typed value of a field_bool / field_num<T>, limits applied; raises the unprefixed message."""
    if f.kind == "bool":
        return get_bool(value)
    if f.kind == "float":
        value = f32(get_number(value))
    elif f.kind == "int64":
        value = get_int(value, 64)
    elif f.kind == "uint32":
        value = get_int(value, 32, signed=False)
    else:
        value = get_int(value)
    if f.hard is not None:
        lo, hi = (f32(x) for x in f.hard) if f.kind == "float" else f.hard
        if not lo <= value <= hi:
            raise _invalid(
                f"Value must be between {_std_to_string(f.kind, lo)} <= value <= "
                f"{_std_to_string(f.kind, hi)}, but got {_std_to_string(f.kind, value)}"
            )
    if f.soft is not None:
        lo, hi = (f32(x) for x in f.soft) if f.kind == "float" else f.soft
        value = max(lo, min(hi, value))
    return value


# --- the custom handlers ---------------------------------------------------------------------------------

Handler = Callable[[TaskParams, dict, "EvalContext"], None]


@dataclass
class EvalContext:
    vocab: Vocab | None
    n_slots: int
    base: TaskParams


def _response_fields(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body.get("response_fields")  # json_value(): anything but an array of strings is the default
    p.response_fields = list(v) if isinstance(v, list) and all(isinstance(s, str) for s in v) else []


def _dry_base(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = f32(get_number(body["dry_base"]))
    p.dry_base = ctx.base.dry_base if v < 1.0 else v


def parse_lora_request(entries: list) -> dict[int, float]:
    """b10621's parse_lora_request: each entry's id (else -1) and scale (else 0.0), the last of an id winning."""
    lora: dict[int, float] = {}
    for entry in entries:
        entry = entry if isinstance(entry, dict) else {}
        i = entry.get("id")
        s = entry.get("scale")
        # json_value(entry, key, default): a value that does not convert is the default
        lora[get_int(i) if json_type_name(i) in ("number", "boolean") else -1] = (
            f32(s) if s is not None and json_type_name(s) in ("number", "boolean") else 0.0
        )
    return dict(sorted(lora.items()))


def _lora(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body["lora"]
    if not isinstance(v, list):
        raise _invalid("Error: 'lora' must be an array of objects with 'id' and 'scale' fields")
    p.lora = parse_lora_request(v)


def _dry_sequence_breakers(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body["dry_sequence_breakers"]
    p.dry_sequence_breakers = list(v) if isinstance(v, list) and all(isinstance(s, str) for s in v) else []
    if not p.dry_sequence_breakers:
        raise _invalid("Error: dry_sequence_breakers must be a non-empty array of strings")


def _grammar(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    if "json_schema" in body and "grammar" not in body:
        v = body["json_schema"]
        try:  # json_value(data, "json_schema", json::object()): null reads as the default {}
            p.grammar = json_schema_to_grammar({} if v is None else v)
        except ValueError as e:
            raise _invalid(f'"json_schema": {e}') from None
        p.grammar_type = "output_format"
        return
    v = body.get("grammar")
    if isinstance(v, str) and v:
        p.grammar = v
        p.grammar_type = "tool_calls" if body.get("grammar_type") == "tool_calls" else "user"


def _chat_format(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    p.chat_format = get_int(body["chat_format"])
    if not 0 <= p.chat_format < len(CHAT_FORMATS):  # upstream fails later, naming it, when it prints the name
        raise UpstreamError("Unknown chat format", ErrorKind.SERVER)


def _reasoning_format(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    name = get_str(body["reasoning_format"])
    if name not in REASONING_FORMATS:
        raise _invalid(f"Unknown reasoning format: {name}")
    p.reasoning_format = name
    p.reasoning_in_content = p.stream and name == "deepseek-legacy"


def _generation_prompt(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    p.generation_prompt = get_str(body["generation_prompt"])


def _chat_parser(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    """b10621 loads the serialized parser (common_peg_arena::load) and refuses what does not load; no native
    answer reads the parsed message, so mlxcel only checks that it loads."""
    p.chat_parser = get_str(body["chat_parser"])
    try:
        load_arena(p.chat_parser)
    except ValueError as e:
        raise _invalid(str(e)) from None


def _continue_final_message(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body["continue_final_message"]
    p.is_continuation = v is True or v in ("reasoning_content", "content")


def _single_token(ctx: EvalContext, text: str) -> int | None:
    ids = ctx.vocab.tokenize_mixed(text, add_special=False, parse_special=True) if ctx.vocab else []
    return ids[0] if len(ids) == 1 else None


def _preserved_tokens(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    for t in _elements(body["preserved_tokens"]):
        token = _single_token(ctx, get_str(t))
        if token is not None:
            p.preserved_tokens.add(token)


def _trigger_at(t, key: str):
    if not isinstance(t, dict):
        raise _invalid(f"[json.exception.type_error.304] cannot use at() with {json_type_name(t)}")
    if key not in t:
        raise _invalid(f"[json.exception.out_of_range.403] key '{key}' not found")
    return t[key]


def _grammar_triggers(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    for t in _elements(body["grammar_triggers"]):
        kind = get_int(_trigger_at(t, "type"))
        value = get_str(_trigger_at(t, "value"))
        trigger = {"type": kind, "value": value}
        if kind == GRAMMAR_TRIGGER_TOKEN:
            trigger["token"] = get_int(_trigger_at(t, "token"))
        if kind == GRAMMAR_TRIGGER_WORD:
            token = _single_token(ctx, value)
            if token is not None:
                if token not in p.preserved_tokens:
                    raise _invalid(f"Grammar trigger word should be marked as preserved token: {value}")
                trigger = {"type": GRAMMAR_TRIGGER_TOKEN, "value": value, "token": token}
        p.grammar_triggers.append(trigger)
    if p.grammar_lazy and not p.grammar_triggers:
        raise _invalid("Error: no triggers set for lazy grammar!")


def _reasoning_budget_start_tag(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    p.reasoning_budget_start_tag = get_str(body["reasoning_budget_start_tag"])


def _reasoning_budget_end_tags(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    # the handler tests presence, not value: a null "..._end_tags" next to "..._end_tag" gives no tags
    if "reasoning_budget_end_tags" in body:
        v = body["reasoning_budget_end_tags"]
        tags = [] if v is None else _elements(v)
    else:
        tags = [body["reasoning_budget_end_tag"]]
    p.reasoning_budget_end_tags = [t for t in (get_str(t) for t in tags) if t]


def _reasoning_budget_message(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    message = body["reasoning_budget_message"]  # json_value(): any type is accepted, a wrong one reads as ""
    p.reasoning_budget_message = message if isinstance(message, str) else ""


_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")


def _bias_of(v) -> float | None:
    if json_type_name(v) == "number":
        return f32(v)
    if v is False:
        return -math.inf
    return None


def _logit_bias(p: TaskParams, body: dict, ctx: EvalContext) -> None:  # noqa: C901
    v = body["logit_bias"]
    n_vocab = ctx.vocab.vocab_size if ctx.vocab else 0
    out: list[tuple[int, float]] = []

    def text_tokens(text: str) -> list[int]:
        return ctx.vocab.tokenize_mixed(text, add_special=False, parse_special=False) if ctx.vocab else []

    if isinstance(v, list):
        for el in v:
            if not isinstance(el, list) or len(el) != 2 or (bias := _bias_of(el[1])) is None:
                continue
            tok = el[0]
            if isinstance(tok, int) and not isinstance(tok, bool):
                if 0 <= tok < n_vocab:
                    out.append((tok, bias))
            elif isinstance(tok, str):
                out.extend((t, bias) for t in text_tokens(tok))
    elif isinstance(v, dict):
        for key, val in v.items():
            if (bias := _bias_of(val)) is None:
                continue
            m = _STRTOL.fullmatch(key)
            if m or key.strip(" \t\n\v\f\r") == "":  # strtol consumed it all ("" reads as 0)
                tok = int(m.group(1)) if m else 0
                if 0 <= tok < n_vocab:
                    out.append((tok, bias))
            else:
                out.extend((t, bias) for t in text_tokens(key))
    p.logit_bias = out


def _ignore_eos(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    p.ignore_eos = get_bool(body["ignore_eos"])
    if p.ignore_eos and ctx.vocab is not None:  # the end-of-generation tokens banned, in vocabulary order
        p.logit_bias.extend((t, -math.inf) for t in sorted(ctx.vocab.eog_ids))


def _stop(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body["stop"]
    words: list[str] = []
    if isinstance(v, list):
        for w in v:  # json::empty() is true for null, [] and {} only: "" is a stop word
            if not (w is None or (isinstance(w, (list, dict)) and not w)):
                words.append(get_str(w))
    elif isinstance(v, str):
        words.append(v)
    p.stop = words or list(ctx.base.stop)


def _samplers(p: TaskParams, body: dict, ctx: EvalContext) -> None:
    v = body["samplers"]
    if isinstance(v, list):
        p.samplers = [SAMPLER_NAMES[n.lower()] for n in get_str_list(v) if n.lower() in SAMPLER_NAMES]
    elif isinstance(v, str):
        p.samplers = [SAMPLER_CHARS[c] for c in v if c in SAMPLER_CHARS]


HANDLERS: dict[str, Handler] = {
    "response_fields": _response_fields,
    "dry_base": _dry_base,
    "lora": _lora,
    "dry_sequence_breakers": _dry_sequence_breakers,
    "json_schema": _grammar,
    "chat_format": _chat_format,
    "reasoning_format": _reasoning_format,
    "generation_prompt": _generation_prompt,
    "chat_parser": _chat_parser,
    "continue_final_message": _continue_final_message,
    "preserved_tokens": _preserved_tokens,
    "grammar_triggers": _grammar_triggers,
    "reasoning_budget_start_tag": _reasoning_budget_start_tag,
    "reasoning_budget_end_tags": _reasoning_budget_end_tags,
    "reasoning_budget_message": _reasoning_budget_message,
    "logit_bias": _logit_bias,
    "ignore_eos": _ignore_eos,
    "stop": _stop,
    "samplers": _samplers,
}


def evaluate(body: dict, n_slots: int, vocab: Vocab | None = None, base: TaskParams | None = None) -> TaskParams:
    """eval_llama_cmpl_schema(): the request's parameters over the server's, or the first field's 400."""
    base = base if base is not None else TaskParams()
    p = copy.deepcopy(base)
    ctx = EvalContext(vocab, n_slots, base)
    for f in SCHEMA:
        if f.kind == "nested":
            sub = body.get(f.name)
            if isinstance(sub, dict) and sub.get("include_usage") is not None:
                p.include_usage = _prefixed("include_usage", get_bool, sub["include_usage"])
            continue
        got = present(body, f)
        if got is None:
            continue
        name, value = got
        handler = HANDLERS.get(f.name)
        if handler is not None:
            _prefixed(name, handler, p, body, ctx)
            continue
        value = _prefixed(name, convert, f, value)
        if f.name == "n_cmpl" and not 1 <= value <= n_slots:
            raise _invalid(f"Field '{name}': Value must be between 1 <= value <= {n_slots}, but got {value}")
        setattr(p, f.name, value)
    p.reasoning_in_content = p.stream and p.reasoning_format == "deepseek-legacy"
    return p


def requested_verbose(body: dict, base: TaskParams) -> bool:
    """params.verbose, which puts __verbose in the OpenAI shapes: the body's boolean, else the server's
    (--verbose or a verbosity above 9). A non-boolean is evaluate()'s 400 before any answer is shaped."""
    v = body.get("verbose")
    return v if isinstance(v, bool) else base.verbose


def _prefixed(name: str, fn, *args):
    """handle_with_catch(): any failure reads "Field '<spelling>': <what>"."""
    try:
        return fn(*args)
    except UpstreamError as exc:
        if exc.kind is not ErrorKind.INVALID_REQUEST:
            raise
        raise UpstreamError(f"Field '{name}': {exc.message}", exc.kind) from None


# --- task_params::to_json() ------------------------------------------------------------------------------


def _bias_json(bias: float):
    return None if math.isinf(bias) else bias  # nlohmann writes a non-finite number as null


# keys task_params::to_json(only_metrics=true) leaves out (GET /props, GET /slots)
_NOT_METRICS = frozenset(
    {
        "dry_sequence_breakers",
        "stop",
        "logit_bias",
        "grammar",
        "grammar_lazy",
        "grammar_triggers",
        "preserved_tokens",
    }
)


def generation_settings(p: TaskParams, only_metrics: bool = False) -> dict:
    out = _generation_settings(p)
    return {k: v for k, v in out.items() if k not in _NOT_METRICS} if only_metrics else out


def _generation_settings(p: TaskParams) -> dict:
    return {
        "seed": p.seed,
        "temperature": p.temperature,
        "dynatemp_range": p.dynatemp_range,
        "dynatemp_exponent": p.dynatemp_exponent,
        "top_k": p.top_k,
        "top_p": p.top_p,
        "min_p": p.min_p,
        "top_n_sigma": p.top_n_sigma,
        "xtc_probability": p.xtc_probability,
        "xtc_threshold": p.xtc_threshold,
        "typical_p": p.typical_p,
        "repeat_last_n": p.repeat_last_n,
        "repeat_penalty": p.repeat_penalty,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "dry_multiplier": p.dry_multiplier,
        "dry_base": p.dry_base,
        "dry_allowed_length": p.dry_allowed_length,
        "dry_penalty_last_n": p.dry_penalty_last_n,
        "dry_sequence_breakers": list(p.dry_sequence_breakers),
        "mirostat": p.mirostat,
        "mirostat_tau": p.mirostat_tau,
        "mirostat_eta": p.mirostat_eta,
        "adaptive_target": p.adaptive_target,
        "adaptive_decay": p.adaptive_decay,
        "stop": list(p.stop),
        "max_tokens": p.n_predict,
        "n_predict": p.n_predict,
        "n_keep": p.n_keep,
        "n_discard": p.n_discard,
        "ignore_eos": p.ignore_eos,
        "stream": p.stream,
        "logit_bias": [{"bias": _bias_json(b), "token": t} for t, b in p.logit_bias],
        "n_probs": p.n_probs,
        "min_keep": p.min_keep,
        "grammar": p.grammar,
        "grammar_lazy": p.grammar_lazy,
        "grammar_triggers": [dict(t) for t in p.grammar_triggers],
        "preserved_tokens": sorted(p.preserved_tokens),
        "chat_format": CHAT_FORMATS[p.chat_format],
        "reasoning_format": p.reasoning_format,
        "reasoning_in_content": p.reasoning_in_content,
        "generation_prompt": p.generation_prompt,
        "samplers": list(p.samplers),
        "speculative.types": p.speculative_types,
        "timings_per_token": p.timings_per_token,
        "post_sampling_probs": p.post_sampling_probs,
        "backend_sampling": p.backend_sampling,
        "lora": [{"id": i, "scale": s} for i, s in p.lora.items()],
    }
