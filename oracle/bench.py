"""`nox -s bench` / `mlxcel-oracle bench`: mlxcel against the reference on the same twin, side by side in one run.

Both servers run at once (same flags, `--parallel 16`) and are measured in turn, alternating which goes first
in each repetition, so drift of the machine hits both. Per repetition and server: decode tokens/s at one
stream (greedy, then b10621's default sampler chain, a top-k/top-p/temperature chain and a JSON grammar),
aggregate tokens/s at 4, 8 and 16 concurrent streams, prompt tokens/s at 128, 512 and 2048 tokens, time to
first token, and time to first token on a prompt-cache hit of a 2048-token prefix over the cold one. Peak
resident memory is read once at the end. Each figure is reported as min/median/max over the repetitions
and as the mlxcel/reference ratio of medians (> 1: mlxcel better). `mlx_lm.server` on the same MLX twin
(with the same BLAS) is a second anchor for the one-stream and aggregate decode. A second pair then runs with
speculative decoding (the Q4_1 twin drafting for the target, --spec-type draft-simple): one-stream greedy
decode with and without the draft, each server's speedup over itself and the ratio between the two. Nothing
here asserts a speed. The JSON (default reports/bench/<date>-<commit>.json) keeps every repetition's figures
with the commit, CPU, load average and BLAS; oracle/bench_table.py turns it into docs/cpu-speed.md's table
(`--table` does that too). `--twin` takes several twins (one JSON), `--figures` some groups of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from . import loopback
from .processes import COMMON_ARGS, ServerProcess, free_port, mlxcel_server, reference_server

PROMPT = "Once upon a time, in a small village by the sea, there lived"
STREAMS = (4, 8, 16)
PROMPT_LENGTHS = (128, 512, 2048)
LOWER_IS_BETTER = {"ttft_s", "cache_hit_ttft_over_cold", "peak_rss_mib"}
# the groups of figures a repetition measures (--figures picks some: a quick run on a busy machine)
FIGURE_GROUPS = ("decode", "sampled", "aggregate", "prompt", "ttft", "cache")

# The sampled decode runs: None drops the greedy run's key (the server default applies). The grammar never
# completes, so ignore_eos (an end-of-generation ban) cannot leave it without a token to draw.
SAMPLED = {
    "default_chain": {"temperature": None, "seed": 1},
    "topk_topp_temp": {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "seed": 1},
    "json_grammar": {
        "temperature": 0.7,
        "seed": 1,
        "grammar": 'root ::= "[" item ("," " "? item)*\nitem ::= """ [a-z ]{1,12} """\n',
    },
}


def chain_cost_us(n_vocab: int = 49152) -> dict:
    """mlxcel's sampler chain alone, microseconds per token on random logits of the fixture's vocabulary
    (server/engine/chain_cost.py, run as a process: the oracle imports nothing from server/)."""
    out = subprocess.run(
        [sys.executable, "-m", "server.engine.chain_cost", str(n_vocab)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def long_prompt(n_tokens: int, salt: int = 0) -> list[int]:
    """Token ids of ordinary words, repeated: the same tokens for both servers; `salt` makes it unseen."""
    words = [504, 3458, 282, 4649, 314, 7042, 30, 198]
    return ([12345 + salt] + words * (n_tokens // len(words) + 1))[:n_tokens]


# --- one server's figures ------------------------------------------------------------------------------------


async def _one(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    r = await client.post(url + "/completion", json=body, timeout=900)
    r.raise_for_status()
    return r.json()


async def _ttft(client: httpx.AsyncClient, url: str, prompt, cache_prompt: bool = False) -> float:
    body = {"prompt": prompt, "n_predict": 2, "temperature": 0, "stream": True, "cache_prompt": cache_prompt}
    start = time.perf_counter()
    first = None
    async with client.stream("POST", url + "/completion", json=body, timeout=900) as r:
        async for line in r.aiter_lines():  # read to the end: the next request must find the slot free
            if first is None and line.startswith("data: "):
                first = time.perf_counter() - start
    if first is None:
        raise RuntimeError("no frame")
    return first


async def measure(
    url: str,
    n_predict: int,
    rep: int,
    groups: tuple[str, ...] = FIGURE_GROUPS,
    streams: tuple[int, ...] = STREAMS,
    prompt_lengths: tuple[int, ...] = PROMPT_LENGTHS,
) -> dict:
    """One repetition of every figure in groups on a llama-server-compatible server (`rep` keeps prompts
    unseen), at the stream counts and prompt lengths given (the longest prompt is also the cache's cold run)."""
    gen = {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    out: dict = {}
    # no keep-alive: cpp-httplib closes idle connections after 5 s, racing a pooled reuse
    async with loopback.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        await _one(client, url, {**gen, "n_predict": 4})  # warm up
        if "decode" in groups:
            start = time.perf_counter()
            answer = await _one(client, url, gen)
            out["decode_tps_1"] = answer["tokens_predicted"] / (time.perf_counter() - start)
        for name, settings in SAMPLED.items() if "sampled" in groups else ():
            body = {k: v for k, v in {**gen, **settings}.items() if v is not None}
            start = time.perf_counter()
            answer = await _one(client, url, body)
            out[f"decode_tps_1_{name}"] = answer["tokens_predicted"] / (time.perf_counter() - start)
        for n_streams in streams if "aggregate" in groups else ():
            start = time.perf_counter()
            answers = await asyncio.gather(*(_one(client, url, gen) for _ in range(n_streams)))
            out[f"aggregate_tps_{n_streams}"] = sum(a["tokens_predicted"] for a in answers) / (
                time.perf_counter() - start
            )
        for n in prompt_lengths[:-1] if "prompt" in groups else ():
            body = {
                "prompt": long_prompt(n, 100 * rep + n % 97),
                "n_predict": 1,
                "temperature": 0,
                "cache_prompt": False,
            }
            start = time.perf_counter()
            await _one(client, url, body)
            out[f"prompt_tps_{n}"] = n / (time.perf_counter() - start)
        if "ttft" in groups:
            out["ttft_s"] = min([await _ttft(client, url, PROMPT) for _ in range(3)])
        if not {"prompt", "cache"} & set(groups):
            return out
        # the longest prompt, unseen, is also the cache's cold run (one 2048-token prefill less a repetition),
        # then the same prefix again
        n = prompt_lengths[-1]
        prefix = long_prompt(n, 1000 + rep)
        cold = await _ttft(client, url, prefix, cache_prompt=True)
        if "prompt" in groups:
            out[f"prompt_tps_{n}"] = n / cold
        if "cache" in groups:
            hit = await _ttft(client, url, prefix, cache_prompt=True)
            out["cache_hit_ttft_over_cold"] = hit / cold
    return out


WORDS = "the quiet harbour town kept its lamps lit through the long winter nights while".split()


def unseen_prompt(n_words: int, salt: str) -> str:
    """Ordinary words, about one token each, led by a salt no other request used (no prompt cache hit): a text
    prompt of about n_words tokens, for a server that takes no token ids."""
    return " ".join([salt, *(WORDS * (n_words // len(WORDS) + 1))[: n_words - 1]])


async def _openai(client: httpx.AsyncClient, url: str, body: dict) -> tuple[dict, float]:
    """One /v1/completions request, streamed (a client that leaves stops the generation: mlx_lm.server ends it at
    its next token), read to the end: its usage and the seconds to its first frame."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, usage = None, None
    async with client.stream("POST", url + "/v1/completions", json=body, timeout=900) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue  # (mlx_lm.server's ": keepalive" lines while it reads a long prompt)
            if first is None:
                first = time.perf_counter() - start
            usage = json.loads(line[len("data: ") :]).get("usage") or usage
    if usage is None or first is None:
        raise RuntimeError("no usage frame")
    return usage, first


async def measure_openai(
    url: str,
    n_predict: int,
    rep: int = 0,
    groups: tuple[str, ...] = ("decode", "aggregate"),
    streams: tuple[int, ...] = STREAMS,
    prompt_lengths: tuple[int, ...] = (),
    timeout: float | None = None,
    skip: frozenset[str] = frozenset(),
) -> dict:
    """measure's figures (decode, aggregate, prompt, ttft; not the sampled or cache ones) on a server with only the
    OpenAI /v1/completions (mlx_lm.server: no native route, no ignore_eos, text prompts; a generation that ends early
    counts the tokens it made), every prompt unseen (`rep` and a counter salt them: no prompt-cache hit), the
    cheapest figure first. Prompt tokens/s: the usage's prompt_tokens over a one-token completion's time, on a text
    of about n tokens; time to first token: the first streamed frame (mlx_lm.server sends one once a token's text is
    not empty). A figure that takes longer than `timeout` seconds (None: no limit) is recorded as `<key>_error`
    "timed out after N s", the figures that hold its work and more (_costlier) as "not tried", and the measuring stops
    there, the server perhaps still busy with it (a long prompt is read to its end): the caller restarts it and
    measures the rest, `skip` naming the figures it has or gave up on. A figure the server refuses (its HTTP server
    may drop concurrent connections) is `<key>_error` with the error, and the next one is measured."""
    salts = iter(range(1_000_000))

    def body(n_words: int, max_tokens: int) -> dict:
        prompt = unseen_prompt(n_words, f"r{rep}n{next(salts)}") if n_words else f"r{rep}n{next(salts)} {PROMPT}"
        return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}

    async with loopback.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:

        async def decode() -> float:
            await _openai(client, url, body(0, 4))  # warm up
            start = time.perf_counter()
            usage, _ = await _openai(client, url, body(0, n_predict))
            return usage["completion_tokens"] / (time.perf_counter() - start)

        async def aggregate(n_streams: int) -> float:
            start = time.perf_counter()
            done = await asyncio.gather(*(_openai(client, url, body(0, n_predict)) for _ in range(n_streams)))
            return sum(usage["completion_tokens"] for usage, _ in done) / (time.perf_counter() - start)

        async def prompt(n: int) -> float:
            start = time.perf_counter()
            usage, _ = await _openai(client, url, body(n, 1))
            return usage["prompt_tokens"] / (time.perf_counter() - start)

        async def ttft() -> float:
            return min([(await _openai(client, url, body(0, 2)))[1] for _ in range(3)])

        figures: list[tuple[str, Callable[[], Awaitable[float]]]] = []
        if "ttft" in groups:
            figures.append(("ttft_s", ttft))
        if "decode" in groups:
            figures.append(("decode_tps_1", decode))
        for n_streams in sorted(streams) if "aggregate" in groups else ():
            figures.append((f"aggregate_tps_{n_streams}", functools.partial(aggregate, n_streams)))
        for n in sorted(prompt_lengths) if "prompt" in groups else ():
            figures.append((f"prompt_tps_{n}", functools.partial(prompt, n)))
        return await _in_order(figures, timeout, skip)


async def _in_order(
    figures: list[tuple[str, Callable[[], Awaitable[float]]]], timeout: float | None, skip: frozenset[str]
) -> dict:
    """measure_openai's figures measured one after the other, up to the first that times out."""
    out: dict = {}
    for key, figure in figures:
        if key in skip:
            continue
        try:
            out[key] = await asyncio.wait_for(figure(), timeout)
        except asyncio.TimeoutError:
            out[f"{key}_error"] = f"timed out after {timeout:.0f} s"
            for k in _costlier(key, [k for k, _ in figures]):
                if k not in skip:
                    out[f"{k}_error"] = f"not tried: {key} timed out after {timeout:.0f} s"
            break
        except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
            out[f"{key}_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _costlier(key: str, keys: list[str]) -> list[str]:
    """The figures of keys whose requests hold `key`'s work and more: every other one holds the short prompt's
    prefill and first tokens that time to first token waits for; the aggregates hold decode's generation, 8 streams
    less than 16; 512 prompt tokens less than 2048."""
    if key == "ttft_s":
        return [k for k in keys if k != key]
    if key == "decode_tps_1":
        return [k for k in keys if k.startswith("aggregate_tps_")]
    kind, _, n = key.rpartition("_")
    if kind in ("aggregate_tps", "prompt_tps"):
        return [k for k in keys if k.rpartition("_")[0] == kind and int(k.rpartition("_")[2]) > int(n)]
    return []


def anchor_summary(runs: list[dict]) -> tuple[dict, list[str]]:
    """An anchor's repetitions (measure_openai's) as summaries per figure, and its errors, each once."""
    keys = [k for k in dict.fromkeys(k for r in runs for k in r) if not k.endswith("_error")]
    summary = {k: summarize([r[k] for r in runs if r.get(k) is not None]) for k in keys}
    errors = sorted({f"{k.removesuffix('_error')}: {v}" for r in runs for k, v in r.items() if k.endswith("_error")})
    return summary, errors


def peak_rss_mib(proc: ServerProcess) -> float | None:
    """The process's high-water resident set (VmHWM), MiB; None where /proc has no such line."""
    try:
        for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def mlx_lm_anchor(model_dir: Path, env: dict[str, str] | None = None) -> ServerProcess:
    """mlx_lm.server on the MLX twin, with the BLAS mlxcel interposes (else it runs on the reference BLAS), under
    `env` too (the mlxcel server's own variables, so both get the same BLAS and kernels)."""
    port = free_port()
    code = (
        "from server import blas; blas.activate(); import sys, runpy; "
        f"sys.argv = ['mlx_lm.server', '--model', {str(model_dir)!r}, '--port', '{port}']; "
        "runpy.run_module('mlx_lm.server', run_name='__main__')"
    )
    sp = ServerProcess("mlx_lm", [sys.executable, "-c", code], port, {})
    sp.env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return sp


# --- the run ---------------------------------------------------------------------------------------------------


def summarize(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def ratios(mine: dict, theirs: dict) -> dict:
    out = {}
    for k in mine:
        if k in theirs and theirs[k]["median"] and mine[k]["median"]:
            a, b = mine[k]["median"], theirs[k]["median"]
            out[k] = b / a if k in LOWER_IS_BETTER else a / b
    return out


def in_turn(
    servers: dict[str, ServerProcess], reps: int, one: Callable[[str, int], dict], label: str = "", timeout: float = 300
) -> dict[str, list[dict]]:
    """Start every server, then per repetition measure each (one(url, rep)) in turn, alternating who goes first so
    drift of the machine hits both; each repetition's figures get the server's peak RSS, read at the end. The
    servers are stopped whatever happens."""
    samples: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        for proc in servers.values():
            proc.start(timeout=timeout)
        for rep in range(reps):
            order = list(servers) if rep % 2 == 0 else list(reversed(servers))
            for name in order:
                samples[name].append(one(servers[name].base_url, rep))
                shown = ", ".join(f"{k} {v:.3g}" for k, v in list(samples[name][-1].items())[:2])
                print(f"{label}rep {rep + 1}/{reps} {name}: {shown}", flush=True)
        for name, proc in servers.items():
            rss = peak_rss_mib(proc)
            for s in samples[name]:
                s["peak_rss_mib"] = rss
    finally:
        for proc in servers.values():
            proc.cleanup()
    return samples


def run(
    twin_kind: str, n_predict: int, reps: int, anchor: bool = True, groups: tuple[str, ...] = FIGURE_GROUPS
) -> dict:
    from fixtures.twins import twin

    from .reference import build_reference

    t = twin(twin_kind)
    args = [*COMMON_ARGS, "--parallel", str(max(STREAMS)), "-c", str(max(STREAMS) * 4096)]
    servers = {
        "reference": reference_server(build_reference(), t.gguf, args),
        "mlxcel": mlxcel_server(t.mlx_model, args),
    }
    results: dict = {
        "twin": twin_kind,
        "n_predict": n_predict,
        "repetitions": reps,
        "args": args,
        "figures": list(groups),
    }
    samples = in_turn(servers, reps, lambda url, rep: asyncio.run(measure(url, n_predict, rep, groups)))
    for name in servers:
        results[name] = {
            k: summarize([s[k] for s in samples[name] if s.get(k) is not None])
            for k in samples[name][0]
            if samples[name][0].get(k) is not None
        }
    results["samples"] = samples  # every repetition's figures: oracle/bench_table.py's noise band
    results["ratio_mlxcel_over_reference"] = ratios(results["mlxcel"], results["reference"])
    if anchor:
        proc = mlx_lm_anchor(t.mlx_dir)
        try:
            proc.start()
            runs = [asyncio.run(measure_openai(proc.base_url, n_predict, rep)) for rep in range(reps)]
            results["mlx_lm_server"], results["mlx_lm_server_errors"] = anchor_summary(runs)
            results["ratio_mlxcel_over_mlx_lm_server"] = ratios(results["mlxcel"], results["mlx_lm_server"])
        except Exception as exc:  # an anchor that cannot start is reported, not fatal
            results["mlx_lm_server"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            proc.cleanup()
    results["mlxcel_only"] = chain_cost_us()
    return results


SPEC_ARGS = ["-md", "{draft_q4_1}", "--spec-type", "draft-simple"]  # {draft_q4_1}: oracle/processes.py
# --drafters: each drafter's command line (b10621's defaults unless the drafter needs a shorter n-gram to draft on
# three-prompt runs); --spec-prompts: free text (PROMPT and two more) or repetitive text (lists, code, a phrase)
DRAFTERS = {
    "draft-simple": SPEC_ARGS,
    "draft-eagle3": ["-md", "{eagle3_head}", "--spec-type", "draft-eagle3"],  # (the F32 twin's head: --twin f32)
    "draft-mtp": ["--spec-type", "draft-mtp"],  # (a model's own MTP block: --twin qwen3.5)
    "draft-dflash": ["-md", "{dflash_draft}", "--spec-type", "draft-dflash"],  # (the F32 twin's draft: --twin f32)
    "draft-dspark": ["-md", "{dspark_draft}", "--spec-type", "draft-dspark"],  # (the F32 twin's draft: --twin f32)
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-map-k4v": ["--spec-type", "ngram-map-k4v"],
    "ngram-mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "4"],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}
_CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
SPEC_PROMPTS = {
    "free": (PROMPT, "def fibonacci(n):", "The history of the Roman Empire begins with"),
    "repetitive": (
        "Count: " + ", ".join(str(i) for i in range(1, 40)) + ", " + ", ".join(str(i) for i in range(1, 30)),
        _CODE * 3 + "def add(a, b):\n",
        "The quick brown fox jumps over the lazy dog. " * 6,
    ),
}


async def measure_decode(url: str, n_predict: int, prompts: tuple[str, ...] = SPEC_PROMPTS["free"]) -> dict:
    """One-stream greedy decode tokens/s over three prompts, and the draft counts the server reports."""
    out: dict = {"decode_tps_1": [], "draft_acceptance": []}
    async with loopback.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        await _one(client, url, {"prompt": PROMPT, "n_predict": 4, "temperature": 0})  # warm up
        for prompt in prompts:
            body = {
                "prompt": prompt,
                "n_predict": n_predict,
                "temperature": 0,
                "ignore_eos": True,
                "cache_prompt": False,
            }
            start = time.perf_counter()
            answer = await _one(client, url, body)
            out["decode_tps_1"].append(answer["tokens_predicted"] / (time.perf_counter() - start))
            t = answer.get("timings", {})
            if t.get("draft_n"):
                out["draft_acceptance"].append(t["draft_n_accepted"] / t["draft_n"])
    return {k: statistics.median(v) for k, v in out.items() if v}


def run_speculative(
    twin_kind: str, n_predict: int, reps: int, spec_args: list[str] = SPEC_ARGS, prompts: str = "free"
) -> dict:
    """Both servers plain and with a drafter (default: the Q4_1 draft), side by side: decode tokens/s and the
    speedups."""
    from fixtures.families import FAMILIES, family_twin
    from fixtures.twins import twin

    from .reference import build_reference

    if twin_kind in FAMILIES:  # (a family twin: its F32 GGUF and its MLX checkpoint)
        family = family_twin(twin_kind)
        gguf, mlx_model = family.gguf, str(family.mlx_dir)
    else:
        t = twin(twin_kind)
        gguf, mlx_model = t.gguf, t.mlx_model
    args = [*COMMON_ARGS, "--parallel", "1"]
    servers = {
        ("reference", "plain"): reference_server(build_reference(), gguf, args),
        ("mlxcel", "plain"): mlxcel_server(mlx_model, args),
        ("reference", "draft"): reference_server(build_reference(), gguf, [*args, *spec_args]),
        ("mlxcel", "draft"): mlxcel_server(mlx_model, [*args, *spec_args]),
    }
    samples: dict = {key: [] for key in servers}
    try:
        for proc in servers.values():
            proc.start()
        for rep in range(reps):
            order = list(servers) if rep % 2 == 0 else list(reversed(servers))
            for key in order:
                samples[key].append(
                    asyncio.run(measure_decode(servers[key].base_url, n_predict, SPEC_PROMPTS[prompts]))
                )
    finally:
        for proc in servers.values():
            proc.cleanup()
    return {"args": spec_args, "prompts": prompts, **summarize_speculative(samples)}


def summarize_speculative(samples: dict) -> dict:
    """Each (server, mode)'s repetitions summarized, each server's drafted/plain speedup and the drafted ratio.
    A figure some repetitions lack (the draft acceptance of a drafter that drafts from the second repetition on,
    having learnt the prompt's continuation) is summarized over those that have it."""
    out: dict = {}
    for (name, mode), runs in samples.items():
        for k in dict.fromkeys(k for r in runs for k in r):
            out.setdefault(name, {})[f"{k}_{mode}"] = summarize([r[k] for r in runs if k in r])
    for name in ("reference", "mlxcel"):
        figures = out[name]
        out[name]["speedup"] = figures["decode_tps_1_draft"]["median"] / figures["decode_tps_1_plain"]["median"]
    out["ratio_mlxcel_over_reference"] = (
        out["mlxcel"]["decode_tps_1_draft"]["median"] / out["reference"]["decode_tps_1_draft"]["median"]
    )
    return out


def report(results: dict) -> str:  # noqa: C901
    ref, mine, ratio = results["reference"], results["mlxcel"], results["ratio_mlxcel_over_reference"]
    lines = [
        f"twin {results['twin']}, {results['repetitions']} repetitions, n_predict {results['n_predict']}; "
        "min/median/max; ratio of medians, > 1: mlxcel better",
        f"{'metric':<32}{'reference':>26}{'mlxcel':>26}{'ratio':>8}",
    ]

    def cell(s: dict) -> str:
        return f"{s['min']:.3g}/{s['median']:.3g}/{s['max']:.3g}"

    for k in mine:
        if k in ref:
            lines.append(f"{k:<32}{cell(ref[k]):>26}{cell(mine[k]):>26}{ratio.get(k, float('nan')):>8.3f}")
    anchor = results.get("mlx_lm_server")
    if anchor and "error" not in anchor:
        lines.append("mlx_lm.server on the same MLX twin (ratio: mlxcel over it)")
        for k, s in anchor.items():
            lines.append(
                f"{k:<32}{cell(s):>26}{cell(mine[k]):>26}"
                f"{results['ratio_mlxcel_over_mlx_lm_server'].get(k, float('nan')):>8.3f}"
            )
    elif anchor:
        lines.append(f"mlx_lm.server: {anchor['error']}")
    for k, v in results["mlxcel_only"].items():
        lines.append(f"{k:<32}{'':>26}{v:>26.1f}")
    spec = results.get("speculative")
    if spec:
        lines.append(f"speculative decoding ({' '.join(spec['args'])}), one stream, greedy")
        for k in ("decode_tps_1_plain", "decode_tps_1_draft", "draft_acceptance_draft"):
            if k in spec["mlxcel"] and k in spec["reference"]:
                lines.append(f"{k:<32}{cell(spec['reference'][k]):>26}{cell(spec['mlxcel'][k]):>26}")
        lines.append(
            f"{'speedup over plain':<32}{spec['reference']['speedup']:>26.3f}{spec['mlxcel']['speedup']:>26.3f}"
            f"{spec['ratio_mlxcel_over_reference']:>8.3f}"
        )
    return "\n".join(lines)


def provenance() -> dict:
    """What a run's figures belong to: the commit (and whether the tree differed from it), the date, the CPU,
    the BLAS mlxcel runs (server/blas.py's choice, as a child process makes it)."""

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()

    cpu = (
        next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    code = "from server import blas; blas.activate(); print(blas.STATE.library, blas.STATE.core, sep=' | ')"
    blas = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    return {
        "commit": git("rev-parse", "--short=12", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "-uno")),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_at_start": list(os.getloadavg()),
        "mlxcel_blas": blas,
    }


def default_out(meta: dict) -> str:
    return f"reports/bench/{meta['date'][:10]}-{meta['commit']}.json"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mlxcel-oracle bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--twin",
        choices=["q4_1", "f32", "qwen3.5"],  # (qwen3.5: the family twin, with --speculative-only --drafters draft-mtp)
        nargs="+",
        default=["f32"],
        help="one or more twins, measured one after the other into one JSON",
    )
    p.add_argument("--n-predict", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-anchor", action="store_true", help="skip mlx_lm.server")
    p.add_argument("--no-speculative", action="store_true", help="skip the speculative-decoding pair")
    p.add_argument("--speculative-only", action="store_true", help="run the speculative-decoding pair alone")
    p.add_argument(
        "--drafters",
        default="draft-simple",
        help=f"with --speculative-only: comma-separated drafters, each its own pair ({','.join(DRAFTERS)})",
    )
    p.add_argument("--spec-prompts", choices=list(SPEC_PROMPTS), default="free")
    p.add_argument("--out", help="the JSON written (default reports/bench/<date>-<commit>.json)")
    p.add_argument("--table", action="store_true", help="then regenerate docs/cpu-speed.md's table from it")
    p.add_argument(
        "--figures",
        default=",".join(FIGURE_GROUPS),
        help=f"comma-separated groups of figures to measure (default all: {','.join(FIGURE_GROUPS)})",
    )
    args = p.parse_args(argv)
    groups = tuple(g for g in args.figures.split(",") if g)
    if not groups or set(groups) - set(FIGURE_GROUPS):
        p.error(f"--figures: choose from {','.join(FIGURE_GROUPS)}")
    meta = provenance()
    out = Path(args.out or default_out(meta))
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    twins: dict = {}
    for kind in args.twin:
        if args.speculative_only:
            twins[kind] = {
                "speculative": {
                    name: run_speculative(kind, args.n_predict, args.reps, DRAFTERS[name], args.spec_prompts)
                    for name in args.drafters.split(",")
                }
            }
            print(json.dumps(twins[kind]["speculative"], indent=1))
            continue
        results = run(kind, args.n_predict, args.reps, anchor=not args.no_anchor, groups=groups)
        if not args.no_speculative:
            results["speculative"] = run_speculative(kind, args.n_predict, args.reps)
        twins[kind] = results
        print(report(results))
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps({**meta, "repetitions": args.reps, "twins": twins}, indent=1) + "\n")
    print(f"written: {out} ({meta['wall_s']:.0f} s); the table: python -m oracle.bench_table {out}")
    if args.table and not args.speculative_only:
        from .bench_table import main as table_main

        table_main([str(out)])


if __name__ == "__main__":
    main()
