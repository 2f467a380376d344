"""Memory handed back to the system once the weights and caches that held it are dropped."""

from __future__ import annotations

import ctypes
import gc

import mlx.core as mx


def hand_back() -> None:
    """Python's cycles collected, MLX's buffer cache emptied and the C heap's free pages returned: without
    the last, glibc keeps a freed model's pages and the process's RSS stays at its peak."""
    gc.collect()
    mx.clear_cache()
    try:
        ctypes.CDLL(None).malloc_trim(0)  # glibc; other C libraries lack it and return pages their own way
    except (OSError, AttributeError):
        pass
