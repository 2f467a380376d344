"""One rank of `python -m oracle.bench_ranks` (started with MLX_RANK and MLX_HOSTFILE, as mlx.launch starts
ranks): the communication a split step pays, timed here and written by rank 0 as JSON to the path given."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import blas

SIZES = (576, 2048, 4096, 512 * 2048)  # floats: SmolLM2's and Llama-3.2-1B's hidden row, Llama-3-8B's, a 512-row chunk
ITERATIONS = 200


def probe(out: str) -> None:
    """One rank: all_sum of each size, then rank 0's call messages, timed on rank 0 (medians, microseconds)."""
    blas.activate()
    import mlx.core as mx  # deferred: after blas.activate()
    import numpy as np  # deferred: as mlx

    from .distributed import Channel, world  # deferred: it imports mlx

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


if __name__ == "__main__":
    probe(sys.argv[1])
