"""b10621's draft-eagle3 drafter (common/speculative.cpp common_speculative_impl_draft_eagle3) over an EAGLE-3
head (models/eagle3_head.py) and the target's captured layer inputs.

At position P the head's decoder takes the pair (t_{P+1}, g_P): the token after P and the encoder's fusion of the
target's features at P. A target pass of n rows at P0.. (`process`) can write only the pairs P0..P0+n-2: the last
row's token is the one the target samples next, so that row's g is kept pending (its position and g) and written
by the next pass's first token (the bridge, across a prompt's chunks) or by the draft's seed step with the sampled
token. The pass's g rows are kept too: after a verify pass `accept` moves the pending row to the first one not
accepted. Drafting (`propose`) seeds with (last sampled token, pending g) at the pending position, then feeds each
draft token with the head's own pre-norm output as its g, greedily (the top of its 10 best, stopping under
p_min). The head's KV follows the target's: trimmed where b10621's server trims the draft context (after the
draft to the target's length, after a verify to the accepted length).

State is per slot, kept across requests as b10621 keeps its draft context's sequence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import mlx.core as mx
import numpy as np

from ..backends.base import TargetPass
from ..models.eagle3_head import Eagle3Head, HeadCache
from ..models.kv_numerics import KVNumerics
from .speculative import top_choice

log = logging.getLogger("mlxcel.engine")


@dataclass
class Eagle3State:
    cache: HeadCache = field(default_factory=HeadCache)
    pending_pos: int = -1
    pending_g: mx.array | None = None
    verify_first: int = -1
    verify_g: mx.array | None = None  # the last pass's g rows


class Eagle3Drafter:
    name = "draft-eagle3"

    def __init__(
        self,
        head: Eagle3Head,
        embed: Callable[[mx.array], mx.array],
        numerics: KVNumerics,
        n_max: int = 3,
        n_min: int = 0,
        p_min: float = 0.0,
    ):
        self.head, self.embed, self.numerics = head, embed, numerics
        self._n_max, self.n_min, self.p_min = n_max, n_min, p_min
        self._slots: dict[int, Eagle3State] = {}
        self._warned = False

    @property
    def n_max(self) -> int:
        return self._n_max

    @property
    def target_layers(self) -> tuple[int, ...]:
        """The target layers whose inputs the head reads."""
        return self.head.target_layers

    def new_state(self, slot: int | None = None) -> Eagle3State:
        if slot is None:
            return Eagle3State()
        return self._slots.setdefault(slot, Eagle3State())

    def begin(self, _state: Eagle3State, _prompt: list[int]) -> None:
        pass

    def _decode(self, st: Eagle3State, tokens: list[int], g: mx.array, first: int) -> tuple[np.ndarray, mx.array]:
        return self.head.decode(st.cache, tokens, g, first, self.embed, self.numerics)

    def process(self, st: Eagle3State, passes: list[TargetPass]) -> None:
        """common_speculative_impl_draft_eagle3::process, for each pass in order."""
        for p in passes:
            if p.tokens is None:  # (b10621 skips an embedding batch: its positions stay unwritten)
                continue
            if p.features is None:
                if not self._warned:
                    log.warning("draft-eagle3: a target pass ran without its features (through MLX): no drafts there")
                    self._warned = True
                continue
            g = self.head.encode(p.features)
            n = len(p.tokens)
            tokens, rows, first = [], [], p.first
            bridge = st.pending_pos >= 0 and st.pending_pos + 1 == p.first and st.pending_pos > st.cache.pos_max
            if bridge:
                assert st.pending_g is not None
                tokens.append(p.tokens[0])
                rows.append(st.pending_g)
                first = st.pending_pos
            tokens += p.tokens[1:]
            rows += [g[k] for k in range(n - 1)]
            st.verify_first, st.verify_g = p.first, g
            st.pending_pos, st.pending_g = p.first + n - 1, g[n - 1]
            if tokens:
                self._decode(st, tokens, mx.stack(rows), first)

    def propose(self, st: Eagle3State, history: list[int], last: int, n_max: int) -> list[int]:
        """The draft() of one sequence: seeded at the pending position with the last sampled token."""
        if st.pending_pos < 0 or st.pending_g is None:
            return []
        want = max(min(self._n_max, n_max) if n_max > 0 else self._n_max, self.n_min)
        logits, pre = self._decode(st, [last], st.pending_g[None], st.pending_pos)
        draft: list[int] = []
        while True:
            token, p = self._pick(logits)
            if p < self.p_min:
                break
            draft.append(token)
            if len(draft) >= self._n_max or len(draft) >= want:
                break
            logits, pre = self._decode(st, [token], pre, st.pending_pos + len(draft))
        st.cache.trim(len(history))  # (the server's seq_rm past the target's positions)
        return draft if len(draft) >= self.n_min else []

    def _pick(self, logits: np.ndarray) -> tuple[int, float]:
        """The draft sampler's pick (top of the 10 best) as a target id, and its probability among them."""
        head = self.head
        if head.ordered and head.d2t is not None:  # (over the draft vocab: the 49k-wide scatter spared)
            token, p = top_choice(logits[0])
            return int(head.d2t[token]), p
        return top_choice(head.target_logits(logits[:1])[0])

    def accept(self, st: Eagle3State, n_accepted: int) -> None:
        """accept(): the pending row moves to the first not accepted; the head's KV past it is dropped (the
        server's seq_rm at the target's next position)."""
        if st.verify_g is None:
            return
        rows = st.verify_g.shape[0]
        i = min(n_accepted, rows - 1)
        st.pending_pos, st.pending_g = st.verify_first + i, st.verify_g[i]
        st.cache.trim(st.verify_first + n_accepted + 1)
