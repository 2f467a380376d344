"""Weights in 2 MiB pages on Linux.

A decode step streams every weight from memory once. With 4 KiB pages the TLB misses hold two cores' reads at
~25 GB/s on this machine kind; in 2 MiB pages they reach ~31 GB/s. Memory mlxcel allocates itself (the
kernels' panels, an Arena) and MLX's own buffers are collapsed into
huge pages in place (MADV_COLLAPSE, Linux 6.1+) by a background thread COLLAPSE_DELAY seconds after loading,
so start-up does not wait and a process that lives only seconds (a refused request, a test's server) never
spends the ~1.4 s of a core that 540 MB take. Where the kernel refuses either, the memory keeps its small
pages: the same numbers, read slower.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
import threading

import mlx.core as mx
import numpy as np

HUGE_PAGE = 2 << 20
MADV_COLLAPSE = 25  # linux/mman.h (Python's mmap module names it from 3.12 only where the libc has it)
MIN_BYTES = 2 * HUGE_PAGE  # smaller buffers hold at most one whole huge page
COLLAPSE_DELAY = 5.0  # seconds after loading


class Arena:
    """An anonymous mapping, its usable part aligned to 2 MiB; lives as long as this object (keep it with
    whatever points into it). Touched in small pages: advising it for huge pages before the first touch makes
    each fault compact memory (defrag "madvise"), seconds for 540 MB once memory is fragmented; collapse()
    moves it into huge pages later, off the caller's thread."""

    def __init__(self, nbytes: int):
        # private: a shared anonymous mapping is shmem, whose huge pages follow another setting
        self._map = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self._map)  # the mapping's address (an export: never closed)
        start = ctypes.addressof(self._anchor)
        self.address = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
        self.nbytes = nbytes

    def collapse(self, delay: float = COLLAPSE_DELAY) -> threading.Thread | None:
        """Into huge pages on a daemon thread, `delay` seconds from now (once its contents are written)."""
        return _collapse_later([(self.address, self.nbytes)], delay)


def _buffers(arrays: list[mx.array]) -> list[tuple[int, int]]:
    """(address, bytes) of the evaluated arrays' memory, the large ones only."""
    out = []
    for a in arrays:
        if a.nbytes >= MIN_BYTES:
            view = np.array(a, copy=False)
            out.append((view.ctypes.data, a.nbytes))
    return out


def _collapse(regions: list[tuple[int, int]], delay: float = 0.0) -> None:
    """(Holds no reference to the arrays: MLX objects stay on the main thread. Memory freed meanwhile makes
    madvise fail or collapse whatever is mapped there now; collapsing changes no byte.)"""
    if delay > 0:
        threading.Event().wait(delay)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for address, nbytes in regions:
        start = (address + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
        end = (address + nbytes) & ~(HUGE_PAGE - 1)
        if end > start and libc.madvise(start, end - start, MADV_COLLAPSE) != 0 and ctypes.get_errno() == errno.EINVAL:
            return  # not supported here (kernels before 6.1): the rest would fail the same way


def collapse_in_background(arrays: list[mx.array], delay: float = COLLAPSE_DELAY) -> threading.Thread | None:
    """Collapse the large arrays' memory into huge pages on a daemon thread, `delay` seconds from now."""
    return _collapse_later(_buffers(arrays), delay)


def _collapse_later(regions: list[tuple[int, int]], delay: float) -> threading.Thread | None:
    if not sys.platform.startswith("linux") or not regions:
        return None
    thread = threading.Thread(target=_collapse, args=(regions, delay), name="mlxcel-huge-pages", daemon=True)
    thread.start()
    return thread


def huge_bytes() -> int:
    """This process's anonymous memory in huge pages (0 where the kernel does not say)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
