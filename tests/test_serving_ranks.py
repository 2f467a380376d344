"""One model served across ranks (server/backends/distributed.py, docs/scaling-out.md): `mlx.launch --backend ring`
on loopback starting the same mlxcel-server command on 2 and on 3 ranks, rank 0 serving HTTP. Against the same
model served by one process: greedy paths with no disagreement where the one-rank server's top token leads by
0.5 nats, logprobs within 1e-3 (the ranks' all_sum adds partial products in another order), and the same
answers to the generation requests (streamed, chat, grammar, seeded sampling)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from oracle import loopback
from oracle.processes import F32_NUMERICS, ServerProcess, free_port, mlxcel_server, start_together
from oracle.trace import trace

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village"]
LOGPROB_BOUND = 1e-3
pytestmark = pytest.mark.heavy  # (servers of several processes: the full run's, not the fast tier's)


def launched(model: str, ranks: int, args: list[str]) -> ServerProcess:
    """mlxcel-server over `ranks` ranks on loopback, through mlx.launch (the documented command)."""
    launcher = shutil.which("mlx.launch", path=os.path.dirname(sys.executable)) or shutil.which("mlx.launch")
    assert launcher, "mlx.launch comes with mlx"
    sp = mlxcel_server(model, args)
    ring = ["--backend", "ring", "-n", str(ranks), "--hosts", "127.0.0.1", "--starting-port", str(free_port())]
    sp.argv = [launcher, *ring, "--python", sys.executable, "--", *sp.argv[1:]]  # (argv[0]: this Python)
    sp.name = f"mlxcel-{ranks}-ranks"
    sp.stdin_pipe = True
    return sp


def spawned(model: str, ranks: int, args: list[str], per_rank: dict[int, list[str]] | None = None):
    """The ranks started here with what mlx.launch hands each (MLX_RANK, MLX_HOSTFILE: the ring's addresses), each a
    process of its own: mlx.launch's forwarding loop polls without pause (a core of this 2-core machine), and a
    test reads each rank's exit status. Rank 0 first; per_rank: arguments added to a rank's command line."""
    import json

    hostfile = Path(tempfile.mkdtemp(prefix="mlxcel-ring-")) / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]))
    out = []
    for rank in range(ranks):
        sp = mlxcel_server(model, [*args, *(per_rank or {}).get(rank, [])])
        sp.name = f"rank{rank}"
        sp.env |= {"MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)}
        if rank:
            sp.port = out[0].port  # (the same command line: only rank 0 listens)
            sp.argv[sp.argv.index("--port") + 1] = str(sp.port)
        out.append(sp)
    for sp in out:
        sp.launch()
    return out


def _post(base: str, path: str, body: dict) -> dict:
    r = loopback.post(base + path, json=body, timeout=300)
    assert r.status_code == 200, r.text[:300]
    return r.json()


def _stream_text(base: str, body: dict) -> str:
    import json

    text = ""
    with loopback.stream("POST", base + "/completion", json={**body, "stream": True}, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                text += json.loads(line[6:]).get("content", "")
    return text


def _pair(model: str, ranks: int) -> tuple[ServerProcess, ServerProcess]:
    args = [*F32_NUMERICS, "-np", "2"]
    one, split = mlxcel_server(model, args), launched(model, ranks, args)
    start_together(one, split, timeout=300)
    return one, split


def _agree(one: ServerProcess, split: ServerProcess, prompts: list[str], n: int, decided: int) -> None:
    """Traces of n tokens: at least `decided` positions decided, none disagreeing, logprobs within the bound."""
    traces = [trace(one.base_url, split.base_url, p, "f32", n) for p in prompts]
    assert sum(t.decided for t in traces) >= decided, [t.decided for t in traces]
    assert [t.disagreements_at_decided for t in traces] == [0] * len(prompts)
    assert 0 < max(t.max_abs_delta_logprob for t in traces) <= LOGPROB_BOUND  # (0: the ranks did not run)


def _same(one: ServerProcess, split: ServerProcess, path: str, body: dict) -> dict:
    got = _post(split.base_url, path, body)
    want = _post(one.base_url, path, body)
    pick = (lambda r: r["choices"][0]["message"]["content"]) if "messages" in body else (lambda r: r["content"])
    assert pick(got) == pick(want), (path, body)
    return got


def test_two_ranks_serve_one_process_answers():
    """llama3's family twin (4 query and 2 key-value heads: 2 and 1 a rank) over 2 ranks: traces, greedy, streamed,
    chat, grammar and seeded sampling as one process answers them."""
    from fixtures.families import family_twin

    one, split = _pair(str(family_twin("llama3").mlx_dir), 2)
    try:
        _agree(one, split, PROMPTS[:2], 16, 16)
        greedy = {"prompt": PROMPTS[1], "n_predict": 16, "temperature": 0}
        assert _stream_text(split.base_url, greedy) == _same(one, split, "/completion", greedy)["content"]
        chat = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8, "temperature": 0}
        _same(one, split, "/v1/chat/completions", chat)
        _same(one, split, "/completion", {**greedy, "grammar": 'root ::= "yes" | "no" | [a-z]+'})
        _same(one, split, "/completion", {"prompt": PROMPTS[2], "n_predict": 12, "temperature": 0.8, "seed": 42})
        assert loopback.get(split.base_url + "/props", timeout=30).json()["total_slots"] == 2
    finally:
        for p in (one, split):
            p.cleanup()


def test_three_ranks_serve_one_process_answers(twin_f32):
    """SmolLM2's F32 twin (9 query and 3 key-value heads: 3 and 1 a rank) over 3 ranks (three processes on this
    machine's 2 cores: ~2 tokens/s, each token waiting on 60 all_sums): the one-process greedy path scored by the
    3 ranks, a greedy answer streamed and whole, a seeded one; then SIGTERM to rank 0 stops every rank, each
    exiting 0. (Chat and grammar take the same rank path as /completion: the 2-rank test has them.)"""
    args = [*F32_NUMERICS, "-np", "2"]
    one = mlxcel_server(twin_f32.mlx_model, args)
    ranks = spawned(twin_f32.mlx_model, 3, args)
    try:
        one.launch()
        for sp in (one, ranks[0]):
            sp.wait_healthy(300)
        _agree(one, ranks[0], PROMPTS[:1], 12, 8)
        greedy = {"prompt": PROMPTS[1], "n_predict": 6, "temperature": 0}
        assert _stream_text(ranks[0].base_url, greedy) == _same(one, ranks[0], "/completion", greedy)["content"]
        _same(one, ranks[0], "/completion", {"prompt": PROMPTS[2], "n_predict": 4, "temperature": 0.8, "seed": 42})
        ranks[0].proc.send_signal(signal.SIGTERM)
        assert [sp.proc.wait(timeout=120) for sp in ranks] == [0, 0, 0]
        assert "stopped by rank 0" in ranks[1].log_path.read_text()
    finally:
        for sp in (one, *ranks):
            sp.cleanup()


def test_ranks_on_other_flags_refuse_to_serve(twin_f32):
    """A rank started with another command line than rank 0's (here -c): every rank stops before serving, rank 0
    saying which rank differs, in one line, exit 1."""
    ranks = spawned(twin_f32.mlx_model, 3, [*F32_NUMERICS], per_rank={2: ["-b", "512"]})
    try:
        codes = [sp.proc.wait(timeout=300) for sp in ranks]
        assert codes[0] == 1 and codes[2] == 1, codes
        assert "rank(s) 2 started on another model or other flags than rank 0" in ranks[0].log_path.read_text()
    finally:
        for sp in ranks:
            sp.cleanup()


def test_a_launch_refuses_what_it_does_not_serve_across_ranks(twin_f32):
    """What mlxcel does not split over ranks is refused on every rank before anything loads: one line, exit 1."""
    ranks = spawned(twin_f32.mlx_model, 2, ["--slot-save-path", "/tmp"])
    try:
        assert [sp.proc.wait(timeout=120) for sp in ranks] == [1, 1]
        lines = ranks[0].log_path.read_text().strip().splitlines()
        assert lines[-1].endswith(
            "--slot-save-path: slot files (each rank holds its own part of a slot's cache) are not served across ranks"
        )
    finally:
        for sp in ranks:
            sp.cleanup()


def test_a_rank_lost_makes_rank_0_answer_503_and_exit_1():
    """A rank killed while the model is served: rank 0's next pass finds its connection gone, answers 503 with why,
    and stops with status 1 (never a hang); the other rank's own line says rank 0 went, where it outlives it."""
    from fixtures.families import family_twin

    ranks = spawned(str(family_twin("llama3").mlx_dir), 2, [*F32_NUMERICS])
    try:
        ranks[0].wait_healthy(300)
        body = {"prompt": PROMPTS[0], "n_predict": 4, "temperature": 0}
        assert loopback.post(ranks[0].base_url + "/completion", json=body, timeout=120).status_code == 200
        ranks[1].proc.kill()
        ranks[1].proc.wait(timeout=30)
        r = loopback.post(ranks[0].base_url + "/completion", json=body, timeout=120)
        assert r.status_code == 503, r.text[:300]
        assert "a rank of the model split across ranks was lost" in r.json()["error"]["message"]
        assert ranks[0].proc.wait(timeout=60) == 1
    finally:
        for sp in ranks:
            sp.cleanup()


def test_heads_the_ranks_do_not_divide_are_refused_on_every_rank(twin_f32):
    """SmolLM2's 9 query heads over 2 ranks: each rank says so in one line and exits 1 (no traceback, no hang)."""
    ranks = spawned(twin_f32.mlx_model, 2, [*F32_NUMERICS])
    try:
        assert [sp.proc.wait(timeout=120) for sp in ranks] == [1, 1]
        for sp in ranks:
            text = sp.log_path.read_text()
            assert "num_attention_heads 9 is not a multiple of the 2 ranks" in text, text[-500:]
            assert "Traceback" not in text
    finally:
        for sp in ranks:
            sp.cleanup()


def test_two_ranks_in_a_pipeline_serve_one_process_answers():
    """qwen2.5's family twin with its layers split over 2 ranks (--pp-size 2, mlx-lm's pipeline: rank 1 runs the
    first half, sends the hidden rows to rank 0, which runs the rest): traces, greedy, streamed, chat and seeded
    sampling as one process answers them, a slot's cache reused, and n-gram drafts verified across the ranks (the
    ranks drafting, the one process not: drafting changes no token)."""
    from fixtures.families import family_twin

    model = str(family_twin("qwen2.5").mlx_dir)
    # (size-n 1: the random twin's greedy paths repeat single tokens, which the drafter then copies)
    ngram = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4"]
    args = [*F32_NUMERICS, "-np", "2"]
    one = mlxcel_server(model, args)  # plain decoding: the ranks' drafted answers must be its answers
    ranks = spawned(model, 2, [*args, "--pp-size", "2", "--metrics", *ngram])
    try:
        one.launch()
        for sp in (one, ranks[0]):
            sp.wait_healthy(300)
        assert "rank 1 of 2: pipeline parallel" in ranks[1].log_path.read_text()
        _agree(one, ranks[0], PROMPTS[:2], 12, 12)
        greedy = {"prompt": PROMPTS[1], "n_predict": 12, "temperature": 0}
        assert _stream_text(ranks[0].base_url, greedy) == _same(one, ranks[0], "/completion", greedy)["content"]
        chat = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8, "temperature": 0}
        _same(one, ranks[0], "/v1/chat/completions", chat)
        _same(one, ranks[0], "/completion", {"prompt": PROMPTS[2], "n_predict": 10, "temperature": 0.8, "seed": 7})
        again = _same(one, ranks[0], "/completion", greedy)  # the slot's cache, kept on every rank, reused
        assert again["timings"]["cache_n"] > 0, again["timings"]
        drafted = _same(one, ranks[0], "/completion", {"prompt": PROMPTS[0], "n_predict": 12, "temperature": 0})
        assert drafted["timings"].get("draft_n", 0) > 0, drafted["timings"]  # drafts verified across the ranks
        _concurrent_rows_agree(one, ranks[0])
    finally:
        for sp in (one, *ranks):
            sp.cleanup()


def _concurrent_rows_agree(one: ServerProcess, split: ServerProcess) -> None:
    """Two greedy requests at once: their rows decode together, in a pipeline as two micro-batches (one a stage,
    backends/micro_batches.py), each answer the one process's for its prompt."""
    from concurrent.futures import ThreadPoolExecutor

    bodies = [{"prompt": p, "n_predict": 16, "temperature": 0, "n_probs": 2} for p in PROMPTS[:2]]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda b: _post(split.base_url, "/completion", b), bodies))
    want = [_post(one.base_url, "/completion", b) for b in bodies]
    assert [g["content"] for g in got] == [w["content"] for w in want]
    deltas = [
        abs(a["logprob"] - b["logprob"])
        for g, w in zip(got, want, strict=True)
        for a, b in zip(g["completion_probabilities"], w["completion_probabilities"], strict=True)
        if a["top_logprobs"]  # (a drafted token accepted carries no probabilities, as in b10621)
    ]
    assert len(deltas) >= 8 and max(deltas) <= LOGPROB_BOUND, deltas
    metrics = loopback.get(split.base_url + "/metrics", timeout=60).text
    busy = next(float(ln.split()[-1]) for ln in metrics.splitlines() if ln.startswith("llamacpp:n_busy_slots_per"))
    assert busy > 1.0, busy  # (the rows did share passes)


def _slowdowns(base: str) -> dict[str, float]:
    r = loopback.get(base + "/metrics", timeout=120)
    assert r.status_code == 200, r.text[:300]
    out = {}
    for line in r.text.splitlines():
        if line.startswith("mlxcel:rank_slowdown{"):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def test_a_slow_rank_shows_in_metrics():
    """Each rank's time for the same probe product is in GET /metrics, and the slowdown against the fastest: rank 1
    held stopped 3/4 of the time (SIGSTOP/SIGCONT, a stand-in for a busier machine) is the slow one, several times
    rank 0's figure; running freely again, it is not."""
    import threading
    import time

    from fixtures.families import family_twin

    ranks = spawned(str(family_twin("llama3").mlx_dir), 2, [*F32_NUMERICS, "--metrics"])
    try:
        ranks[0].wait_healthy(300)
        done = threading.Event()

        def hold() -> None:
            while not done.is_set():
                ranks[1].proc.send_signal(signal.SIGSTOP)
                time.sleep(0.03)
                ranks[1].proc.send_signal(signal.SIGCONT)
                time.sleep(0.01)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        try:
            held = _slowdowns(ranks[0].base_url)
        finally:
            done.set()
            holder.join()
            ranks[1].proc.send_signal(signal.SIGCONT)
        assert set(held) == {"0", "1"} and held["0"] == 1.0 and held["1"] >= 2.0, held
        free = _slowdowns(ranks[0].base_url)
        assert free["1"] < held["1"] / 1.5, (free, held)
    finally:
        for sp in ranks:
            sp.cleanup()
