"""The fast CPU BLAS is interposed before mlx and measured, not assumed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from server import blas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the interposition is Linux-only")


def _probe(env_extra: dict) -> str:
    code = ("from server import blas; blas.activate(); blas.verify(); "
            "print(blas.STATE.fast, blas.STATE.gflops, blas.STATE.library)")
    import os

    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True).stdout.split()


def test_fast_blas_is_in_use_in_this_process():
    # conftest activated it before mlx was imported
    assert blas.STATE.library is not None, blas.STATE.reason
    blas.verify()
    assert blas.STATE.fast, blas.describe()


def test_reference_blas_is_measured_as_slow():
    fast, gflops, _ = _probe({})
    slow, slow_gflops, lib = _probe({blas.BLAS_ENV: "reference"})
    assert fast == "True" and slow == "False" and lib == "None"
    assert float(gflops) > 4 * float(slow_gflops)


def test_activation_after_mlx_import_is_refused_and_said():
    code = "import mlx.core; from server import blas; s = blas.activate(); print(s.library, '|', s.reason)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("None |") and "imported before" in out
