"""mlx-lm's BatchKVCache, read and moved on where its public interface stops: the one module that touches its
private fields (a native step writes a batch's keys itself, then moves the cache on as update_and_fetch would)."""

from __future__ import annotations

from mlx_lm.models.cache import BatchKVCache


def written(cache: BatchKVCache) -> int:
    """Positions written in the batch's buffers (left padding included)."""
    return cache.size()


def left_padded_only(cache: BatchKVCache) -> bool:
    """No right padding waits to be rolled in (mlxcel never asks for it: rows join a batch left-padded)."""
    return getattr(cache, "_right_padding", None) is None


def advance(cache: BatchKVCache, offsets, index: int) -> None:
    """The bookkeeping update_and_fetch does after writing one position per row at `index - 1`."""
    cache.offset, cache._idx = offsets, index
