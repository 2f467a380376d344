"""`nox -s bench` / `python -m oracle.bench`: mlxcel against the reference on the same twin, in one run.

Measured per server: decode tokens/s at 1 stream (greedy, then b10621's default sampler chain, a
top-k/top-p/temperature chain and a JSON grammar), aggregate tokens/s at 4 and 8 concurrent streams,
prompt tokens/s on a 512-token prompt, time to first token, and the prompt-cache hit speedup (a repeated
prompt against its first run). Reported as mlxcel/reference ratios, plus each server's sampled decode
over its own greedy decode (the sampling overhead) and the cost of mlxcel's sampler chain per token at
the fixture's vocabulary; nothing here asserts a speed.
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


# The sampled decode runs: None drops the greedy run's key (the server default applies). The grammar never
# completes, so ignore_eos (an end-of-generation ban) cannot leave it without a token to draw.
SAMPLED = {
    "default_chain": {"temperature": None, "seed": 1},
    "topk_topp_temp": {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "seed": 1},
    "json_grammar": {"temperature": 0.7, "seed": 1,
                     "grammar": 'root ::= "[" item ("," " "? item)*\nitem ::= "\"" [a-z ]{1,12} "\""\n'},
}


def chain_cost_us(n_vocab: int = 49152, steps: int = 200) -> dict:
    """mlxcel's sampler chain alone, microseconds per token on random logits of the fixture's vocabulary."""
    import numpy as np

    from server.engine.sampling import Chain
    from server.engine.types import SamplingParams

    chains = {"greedy": SamplingParams(temperature=0.0), "default_chain": SamplingParams(seed=1),
              "topk_topp_temp": SamplingParams(seed=1, temperature=0.7, top_k=40, top_p=0.9, min_p=0.0),
              "penalties_dry": SamplingParams(seed=1, repeat_penalty=1.1, frequency_penalty=0.1, dry_multiplier=0.8)}
    rng = np.random.default_rng(0)
    logits = [rng.standard_normal(n_vocab).astype(np.float32) * 3 for _ in range(steps)]
    out = {}
    for name, params in chains.items():
        chain = Chain(params, n_vocab)
        start = time.perf_counter()
        for x in logits:
            chain.accept(chain.sample(x))
        out[f"chain_us_per_token_{name}"] = (time.perf_counter() - start) / steps * 1e6
    return out


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
        for name, settings in SAMPLED.items():
            body = {k: v for k, v in {**gen, **settings}.items() if v is not None}
            start = time.perf_counter()
            answer = await _one(client, url, body)
            out[f"decode_tps_1_{name}"] = answer["tokens_predicted"] / (time.perf_counter() - start)
            out[f"sampled_over_greedy_{name}"] = out[f"decode_tps_1_{name}"] / out["decode_tps_1"]
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
    results["mlxcel_only"] = chain_cost_us()
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
    print(f"{'metric':<34}{'reference':>12}{'mlxcel':>12}{'ratio':>10}   (ratio > 1: mlxcel better)")
    for k, ratio in results["ratio_mlxcel_over_reference"].items():
        print(f"{k:<34}{results['reference'][k]:>12.3f}{results['mlxcel'][k]:>12.3f}{ratio:>10.3f}")
    for k, v in results["mlxcel_only"].items():
        print(f"{k:<34}{'':>12}{v:>12.1f}")


if __name__ == "__main__":
    main()
