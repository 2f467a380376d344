"""`nox -s bench` / `python -m oracle.bench`: mlxcel against the reference on the same twin, in one run.

Measured per server: decode tokens/s at 1 stream, aggregate tokens/s at 4 and 8 concurrent streams,
prompt tokens/s on a 512-token prompt, time to first token, and the prompt-cache hit speedup (a repeated
prompt against its first run). Reported as mlxcel/reference ratios; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx

from .processes import COMMON_ARGS, mlxcel_server, reference_server

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def _long_prompt(n_tokens: int) -> list[int]:
    # token ids of ordinary words, repeated: the same bytes for both servers
    words = [504, 3458, 282, 4649, 314, 7042, 30, 198]
    return (words * (n_tokens // len(words) + 1))[:n_tokens]


async def _one(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    r = await client.post(url + "/completion", json=body, timeout=900)
    r.raise_for_status()
    return r.json()


async def _ttft(client: httpx.AsyncClient, url: str) -> float:
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stream": True, "cache_prompt": False}
    start = time.perf_counter()
    first = None
    async with client.stream("POST", url + "/completion", json=body, timeout=300) as r:
        async for line in r.aiter_lines():
            if first is None and line.startswith("data: "):
                first = time.perf_counter() - start
    if first is None:
        raise RuntimeError("no frame")
    return first


async def measure(url: str, n_predict: int) -> dict:
    gen = {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    out: dict = {}
    # no keep-alive: cpp-httplib closes idle connections after 5 s, racing a pooled reuse
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        await _one(client, url, {**gen, "n_predict": 4})  # warm up
        start = time.perf_counter()
        await _one(client, url, gen)
        out["decode_tps_1"] = n_predict / (time.perf_counter() - start)
        for streams in (4, 8):
            start = time.perf_counter()
            await asyncio.gather(*(_one(client, url, gen) for _ in range(streams)))
            out[f"aggregate_tps_{streams}"] = streams * n_predict / (time.perf_counter() - start)
        long = {"prompt": _long_prompt(512), "n_predict": 1, "temperature": 0, "cache_prompt": False}
        start = time.perf_counter()
        await _one(client, url, long)
        out["prompt_tps_512"] = 512 / (time.perf_counter() - start)
        out["ttft_s"] = min([await _ttft(client, url) for _ in range(3)])
        cached = {"prompt": [12345, *_long_prompt(511)], "n_predict": 1, "temperature": 0}  # not seen before
        start = time.perf_counter()
        await _one(client, url, cached)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        await _one(client, url, cached)
        out["cache_hit_speedup"] = cold / (time.perf_counter() - start)
    return out


def run(twin_kind: str, n_predict: int) -> dict:
    from fixtures.twins import twin

    from .reference import build_reference

    t = twin(twin_kind)
    args = [*COMMON_ARGS, "--parallel", "8"]
    results = {}
    # one server at a time: both would otherwise share the same cores
    for name, proc in (("reference", reference_server(build_reference(), t.gguf, args)),
                       ("mlxcel", mlxcel_server(t.mlx_model, args))):
        with proc:
            results[name] = asyncio.run(measure(proc.base_url, n_predict))
    lower_is_better = {"ttft_s"}
    results["ratio_mlxcel_over_reference"] = {
        k: (results["reference"][k] / results["mlxcel"][k] if k in lower_is_better else
            results["mlxcel"][k] / results["reference"][k]) for k in results["mlxcel"]}
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m oracle.bench", description=__doc__.splitlines()[0])
    p.add_argument("--twin", choices=["q4_1", "f32"], default="q4_1")
    p.add_argument("--n-predict", type=int, default=64)
    p.add_argument("--out", default=".oracle/bench.json")
    args = p.parse_args(argv)
    results = run(args.twin, args.n_predict)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'metric':<20}{'reference':>12}{'mlxcel':>12}{'ratio':>10}   (ratio > 1: mlxcel better)")
    for k, ratio in results["ratio_mlxcel_over_reference"].items():
        print(f"{k:<20}{results['reference'][k]:>12.3f}{results['mlxcel'][k]:>12.3f}{ratio:>10.3f}")


if __name__ == "__main__":
    main()
