"""Speculative decoding: b10621's draft-simple drafter (a draft model), its ngram-simple drafter
(common/speculative.cpp, common/ngram-map.cpp) and the stateful n-gram drafters (ngram_drafters.py), tried in
b10621's order (n-gram first).

Before a sequence's next decode step the draft model proposes up to n_max tokens, greedily, stopping early
where its top candidate's probability (softmax over its 10 best, the drafter's top-k 10 sampler) falls under
p_min; a draft shorter than n_min is dropped. The target then computes the last sampled token and the draft
in one pass (the backend's verify) and the request's own sampler draws at each position until a draw differs from
the draft (common_sampler_sample_and_accept_n): every token is one the target's sampler drew from the
target's logits, so the output is the one plain decoding gives. The engine owns the rounds; this module owns
the drafter and b10621's arithmetic around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..backends.base import Backend
from ..cpu_threads import draft_steps
from ..models.kv_numerics import KVNumerics
from ..models.tokenizer import ModelTokenizer

DRAFT_TOP_K = 10  # the drafter's sampler: top-k 10 (common_speculative_impl_draft_simple)


@dataclass(frozen=True)
class DraftConfig:
    """--spec-draft-model and the draft-simple tuning that acts (common_params_speculative_draft)."""

    model: str  # the draft checkpoint (an MLX directory)
    n_max: int = 3  # --spec-draft-n-max
    n_min: int = 0  # --spec-draft-n-min
    p_min: float = 0.0  # --spec-draft-p-min
    kv: KVNumerics | None = None  # -ctkd, -ctvd, -fa (None: a float32 cache)
    kind: str = "draft-simple"  # or "draft-eagle3": model is then an EAGLE-3 head's GGUF; "draft-mtp": the target's


def draft_max(n_ctx: int, n_tokens: int, n_predict: int, n_decoded: int) -> int:
    """b10621's get_n_draft_max: what fits before the slot's context end (two positions kept free) and, under
    a token budget, one under what the budget has left."""
    n = n_ctx - n_tokens - 2
    remaining = -1 if n_predict == -1 else n_predict - n_decoded
    if remaining > 0:
        n = min(n, remaining - 1)
    return n


def top_choice(logits: np.ndarray) -> tuple[int, float]:
    """The drafter's pick from one row of logits: the highest (the first of equals), and its probability
    among the DRAFT_TOP_K best."""
    row = np.asarray(logits, dtype=np.float32).reshape(-1)
    best = int(np.argmax(row))
    top = np.partition(row, -DRAFT_TOP_K)[-DRAFT_TOP_K:] if row.size > DRAFT_TOP_K else row
    weights = np.exp((top - row[best]).astype(np.float64))
    return best, float(1.0 / weights.sum())


SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


def vocab_mismatch(target: ModelTokenizer, draft: ModelTokenizer) -> str | None:
    """common_speculative_are_compatible over two server.models.tokenizer.ModelTokenizer: the same vocabulary
    type and BOS/EOS rules, sizes within 128 and the same text for every id from 5 on. None when compatible,
    else what differs."""

    def kind(t: ModelTokenizer) -> str:
        return type(t._parse.model).__name__

    if kind(target) != kind(draft):
        return f"the vocab types differ ({kind(draft)} in the draft, {kind(target)} in the target)"
    for what, a, b in (("BOS", target.add_bos, draft.add_bos), ("EOS", target.add_eos, draft.add_eos)):
        ids = (target.bos_id, draft.bos_id) if what == "BOS" else (target.eos_id, draft.eos_id)
        if a != b or (a and ids[0] != ids[1]):
            return f"the {what} tokens differ"
    n_t, n_d = target.vocab_size, draft.vocab_size
    if abs(n_t - n_d) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return (
            f"the vocab sizes differ by more than {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} ({n_d} in the draft, "
            f"{n_t} in the target)"
        )
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(n_t, n_d)):
        if target._parse.id_to_token(i) != draft._parse.id_to_token(i):
            return f"token {i} differs"
    return None


class NgramSimple:
    """common_ngram_simple_draft: the last size_n tokens (the last sampled one included) looked up backwards
    in the sequence's own tokens; the size_m tokens that followed the latest earlier occurrence are the draft
    (none when fewer than size_n of them exist). Stateless: it keeps nothing per sequence."""

    name = "ngram-simple"

    def __init__(self, size_n: int = 12, size_m: int = 48):
        self.size_n, self.size_m = size_n, size_m

    @property
    def n_max(self) -> int:
        return self.size_m

    def new_state(self, _slot: int | None = None) -> None:
        return None

    def begin(self, _state: None, _prompt: list[int]) -> None:
        pass

    def accept(self, _state: None, _n_accepted: int) -> None:
        pass

    def propose(self, _state: None, history: list[int], last: int, _n_max: int) -> list[int]:
        n, m, cur = self.size_n, self.size_m, len(history)
        if cur <= n + m + 1:
            return []
        pattern = [*history[cur - n + 1 :], last]
        match = 0
        for j in range(cur - n - 1, 0, -1):
            if history[j : j + len(pattern)] == pattern:
                match = j
                break
        if match == 0:
            return []
        count = min(m, cur - (match + n))
        draft = history[match + n : match + n + count]
        if any(t < 0 for t in draft):  # (an image's positions are no tokens to draft: the draft ends before them)
            draft = draft[: next(i for i, t in enumerate(draft) if t < 0)]
            count = len(draft)
        return [] if count < n else draft


@dataclass
class SpecState:
    """One sequence's drafters' states (a stateful drafter's are its slot's, kept across requests) and which
    drafter made the draft being verified (b10621's impl_last: it alone hears the acceptance)."""

    states: list
    last: int | None = None


class Speculator:
    """The drafters b10621 would run, in its priority order: each round takes the first non-empty draft,
    cut to the round's bound (common_speculative_draft); every drafter sees each request's prompt (begin), the
    one whose draft was verified hears how many the target took (accept)."""

    def __init__(self, sources: list, n_max: int | None = None):
        self.sources = sources
        # common_speculative_n_max: the per-position statistics' length
        self.n_max = n_max if n_max is not None else max((s.n_max for s in sources), default=0)

    def new_state(self, slot: int | None = None) -> SpecState:
        return SpecState([source.new_state(slot) for source in self.sources])

    def begin(self, state: SpecState, prompt: list[int]) -> None:
        for source, s in zip(self.sources, state.states, strict=True):
            source.begin(s, prompt)

    def propose(self, state: SpecState, history: list[int], last: int, n_max: int) -> list[int]:
        for i, (source, s) in enumerate(zip(self.sources, state.states, strict=True)):
            draft = source.propose(s, history, last, n_max)
            if draft:
                state.last = i
                return draft[:n_max] if n_max > 0 else draft
        return []

    def process(self, state: SpecState, passes: list) -> None:
        """The target's passes over the sequence since the last call (common_speculative_process), to the drafters
        that read the target's features (draft-eagle3)."""
        for source, s in zip(self.sources, state.states, strict=True):
            if hasattr(source, "process"):
                source.process(s, passes)

    @property
    def captures(self) -> tuple[int, ...]:
        """The target layers whose inputs a drafter reads (() : none)."""
        return next((s.target_layers for s in self.sources if hasattr(s, "target_layers")), ())

    @property
    def reads_outputs(self) -> bool:
        """A drafter reads the target's final hidden states (draft-mtp)."""
        return any(getattr(s, "reads_outputs", False) for s in self.sources)

    def accept(self, state: SpecState, n_accepted: int) -> None:
        if state.last is not None:
            self.sources[state.last].accept(state.states[state.last], n_accepted)


class Drafter:
    """The draft model and its per-sequence caches. A sequence's draft cache holds the tokens it was fed
    (`fed`); each round it is brought to the target's tokens first (trimmed to their common prefix, the rest
    fed), as b10621's draft context runs every batch the target runs."""

    name = "draft-simple"

    def __init__(self, runner: Backend, config: DraftConfig):
        self.runner = runner  # the draft model's backend
        self.config = config

    @property
    def n_max(self) -> int:
        return self.config.n_max

    def new_state(self, _slot: int | None = None) -> DraftState:
        """A cache per request (the draft model's KV is not kept across requests)."""
        return DraftState(self.runner.new_cache())

    def begin(self, _state: DraftState, _prompt: list[int]) -> None:
        pass

    def accept(self, _state: DraftState, _n_accepted: int) -> None:
        pass

    def propose(self, state: DraftState, history: list[int], last: int, n_max: int) -> list[int]:
        """The draft after `history` (the target's tokens in its cache) and `last` (the token sampled last, not
        yet in it): at most min(n_max, --spec-draft-n-max) tokens, on the draft's CPU threads (-td / -tbd)."""
        with draft_steps():
            return self._propose(state, history, last, n_max)

    def _propose(self, state: DraftState, history: list[int], last: int, n_max: int) -> list[int]:
        runner, cfg = self.runner, self.config
        keep = len(state.fed)
        if state.fed != history[:keep]:  # usually a prefix already (one slice compare); else where they part
            keep = next(
                (i for i, (a, b) in enumerate(zip(state.fed, history, strict=False)) if a != b), min(keep, len(history))
            )
        if keep < len(state.fed):
            runner.trim(state.cache, keep)
            del state.fed[keep:]
        if len(history) > keep:
            runner.prefill(state.cache, history[keep:])
            state.fed.extend(history[keep:])
        cap = min(cfg.n_max, n_max) if n_max > 0 else cfg.n_max
        logits = runner.decode(state.cache, last)
        state.fed.append(last)
        draft: list[int] = []
        while len(draft) < cap:
            token, p = top_choice(runner.to_numpy(logits))
            if p < cfg.p_min:
                break
            draft.append(token)
            if len(draft) >= cap:
                break
            logits = runner.decode(state.cache, token)
            state.fed.append(token)
        return draft if len(draft) >= cfg.n_min else []


@dataclass
class DraftState:
    """One sequence's draft cache and the tokens in it, in order."""

    cache: list
    fed: list = field(default_factory=list)
