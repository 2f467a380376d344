"""b10621's draft-dflash and draft-dspark drafter (common/speculative.cpp common_speculative_impl_draft_dflash) over
a DFlash draft (models/dflash_head.py) and the target's captured layer inputs.

Every row a target pass processes (`process`: the prompt, each decode, each verify's rejected drafts too) is fused
and injected into the draft's KV cache at its position. Drafting (`propose`) decodes one block [last sampled
token, MASK x n_max] at the positions after the target's (n_max the drafter's own, whatever the slot's room) and
reads rows 1.. greedily: the top of each row's 10 best, stopping under p_min; fewer than n_min drafts none; the
round then keeps at most the slot's room. draft-dspark (`dspark`) reads a draft that samples from the anchor from
rows 0.. of a block of n_max rows (the anchor row predicts the next token), stopping where the Markov head's
confidence falls under p_min (with p_min 0 it never stops) and never checking the top-10 probability. The block's
cells go again right after (the server's seq_rm past the
target's positions), and a verify's rejected rows at accept (seq_rm at the target's next position): the cache
then holds the accepted positions' features only.

State is per slot, kept across requests as b10621 keeps its draft context's sequence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import mlx.core as mx

from ..backends.base import TargetPass
from ..models.dflash_head import DFlashDraft, DraftCache
from ..models.kv_numerics import KVNumerics
from .speculative import top_choice

log = logging.getLogger("mlxcel.engine")


@dataclass
class DFlashState:
    cache: DraftCache = field(default_factory=DraftCache)
    verify_first: int = -1  # the last pass's first position (accept trims after it)


class DFlashDrafter:
    def __init__(
        self,
        draft: DFlashDraft,
        embed: Callable[[mx.array], mx.array],
        head: Callable[[mx.array], mx.array],
        numerics: KVNumerics,
        n_max: int = 3,
        n_min: int = 0,
        p_min: float = 0.0,
        dspark: bool = False,
    ):
        self.draft, self.embed, self.head, self.numerics = draft, embed, head, numerics
        self.dspark, self.name = dspark, "draft-dspark" if dspark else "draft-dflash"
        self.from_anchor = dspark and draft.sample_from_anchor  # (the block's rows all drafts: no leading anchor)
        # (b10621 clamps both to the block's drafting rows, with a warning)
        rows = draft.block_size if self.from_anchor else draft.block_size - 1
        self._n_max, self.n_min = min(n_max, rows), min(n_min, rows)
        if self._n_max < n_max or self.n_min < n_min:
            log.warning(
                "%s: the draft's block drafts %d rows: --spec-draft-n-max / -n-min clamped to it", self.name, rows
            )
        self.p_min = p_min
        self._slots: dict[int, DFlashState] = {}
        self._warned = False

    @property
    def n_max(self) -> int:
        return self._n_max

    @property
    def target_layers(self) -> tuple[int, ...]:
        """The target layers whose inputs the draft's encoder reads."""
        return self.draft.target_layers

    def new_state(self, slot: int | None = None) -> DFlashState:
        if slot is None:
            return DFlashState()
        return self._slots.setdefault(slot, DFlashState())

    def begin(self, _state: DFlashState, _prompt: list[int]) -> None:
        pass

    def process(self, st: DFlashState, passes: list[TargetPass]) -> None:
        """common_speculative_impl_draft_dflash::process, for each pass in order."""
        for p in passes:
            if p.tokens is None:  # (b10621 skips an embedding batch: its positions stay unwritten)
                continue
            if p.features is None:
                if not self._warned:
                    log.warning("draft-dflash: a target pass ran without its features (through MLX): no drafts there")
                    self._warned = True
                continue
            self.draft.inject(st.cache, self.draft.encode(p.features), p.first, self.numerics)
            st.verify_first = p.first

    def propose(self, st: DFlashState, history: list[int], last: int, n_max: int) -> list[int]:
        """The draft() of one sequence: the block at the target's next position n (history's length)."""
        n = len(history)
        if st.cache.pos_max < 0:
            return []
        tokens = [last] + [self.draft.mask_token] * (self._n_max - 1 if self.from_anchor else self._n_max)
        logits, confidences = self.draft.block(st.cache, tokens, n, self.embed, self.head, self.numerics)
        st.cache.trim(n)  # (the server's seq_rm past the target's positions: the block's cells go)
        draft: list[int] = []
        first = 0 if self.from_anchor else 1
        for i in range(first, len(tokens)):
            if self.dspark:
                if self.p_min > 0 and confidences is not None and confidences[i] < self.p_min:
                    break
                draft.append(top_choice(logits[i])[0])
                continue
            token, p = top_choice(logits[i])
            if p < self.p_min:
                break
            draft.append(token)
        if len(draft) < self.n_min:
            return []
        return draft[:n_max] if n_max > 0 else draft

    def accept(self, st: DFlashState, n_accepted: int) -> None:
        """The verify's rejected rows dropped (the server's seq_rm at the target's next position)."""
        if st.verify_first >= 0:
            st.cache.trim(st.verify_first + n_accepted + 1)
