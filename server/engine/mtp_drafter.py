"""b10621's draft-mtp drafter (common/speculative.cpp common_speculative_impl_draft_mtp, the single-head mode
Qwen3.5 runs: not chained, its own KV cache) over the target's MTP block (models/mtp_head.py).

The block's KV at position p holds the pair (token at p, the target's final hidden state at p - 1). Each target
pass of n rows at P.. (`process`: a prompt chunk, a decode step, a verify pass) writes the pairs P..P+n-1, the
first row's hidden state the one kept from the pass before (`pending_h`: zeros at first, and kept across requests
as b10621 keeps it per sequence id), and keeps its last row as pending and all its rows for `accept`. Drafting
(`propose`) feeds (last sampled token, pending_h) at the target's next position, then each draft token with the
block's own output, b10621's n_max steps, greedily (the best of the top 10, stopping under p_min); its positions are
dropped afterwards (the server's seq_rm of the draft context). After a verify, `accept` takes the hidden state of
the last accepted row as pending and drops the block's KV past the accepted positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from ..backends.base import TargetPass
from ..models.mtp_head import MTPRunner
from .speculative import top_choice


@dataclass
class MTPState:
    cache: KVCache = field(default_factory=KVCache)
    pending_h: mx.array | None = None  # (width,): zeros until a pass ran (b10621's initial pending_h)
    verify_first: int = -1
    verify_h: mx.array | None = None  # the last pass's rows


class MTPDrafter:
    name = "draft-mtp"
    reads_outputs = True  # the target's final hidden states (backends/mlx_backend.py capture_outputs)

    def __init__(self, runner: MTPRunner, width: int, n_max: int = 3, n_min: int = 0, p_min: float = 0.0):
        self.runner, self.width = runner, width
        self._n_max, self.n_min, self.p_min = n_max, n_min, p_min
        self._slots: dict[int, MTPState] = {}

    @property
    def n_max(self) -> int:
        return self._n_max

    def new_state(self, slot: int | None = None) -> MTPState:
        if slot is None:
            return MTPState()
        return self._slots.setdefault(slot, MTPState())

    def begin(self, _state: MTPState, _prompt: list[int]) -> None:
        pass

    def _pending(self, st: MTPState) -> mx.array:
        return st.pending_h if st.pending_h is not None else mx.zeros((self.width,), mx.float32)

    def process(self, st: MTPState, passes: list[TargetPass]) -> None:
        """process(), for each target pass in order (an image's embedding rows are skipped, as b10621 does)."""
        for p in passes:
            if p.tokens is None or p.features is None or not p.tokens or st.cache.offset < p.first:
                continue  # (after positions it could not write, an image's, the block stops drafting)
            h = p.features.astype(mx.float32).reshape(len(p.tokens), -1)
            rows = mx.concatenate([self._pending(st)[None], h[:-1]], axis=0)
            self.runner.run(st.cache, p.first, list(p.tokens), rows)
            st.verify_first, st.verify_h, st.pending_h = p.first, h, h[-1]

    def propose(self, st: MTPState, history: list[int], last: int, n_max: int) -> list[int]:
        """draft() for one sequence: b10621's n_max steps from the target's next position (the caller keeps the
        first n_max of them, as common_speculative_draft does)."""
        n_past = len(history)
        if st.cache.offset != n_past:
            return []
        logits, out = self.runner.run(st.cache, n_past, [last], self._pending(st)[None])
        draft: list[int] = []
        while True:
            token, p = top_choice(np.array(logits[0]))
            if p < self.p_min:
                break
            draft.append(token)
            if len(draft) >= self._n_max:
                break
            logits, out = self.runner.run(st.cache, n_past + len(draft), [token], out)
        st.cache.trim(st.cache.offset - n_past)  # (the server's seq_rm of the draft's positions)
        return draft if len(draft) >= self.n_min else []

    def accept(self, st: MTPState, n_accepted: int) -> None:
        """accept(): the last accepted row's hidden state is pending; the KV past the accepted positions goes."""
        if st.verify_h is None:
            return
        i = min(n_accepted, st.verify_h.shape[0] - 1)
        st.pending_h = st.verify_h[i]
        keep = st.verify_first + n_accepted + 1
        if st.cache.offset > keep:
            st.cache.trim(st.cache.offset - keep)
