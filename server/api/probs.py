"""completion_probabilities: b10621's per-token probability report (completion_token_output::to_json)."""

from __future__ import annotations

import math

from ..engine.stopping import valid_utf8_prefix
from ..engine.types import TokenProbs
from .task_params import f32

LOWEST_FLOAT = -3.4028234663852886e38  # std::numeric_limits<float>::lowest(): the log of 0, kept out of null


def _text(piece: bytes) -> str:
    return piece[: valid_utf8_prefix(piece)].decode("utf-8", "replace")


def _value(p: float, post: bool) -> float:
    if post:
        return p
    return LOWEST_FLOAT if p == 0 else f32(math.log(p))


def token_entry(tok, token: int, sent_piece: bytes, probs: TokenProbs, post: bool, special: bool) -> dict:
    """One generated token: its own probability and the top candidates (pre- or post-sampling)."""
    key = "prob" if post else "logprob"
    top = []
    for tid, p in probs.top:
        piece = tok.piece(tid, special=special)
        top.append({"id": tid, "token": _text(piece), "bytes": list(piece), key: _value(p, post)})
    return {
        "id": token,
        "token": _text(sent_piece),
        "bytes": list(sent_piece),
        key: _value(probs.prob, post),
        "top_probs" if post else "top_logprobs": top,
    }
