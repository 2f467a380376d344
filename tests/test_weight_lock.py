"""--mlock (server/models/weight_lock.py): the weights' memory locked in RAM, each buffer once, as the kernel counts
it (VmLck in /proc/self/status)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from server.models.weight_lock import _buffers, lock


def _locked_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


def test_the_weights_buffers_are_locked_once_each(caplog):
    a = mx.array(np.arange(64 * 1024, dtype=np.float32))  # 256 KiB
    b = mx.array(np.ones((128, 256), dtype=np.float32))  # 128 KiB
    mx.eval(a, b)
    buffers = _buffers([a, b, a])  # (a counted once)
    assert sorted(size for _, size in buffers) == [128 * 1024, 256 * 1024]
    before = _locked_kib()
    done = lock([a, b, a])
    if done == 0:  # a RLIMIT_MEMLOCK below 128 KiB without CAP_IPC_LOCK: b10621's warning, nothing locked
        assert "warning: failed to mlock 131072-byte buffer (after previously locking 0 bytes)" in caplog.text
        return
    assert done == 384 * 1024
    assert _locked_kib() - before >= 384 - 8  # (pages already locked by an earlier test may overlap)
