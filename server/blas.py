"""A fast CPU BLAS for MLX on Linux.

The Linux `mlx[cpu]` wheel links the netlib reference BLAS (about 2.5 GFLOP/s). Loading an OpenBLAS (or
MKL) that exports the standard cblas symbols with global binding *before* `mlx` is imported interposes
its `cblas_sgemm`: a 512x576x1536 GEMM drops from ~350 ms to ~5 ms. `activate()` must run before the
first `import mlx`; `verify()` measures that GEMM afterwards, so the log states what is really in use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import time
from dataclasses import dataclass

BLAS_ENV = "MLXCEL_BLAS"  # a library path, or "reference" to keep the wheel's own BLAS
FAST_GFLOPS = 10.0  # the reference BLAS measures ~2.5, OpenBLAS on two cores ~150

_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


@dataclass
class BlasState:
    library: str | None = None
    reason: str = "not attempted"
    gflops: float | None = None

    @property
    def fast(self) -> bool:
        return self.gflops is not None and self.gflops >= FAST_GFLOPS


STATE = BlasState()


def _candidates() -> list[str]:
    found = [p for p in _CANDIDATES if os.path.exists(p)]
    name = ctypes.util.find_library("openblas")
    if name:
        found.append(name)
    for site in sys.path:
        found.extend(sorted(glob.glob(os.path.join(site, "..", "..", "libmkl_rt.so*"))))
    return found


def activate() -> BlasState:
    if not sys.platform.startswith("linux"):
        STATE.reason = "not Linux: MLX uses the platform's accelerated BLAS"
        return STATE
    if "mlx.core" in sys.modules:
        STATE.reason = "mlx was imported before the BLAS could be interposed"
        return STATE
    wanted = os.environ.get(BLAS_ENV)
    if wanted == "reference":
        STATE.reason = f"{BLAS_ENV}=reference: keeping the wheel's reference BLAS"
        return STATE
    tried = []
    for path in [wanted] if wanted else _candidates():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.cblas_sgemm  # noqa: B018 - must export the standard cblas symbol
        except (OSError, AttributeError) as exc:
            tried.append(f"{path}: {exc}")
            continue
        STATE.library, STATE.reason = path, "loaded with global symbol binding before mlx"
        return STATE
    STATE.reason = "no OpenBLAS/MKL found (" + ("; ".join(tried) or "install libopenblas0-pthread") + ")"
    return STATE


def verify() -> BlasState:
    """Time one f32 GEMM through MLX on the CPU; records GFLOP/s in STATE."""
    import mlx.core as mx

    m, k, n = 512, 1536, 576
    with mx.stream(mx.cpu):
        a = mx.random.normal((m, k))
        b = mx.random.normal((k, n))
        mx.eval(a, b, a @ b)
        start = time.perf_counter()
        mx.eval(a @ b)
        elapsed = time.perf_counter() - start
    STATE.gflops = 2.0 * m * k * n / elapsed / 1e9
    return STATE


def describe() -> str:
    speed = f"{STATE.gflops:.1f} GFLOP/s" if STATE.gflops is not None else "not measured"
    verdict = "fast BLAS in use" if STATE.fast else "SLOW reference BLAS in use"
    lib = STATE.library or "the mlx wheel's own"
    return f"CPU BLAS: {verdict} ({lib}; {STATE.reason}; sgemm 512x1536x576 at {speed})"
