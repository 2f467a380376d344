"""-t / -tb, -C / -Cr / --cpu-strict, --prio and --poll: mlxcel's CPU thread pool sized, placed and prioritised as
b10621 sizes, places and prioritises its threadpools (common/common.cpp, ggml/src/ggml-cpu/ggml-cpu.c).

b10621 runs generation on -t threads and a prompt's batches on -tb (default: -t's), each thread placed by the
mask (-C hex bits, -Cr a range; with --cpu-strict 1 one CPU each, the mask's in turn) and prioritised by --prio
(ggml_thread_apply_priority: low SCHED_BATCH, medium/high/realtime SCHED_FIFO 40/80/90), its process niced by
set_process_priority; --poll sets how long an idle thread spins before it sleeps (0: not at all). mlxcel has one
pool (server/native/cpu_kernels.c), sized to the larger count: a decode step's jobs use -t's threads, a prompt's
-tb's, and the BLAS (a prompt's large products) -tb's. A job's numbers never depend on how many threads ran it.
One pool has one placement: generation's where given, else the -batch forms'; both given and different is
refused at startup (`refusal`)."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import blas

log = logging.getLogger("mlxcel")

GGML_MAX_N_THREADS = 512  # the masks' length
NICE = {-1: 5, 0: 0, 1: -5, 2: -10, 3: -20}  # set_process_priority's nice values (POSIX)


def parse_cpu_mask(text: str, mask: list[bool]) -> None:
    """common.cpp parse_cpu_mask: hex digits (a 0x prefix dropped, at most 128), the last digit CPUs 0-3; ORed
    into mask. ValueError("invalid cpumask") as -C's handler throws."""
    digits = text[2:] if text.startswith("0x") else text
    digits = digits[:128]
    n = len(digits) * 4 - 1
    for c in digits:
        if c not in "0123456789abcdefABCDEF":
            raise ValueError("invalid cpumask")
        v = int(c, 16)
        for bit in range(4):
            if v & (8 >> bit) and 0 <= n - bit < GGML_MAX_N_THREADS:
                mask[n - bit] = True
        n -= 4


def parse_cpu_range(text: str, mask: list[bool]) -> None:
    """common.cpp parse_cpu_range: [start]-[end], inclusive, each below 512; ValueError("invalid range")."""
    dash = text.find("-")
    if dash < 0:
        raise ValueError("invalid range")
    try:
        start = int(text[:dash]) if dash else 0
        end = int(text[dash + 1 :]) if dash < len(text) - 1 else GGML_MAX_N_THREADS - 1
    except ValueError:
        raise ValueError("invalid range") from None
    if not 0 <= start < GGML_MAX_N_THREADS or not 0 <= end < GGML_MAX_N_THREADS:
        raise ValueError("invalid range")
    for i in range(start, end + 1):
        mask[i] = True


def check_mask(text: str) -> None:
    parse_cpu_mask(text, [False] * GGML_MAX_N_THREADS)


def check_range(text: str) -> None:
    parse_cpu_range(text, [False] * GGML_MAX_N_THREADS)


@dataclass(frozen=True)
class CpuParams:
    """One role's cpuparams (generation's, or a prompt batch's)."""

    threads: int = -1  # <= 0: every thread of the pool
    mask: tuple[bool, ...] | None = None  # None: no placement
    strict: int = 0
    prio: int = 0
    poll: int = 50

    def placement(self) -> tuple:
        return (self.mask, self.strict, self.prio, self.poll)


def _mask(entries: list | None) -> tuple[bool, ...] | None:
    """The -C / -Cr uses in order, ORed as b10621's handlers OR them."""
    if not entries:
        return None
    mask = [False] * GGML_MAX_N_THREADS
    for long, _spelling, value in entries:
        (parse_cpu_range if long.endswith("range") or long.endswith("range-batch") else parse_cpu_mask)(value, mask)
    return tuple(mask)


@dataclass(frozen=True)
class ThreadConfig:
    decode: CpuParams
    batch: CpuParams
    # --spec-draft-threads / --spec-draft-threads-batch: the draft model's steps (0: not given, the target's -t /
    # -tb, as postprocess_cpu_params gives the draft's roles the target's; < 0: every thread)
    draft: tuple[int, int] = (0, 0)

    @classmethod
    def from_args(cls, args) -> ThreadConfig:
        """b10621's postprocess_cpu_params: the batch role takes generation's values where it has none."""
        decode = CpuParams(
            args.threads if args.threads is not None else -1,
            _mask(args.cpu_mask_args),
            int(args.cpu_strict or 0),
            int(args.prio or 0),
            int(args.poll if args.poll is not None else 50),
        )
        batch = CpuParams(
            args.threads_batch if args.threads_batch is not None else decode.threads,
            _mask(args.cpu_mask_batch_args) or decode.mask,
            int(args.cpu_strict_batch) if args.cpu_strict_batch is not None else decode.strict,
            int(args.prio_batch) if args.prio_batch is not None else decode.prio,
            int(args.poll_batch) if args.poll_batch is not None else decode.poll,
        )
        td, tbd = getattr(args, "spec_draft_threads", None), getattr(args, "spec_draft_threads_batch", None)
        if not (getattr(args, "spec_draft_model", None) or getattr(args, "spec_draft_hf", None)):
            td = tbd = None  # (without a draft model they configure nothing, in b10621 too)
        draft = (0 if td is None else td if td > 0 else -1, 0 if tbd is None else tbd if tbd > 0 else -1)
        return cls(decode, batch, draft)

    def pool(self) -> CpuParams:
        """The pool's placement: generation's where it asks for one, else the batch role's (its threads aside)."""
        if self.decode.placement() != CpuParams().placement():
            return self.decode
        b = self.batch
        return CpuParams(self.decode.threads, b.mask, b.strict, b.prio, b.poll)

    def refusal(self) -> str | None:
        """One line where both roles ask for placements and they differ (mlxcel's one pool is placed once)."""
        default = CpuParams().placement()
        if self.batch.placement() in (self.decode.placement(), default) or self.decode.placement() == default:
            return None
        return (
            "error: --cpu-mask-batch / --cpu-range-batch / --cpu-strict-batch / --prio-batch / --poll-batch: "
            "mlxcel runs prompts and generation on one CPU thread pool, placed once; leave them out or pass the "
            "values of --cpu-mask / --cpu-range / --cpu-strict / --prio / --poll"
        )


def _set_process_priority(prio: int) -> None:
    """common.cpp set_process_priority (POSIX): the calling thread niced, which the threads it starts inherit."""
    if prio == 0:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE[prio])
    except OSError as exc:
        code = exc.errno or errno.EPERM
        log.warning("failed to set process priority %d : %s (%d)", prio, os.strerror(code), code)


def apply(config: ThreadConfig) -> int:
    """Size, place and prioritise the pool (and the BLAS's threads) before the model loads; returns the pool's
    threads (0 where mlxcel's kernels are not loaded: MLX and the BLAS then schedule their own)."""
    d, b = config.pool(), config.batch
    _set_process_priority(d.prio)
    if d.mask is not None and any(d.mask) and hasattr(os, "sched_setaffinity"):
        cpus = {i for i, on in enumerate(d.mask) if on} & set(range(os.cpu_count() or 1))
        try:  # the calling thread, whose later threads (the engine's, the HTTP layer's) inherit it
            os.sched_setaffinity(0, cpus or set(range(os.cpu_count() or 1)))
        except OSError as exc:
            log.warning("failed to set affinity mask : %s", exc.strerror)
    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_pool_config"):
        return 0
    mask = (ctypes.c_ubyte * GGML_MAX_N_THREADS)(*(d.mask or ()))
    native.mlxcel_pool_config.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 4
    n = native.mlxcel_pool_config(
        max(d.threads, 0), max(b.threads, 0), mask, GGML_MAX_N_THREADS if d.mask else 0, d.strict, d.prio, d.poll
    )
    blas.set_threads(b.threads if b.threads > 0 else n)
    if hasattr(native, "mlxcel_pool_draft_config"):
        n = native.mlxcel_pool_draft_config(*config.draft)
    if hasattr(native, "mlxcel_attention_split"):  # a one-row step's keys split as b10621's -t threads split them
        native.mlxcel_attention_split(config.decode.threads if config.decode.threads > 0 else physical_cores())
    log.info(
        "CPU threads: %d for generation, %d for prompts (a pool of %d)%s%s",
        d.threads if 0 < d.threads < n else n,
        b.threads if 0 < b.threads < n else n,
        n,
        "" if d.mask is None else ", placed by the CPU mask" + (" (strict)" if d.strict else ""),
        ""
        if config.draft == (0, 0)
        else "; a draft model's steps: %s for generation, %s for prompts"
        % tuple(str(t if 0 < t < n else n) if t else "the target's" for t in config.draft),
    )
    return n


@contextmanager
def draft_steps() -> Iterator[None]:
    """The calling thread's jobs on the draft's thread counts (--spec-draft-threads / -batch) while it runs the
    draft model, as b10621 runs the draft context on its own threadpools."""
    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_pool_draft"):
        yield
        return
    was = native.mlxcel_pool_draft(1)
    try:
        yield
    finally:
        native.mlxcel_pool_draft(was)


NODES = "/sys/devices/system/node"
CPUS = "/sys/devices/system/cpu"


def physical_cores(root: str = CPUS) -> int:
    """b10621's default -t (common_cpu_get_num_physical_cores on Linux): the distinct thread-sibling sets of
    cpu0, cpu1, ... up to the first missing one; the logical count where none is readable. (Its hybrid-CPU count,
    performance cores only, is not reproduced.)"""
    siblings: set[str] = set()
    cpu = 0
    while True:
        try:
            with open(f"{root}/cpu{cpu}/topology/thread_siblings") as f:
                siblings.add(f.readline().rstrip("\n"))
        except OSError:
            break
        cpu += 1
    return len(siblings) or (os.cpu_count() or 1)


def _cpulist(text: str) -> set[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def numa_nodes(root: str = NODES) -> list[set[int]]:
    """Each NUMA node's CPUs, in node order (one node where the kernel shows none)."""
    try:
        names = sorted(
            (n for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit()), key=lambda n: int(n[4:])
        )
        nodes = [_cpulist(open(os.path.join(root, n, "cpulist"), encoding="ascii").read()) for n in names]
    except OSError:
        nodes = []
    return [n for n in nodes if n] or [set(range(os.cpu_count() or 1))]


def _current_cpu() -> int:
    """The CPU this thread runs on (/proc/self/stat's processor field)."""
    with open("/proc/thread-self/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def apply_numa(strategy: str | None, nodes: list[set[int]] | None = None) -> list[set[int]]:
    """--numa as ggml places its threads (ggml-cpu.c set_numa_thread_affinity): nothing on one node; distribute,
    worker i on node i % nodes; isolate, every worker on the node this thread runs on; numactl, every worker on
    the CPUs numactl gave the process. Returns each worker's CPUs (empty: none placed)."""
    nodes = nodes if nodes is not None else numa_nodes()
    strategy = "distribute" if strategy == "" else strategy  # (b10621's handler: an empty value distributes)
    native = blas.STATE.native
    if strategy is None or native is None or len(nodes) <= 1:
        if strategy is not None:
            log.info("--numa %s: one NUMA node here, nothing to place", strategy)
        return []
    n = int(native.mlxcel_threads())
    if strategy == "distribute":
        placed = [nodes[w % len(nodes)] for w in range(1, n)]
    elif strategy == "isolate":
        cpu = _current_cpu()
        placed = [next((node for node in nodes if cpu in node), nodes[0])] * (n - 1)
    else:  # numactl
        placed = [set(os.sched_getaffinity(0))] * (n - 1)
    native.mlxcel_pool_place.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    for w, cpus in enumerate(placed, start=1):
        mask = (ctypes.c_ubyte * GGML_MAX_N_THREADS)(*(int(i in cpus) for i in range(GGML_MAX_N_THREADS)))
        native.mlxcel_pool_place(w, mask, GGML_MAX_N_THREADS)
    log.info("--numa %s: %d workers placed over %d NUMA nodes", strategy, n - 1, len(nodes))
    return placed
