"""`nox -s bench -- --matrix` (`python -m oracle.bench_matrix`): speed on the models people run, side by side.

For each speed twin (fixtures/speed_twins.py: Llama-3.2-1B, Qwen3-1.7B, Gemma-3-1B shapes) and format (F16, Q8_0,
Q4_K_M), b10621's llama-server and mlxcel are started on the same GGUF with the same command line and measured in
turn, alternating which goes first, 5 or more repetitions (oracle/bench.py's `measure`): decode tokens/s at one
stream, aggregate tokens/s at 8 and 16 streams, prompt tokens/s at 512 and 2048 tokens, time to first token, and
each server's peak resident memory. Every figure stands beside the machine's physical bound, measured in the same
run: decode at most the stream bandwidth over the bytes a token reads (the file's tensors, less an untied
embedding table), a prompt at most the float GEMM peak over 2 FLOPs a parameter. Nothing here asserts a speed.

After the pair, `mlx_lm.server` runs alone on the same weights as an MLX checkpoint (fixtures/speed_twins.py
speed_mlx: F16 as float16, Q8_0 and Q4_K_M as mlx_lm's 8- and 4-bit affine, groups of 64, bfloat16 beside the bits
as mlx-community's; with the BLAS mlxcel runs, oracle/bench.py mlx_lm_anchor), the same repetitions, the same figures through its OpenAI route
(oracle/bench.py measure_openai: text prompts of about 512 and 2048 tokens, the usage's token counts) and its peak
RSS; `--no-anchor` leaves it out. MLX's CPU backend runs these products slowly (on the Llama-3.2-1B twin, 2 cores,
2026-12-05: float16 2.7 s a token and 11 s to a 17-token prompt's first token; the 4-bit affine layers on one
thread, ~90 s to that first token and ~7 s a token after), so each of the anchor's figures gets at most
`--anchor-timeout` seconds (default ANCHOR_TIMEOUT, 180) a repetition: one that runs past it is recorded as an
error ("timed out after 180 s"), and so are the figures that hold its work and more ("not tried": the aggregates
after decode, 2048 prompt tokens after 512, all after time to first token, which is measured first); the server is
restarted (it would go on reading the prompt) and those figures are not tried again in later repetitions; its
peak RSS is the largest of its processes'.
The JSON (reports/bench/<date>-<commit>-matrix.json) keeps every repetition; oracle/bench_matrix_table.py turns
it into docs/speed-matrix.md's table (`--table`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np

from .bench import (
    anchor_summary,
    in_turn,
    measure,
    measure_openai,
    mlx_lm_anchor,
    peak_rss_mib,
    provenance,
    ratios,
    summarize,
)
from .processes import mlxcel_server, reference_server

STREAMS = (8, 16)
PROMPT_LENGTHS = (512, 2048)
GROUPS = ("decode", "aggregate", "prompt", "ttft")
PARALLEL = 16
SLOT_CTX = 2560  # a slot holds the 2048-token prompt and its answer
ANCHOR_TIMEOUT = 180.0  # seconds one of mlx_lm.server's figures may take in a repetition


def stream_bandwidth_gbs(mib: int = 1024, threads: int = 2, reps: int = 5) -> float:
    """Bytes a second the cores read streaming a large array (the best of reps): numpy's sum over each thread's
    part (its loop releases the GIL), as many threads as a decode step uses."""
    a = np.ones(mib * (1 << 20) // 4, np.float32)
    parts = np.array_split(a, threads)
    best = 0.0
    for _ in range(reps):
        workers = [threading.Thread(target=np.add.reduce, args=(p,)) for p in parts]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, a.nbytes / (time.perf_counter() - start) / 1e9)
    return best


def gemm_gflops(n: int = 2048, reps: int = 5) -> float:
    """float32 GEMM FLOPs a second (numpy's OpenBLAS, every core; the best of reps)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    x @ y
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        x @ y
        best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def bounds(sizes: dict, bandwidth_gbs: float, gflops: float) -> dict:
    """The physical ceilings of one twin's figures on this machine."""
    return {
        "decode_tps_1": bandwidth_gbs * 1e9 / sizes["bytes_per_token"],
        "prompt_tps": gflops * 1e9 / (2 * sizes["matmul_params"]),
    }


def run_anchor(shape: str, fmt: str, reps: int, n_predict: int, timeout: float | None = ANCHOR_TIMEOUT) -> dict:
    """mlx_lm.server alone on the twin's MLX checkpoint: every repetition's figures (measure_openai's), each within
    `timeout` seconds; one past it is an error, the server restarted and the figure not tried in later repetitions.
    Returns the repetitions (with the largest peak RSS of its processes) and the errors of a start that failed."""
    from fixtures.speed_twins import speed_mlx

    runs: list[dict] = []
    given_up: set[str] = set()
    rss: list[float | None] = []
    try:  # (a checkpoint that cannot be built is the anchor's error, as a server that cannot start is)
        model_dir = speed_mlx(shape, fmt)
    except Exception as exc:
        return {"samples": [], "errors": [f"the MLX checkpoint: {type(exc).__name__}: {exc}"[:500]]}
    proc = mlx_lm_anchor(model_dir)
    try:
        proc.start(timeout=600)
        for rep in range(reps):
            sample: dict = {}
            while True:
                skip = frozenset({k.removesuffix("_error") for k in sample} | given_up)
                got = asyncio.run(
                    measure_openai(proc.base_url, n_predict, rep, GROUPS, STREAMS, PROMPT_LENGTHS, timeout, skip)
                )
                sample.update(got)
                timed_out = {
                    k.removesuffix("_error")
                    for k, v in got.items()
                    if k.endswith("_error") and v.startswith(("timed out", "not tried"))
                }
                if not timed_out:
                    break
                given_up |= timed_out
                rss.append(peak_rss_mib(proc))
                proc.stop()  # it may still be reading the prompt it timed out on
                proc.start(timeout=600)
            runs.append(sample)
            shown = ", ".join(f"{k} {v:.3g}" for k, v in sample.items() if not k.endswith("_error"))
            print(f"{shape} {fmt} rep {rep + 1}/{reps} mlx_lm_server: {shown or 'no figure'}", flush=True)
        rss.append(peak_rss_mib(proc))
    except Exception as exc:  # an anchor that cannot start (or dies) is reported, not fatal
        return {"samples": runs, "errors": [f"{type(exc).__name__}: {exc}"[:500]]}
    finally:
        proc.cleanup()
    peak = max((r for r in rss if r is not None), default=None)
    for sample in runs:
        sample["peak_rss_mib"] = peak
    return {"samples": runs, "errors": []}


_CONVERT = (
    "import resource, sys; from pathlib import Path; from server import blas; blas.activate(); "
    "from server.models.store import converted_gguf; converted_gguf(Path(sys.argv[1])); "
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def warm_conversion(gguf: Path) -> float:
    """mlxcel's one-time conversion of the GGUF into its cache (server/models/store.py), in a process of its own
    before the measured server starts, so that server's peak RSS is serving's and not a first start's; the
    process's peak RSS in MiB (small where the conversion was cached already)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CONVERT, str(gguf)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


def run_cell(
    shape: str,
    fmt: str,
    reps: int,
    n_predict: int,
    binary: Path,
    anchor: bool = True,
    anchor_timeout: float | None = ANCHOR_TIMEOUT,
    groups: tuple[str, ...] = GROUPS,
) -> dict:
    """One twin in one format: both servers up at once, measured in turn, alternating; then the anchor alone.
    groups: the figures' groups measured (all by default)."""
    from fixtures.speed_twins import speed_gguf, weight_bytes

    gguf = speed_gguf(shape, fmt)
    conversion_rss = warm_conversion(gguf)
    args = ["--parallel", str(PARALLEL), "-c", str(PARALLEL * SLOT_CTX)]
    servers = {"reference": reference_server(binary, gguf, args), "mlxcel": mlxcel_server(str(gguf), args)}
    samples = in_turn(
        servers,
        reps,
        lambda url, rep: asyncio.run(measure(url, n_predict, rep, groups, STREAMS, PROMPT_LENGTHS)),
        f"{shape} {fmt} ",
    )
    out: dict = {"shape": shape, "format": fmt, "args": args, "sizes": weight_bytes(gguf), "samples": samples}
    out["conversion_peak_rss_mib"] = conversion_rss
    for name in servers:
        out[name] = {k: summarize([s[k] for s in samples[name] if s.get(k) is not None]) for k in samples[name][0]}
    out["ratio_mlxcel_over_reference"] = ratios(out["mlxcel"], out["reference"])
    if anchor:
        started = time.perf_counter()
        got = run_anchor(shape, fmt, reps, n_predict, anchor_timeout)
        samples["mlx_lm_server"] = got["samples"]
        out["mlx_lm_server"], errors = anchor_summary(got["samples"])
        out["mlx_lm_server_errors"] = [*got["errors"], *errors]
        out["ratio_mlxcel_over_mlx_lm_server"] = ratios(out["mlxcel"], out["mlx_lm_server"])
        out["mlx_lm_server_wall_s"] = round(time.perf_counter() - started, 1)
    return out


def main(argv: list[str] | None = None) -> None:
    from fixtures.speed_twins import FORMATS, SHAPES

    from .reference import build_reference

    p = argparse.ArgumentParser(prog="python -m oracle.bench_matrix", description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument(
        "--cells", nargs="+", metavar="SHAPE:FORMAT", help="these twins and formats only, in place of shapes x formats"
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n-predict", type=int, default=32)
    p.add_argument("--no-anchor", action="store_true", help="leave out mlx_lm.server on the MLX checkpoints")
    p.add_argument(
        "--anchor-timeout",
        type=float,
        default=ANCHOR_TIMEOUT,
        help=f"seconds one of mlx_lm.server's figures may take in a repetition (default {ANCHOR_TIMEOUT:.0f})",
    )
    p.add_argument(
        "--groups",
        default=",".join(GROUPS),
        help=f"comma-separated groups of figures (default all: {','.join(GROUPS)}); peak RSS is always read",
    )
    p.add_argument("--out", help="the JSON written (default reports/bench/<date>-<commit>-matrix.json)")
    p.add_argument("--table", action="store_true", help="then regenerate docs/speed-matrix.md's table from it")
    args = p.parse_args(argv)
    groups = tuple(g for g in args.groups.split(",") if g)
    if not groups or set(groups) - set(GROUPS):
        p.error(f"--groups: a comma-separated subset of {','.join(GROUPS)}")
    meta = provenance()
    out = Path(args.out or f"reports/bench/{meta['date'][:10]}-{meta['commit']}-matrix.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    binary = build_reference()
    started = time.perf_counter()
    machine = {"stream_bandwidth_gbs": stream_bandwidth_gbs(), "gemm_gflops": gemm_gflops()}
    print(f"machine: {machine}", flush=True)
    cells = []
    chosen = [tuple(c.split(":", 1)) for c in args.cells] if args.cells else None
    for shape, fmt in chosen or [(shape, fmt) for shape in args.shapes for fmt in args.formats]:
        if shape not in SHAPES or fmt not in FORMATS:
            raise SystemExit(f"unknown cell {shape}:{fmt} (shapes: {', '.join(SHAPES)}; formats: {', '.join(FORMATS)})")
        cell = run_cell(shape, fmt, args.reps, args.n_predict, binary, not args.no_anchor, args.anchor_timeout, groups)
        cell["bounds"] = bounds(cell["sizes"], machine["stream_bandwidth_gbs"], machine["gemm_gflops"])
        cells.append(cell)
        # written after every cell: a long run interrupted keeps what it measured
        meta["wall_s"] = round(time.perf_counter() - started, 1)
        doc = {**meta, "machine": machine, "repetitions": args.reps, "n_predict": args.n_predict, "cells": cells}
        out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {out} ({time.perf_counter() - started:.0f} s)")
    if args.table:
        from .bench_matrix_table import main as table_main

        table_main([str(out)])


if __name__ == "__main__":
    main()
