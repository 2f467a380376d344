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

    def lookup(self, prompt: list[int]) -> tuple[int, Any]:
        """(positions to reuse, snapshot holding at least that many) or (0, None)."""
        best, best_n = None, 0
        for e in self.entries:
            n = min(common_prefix(e.tokens, prompt), len(prompt) - 1)
            n -= n % self.align
            if n > best_n:
                best, best_n = e, n
        if best is None:
            return 0, None
        best.used = next(self._clock)
        return best_n, best.snapshot

    def store(self, tokens: tuple[int, ...], snapshot: Any, nbytes: int) -> None:
        if not self.enabled or not tokens or (self.budget is not None and nbytes > self.budget):
            return
        # an entry that is a prefix of the new one adds nothing
        self.entries = [e for e in self.entries if tokens[: len(e.tokens)] != e.tokens]
        if any(e.tokens[: len(tokens)] == tokens for e in self.entries):
            return
        self.entries.append(_Entry(tokens, snapshot, nbytes, next(self._clock)))
        while self.budget is not None and self.nbytes > self.budget:
            self.entries.remove(min(self.entries, key=lambda e: e.used))
