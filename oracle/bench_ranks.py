"""`python -m oracle.bench_ranks [--ranks N]`: what one step of a model split across ranks pays in communication,
measured on loopback: an all_sum of a decode row's hidden state (and of a prompt chunk's), and rank 0's call
message to the other ranks (a length, then the JSON bytes: server/backends/distributed.py Channel). The inputs of
the throughput model in docs/scaling-out.md. The ranks are started here as mlx.launch starts them (MLX_RANK and
the ring's host file), each a process; the JSON goes to reports/bench/<date>-<commit>-ranks<N>.json."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bench import provenance
from .processes import free_port

SIZES = (576, 2048, 4096, 512 * 2048)  # floats: SmolLM2's and Llama-3.2-1B's hidden row, Llama-3-8B's, a 512-row chunk
ITERATIONS = 200


def worker(out: str) -> None:
    """One rank: all_sum of each size, then rank 0's call messages, timed on rank 0 (medians, microseconds)."""
    from server import blas  # deferred: the BLAS activated before anything imports mlx (the worker only)

    blas.activate()
    import mlx.core as mx  # deferred: after blas.activate()
    import numpy as np  # deferred: as mlx

    from server.backends.distributed import Channel, world  # deferred: it imports mlx

    ranks = world()
    assert ranks is not None, "started without MLX_RANK / MLX_HOSTFILE"
    g = ranks.group
    figures: dict = {"ranks": ranks.size, "all_sum_us": {}}
    for n in SIZES:
        x = mx.ones((n,))
        mx.eval(mx.distributed.all_sum(x, group=g))  # warm
        times = []
        for _ in range(ITERATIONS if n < 100_000 else 20):
            start = time.perf_counter()
            mx.eval(mx.distributed.all_sum(x, group=g))
            times.append((time.perf_counter() - start) * 1e6)
        figures["all_sum_us"][str(n)] = float(np.median(times))
    channel = Channel(ranks)
    message = json.dumps({"op": "decode", "args": [{"h": 12}, 4242], "drop": [], "new": None}).encode()
    times = []
    for _ in range(ITERATIONS):
        start = time.perf_counter()
        if ranks.rank == 0:
            channel.broadcast(message)
            channel.gather()  # (the answer closes the round trip; a real call needs none)
        else:
            channel.receive()
            channel.answer(b"ok")
        times.append((time.perf_counter() - start) * 1e6)
    figures["call_round_trip_us"] = float(np.median(times))
    if ranks.rank == 0:
        Path(out).write_text(json.dumps(figures, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m oracle.bench_ranks", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--out", help="default reports/bench/<date>-<commit>-ranks<N>.json")
    args = p.parse_args(argv)
    meta = provenance()
    out = Path(args.out or f"reports/bench/{meta['date'][:10]}-{meta['commit']}-ranks{args.ranks}.json")
    hostfile = Path(tempfile.mkdtemp(prefix="mlxcel-ring-")) / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(args.ranks)]))
    figures_file = Path(tempfile.mkdtemp()) / "figures.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "oracle.bench_ranks", "--worker", str(figures_file)],
            env={**os.environ, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)},
        )
        for rank in range(args.ranks)
    ]
    codes = [proc.wait(timeout=600) for proc in procs]
    if any(codes):
        raise SystemExit(f"a rank failed: exit statuses {codes}")
    figures = json.loads(figures_file.read_text())
    result = {**meta, "cores": os.cpu_count(), **figures}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(figures), f"\nwritten: {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
