"""A fast CPU BLAS for MLX on Linux.

The Linux `mlx[cpu]` wheel links the netlib reference BLAS (about 2.5 GFLOP/s). Loading an OpenBLAS (or
MKL) that exports the standard cblas symbols with global binding *before* `mlx` is imported interposes
its `cblas_sgemm`: a 512x576x1536 GEMM drops from ~350 ms to ~5 ms. `activate()` must run before the
first `import mlx`; `verify()` measures that GEMM afterwards, so the log states what is really in use.

Ahead of that BLAS goes a small cblas_sgemm of mlxcel's own (server/native/sgemm_row.c, compiled once into
the cache with the C compiler, skipped without one): it sends one-row products, a decode step's, to
cblas_sgemv, about 3x faster there, and forwards every other call unchanged.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import subprocess
import sys
import time
from dataclasses import dataclass

BLAS_ENV = "MLXCEL_BLAS"  # a library path, or "reference" to keep the wheel's own BLAS
ROW_ENV = "MLXCEL_SGEMV_ROWS"  # "0": no one-row GEMV path
ROW_SOURCE = os.path.join(os.path.dirname(__file__), "native", "sgemm_row.c")
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
    row_path: str = "not attempted"  # the one-row GEMV shim: "on", or why not
    shim: ctypes.CDLL | None = None

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
        try:  # opened locally first: the shim must take the global scope ahead of it
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
            lib.cblas_sgemm  # noqa: B018 - must export the standard cblas symbol
        except (OSError, AttributeError) as exc:
            tried.append(f"{path}: {exc}")
            continue
        _load_row_shim(lib)
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # now global: MLX's cblas calls bind to it
        STATE.library, STATE.reason = path, "loaded with global symbol binding before mlx"
        return STATE
    STATE.reason = "no OpenBLAS/MKL found (" + ("; ".join(tried) or "install libopenblas0-pthread") + ")"
    return STATE


def _build_row_shim() -> str:
    """The shim's shared object in the cache, compiled from its source once (keyed by the source's hash)."""
    import hashlib
    import shutil
    import tempfile

    from .models.cache import cache_root

    source = open(ROW_SOURCE, "rb").read()
    out = cache_root() / "native" / f"sgemm_row-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if out.is_file():
        return str(out)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise OSError("no C compiler (cc) to build it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        target = os.path.join(tmp, out.name)
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", target, ROW_SOURCE, "-ldl"], check=True,
                       capture_output=True, timeout=120)
        os.replace(target, out)
    return str(out)


def _load_row_shim(blas: ctypes.CDLL) -> None:
    """Load the one-row shim with global binding, ahead of the BLAS it forwards to."""
    if os.environ.get(ROW_ENV) == "0":
        STATE.row_path = f"off ({ROW_ENV}=0)"
        return
    try:
        shim = ctypes.CDLL(_build_row_shim(), mode=ctypes.RTLD_GLOBAL)
        shim.mlxcel_sgemm_bind.argtypes = [ctypes.c_void_p]
        if not shim.mlxcel_sgemm_bind(blas._handle):
            raise OSError("the BLAS lacks cblas_sgemm or cblas_sgemv")
    except (OSError, subprocess.SubprocessError) as exc:
        STATE.row_path = f"off ({exc})"
        return
    shim.mlxcel_sgemm_one_row_calls.restype = ctypes.c_long
    STATE.shim, STATE.row_path = shim, "on"


def one_row_calls() -> int:
    """How many one-row products the shim has sent to GEMV (0 without it)."""
    return int(STATE.shim.mlxcel_sgemm_one_row_calls()) if STATE.shim is not None else 0


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
    return (f"CPU BLAS: {verdict} ({lib}; {STATE.reason}; sgemm 512x1536x576 at {speed}; one-row products "
            f"through sgemv: {STATE.row_path})")
