"""--mlock (--load-mode mlock or mmap+mlock): the model's weights locked in RAM, as b10621's llama_mlock locks its
buffers (src/llama-mmap.cpp): each buffer mlock()ed in turn; the first that fails is warned about in b10621's
words (with its RLIMIT_MEMLOCK suggestion where raising the soft limit would help) and locking stops there."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import resource
from collections.abc import Iterable

import mlx.core as mx
import numpy as np

log = logging.getLogger("mlxcel")

SUGGESTION = "Try increasing RLIMIT_MEMLOCK ('ulimit -l' as root).\n"


def _buffers(arrays: Iterable[mx.array]) -> list[tuple[int, int]]:
    """(address, bytes) of each array's memory, once per buffer (views of one buffer counted once)."""
    seen: dict[int, int] = {}
    for a in arrays:
        try:
            view = np.array(a, copy=False)
        except (TypeError, ValueError, RuntimeError):  # (a type numpy cannot view: bfloat16)
            continue
        if view.nbytes:
            seen[view.ctypes.data] = max(seen.get(view.ctypes.data, 0), view.nbytes)
    return sorted(seen.items())


def lock(arrays: Iterable[mx.array]) -> int:
    """Lock the arrays' memory; returns the bytes locked (warned as b10621 warns where a buffer fails)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    done = 0
    for address, size in _buffers(arrays):
        if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) == 0:
            done += size
            continue
        code = ctypes.get_errno()
        soft, hard = (x if x >= 0 else 2**64 - 1 for x in resource.getrlimit(resource.RLIMIT_MEMLOCK))
        suggest = code == errno.ENOMEM and not hard > soft + size  # (raising the soft limit would not do)
        log.warning(
            "warning: failed to mlock %d-byte buffer (after previously locking %d bytes): %s\n%s",
            size,
            done,
            os.strerror(code),
            SUGGESTION if suggest else "",
        )
        break
    log.info("--mlock: %d bytes of weights locked in RAM", done)
    return done
