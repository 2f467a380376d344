"""`nox -s bench` (part): mlxcel's MLX backend (its CPU kernels off, MLXCEL_CPU_KERNELS=0) against
`mlx_lm.server` on the same MLX checkpoint, side by side in one run.

Both servers run at once and are measured in turn through the one route they share (/v1/completions, greedy),
alternating which goes first in each repetition. Per repetition and server: one-stream decode tokens/s (a
generation's tokens over its time less the same prompt's one-token time) and prompt tokens/s at 128 and 512
tokens (a one-token completion of an unseen prompt). Both servers get the same BLAS and neither gets mlxcel's
kernels (KERNELS_OFF). Nothing here asserts a speed: the JSON keeps every repetition, the table gives min/median/max and the
ratio of medians with the repetitions' spread as its noise band.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx

from . import loopback
from .bench import default_out, mlx_lm_anchor, provenance, summarize, unseen_prompt
from .processes import mlxcel_server

PROMPT = "Once upon a time, in a small village by the sea, there lived"
PROMPT_LENGTHS = (128, 512)
# both servers without mlxcel's kernels: its BLAS shim's few-row GEMV (server/blas.py) would otherwise speed up
# mlx_lm.server's decode and not mlxcel's (the runs before 2026-12-04 compared so: F32 decode read 0.69x)
KERNELS_OFF = {"MLXCEL_CPU_KERNELS": "0"}


async def _complete(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> tuple[float, dict]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    r = await client.post(url + "/v1/completions", json=body, timeout=900)
    r.raise_for_status()
    return time.perf_counter() - start, r.json()["usage"]


async def measure(url: str, n_predict: int, rep: int) -> dict:
    out: dict = {}
    async with loopback.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        await _complete(client, url, PROMPT, 4)  # warm up
        first, _ = await _complete(client, url, unseen_prompt(12, f"r{rep}a"), 1)
        whole, usage = await _complete(client, url, unseen_prompt(12, f"r{rep}b"), n_predict)
        if usage["completion_tokens"] > 1:
            out["decode_tps_1"] = (usage["completion_tokens"] - 1) / max(whole - first, 1e-6)
        for n in PROMPT_LENGTHS:
            seconds, usage = await _complete(client, url, unseen_prompt(n, f"r{rep}p{n}"), 1)
            out[f"prompt_tps_{n}"] = usage["prompt_tokens"] / seconds
    return out


def run(twin_kind: str, n_predict: int, reps: int) -> dict:
    from fixtures.twins import twin

    t = twin(twin_kind)
    mine = mlxcel_server(t.mlx_model, ["-np", "1"])
    mine.env = {**(mine.env or {}), **KERNELS_OFF}
    servers = {"mlxcel_mlx_backend": mine, "mlx_lm_server": mlx_lm_anchor(t.mlx_dir, KERNELS_OFF)}
    samples: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        for proc in servers.values():
            proc.start()
        for rep in range(reps):
            for name in list(servers) if rep % 2 == 0 else list(reversed(servers)):
                samples[name].append(asyncio.run(measure(servers[name].base_url, n_predict, rep)))
                print(f"rep {rep + 1}/{reps} {name}: {samples[name][-1]}", flush=True)
    finally:
        for proc in servers.values():
            proc.cleanup()
    results: dict = {"twin": twin_kind, "n_predict": n_predict, "repetitions": reps, "samples": samples}
    for name in servers:
        keys = {k for s in samples[name] for k in s}
        results[name] = {k: summarize([s[k] for s in samples[name] if k in s]) for k in sorted(keys)}
    results["ratio_mlxcel_over_mlx_lm_server"] = {
        k: results["mlxcel_mlx_backend"][k]["median"] / results["mlx_lm_server"][k]["median"]
        for k in results["mlxcel_mlx_backend"]
        if k in results["mlx_lm_server"]
    }
    return results


def _spread(s: dict) -> str:
    return f"{s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}"


def table(results: list[dict]) -> str:
    """docs/mlx-backend-speed.md's table: medians, ranges, the ratio and whether it clears the noise band (the
    larger of the two servers' relative spreads)."""
    lines = [
        "| twin | figure | mlxcel MLX backend (min/median/max) | mlx_lm.server (min/median/max) | ratio | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        for k, ratio in r["ratio_mlxcel_over_mlx_lm_server"].items():
            a, b = r["mlxcel_mlx_backend"][k], r["mlx_lm_server"][k]
            band = max((a["max"] - a["min"]) / a["median"], (b["max"] - b["min"]) / b["median"])
            verdict = (
                "parity (inside the noise band)"
                if abs(ratio - 1) <= band
                else ("mlxcel better" if ratio > 1 else "mlx_lm.server better")
            )
            lines.append(f"| {r['twin']} | {k} | {_spread(a)} | {_spread(b)} | {ratio:.2f}x | {verdict} |")
    return "\n".join(lines) + "\n"


DOC = Path("docs/mlx-backend-speed.md")
DOC_HEAD = """# The MLX backend against mlx_lm.server

mlxcel with its CPU kernels off (`MLXCEL_CPU_KERNELS=0`: every pass through MLX, the MLX backend) and
`mlx_lm.server` on the same MLX checkpoint, one run, 5 repetitions, alternating order (oracle/bench_mlx_backend.py).
Generated from {source}; a ratio inside the noise band (the larger relative min-max spread of the two) is parity.

"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m oracle.bench_mlx_backend")
    ap.add_argument("--twin", nargs="+", default=["q4_1", "f32"])
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--from-json", default=None, help="only regenerate the docs table from this JSON")
    args = ap.parse_args(argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        out = args.from_json
    else:
        data = {"meta": provenance(), "runs": [run(t, args.n_predict, args.reps) for t in args.twin]}
        out = args.out or default_out(data["meta"]).replace(".json", "-mlx-backend.json")
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(data, indent=2) + "\n")
    DOC.write_text(DOC_HEAD.format(source=f"`{out}`") + table(data["runs"]))
    print(table(data["runs"]), end="")


if __name__ == "__main__":
    main()
