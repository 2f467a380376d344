"""A process-wide prompt-prefix cache shared by all slots, LRU under a byte budget.

Entries hold KV snapshots (opaque here) of prompt positions that were prefilled in ubatch-aligned chunks.
A lookup reuses the longest common prefix rounded down to a chunk boundary and leaves at least one
prompt token to evaluate, so the rest of the prompt is computed in exactly the chunks a cold run uses:
a hit is bit-identical to a miss.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    snapshot: Any
    nbytes: int
    used: int
    key: tuple = ()  # what else the positions were computed with (LoRA scales): () for the model alone


def reuse_chunks(cached, prompt, n_past: int, min_chunk: int) -> list[tuple[int, int, int]]:
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
    """What a request resumes from: a snapshot's first `prefix` positions, then its `chunks` moved."""

    prefix: int
    snapshot: Any
    chunks: list[tuple[int, int, int]]

    @property
    def n(self) -> int:
        return self.prefix + sum(c[2] for c in self.chunks)


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PromptCache:
    def __init__(self, budget_bytes: int | None, align: int):
        """budget_bytes: None for no limit, 0 disables the cache."""
        self.budget = budget_bytes
        self.align = align
        self.entries: list[_Entry] = []
        self._clock = itertools.count()

    @property
    def enabled(self) -> bool:
        return self.budget != 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def lookup(self, prompt: list[int], key: tuple = ()) -> tuple[int, Any]:
        """(positions to reuse, snapshot holding at least that many) or (0, None). key: what else the positions
        were computed with (a request's LoRA scales); only entries computed alike are reused."""
        best, best_n = None, 0
        for e in self.entries:
            if e.key != key:
                continue
            n = min(common_prefix(e.tokens, prompt), len(prompt) - 1)
            n -= n % self.align
            if n > best_n:
                best, best_n = e, n
        if best is None:
            return 0, None
        best.used = next(self._clock)
        return best_n, best.snapshot

    def lookup_chunks(self, prompt: list[int], min_chunk: int, key: tuple = ()) -> Reuse | None:
        """b10621's n_cache_reuse over the cached prompts: the entry whose whole common prefix and chunks
        moved from further on (reuse_chunks) cover the most of the prompt, leaving one token to evaluate;
        None where no entry covers any."""
        best: Reuse | None = None
        best_entry = None
        for e in self.entries:
            if e.key != key:
                continue
            prefix = common_prefix(e.tokens, prompt)
            chunks = reuse_chunks(e.tokens, prompt, prefix, min_chunk)
            reuse = Reuse(prefix, e.snapshot, chunks)
            if reuse.n >= len(prompt):  # the last prompt token is evaluated again, for its logits
                if chunks:
                    c, p, n = chunks[-1]
                    chunks[-1:] = [(c, p, n - 1)] if n > 1 else []
                else:
                    reuse.prefix = len(prompt) - 1
            if reuse.n > 0 and (best is None or reuse.n > best.n):
                best, best_entry = reuse, e
        if best_entry is not None:
            best_entry.used = next(self._clock)
        return best

    def store(self, tokens: tuple[int, ...], snapshot: Any, nbytes: int, key: tuple = ()) -> None:
        if not self.enabled or not tokens or (self.budget is not None and nbytes > self.budget):
            return
        # an entry that is a prefix of the new one (computed alike) adds nothing
        self.entries = [e for e in self.entries if e.key != key or tokens[: len(e.tokens)] != e.tokens]
        if any(e.key == key and e.tokens[: len(tokens)] == tokens for e in self.entries):
            return
        self.entries.append(_Entry(tokens, snapshot, nbytes, next(self._clock), key))
        while self.budget is not None and self.nbytes > self.budget:
            self.entries.remove(min(self.entries, key=lambda e: e.used))
