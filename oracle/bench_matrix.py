"""`nox -s bench -- --matrix` (`python -m oracle.bench_matrix`): speed on the models people run, side by side.

For each speed twin (fixtures/speed_twins.py: Llama-3.2-1B, Qwen3-1.7B, Gemma-3-1B shapes) and format (F16, Q8_0,
Q4_K_M), b10621's llama-server and mlxcel are started on the same GGUF with the same command line and measured in
turn, alternating which goes first, 5 or more repetitions (oracle/bench.py's `measure`): decode tokens/s at one
stream, aggregate tokens/s at 8 and 16 streams, prompt tokens/s at 512 and 2048 tokens, time to first token, and
each server's peak resident memory. Every figure stands beside the machine's physical bound, measured in the same
run: decode at most the stream bandwidth over the bytes a token reads (the file's tensors, less an untied
embedding table), a prompt at most the float GEMM peak over 2 FLOPs a parameter. Nothing here asserts a speed.
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

from .bench import in_turn, measure, provenance, ratios, summarize
from .processes import mlxcel_server, reference_server

STREAMS = (8, 16)
PROMPT_LENGTHS = (512, 2048)
GROUPS = ("decode", "aggregate", "prompt", "ttft")
PARALLEL = 16
SLOT_CTX = 2560  # a slot holds the 2048-token prompt and its answer


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


def run_cell(shape: str, fmt: str, reps: int, n_predict: int, binary: Path) -> dict:
    """One twin in one format: both servers up at once, measured in turn, alternating."""
    from fixtures.speed_twins import speed_gguf, weight_bytes

    gguf = speed_gguf(shape, fmt)
    args = ["--parallel", str(PARALLEL), "-c", str(PARALLEL * SLOT_CTX)]
    servers = {"reference": reference_server(binary, gguf, args), "mlxcel": mlxcel_server(str(gguf), args)}
    samples = in_turn(
        servers,
        reps,
        lambda url, rep: asyncio.run(measure(url, n_predict, rep, GROUPS, STREAMS, PROMPT_LENGTHS)),
        f"{shape} {fmt} ",
        timeout=1800,  # (mlxcel's first start converts the GGUF into its cache)
    )
    out: dict = {"shape": shape, "format": fmt, "args": args, "sizes": weight_bytes(gguf), "samples": samples}
    for name in servers:
        out[name] = {k: summarize([s[k] for s in samples[name] if s.get(k) is not None]) for k in samples[name][0]}
    out["ratio_mlxcel_over_reference"] = ratios(out["mlxcel"], out["reference"])
    return out


def main(argv: list[str] | None = None) -> None:
    from fixtures.speed_twins import FORMATS, SHAPES

    from .reference import build_reference

    p = argparse.ArgumentParser(prog="python -m oracle.bench_matrix", description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n-predict", type=int, default=32)
    p.add_argument("--out", help="the JSON written (default reports/bench/<date>-<commit>-matrix.json)")
    p.add_argument("--table", action="store_true", help="then regenerate docs/speed-matrix.md's table from it")
    args = p.parse_args(argv)
    meta = provenance()
    out = Path(args.out or f"reports/bench/{meta['date'][:10]}-{meta['commit']}-matrix.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    binary = build_reference()
    started = time.perf_counter()
    machine = {"stream_bandwidth_gbs": stream_bandwidth_gbs(), "gemm_gflops": gemm_gflops()}
    print(f"machine: {machine}", flush=True)
    cells = []
    for shape in args.shapes:
        for fmt in args.formats:
            cell = run_cell(shape, fmt, args.reps, args.n_predict, binary)
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
