"""Scaling out with mlx.distributed (docs/scaling-out.md): tensor parallelism across ranks on loopback gives
the single-process logits, through MLX's own ring backend (no home-made protocol)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

from server.models.loader import load_checkpoint

WORKER = Path(__file__).parent / "workers" / "tensor_parallel.py"
TOKENS = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 4


def test_three_ranks_on_loopback_match_one_process(twin_f32, tmp_path):
    launcher = shutil.which("mlx.launch", path=os.path.dirname(sys.executable)) or shutil.which("mlx.launch")
    assert launcher, "mlx.launch comes with mlx"
    out = tmp_path / "logits.npy"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    # SmolLM2 has 9 query and 3 key/value heads: three ranks take three and one each
    proc = subprocess.run(
        [
            launcher,
            "--backend",
            "ring",
            "-n",
            "3",
            "--hosts",
            "127.0.0.1",
            "--python",
            sys.executable,
            str(WORKER),
            str(twin_f32.mlx_dir),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # (counted over the whole output: mlx.launch relays the ranks' streams in chunks, two lines can share one)
    assert proc.stdout.count("of 3: done") == 3, proc.stdout[-2000:]
    sharded = np.load(out)
    model = load_checkpoint(twin_f32.mlx_dir, transpose=False).model
    whole = model(mx.array([TOKENS]))[0].astype(mx.float32)
    mx.eval(whole)
    whole = np.array(whole)
    assert sharded.shape == whole.shape
    # all_sum adds the ranks' partial products in another order: close, not bitwise
    assert np.abs(sharded - whole).max() < 1e-3
    assert (sharded.argmax(-1) == whole.argmax(-1)).all()
