"""The fast CPU BLAS is interposed before mlx and measured, not assumed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from oracle import loopback
from server import blas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the interposition is Linux-only")


def _probe(env_extra: dict) -> str:
    code = (
        "from server import blas; blas.activate(); blas.verify(); "
        "print(blas.STATE.fast, blas.STATE.gflops, blas.STATE.library)"
    )
    import os

    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()


def test_fast_blas_is_in_use_in_this_process():
    # conftest activated it before mlx was imported
    assert blas.STATE.library is not None, blas.STATE.reason
    blas.verify()
    assert blas.STATE.fast, blas.describe()
    if blas.wheel_library() is not None and not os.environ.get(blas.BLAS_ENV):
        # pip install alone gives the fast path: the wheel's scipy_-prefixed cblas_sgemm, reached through
        # mlxcel's kernels' cblas_sgemm, is preferred to a system OpenBLAS, and the log says so
        assert blas.STATE.library == blas.wheel_library() and blas.STATE.kernels == "on"
        assert "scipy-openblas32 wheel" in blas.describe() and "scipy_cblas_sgemm" in blas.describe()


def test_reference_blas_is_measured_as_slow():
    fast, gflops, _ = _probe({})
    slow, slow_gflops, lib = _probe({blas.BLAS_ENV: "reference"})
    assert fast == "True" and slow == "False" and lib == "None"
    assert float(gflops) > 4 * float(slow_gflops)


def test_activation_after_mlx_import_is_refused_and_said():
    code = "import mlx.core; from server import blas; s = blas.activate(); print(s.library, '|', s.reason)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("None |") and "imported before" in out


def test_few_row_products_run_on_mlxcels_kernels_and_agree_with_the_gemm():
    import mlx.core as mx
    import numpy as np

    assert blas.STATE.kernels == "on", blas.STATE.kernels
    rng = np.random.default_rng(0)
    w = rng.standard_normal((576, 1536)).astype(np.float32)
    x = rng.standard_normal((20, 576)).astype(np.float32)
    exact = x.astype(np.float64) @ w
    before = blas.small_calls()
    for b in (mx.array(w), mx.array(np.ascontiguousarray(w.T)).T):  # either layout of the weight
        alone = np.array(mx.array(x[:1]) @ b)
        few = np.array(mx.array(x[:7]) @ b)
        many = np.array(mx.array(x) @ b)  # 20 rows: OpenBLAS's GEMM
        assert np.array_equal(alone[0], few[0])  # a row's sums do not depend on the rows beside it
        assert np.abs(few - exact[:7]).max() < 1e-3 and np.abs(many - exact).max() < 1e-3
    assert blas.small_calls() - before == 4


def test_prompt_sized_products_split_over_the_pool_keep_every_row_bitwise():
    """The BLAS runs one thread and mlxcel's pool cuts a product's rows among its threads: a row's sums are
    the BLAS's own whatever the rows beside it (17 rows or 700, either operand layout, a weight's columns
    read in part), so a prompt's rows do not depend on how it was cut into chunks."""
    import mlx.core as mx
    import numpy as np

    if not blas.STATE.split:
        pytest.skip("the BLAS cannot be set to one thread here")
    assert "products split over" in blas.describe()
    rng = np.random.default_rng(3)
    x = mx.array(rng.standard_normal((700, 576)).astype(np.float32))
    w = rng.standard_normal((576, 960)).astype(np.float32)
    for b in (mx.array(w), mx.array(np.ascontiguousarray(w.T)).T, mx.array(w)[:, 576:]):
        whole = np.array(x @ b)
        assert np.abs(whole - np.array(x, np.float64) @ np.array(b, np.float64)).max() < 1e-3
        for lo, hi in ((0, 17), (100, 140), (13, 600), (683, 700)):  # (16 rows or fewer: the few-row kernels)
            assert np.array_equal(np.array(x[lo:hi] @ b), whole[lo:hi]), (lo, hi)


def test_the_probe_tells_kernels_that_cut_rows_differently_from_ones_that_do_not():
    """OpenBLAS's Haswell kernels (its choice on AVX2 CPUs without AVX-512, Zen included) sum a row in a
    4- or 12-wide block in another order than a row alone; its AVX (Sandybridge) kernels do not. Where its own
    choice fails the probe, activate() loads the AVX kernels instead, and says so."""
    if not (blas.X86 and blas.STATE.library and blas.STATE.native and blas.STATE.native.mlxcel_has_avx2()):
        pytest.skip("needs OpenBLAS on an x86-64 CPU with AVX2")
    assert blas._rows_stable(blas.STATE.library, "Haswell", blas.STATE.prefix) is False
    assert blas._rows_stable(blas.STATE.library, blas.ROW_STABLE_CORE, blas.STATE.prefix) is True
    assert blas.STATE.core == blas.ROW_STABLE_CORE  # OpenBLAS (the wheel's too) read OPENBLAS_CORETYPE
    assert "rows the same however cut" in blas.describe()


def test_the_kernels_can_be_turned_off():
    """MLXCEL_CPU_KERNELS=0: no kernels; a prefixed BLAS (the wheel's) stays fast, its products forwarded."""
    library, kernels, _ = _activated({blas.KERNELS_ENV: "0"})
    assert kernels.startswith("off") and library != "None"
    assert library == str(blas.wheel_library() or library)


def test_the_server_warns_when_only_the_reference_blas_is_there(twin_q4_1):
    """Said at warning level (a 'W' line), before the socket is bound (here it is taken, so startup ends)."""
    import os
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "server", "-m", str(twin_q4_1.mlx_dir), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, blas.BLAS_ENV: "reference"},
        )
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode != 0
    assert any(" W " in f" {line[:20]} " and "SLOW reference BLAS in use" in line for line in lines), lines[-5:]


def test_props_build_info_names_the_cpu_backend_verified_at_startup(twin_q4_1):
    """GET /props's build_info: b10621's b<build>-<commit>, then what the CPU really runs on."""
    import os

    from oracle.processes import mlxcel_server

    with mlxcel_server(str(twin_q4_1.mlx_dir)) as server:
        info = loopback.get(server.base_url + "/props", timeout=30).json()["build_info"]
    assert info.startswith("b10621-mlxcel-")
    assert f"CPU: {os.path.basename(blas.STATE.library)}" in info and "GFLOP/s" in info and "SLOW" not in info
    assert info.endswith("mlxcel kernels on)")


def test_few_row_products_over_a_transposed_operand_at_every_row_count_and_edge():
    """x @ W.T with W row-major (a tied head): tiles of 4 rows x 3 columns, 8 columns for one row, single
    columns at the edge; every row bitwise the same at any row count, each within rounding of the exact sum."""
    import mlx.core as mx
    import numpy as np

    rng = np.random.default_rng(3)
    for n, k in ((1, 7), (2, 64), (5, 100), (37, 64), (1000, 576)):
        w = rng.standard_normal((n, k)).astype(np.float32)
        x = rng.standard_normal((16, k)).astype(np.float32)
        exact = x.astype(np.float64) @ w.T.astype(np.float64)
        weight = mx.array(w)
        rows = [np.array(mx.array(x[i : i + 1]) @ weight.T)[0] for i in range(16)]
        for m in (2, 3, 4, 5, 8, 16):
            out = np.array(mx.array(x[:m]) @ weight.T)
            assert all(np.array_equal(out[i], rows[i]) for i in range(m)), (n, k, m)
            assert np.abs(out - exact[:m]).max() < 1e-4 * max(1.0, np.abs(exact).max()), (n, k, m)


def test_the_row_probe_verdict_is_kept_per_library_and_cpu(monkeypatch, tmp_path):
    """The probe's child runs once per library and CPU; later starts read the verdict from the cache."""
    import os

    from server import blas

    cand = next((c for c in blas._candidates() if os.path.exists(c.path)), None)
    if cand is None:
        pytest.skip("no OpenBLAS here")
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path))
    first = blas._rows_stable(cand.path, prefix=cand.prefix)
    assert first is not None  # an OpenBLAS, prefixed or not, is probed
    monkeypatch.setattr(blas.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("probed again")))
    assert blas._rows_stable(cand.path, prefix=cand.prefix) == first


def _activated(env_extra: dict, setup: str = "") -> list[str]:
    """activate() in a child with env_extra (and setup run first): library | kernels | reason."""
    code = (
        f"from server import blas; {setup}blas.activate(); "
        "print(blas.STATE.library, blas.STATE.kernels, blas.STATE.reason, sep=' | ')"
    )
    env = {**os.environ, **env_extra}
    return (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        .stdout.strip()
        .split(" | ")
    )


needs_wheel = pytest.mark.skipif(blas.wheel_library() is None, reason="the scipy-openblas32 wheel is not installed")


@needs_wheel
def test_without_a_c_compiler_the_prefixed_library_is_passed_over_and_said(tmp_path):
    """No compiler: the wheel's prefixed symbols cannot be reached, a system OpenBLAS serves if there is one,
    else the reference BLAS, and the reason names the compiler either way."""
    env = {"CC": str(tmp_path / "no-cc"), "MLXCEL_CACHE_DIR": str(tmp_path)}  # an empty cache: a build is needed
    library, kernels, reason = _activated(env, setup="blas._SYSTEM = (); blas._system = lambda: []; ")
    assert library == "None" and "could not be built" in reason and "no-cc" in reason
    system = [p for p in blas._SYSTEM if os.path.exists(p)]
    if system:
        library, kernels, reason = _activated(env)
        assert library == system[0] and kernels.startswith("off")
        assert reason.startswith("system") and "passed over" in reason


def test_blas_system_picks_a_system_openblas_only():
    system = [p for p in blas._SYSTEM if os.path.exists(p)]
    if not system:
        pytest.skip("no system OpenBLAS here")
    library, kernels, reason = _activated({blas.BLAS_ENV: "system"})
    assert library == system[0] and kernels == "on" and reason.startswith("system")
