"""Decode rows in micro-batches through a pipeline split (distributed.pipeline), so the stages work at once.

mlx-lm's pipelined forward runs every stage in turn and ends with an `all_gather`, so while one rank computes its
layers the others wait: a pipeline divides the memory, not the time. Here a batch of decode rows is held as
several micro-batches (`Groups`: each its own merged cache per layer, rows in order), and `decode_rows` runs them
one after another through this rank's layers, each evaluated on its own: the first stage sends micro-batch 0 on
and starts micro-batch 1 while the next stage works on micro-batch 0. The hidden rows travel by the group's
`send` / `recv` only; the last stage (rank 0, which holds the last layers) alone applies the norm and the head,
since only rank 0 reads logits. Every rank keeps the same grouping: the batch calls arrive in the same order with
the same arguments on every rank (distributed.Leader).
"""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
from mlx_lm.models.base import create_attention_mask

from .distributed import Ranks


class Groups(list):
    """A batch on a pipeline: its micro-batches in row order, each a list of per-layer merged caches."""


class MicroBatched:
    """The MLX backend of one pipeline stage, its batches held as micro-batches; everything else is the backend's."""

    def __init__(self, backend: Any, ranks: Ranks):
        self._backend, self._ranks = backend, ranks
        inner = backend.model.model
        self._inner = inner
        tied = getattr(getattr(backend.model, "args", None), "tie_word_embeddings", False)
        self._head: Any = (
            inner.embed_tokens.as_linear if tied or not hasattr(backend.model, "lm_head") else backend.model.lm_head
        )

    def __getattr__(self, name: str) -> Any:  # (only what this class does not define)
        return getattr(self._backend, name)

    # --- batches as micro-batches ---------------------------------------------------------------------------

    def batch_merge(self, caches: list) -> Groups:
        """One micro-batch a stage at most, rows split evenly in order."""
        n = min(self._ranks.size, len(caches))
        size = math.ceil(len(caches) / n)
        return Groups(self._backend.batch_merge(caches[i : i + size]) for i in range(0, len(caches), size))

    def _sizes(self, batch: Groups) -> list[int]:
        return [int(g[0].offset.shape[0]) for g in batch]  # (a BatchKVCache's offset: one a row)

    def batch_keep(self, batch: Groups, rows: list[int]) -> None:
        """Keep these rows (ascending, as the engine lists them); a micro-batch left empty goes."""
        start, kept = 0, Groups()
        for group, size in zip(list(batch), self._sizes(batch), strict=True):
            mine = [r - start for r in rows if start <= r < start + size]
            start += size
            if not mine:
                continue
            if len(mine) < size:
                self._backend.batch_keep(group, mine)
            kept.append(group)
        batch[:] = kept

    def batch_extend(self, batch: Groups, other: Groups) -> None:
        """The new rows' micro-batches after these; beyond one a stage, the two smallest neighbours merge."""
        batch.extend(other)
        while len(batch) > self._ranks.size:
            sizes = self._sizes(batch)
            i = min(range(len(batch) - 1), key=lambda j: sizes[j] + sizes[j + 1])
            self._backend.batch_extend(batch[i], batch[i + 1])
            del batch[i + 1]

    def batch_extract(self, batch: Groups, row: int) -> Any:
        for group, size in zip(batch, self._sizes(batch), strict=True):
            if row < size:
                return self._backend.batch_extract(group, row)
            row -= size
        raise IndexError(f"row {row} past the batch")

    # --- the micro-batches' pass --------------------------------------------------------------------------------

    def decode_rows(self, batch: Groups, tokens: list[int]) -> Any:
        """One token a row: each micro-batch through this rank's layers in turn, evaluated before the next, its
        hidden rows received from the stage before and sent to the stage after; rank 0's rows' logits (the other
        ranks' result is a placeholder no one reads)."""
        self._backend._settle()
        rank, size, group = self._ranks.rank, self._ranks.size, self._ranks.group
        inner, out, start = self._inner, [], 0
        for caches, n in zip(batch, self._sizes(batch), strict=True):
            h = inner.embed_tokens(mx.array([[t] for t in tokens[start : start + n]]))
            start += n
            if rank < size - 1:  # not the first stage: the rows come from the rank holding the layers before
                h = mx.distributed.recv_like(h, rank + 1, group=group)
            mask = create_attention_mask(h, caches[0])
            for layer, c in zip(inner.pipeline_layers, caches, strict=True):
                h = layer(h, mask, c)
            if rank > 0:
                mx.eval(mx.distributed.send(h, rank - 1, group=group), [(c.keys, c.values) for c in caches])
            else:
                logits = self._head(inner.norm(h))[:, -1, :].astype(mx.float32)
                mx.eval(logits)
                out.append(logits)
        return mx.concatenate(out, axis=0) if out else mx.zeros((len(tokens), 1))
