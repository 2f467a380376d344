"""The native /completion request fields mlxcel reads, as one declared schema (the claims gate reads it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

from ..errors import MISSING_PROMPT, ErrorKind, UpstreamError, field_type_error, json_type_name

log = logging.getLogger("mlxcel.api")


@dataclass(frozen=True)
class NativeCompletionRequest:
    prompt: Any
    n_predict: int = -1
    ignore_eos: bool = False
    return_tokens: bool = False
    stream: bool = False
    stop: tuple[str, ...] = ()

    @classmethod
    def parse(cls, body: dict) -> "NativeCompletionRequest":
        if "prompt" not in body:
            raise UpstreamError(MISSING_PROMPT, ErrorKind.INVALID_REQUEST)
        ignored = sorted(set(body) - set(native_completion_fields()))
        if ignored:  # never silently: b10621 would act on these
            log.warning("/completion: mlxcel does not act on the request field(s) %s yet", ", ".join(ignored))
        return cls(
            prompt=body["prompt"],
            n_predict=_bounded(body, "n_predict", -1, INT32_MAX, -1),
            ignore_eos=_typed(body, "ignore_eos", "boolean", False),
            return_tokens=_typed(body, "return_tokens", "boolean", False),
            stream=_typed(body, "stream", "boolean", False),
            stop=_stop_strings(body),
        )


def _typed(body: dict, name: str, expected: str, default):
    """A schema field's value, or b10621's 400 when its JSON type is wrong (null means the default)."""
    value = body.get(name)
    if value is None:
        return default
    if json_type_name(value) != expected:
        raise field_type_error(name, expected, value)
    return value


INT32_MAX = 2**31 - 1


def _bounded(body: dict, name: str, low: int, high: int, default: int) -> int:
    """An integer field with b10621's hard limits (set_hard_limits): out of range is a 400."""
    value = _typed(body, name, "number", None)
    if value is None:
        return default
    value = int(value)  # nlohmann's get<int32_t>() truncates a fractional number
    if not low <= value <= high:
        raise UpstreamError(f"Field '{name}': Value must be between {low} <= value <= {high}, but got {value}",
                            ErrorKind.INVALID_REQUEST)
    return value


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
