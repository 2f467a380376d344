"""`mlxcel bench -m MODEL [-p 512] [-n 128] [-r 5] [-o md|json] [llama-server's options]`: llama-bench's headline
figures for a model on this machine: prompt processing (ppN: N random tokens, t/s) and text generation (tgN: N
tokens decoded one at a time, t/s), each the mean and standard deviation over the repetitions after one warm-up,
in llama-bench's markdown table (tools/llama-bench).

Each run is a /completion request answered in process by the server's handler (server/cli/local.py) with the
prompt cache off, so every repetition processes its whole prompt; the speeds are the ones the server reports in
`timings` (prompt_per_second, predicted_per_second). -p, -n, -r and -o are llama-bench's; the rest of the command
line is llama-server's (-t, -c, -ctk, -ub ...). For the reference side by side, `nox -s bench`."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from ..cpu_threads import physical_cores
from ..errors import UpstreamError
from .local import Local, Own, command_line, load

PROG = "mlxcel bench"
OWN = (
    Own("n_prompt", ("-p", "--n-prompt")),
    Own("n_gen", ("-n", "--n-gen")),
    Own("reps", ("-r", "--repetitions")),
    Own("output", ("-o", "--output")),
    Own("help", ("-h", "--help"), value=False),
)
USAGE = f"""usage: {PROG} -m MODEL [-p N] [-n N] [-r N] [-o md|json] [llama-server's options]

llama-bench's headline figures on this machine: ppN (N random prompt tokens) and tgN (N generated tokens), t/s
as mean ± standard deviation over the repetitions, after one warm-up run.
  -p, --n-prompt N      prompt tokens (default 512; 0 skips the test)
  -n, --n-gen N         generated tokens (default 128; 0 skips the test)
  -r, --repetitions N   repetitions of each test (default 5)
  -o, --output FORMAT   md (default) or json
"""


def main(argv: list[str]) -> int:
    parsed = command_line(argv, OWN, PROG, USAGE)
    if isinstance(parsed, int):
        return parsed
    own, rest = parsed
    try:
        n_prompt, n_gen, reps = (
            _count(own[k], default) for k, default in (("n_prompt", 512), ("n_gen", 128), ("reps", 5))
        )
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if own["output"] not in (None, "md", "json") or reps < 1:
        print(f"{PROG}: error: -o takes md or json, -r a count of 1 or more", file=sys.stderr)
        return 2
    local = load(rest, PROG)
    if isinstance(local, int):
        return local
    try:
        results = asyncio.run(run(local, n_prompt, n_gen, reps))
    except UpstreamError as exc:
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return 1
    finally:
        local.stop()
    print(json.dumps(results, indent=2) if own["output"] == "json" else table(local, results), end="\n")
    return 0


def _count(value: str | None, default: int) -> int:
    if value is None:
        return default
    if not value.isdigit():
        raise ValueError(f"error: expected a count of tokens or runs, got '{value}'")
    return int(value)


async def _complete(local: Local, prompt: list[int], n_predict: int) -> dict:
    from ..api.native import complete  # deferred: the handlers import FastAPI

    body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False, "ignore_eos": True, "temperature": 0}
    response = await complete(local.state, body)
    return json.loads(bytes(response.body))


async def run(local: Local, n_prompt: int, n_gen: int, reps: int) -> list[dict]:
    """[{test, n_prompt, n_gen, samples: [t/s per repetition], prompt_n/predicted_n seen}] for ppN and tgN."""
    vocab = local.state.model_facts.n_vocab
    rng = np.random.default_rng(0)
    tests = []
    if n_prompt:
        tests.append((f"pp{n_prompt}", n_prompt, 1, "prompt_per_second", "prompt_n"))
    if n_gen:
        tests.append((f"tg{n_gen}", 1, n_gen, "predicted_per_second", "predicted_n"))
    results = []
    for name, prompt_len, predict, speed, count in tests:
        prompts = [rng.integers(0, vocab, prompt_len).tolist() for _ in range(reps + 1)]
        await _complete(local, prompts[0], predict)  # the warm-up (llama-bench's default)
        samples, counts = [], []
        for prompt in prompts[1:]:
            timings = (await _complete(local, prompt, predict))["timings"]
            samples.append(float(timings[speed]))
            counts.append(int(timings[count]))
        results.append({"test": name, "n_prompt": prompt_len, "n_gen": predict, "samples_ts": samples, count: counts})
    return results


def table(local: Local, results: list[dict]) -> str:
    """llama-bench's markdown table: model, size, params, backend, threads, test, t/s (mean ± stdev)."""
    state = local.state
    threads = local.args.threads if (local.args.threads or 0) > 0 else physical_cores()  # (b10621's -t default)
    size, params = state.model_facts.size, state.model_facts.n_params
    size_text = f"{size / 2**20:.2f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB"
    params_text = f"{params / 1e6:.2f} M" if params < 1e9 else f"{params / 1e9:.2f} B"
    header = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    rows = []
    for r in results:
        s = r["samples_ts"]
        spread = statistics.stdev(s) if len(s) > 1 else 0.0
        rows.append(
            [
                f"{Path(state.model_name).name} {state.model_ftype}",
                size_text,
                params_text,
                "MLX CPU",
                str(threads),
                r["test"],
                f"{statistics.mean(s):.2f} ± {spread:.2f}",
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    right = {1, 2, 4, 5, 6}
    line = lambda cells: (
        "| "
        + " | ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        + " |"
    )
    rule = "| " + " | ".join("-" * (w - 1) + (":" if i in right else "-") for i, w in enumerate(widths)) + " |"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])
