"""`python -m oracle.bench_blas`: one-stream decode on a twin, mlxcel on the pip-installed OpenBLAS against mlxcel
on a system OpenBLAS, both servers up at once and measured in turn (alternating who goes first).

The pip-only side runs with MLXCEL_BLAS=scipy-openblas: what a machine without Debian's libopenblas0-pthread
serves after `pip install -e .`; the other side with MLXCEL_BLAS=system. Both run the README's command line
(no flags beyond the model, host and port). Prints min/median/max tokens/s per side and the ratio of medians;
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics

import httpx

from . import loopback
from .bench import PROMPT, _one
from .processes import mlxcel_server

SIDES = {"scipy-openblas": "scipy-openblas", "system": "system"}  # side -> MLXCEL_BLAS


async def _decode(url: str, n_predict: int) -> float:
    body = {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    async with loopback.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        await _one(client, url, {**body, "n_predict": 4})  # warm up
        answer = await _one(client, url, body)
    return answer["timings"]["predicted_per_second"]


def main(argv: list[str] | None = None) -> None:
    from fixtures.twins import twin

    p = argparse.ArgumentParser(prog="python -m oracle.bench_blas", description=__doc__.splitlines()[0])
    p.add_argument("--twin", choices=["q4_1", "f32"], default="f32")
    p.add_argument("--n-predict", type=int, default=64)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    servers = {}
    for side, value in SIDES.items():
        servers[side] = mlxcel_server(twin(args.twin).mlx_model)
        servers[side].env["MLXCEL_BLAS"] = value
    samples: dict[str, list[float]] = {side: [] for side in servers}
    try:
        for proc in servers.values():
            proc.start()
            print(
                f"{proc.name} {proc.env['MLXCEL_BLAS']}: "
                + next((ln.strip() for ln in proc.log_tail(200, 100000).splitlines() if "CPU BLAS" in ln), "?"),
                flush=True,
            )
        for rep in range(args.reps):
            order = list(servers) if rep % 2 == 0 else list(reversed(servers))
            for side in order:
                samples[side].append(asyncio.run(_decode(servers[side].base_url, args.n_predict)))
            print(
                f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{s} {v[-1]:.1f}" for s, v in samples.items()), flush=True
            )
    finally:
        for proc in servers.values():
            proc.cleanup()
    out = {
        side: {"min": min(v), "median": statistics.median(v), "max": max(v), "runs": v} for side, v in samples.items()
    }
    out["ratio_scipy_openblas_over_system"] = out["scipy-openblas"]["median"] / out["system"]["median"]
    print(json.dumps({"twin": args.twin, "n_predict": args.n_predict, "reps": args.reps, **out}, indent=1))


if __name__ == "__main__":
    main()
