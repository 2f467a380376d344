"""The native /completion request fields mlxcel reads, as one declared schema (the claims gate reads it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

from ..errors import MISSING_PROMPT, ErrorKind, UpstreamError
from .native_fields import check_request

log = logging.getLogger("mlxcel.api")


@dataclass(frozen=True)
class NativeCompletionRequest:
    prompt: Any
    n_predict: int = -1
    ignore_eos: bool = False
    return_tokens: bool = False
    stream: bool = False
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    timings_per_token: bool = False
    response_fields: tuple[str, ...] = ()
    n_indent: int = 0
    t_max_predict_ms: int = -1
    return_progress: bool = False

    @classmethod
    def parse(cls, body: dict, n_slots: int = 1) -> "NativeCompletionRequest":
        checked = check_request(body, n_slots)  # upstream's type checks and hard limits, in its order
        if "prompt" not in body:
            raise UpstreamError(MISSING_PROMPT, ErrorKind.INVALID_REQUEST)
        if checked.get("n_cmpl", 1) > 1:
            raise UpstreamError("mlxcel does not generate several completions per request yet (n_cmpl > 1)",
                                ErrorKind.NOT_SUPPORTED)
        acted_on = {*native_completion_fields(), "max_tokens", "max_completion_tokens"}
        ignored = sorted(k for k in body if k not in acted_on and body[k] is not None)
        if ignored:  # never silently: b10621 would act on these
            log.warning("/completion: mlxcel does not act on the request field(s) %s yet", ", ".join(ignored))
        return cls(
            prompt=body["prompt"],
            n_predict=checked.get("n_predict", -1),
            ignore_eos=checked.get("ignore_eos", False),
            return_tokens=checked.get("return_tokens", False),
            stream=checked.get("stream", False),
            stop=_stop_strings(body),
            cache_prompt=checked.get("cache_prompt", True),
            timings_per_token=checked.get("timings_per_token", False),
            response_fields=_string_list(body, "response_fields"),
            n_indent=checked.get("n_indent", 0),
            t_max_predict_ms=checked.get("t_max_predict_ms", -1),
            return_progress=checked.get("return_progress", False),
        )


def _string_list(body: dict, name: str) -> tuple[str, ...]:
    """json_value(data, name, std::vector<std::string>()): anything but an array of strings is the default."""
    value = body.get(name)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def _stop_strings(body: dict) -> tuple[str, ...]:
    """The "stop" field: a string or an array of strings; empty strings are dropped, as upstream does."""
    value = body.get("stop")
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list):
        return tuple(s for s in value if isinstance(s, str) and s)
    return ()


def native_completion_fields() -> list[str]:
    return [f.name for f in fields(NativeCompletionRequest)]
