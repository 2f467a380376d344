"""The native /completion request fields mlxcel reads, as one declared schema (the claims gate reads it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

from ..errors import MISSING_PROMPT, ErrorKind, UpstreamError

log = logging.getLogger("mlxcel.api")


@dataclass(frozen=True)
class NativeCompletionRequest:
    prompt: Any
    n_predict: int = -1
    ignore_eos: bool = False
    return_tokens: bool = False
    stream: bool = False

    @classmethod
    def parse(cls, body: dict) -> "NativeCompletionRequest":
        if "prompt" not in body:
            raise UpstreamError(MISSING_PROMPT, ErrorKind.INVALID_REQUEST)
        ignored = sorted(set(body) - set(native_completion_fields()))
        if ignored:  # never silently: b10621 would act on these
            log.warning("/completion: mlxcel does not act on the request field(s) %s yet", ", ".join(ignored))
        return cls(
            prompt=body["prompt"],
            n_predict=int(body.get("n_predict", -1)),
            ignore_eos=bool(body.get("ignore_eos", False)),
            return_tokens=bool(body.get("return_tokens", False)),
            stream=bool(body.get("stream", False)),
        )


def native_completion_fields() -> list[str]:
    return [f.name for f in fields(NativeCompletionRequest)]
