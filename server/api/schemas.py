"""The native /completion request fields mlxcel reads, as one declared schema (the claims gate reads it)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..errors import MISSING_PROMPT, ErrorKind, UpstreamError


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
        return cls(
            prompt=body["prompt"],
            n_predict=int(body.get("n_predict", -1)),
            ignore_eos=bool(body.get("ignore_eos", False)),
            return_tokens=bool(body.get("return_tokens", False)),
            stream=bool(body.get("stream", False)),
        )


def native_completion_fields() -> list[str]:
    return [f.name for f in fields(NativeCompletionRequest)]
