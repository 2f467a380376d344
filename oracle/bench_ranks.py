"""`python -m oracle.bench_ranks [--ranks N]`: what one step of a model split across ranks pays in communication,
measured on loopback: an all_sum of a decode row's hidden state (and of a prompt chunk's), and rank 0's call
message to the other ranks (a length, then the JSON bytes: server/backends/distributed.py Channel). The inputs of
the throughput model in docs/scaling-out.md. The ranks (server/backends/ranks_probe.py) are started here as
mlx.launch starts them (MLX_RANK and the ring's host file), each a process; the JSON goes to reports/bench/<date>-<commit>-ranks<N>.json."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .bench import provenance
from .processes import free_port


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m oracle.bench_ranks", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument(
        "--pipeline",
        action="store_true",
        help="decode steps through a pipeline split instead: the stages in turn against micro-batches "
        "(server/backends/pipeline_probe.py)",
    )
    p.add_argument("--out", help="default reports/bench/<date>-<commit>-ranks<N>[-pipeline].json")
    args = p.parse_args(argv)
    meta = provenance()
    kind = "-pipeline" if args.pipeline else ""
    out = Path(args.out or f"reports/bench/{meta['date'][:10]}-{meta['commit']}-ranks{args.ranks}{kind}.json")
    program = "server.backends.pipeline_probe" if args.pipeline else "server.backends.ranks_probe"
    hostfile = Path(tempfile.mkdtemp(prefix="mlxcel-ring-")) / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(args.ranks)]))
    figures_file = Path(tempfile.mkdtemp()) / "figures.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", program, str(figures_file)],
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
    main()
