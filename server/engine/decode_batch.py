"""Decode rows that share one forward pass: their caches merged once into the backend's batch and kept merged
while the same rows decode together (tests/test_engine_batching.py)."""

from __future__ import annotations

from ..backends import Backend
from .running import Running
from .scheduler import Sequence


class DecodeBatch:
    def __init__(self, backend: Backend):
        self.backend = backend
        self._batch = None  # the rows' merged caches
        self._rows: list[Sequence | None] = []  # whose row is which; None: a row dropped at the next step

    def decode(self, decode: list[Sequence]) -> None:
        """One token for each of these sequences in one pass; each one's logits set, in its row."""
        backend = self.backend
        wanted = {id(s) for s in decode}
        rows: list[Sequence] = []
        if self._batch is not None:
            for s in self._rows:  # a row leaving while still alive takes its cache with it
                if s is not None and id(s) not in wanted:
                    self.own_cache(s)
            keep = [i for i, s in enumerate(self._rows) if s is not None]
            if not keep:
                self._batch = None
            elif len(keep) < len(self._rows):
                backend.batch_keep(self._batch, keep)
            rows = [s for s in self._rows if s is not None]
        present = {id(s) for s in rows}
        new = [s for s in decode if id(s) not in present]
        if new:
            merged = backend.batch_merge([s.payload.cache for s in new])
            if self._batch is None:
                self._batch = merged
            else:
                backend.batch_extend(self._batch, merged)
            rows = rows + new
            for s in new:
                s.payload.cache = None  # its positions live in the batch now
        self._rows = list(rows)
        logits = backend.decode_rows(self._batch, [s.payload.last_token for s in rows])
        row = {id(s): i for i, s in enumerate(rows)}
        for seq in decode:
            i = row[id(seq)]
            seq.payload.logits = logits[i : i + 1]

    def own_cache(self, seq: Sequence) -> None:
        """The sequence's own cache again, out of the batch (its row is dropped at the next step)."""
        run: Running = seq.payload
        if run.cache is not None or self._batch is None:
            return
        i = next((i for i, s in enumerate(self._rows) if s is seq), None)
        if i is None:  # never decoded in the batch (a child released before its copy)
            return
        run.cache = self.backend.batch_extract(self._batch, i)
        self._rows[i] = None

    def dissolve(self) -> None:
        """Back to one cache per sequence (the rows still alive get theirs out)."""
        if self._batch is None:
            return
        for s in self._rows:
            if s is not None and not s.payload.done:
                self.own_cache(s)
        self._batch, self._rows = None, []
