"""What a sequence's slot holds, counted as b10621 counts it, and its context-shift arithmetic (one place)."""

from __future__ import annotations

from dataclasses import dataclass

from .running import Running
from .scheduler import Sequence


def slot_index(seq: Sequence) -> int:
    """The slot a launched sequence holds."""
    if seq.slot is None:
        raise RuntimeError(f"task {seq.rid} holds no slot")
    return seq.slot


def slot_tokens(seq: Sequence) -> int:
    """Tokens in the slot's KV cache: the prompt fed so far and every generated token but the last."""
    return seq.n_prefilled + max(seq.n_decoded - 1, 0) - seq.payload.shifts.n_shifted


def cached_tokens(seq: Sequence) -> list[int]:
    """The tokens in the slot's KV cache, in order: the prompt and every generated token but the last, less
    what each context shift discarded (b10621's slot.prompt.tokens)."""
    run: Running = seq.payload
    tokens = [*seq.prompt[: seq.n_prefilled], *run.generated_ids[:-1]]
    for n_keep, n_discard in run.shifts.discards:
        del tokens[n_keep : n_keep + n_discard]
    return tokens


@dataclass(frozen=True)
class ShiftPlan:
    n_keep: int
    n_left: int
    n_discard: int


def shift_plan(seq: Sequence, n_ctx: int, add_bos: bool) -> ShiftPlan:
    """b10621's context shift (pre_decode): keep n_keep tokens (the BOS one more), discard n_discard after them
    (the request's, else half of what is left)."""
    req = seq.payload.request
    n_keep = len(seq.prompt) if req.n_keep < 0 else req.n_keep
    n_keep = min(n_ctx - 4, n_keep + (1 if add_bos else 0))
    n_left = slot_tokens(seq) - n_keep
    n_discard = req.n_discard if req.n_discard else int(n_left / 2)
    return ShiftPlan(n_keep, n_left, max(0, min(n_discard, max(0, n_left - 1))))


def shift_frees_nothing(seq: Sequence, n_ctx: int, add_bos: bool) -> bool:
    """A shift that would discard nothing (n_keep covers the context): stop at the bound instead."""
    return shift_plan(seq, n_ctx, add_bos).n_left - 1 <= 0
