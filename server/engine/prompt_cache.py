"""b10621's prompt reuse, pure Python: what each slot holds, the host-memory prompt cache (--cache-ram), which
slot a request takes (get_available_slot) and how much of its prompt it reuses (n_past).

A slot keeps the KV state of its last task (its prompt and every generated token but the last). A request
takes the idle slot whose tokens share the largest fraction of its prompt (above --slot-prompt-similarity),
else the least recently used one; on that second path (or when the chosen slot would lose over half its
tokens) the slot's state is saved to the prompt cache and the cached state that best matches the prompt is
loaded into the slot. The request then reuses the common prefix of its prompt and the slot's tokens, to the
token, less one when that is the whole prompt (the last token is evaluated for its logits): server-context.cpp
get_available_slot, update_slots; server-task.cpp server_prompt_cache.

Snapshots are opaque here (the engine's KV caches); `key` says what else their positions were computed with
(a request's LoRA scales: () for the model alone), and only a state computed alike is reused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class State:
    """A KV state: its tokens (position i holds tokens[i]) and the opaque snapshot holding them."""

    tokens: tuple[int, ...] = ()
    snapshot: Any = None
    nbytes: int = 0
    key: tuple = ()
    # per position, how it was computed (the engine's `Provenance`); None: unknown (no exactness guarantee)
    made: Any = None


@dataclass
class Slot:
    """What b10621's slot keeps between tasks: its prompt state and when it was last released."""

    state: State = field(default_factory=State)
    t_last_used: int = -1  # b10621's t_last_used: -1 until the first release, then a clock (here a counter)
    processing: bool = False

    def clear(self) -> None:
        self.state = State()


def reuse_chunks(
    cached: Sequence[int], prompt: Sequence[int], n_past: int, min_chunk: int
) -> list[tuple[int, int, int]]:
    """b10621's cache reuse (server-context.cpp, n_cache_reuse): past the common prefix n_past, every run of at
    least min_chunk cached tokens that continues the prompt where it stands, as (cached start, prompt start,
    length); each is to be moved to its prompt start (its keys turned by the shift)."""
    chunks = []
    head_c = head_p = n_past
    while head_c < len(cached) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cached) and head_p + n < len(prompt) and cached[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= min_chunk:
            chunks.append((head_c, head_p, n))
            head_c, head_p = head_c + n, head_p + n
        else:
            head_c += 1
    return chunks


@dataclass
class Reuse:
    """What a request resumes from its slot's state: the first `prefix` positions, then `chunks` moved
    (n_cache_reuse); n: b10621's n_past (cache_n)."""

    prefix: int
    chunks: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return self.prefix + sum(c[2] for c in self.chunks)


def plan_reuse(cached: tuple[int, ...], prompt: list[int], min_chunk: int = 0) -> Reuse:
    """b10621's n_past for a prompt on a slot holding `cached`: the common prefix, then (min_chunk > 0) the
    chunks moved; when that covers the whole prompt, one token less (the last is evaluated for its logits)."""
    reuse = Reuse(common_prefix(cached, prompt))
    if min_chunk > 0:
        reuse.chunks = reuse_chunks(cached, prompt, reuse.prefix, min_chunk)
    if reuse.n == len(prompt) and reuse.n > 0:
        if reuse.chunks:
            c, p, n = reuse.chunks[-1]
            reuse.chunks[-1:] = [(c, p, n - 1)] if n > 1 else []
        else:
            reuse.prefix -= 1
    return reuse


def choose_slot(  # noqa: C901
    slots: list[Slot], prompt: list[int], id_slot: int | None, similarity: float
) -> tuple[int | None, bool]:
    """b10621's get_available_slot: (the slot, whether to update it from the prompt cache), or (None, False)
    when every slot is busy. id_slot: the slot the request asked for (it may be busy: the request waits)."""
    ret = id_slot
    update = False
    if similarity != 0.0:
        best = 0.0
        for i, s in enumerate(slots):
            if id_slot is not None and i != id_slot:
                continue
            if s.processing or not s.state.tokens:
                continue
            sim = common_prefix(s.state.tokens, prompt) / len(prompt)
            if sim > best and sim > similarity:
                best, ret = sim, i
        if ret is not None:
            held = len(slots[ret].state.tokens)
            # about to lose most of the slot's context: save it in the prompt cache (f_keep < 0.5; 0/0 is not)
            if held and best * len(prompt) / held < 0.5:
                update = True
    if ret is None:
        t_last = -1
        for i, s in enumerate(slots):
            if s.processing:
                continue
            if ret is None or s.t_last_used <= t_last:  # ties go to the later slot, as upstream's <=
                t_last, ret = s.t_last_used, i
        update = ret is not None
    return ret, update


class PromptCache:
    """b10621's server_prompt_cache: slot states kept in host memory, oldest first, under a byte limit (and a
    token limit raised to what the bytes allow)."""

    def __init__(self, limit_bytes: int, limit_tokens: int):
        """limit_bytes: 0 for no limit (--cache-ram -1); limit_tokens: the context size (0: no limit)."""
        self.limit_bytes = limit_bytes
        self.limit_tokens = limit_tokens
        self.states: list[State] = []

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.states)

    @property
    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.states)

    @property
    def entries(self) -> list[State]:
        return self.states

    def save(self, state: State) -> bool:
        """alloc(): a copy of a slot's state added, unless the cache already holds all of it or it alone
        exceeds the limit; states it contains entirely are dropped, the oldest make room."""
        if not state.tokens:
            return False
        for s in self.states:
            if s.key == state.key and common_prefix(s.tokens, state.tokens) == len(state.tokens):
                return False
        if self.limit_bytes > 0 and state.nbytes > self.limit_bytes:
            return False
        self.states = [
            s
            for s in self.states
            if not (s.key == state.key and common_prefix(s.tokens, state.tokens) == len(s.tokens))
        ]
        if self.limit_bytes > 0:
            while self.states and self.nbytes + state.nbytes > self.limit_bytes:
                self.states.pop(0)
        self.states.append(state)
        return True

    def load(self, held: State, prompt: list[int], key: tuple = ()) -> State | None:
        """load(): the cached state that keeps more of itself (f_keep, at least a quarter) and covers more of
        the prompt (f_sim) than the slot's own `held` state, taken out of the cache; None: keep the slot's.
        Only states computed with `key` (the request's) count; a slot holding another's counts as empty."""
        own = held.tokens if held.key == key else ()
        lcp = common_prefix(own, prompt)
        keep_best = lcp / len(own) if own else -1.0  # an empty slot: any cached state wins
        sim_best = lcp / len(prompt)
        best = None
        for s in self.states:
            if s.key != key:
                continue
            lcp = common_prefix(s.tokens, prompt)
            keep, sim = lcp / len(s.tokens), lcp / len(prompt)
            if keep < 0.25:  # don't trash large prompts
                continue
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, s
        if best is not None:
            self.states.remove(best)
        return best

    def update(self) -> None:
        """update(): the oldest states dropped while over the byte limit, then over the token limit (raised to
        what the byte limit holds at the states' average size per token)."""
        if self.limit_bytes > 0:
            while self.states and self.nbytes > self.limit_bytes:
                self.states.pop(0)
        per_token = max(1.0, self.nbytes / max(1, self.n_tokens))
        limit = max(self.limit_tokens, int(self.limit_bytes / per_token)) if self.limit_bytes > 0 else self.limit_tokens
        if self.limit_tokens > 0:
            while self.states and self.n_tokens > limit:
                self.states.pop(0)

    def clear(self) -> None:
        self.states = []
