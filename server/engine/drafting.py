"""Speculative decoding's rounds (speculative.py holds the drafters and b10621's arithmetic): the draft, the
target's pass over the last token and the draft, the draws (common_sampler_sample_and_accept_n), the rejected
positions forgotten, the tokens emitted in order."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from ..backends import Backend, load_backend
from .process_token import TokenProcessor
from .running import Running
from .scheduler import Sequence
from .sequence_tokens import cached_tokens, slot_tokens
from .speculative import DraftConfig, Drafter, NgramSimple, Speculator, draft_max
from .types import TokenProbs

log = logging.getLogger("mlxcel.engine")


def load_drafters(draft: DraftConfig | None, ngram_simple: tuple[int, int] | None) -> Speculator | None:
    """The drafters, in b10621's priority order (n-gram first); the draft model loaded beside the target."""
    sources: list = []
    n_max = 0
    if ngram_simple is not None:
        sources.append(NgramSimple(*ngram_simple))
        n_max = max(n_max, ngram_simple[1])
    if draft is not None:
        sources.append(Drafter(load_backend(Path(draft.model), kv=draft.kv), draft))
        n_max = max(n_max, draft.n_max)
        log.info(
            "draft model loaded: %s (n_max %d, n_min %d, p_min %g)", draft.model, draft.n_max, draft.n_min, draft.p_min
        )
    return Speculator(sources, n_max) if sources else None


def draft_state_bytes(drafter: Speculator | None) -> Callable[[int, int], int]:
    """The draft model's share of a slot's state, as --cache-ram counts it."""
    models = [s.runner for s in drafter.sources if isinstance(s, Drafter)] if drafter is not None else []
    return lambda n, n_stream: sum(m.state_bytes(n, n_stream) for m in models)


class Speculation:
    def __init__(self, drafter: Speculator, backend: Backend, tokens: TokenProcessor, n_ctx: int):
        self.drafter, self.backend, self.tokens, self.n_ctx = drafter, backend, tokens, n_ctx

    def n_max(self, seq: Sequence) -> int:
        """How many tokens this decode step may draft (0: it decodes plainly): b10621's get_n_draft_max, for a
        sequence whose cache forgets rejected positions (rewind)."""
        if not self.backend.capabilities.rewind:
            return 0
        run: Running = seq.payload
        return draft_max(self.n_ctx, slot_tokens(seq), run.request.n_predict, seq.n_decoded)

    def round(self, seq: Sequence, n_max: int) -> None:
        """One round for a sequence out of any decode batch, its adapters' scales set."""
        run: Running = seq.payload
        backend, drafter, d = self.backend, self.drafter, run.drafts
        if d.state is None:
            d.state = drafter.new_state()
        # after a context shift the draft cache keeps its common prefix with the shifted tokens and is fed the rest
        draft = drafter.propose(d.state, cached_tokens(seq), run.last_token, n_max)
        d.n_draft += len(draft)
        if not draft:
            run.logits = backend.decode(run.cache, run.last_token)
            self.tokens.sample(seq)
            return
        n_past = backend.length(run.cache)
        rows = backend.verify(run.cache, [run.last_token, *draft])
        ids = []
        for i in range(len(draft) + 1):
            run.logits = rows[i : i + 1]
            drawn = self.tokens.draw(seq)
            if drawn is None:  # the sequence failed (a grammar dead end)
                return
            ids.append(drawn[0])
            if i == len(draft) or drawn[0] != draft[i]:
                break
        backend.trim(run.cache, n_past + len(ids))
        self._count(run, len(ids) - 1)
        # b10621 reports no candidates for a verified round's tokens: probability 1, an empty list
        probs = TokenProbs(1.0, ()) if run.request.n_probs > 0 else None
        for token in ids:
            if self.tokens.emit(seq, token, probs):
                return

    def _count(self, run: Running, n_accepted: int) -> None:
        d = run.drafts
        d.n_accepted += n_accepted
        d.n_rounds += 1
        if not d.accepted_per_pos:
            d.accepted_per_pos = [0] * self.drafter.n_max
        for i in range(min(n_accepted, len(d.accepted_per_pos))):
            d.accepted_per_pos[i] += 1
