"""A fast CPU BLAS for MLX on Linux.

The Linux `mlx[cpu]` wheel links the netlib reference BLAS (about 2.5 GFLOP/s). A `cblas_sgemm` loaded with
global binding *before* `mlx` is imported interposes MLX's: a 512x576x1536 GEMM drops from ~350 ms to ~5 ms.
By default that BLAS is the scipy-openblas32 wheel's (a dependency: `pip install` alone gives the fast path),
whose symbols carry a `scipy_` prefix: mlxcel's kernels (below) export the `cblas_sgemm` and forward to it. A
system OpenBLAS or MKL exporting the plain names is interposed by global binding alone, and serves where the
kernels cannot be built. `activate()` must run before the first `import mlx`; `verify()` measures that GEMM
afterwards, so the log states what is really in use (the library, why it was chosen, its OpenBLAS kernels).

Ahead of that BLAS go mlxcel's own CPU kernels (server/native/cpu_kernels.c, compiled once into the cache
with the C compiler, skipped without one): their cblas_sgemm runs few-row products, a decode step's, at the
memory's bandwidth on every core (OpenBLAS reaches about a third of it there) and cuts every other product's
rows into one part per thread of their pool, each part on the BLAS set to one thread: one pool then runs the
products and the kernels between them (the BLAS's own threads spun on the second core while the pool waited
for it, making a prompt's norms, rope and SwiGLU ~5x slower). server/cpu_kernels.py calls their attention,
rope and SwiGLU, server/models/decode_step.py and prefill_step.py whole steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass

from .cachedir import NoCompiler, cache_root, shared_object

BLAS_ENV = "MLXCEL_BLAS"  # a library path, "scipy-openblas" or "system" (only those), "reference" (the wheel's own)
CORETYPE_ENV = "OPENBLAS_CORETYPE"  # OpenBLAS's own (the scipy-openblas build's too): which CPU's kernels, at load
# AVX kernels, run by every x86-64 CPU with AVX2: a row's sums are the same however the rows were cut. The
# Haswell and Zen kernels' are not (rows in 4- and 12-wide blocks sum in another order than rows alone).
ROW_STABLE_CORE = "Sandybridge"
KERNELS_ENV = "MLXCEL_CPU_KERNELS"  # "0": without mlxcel's CPU kernels
KERNELS_DIR = os.path.join(os.path.dirname(__file__), "native")
KERNELS_SOURCES = (
    "cpu_kernels.c",
    "decode_step.c",
    "prefill_step.c",
    "encoder_ggml.c",
    "attention_ggml.c",
    "ggml_order.c",
    "ggml_blocks.c",
    "int8_dot.c",
    "moe_ggml.c",
    "kv_quant.c",
)  # one shared object
KERNELS_HEADERS = ("cpu_kernels.h", "step_model.h", "ggml_simd.h")
KERNELS_FLAGS = ("-O3", "-shared", "-fPIC")
X86 = platform.machine() in ("x86_64", "AMD64")
FAST_GFLOPS = 10.0  # the reference BLAS measures ~2.5, OpenBLAS on two cores ~150

# The OpenBLAS numpy and scipy ship (pyproject's dependency on Linux x86-64 and aarch64), built for every CPU
# (DYNAMIC_ARCH). Its symbols carry a prefix, so global binding alone interposes nothing: mlxcel's kernels'
# cblas_sgemm forwards to its scipy_cblas_sgemm. Preferred over a system OpenBLAS, which measured no faster
# (docs/cpu-speed.md), so that `pip install` alone gives the same library everywhere; a system one (unprefixed,
# interposed by global binding alone) serves where the kernels cannot be built (no C compiler).
WHEEL = "scipy_openblas32"
WHEEL_PREFIX = "scipy_"
_SYSTEM = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


@dataclass(frozen=True)
class Candidate:
    path: str
    origin: str  # where it came from, for the log: "the scipy-openblas32 wheel", "system", MLXCEL_BLAS

    @property
    def prefix(self) -> str:
        """Its symbols' prefix, told by its name: the library must not be loaded before _choose_core."""
        return WHEEL_PREFIX if os.path.basename(self.path).startswith("libscipy_openblas") else ""


@dataclass
class BlasState:
    library: str | None = None
    reason: str = "not attempted"
    gflops: float | None = None
    kernels: str = "not attempted"  # mlxcel's CPU kernels: "on", or why not
    split: bool = False  # prompt-sized products split over mlxcel's pool, the BLAS single-threaded
    rows: str = "not probed"  # whether a product's row is the same however its rows were cut (_choose_core)
    prefix: str = ""  # the BLAS's symbol prefix ("scipy_" for the wheel's)
    core: str | None = None  # OpenBLAS's kernels in use (its openblas_get_corename)
    native: ctypes.CDLL | None = None

    @property
    def fast(self) -> bool:
        return self.gflops is not None and self.gflops >= FAST_GFLOPS


STATE = BlasState()


def wheel_library() -> str | None:
    """The scipy-openblas32 wheel's shared library, found without importing the package (its import loads it)."""
    try:
        spec = importlib.util.find_spec(WHEEL)
    except (ImportError, ValueError):
        return None
    for root in (spec and spec.submodule_search_locations) or ():
        found = sorted(glob.glob(os.path.join(root, "lib", "libscipy_openblas*.so*")))
        if found:
            return found[0]
    return None


def _system() -> list[str]:
    found = [p for p in _SYSTEM if os.path.exists(p)]
    name = ctypes.util.find_library("openblas")
    if name:
        found.append(name)
    for site in sys.path:
        found.extend(sorted(glob.glob(os.path.join(site, "..", "..", "libmkl_rt.so*"))))
    return found


def _candidates() -> list[Candidate]:
    """In order of preference: MLXCEL_BLAS's library alone, else the wheel's, then the system's."""
    wanted = os.environ.get(BLAS_ENV)
    wheel = wheel_library()
    wheel_list = [Candidate(wheel, "the scipy-openblas32 wheel")] if wheel else []
    system = [Candidate(p, "system") for p in dict.fromkeys(_system())]
    if wanted == "scipy-openblas":
        return wheel_list
    if wanted == "system":
        return system
    if wanted:
        return [Candidate(wanted, BLAS_ENV)]
    return wheel_list + system


def activate() -> BlasState:  # noqa: C901
    if not sys.platform.startswith("linux"):
        STATE.reason = "not Linux: MLX uses the platform's accelerated BLAS"
        return STATE
    if "mlx.core" in sys.modules:
        STATE.reason = "mlx was imported before the BLAS could be interposed"
        return STATE
    if os.environ.get(BLAS_ENV) == "reference":
        STATE.reason = f"{BLAS_ENV}=reference: keeping the wheel's reference BLAS"
        return STATE
    kernels_on = os.environ.get(KERNELS_ENV) != "0"
    try:  # the kernels' object: the few-row kernels, and the forwarder a prefixed BLAS needs
        native_path, native_error = _build_kernels(), ""
    except (OSError, subprocess.SubprocessError) as exc:
        native_path, native_error = None, str(exc) or type(exc).__name__
    tried = []
    for cand in _candidates():
        prefix = cand.prefix
        if prefix and native_path is None:
            tried.append(
                f"{cand.path}: its {prefix}cblas_sgemm is reached only through mlxcel's kernels, which "
                f"could not be built ({native_error})"
            )
            continue
        if kernels_on and os.path.exists(cand.path):
            _choose_core(cand.path, prefix)  # before this process loads it: OpenBLAS reads its core type at load
        try:  # opened locally first: the kernels must take the global scope ahead of it
            lib = ctypes.CDLL(cand.path, mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            tried.append(f"{cand.path}: {exc}")
            continue
        if not hasattr(lib, prefix + "cblas_sgemm"):
            tried.append(f"{cand.path}: no {prefix}cblas_sgemm")
            continue
        if not _load_kernels(lib, prefix, native_path, native_error, kernels_on) and prefix:
            tried.append(f"{cand.path}: mlxcel's kernels did not bind to its {prefix}cblas_sgemm")
            continue
        if not prefix:
            ctypes.CDLL(cand.path, mode=ctypes.RTLD_GLOBAL)  # now global: MLX's cblas calls bind to it
        STATE.library, STATE.prefix = cand.path, prefix
        STATE.core = _corename(lib, prefix)
        how = (
            f"its {prefix}cblas_sgemm reached through mlxcel's kernels' cblas_sgemm"
            if prefix
            else "loaded with global symbol binding before mlx"
        )
        passed = f"; passed over: {'; '.join(tried)}" if tried else ""
        STATE.reason = f"{cand.origin}, {how}{passed}"
        return STATE
    hint = "pip install scipy-openblas32 (and a C compiler, cc) or install libopenblas0-pthread"
    STATE.reason = "no usable OpenBLAS/MKL (" + ("; ".join(tried) or f"none found: {hint}") + ")"
    return STATE


def _corename(lib: ctypes.CDLL, prefix: str) -> str | None:
    try:
        fn = getattr(lib, prefix + "openblas_get_corename")
    except AttributeError:
        return None
    fn.restype = ctypes.c_char_p
    return (fn() or b"").decode(errors="replace") or None


# Run in a child (the BLAS picks its kernels once per process): "1" when a product's rows, computed in one call
# or cut into parts, are bitwise the same, "0" when not, "-" for a BLAS that is not OpenBLAS. Row-major, both
# layouts of the weight, on one thread as mlxcel's pool runs it. argv: the library, its symbols' prefix.
_ROWS_PROBE = r"""
import ctypes, sys
lib, pre = ctypes.CDLL(sys.argv[1]), sys.argv[2]
if not hasattr(lib, pre + "openblas_set_num_threads"):
    print("-"); sys.exit()
getattr(lib, pre + "openblas_set_num_threads")(1)
sgemm = getattr(lib, pre + "cblas_sgemm")
M, K, N, seed, F = 40, 67, 50, 12345, ctypes.c_float
def fill(n):
    global seed
    out = (F * n)()
    for i in range(n):
        seed = (seed * 1103515245 + 12345) % 2**31
        out[i] = seed / 2**30 - 1.0
    return out
a, b = fill(M * K), fill(K * N)
def rows(lo, hi, trans_b):
    c = (F * ((hi - lo) * N))()
    sgemm(101, 111, trans_b, hi - lo, N, K, F(1.0), ctypes.byref(a, lo * K * 4), K, b,
                    K if trans_b == 112 else N, F(0.0), c, N)
    return bytes(c)
same = all(rows(0, M, t)[lo * N * 4:hi * N * 4] == rows(lo, hi, t)
           for t in (111, 112) for lo, hi in ((0, 17), (3, 20), (17, M), (0, 1), (5, 6), (13, 14)))
print(int(same))
"""


def _rows_stable(path: str, core: str | None = None, prefix: str = "") -> bool | None:
    """Whether the BLAS at path (with OpenBLAS's `core` kernels) gives a row the same sums however the rows
    of its product were cut; None where that cannot be told (not OpenBLAS, or the probe failed). The verdict
    is kept in the cache, keyed by the library file and this CPU (a child costs ~0.2 s of every start)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        with open("/proc/cpuinfo", "rb") as f:
            # the first processor's model and flags (not its clock: "cpu MHz" changes between reads)
            cpu = b"\n".join(
                ln
                for ln in f.read().split(b"\n\n")[0].splitlines()
                if ln.startswith((b"model name", b"flags", b"vendor_id", b"cpu family", b"model\t"))
            )
    except OSError:
        st, cpu = None, b""
    key = hashlib.sha256(
        json.dumps(
            [real, st and st.st_size, st and st.st_mtime_ns, core, prefix, cpu.decode(errors="replace"), _ROWS_PROBE]
        ).encode()
    ).hexdigest()[:24]
    memo = cache_root() / "native" / f"blas-rows-{key}.json"
    try:
        return json.loads(memo.read_text())["stable"]
    except (OSError, ValueError, KeyError):
        pass
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    if core:
        env[CORETYPE_ENV] = core
    try:
        out = subprocess.run(
            [sys.executable, "-c", _ROWS_PROBE, path, prefix], capture_output=True, text=True, timeout=60, env=env
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    stable = {"1": True, "0": False}.get(out)
    if stable is not None and st is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"library": real, "core": core, "stable": stable}))
        os.replace(tmp, memo)
    return stable


def _choose_core(path: str, prefix: str = "") -> None:
    """Rows cut over the pool must sum as they would uncut (a prompt's logits must not depend on its chunks):
    where OpenBLAS's own choice of kernels does not keep that, run its AVX kernels instead, which do."""
    chosen = os.environ.get(CORETYPE_ENV)
    stable = _rows_stable(path, prefix=prefix)
    if stable is None:
        STATE.rows = "not probed (not OpenBLAS)"
    elif stable:
        STATE.rows = "rows the same however cut" + (f" ({CORETYPE_ENV}={chosen})" if chosen else "")
    elif chosen or not (X86 and _rows_stable(path, ROW_STABLE_CORE, prefix)):
        STATE.rows = "rows depend on how a product is cut (this BLAS's kernels)"
    else:
        os.environ[CORETYPE_ENV] = ROW_STABLE_CORE
        STATE.rows = f"rows the same however cut on the {ROW_STABLE_CORE} kernels (its own choice's are not)"


def _build_kernels() -> str:
    """The kernels' shared object in the cache, compiled from their sources once (keyed by their hash)."""
    try:
        return shared_object(
            "cpu_kernels", KERNELS_DIR, KERNELS_SOURCES, KERNELS_HEADERS, KERNELS_FLAGS, ("-ldl", "-lm", "-lpthread")
        )
    except NoCompiler as exc:
        raise OSError(str(exc)) from None


def _load_kernels(blas: ctypes.CDLL, prefix: str, path: str | None, error: str, on: bool) -> bool:
    """Load mlxcel's kernels with global binding, ahead of the BLAS their cblas_sgemm forwards to; with the
    kernels off, only as that forwarder, and only for a prefixed BLAS (an unprefixed one is interposed alone).
    False when they are not in front of the BLAS."""
    if not on:
        STATE.kernels = f"off ({KERNELS_ENV}=0)"
        if not prefix:
            return False
    elif path is None:
        STATE.kernels = f"off ({error})"
        return False
    try:
        native = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        native.mlxcel_bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        if not native.mlxcel_bind(blas._handle, prefix.encode(), int(on)):
            raise OSError(f"the BLAS lacks {prefix}cblas_sgemm")
    except OSError as exc:
        STATE.kernels = f"off ({exc})"
        return False
    if not on:
        return True  # a forwarder only: every product goes to the BLAS, on its own threads
    native.mlxcel_small_calls.restype = ctypes.c_long
    set_threads = getattr(blas, prefix + "openblas_set_num_threads", None)
    if set_threads is not None:  # one pool for every thread: the BLAS's own stay asleep
        set_threads(1)
        native.mlxcel_split_rows(1)
        STATE.split = True
    STATE.native = native
    STATE.kernels = "on" if native.mlxcel_has_avx2() else "on (no AVX2/FMA here: products go to the BLAS)"
    return True


def set_threads(n: int) -> None:
    """The BLAS's own threads for the products it runs threaded (a prompt's): only where mlxcel's pool does not
    split them (its kernels loaded over OpenBLAS: the BLAS then runs on one thread a part)."""
    if STATE.split or STATE.library is None or n < 1:
        return
    fn = getattr(ctypes.CDLL(STATE.library), STATE.prefix + "openblas_set_num_threads", None)
    if fn is not None:
        fn(n)


def small_calls() -> int:
    """How many few-row products mlxcel's kernels have run (0 without them)."""
    return int(STATE.native.mlxcel_small_calls()) if STATE.native is not None else 0


def blas_calls() -> int:
    """How many products mlxcel's kernels have handed to the BLAS (0 without them)."""
    if STATE.native is None:
        return 0
    STATE.native.mlxcel_blas_calls.restype = ctypes.c_long
    return int(STATE.native.mlxcel_blas_calls())


def verify() -> BlasState:
    """Time one f32 GEMM through MLX on the CPU; records GFLOP/s in STATE."""
    import mlx.core as mx  # deferred: mlx is imported only after activate() interposed the BLAS

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


def summary() -> str:
    """One short line for /props's build_info: which BLAS and kernels the CPU really uses ("" off Linux)."""
    if STATE.gflops is None and STATE.library is None:
        return ""
    lib = os.path.basename(STATE.library) if STATE.library else "reference BLAS"
    speed = f" {STATE.gflops:.0f} GFLOP/s" if STATE.gflops is not None else ""
    kernels = "on" if STATE.kernels == "on" else "off"
    return f"CPU: {lib}{speed}{'' if STATE.fast else ' (SLOW)'}, mlxcel kernels {kernels}"


def describe() -> str:
    speed = f"{STATE.gflops:.1f} GFLOP/s" if STATE.gflops is not None else "not measured"
    verdict = (
        "fast BLAS in use"
        if STATE.fast
        else "SLOW reference BLAS in use"
        if STATE.library is None
        else "an OpenBLAS in use but measured SLOW (a busy machine?)"
    )
    lib = STATE.library or "the mlx wheel's own"
    if STATE.core:
        lib += f", {STATE.core} kernels"
    split = ""
    if STATE.split and STATE.native is not None:
        split = f", products split over their {STATE.native.mlxcel_threads()} threads, the BLAS on one each"
    return (
        f"CPU BLAS: {verdict} ({lib}; {STATE.reason}; sgemm 512x1536x576 at {speed}; {STATE.rows}; "
        f"mlxcel CPU kernels: {STATE.kernels}{split})"
    )
