"""Bounded load on loopback (issue 10): many concurrent streaming clients against a few slots.

Every request completes (its last frame says stop) or is refused with an error in b10621's envelope; at the end
every slot is idle and the server's resident memory is within 10% of what it was after the warm-up. The p50 and
p99 time to first token are reported. MLXCEL_LOAD_SECONDS sets the duration (CI: 12; `nox -s soak`: longer).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import httpx
import pytest

from oracle import loopback
from tests.reliability import figures

CLIENTS = int(os.environ.get("MLXCEL_LOAD_CLIENTS", "64"))
SLOTS = 4
SECONDS = float(os.environ.get("MLXCEL_LOAD_SECONDS", "12"))
# a fixed set of prompts, all seen in the warm-up: the prompt cache then holds what it will hold
PROMPTS = [f"Item {i}: the weather in city number {i} today is" for i in range(8)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def stream_one(client: httpx.AsyncClient, i: int) -> tuple[str, float | None]:
    """One streaming completion: ("ok", ttft), ("refused", None) for a clean error, or ("failed: why", None)."""
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "n_predict": 8 + i % 9, "stream": True, "temperature": 0.7, "seed": i}
    start, first = time.perf_counter(), None
    try:
        async with client.stream("POST", "/completion", json=body, timeout=120) as r:
            if r.status_code != 200:
                raw = await r.aread()
                envelope = json.loads(raw)
                return (
                    ("refused", None)
                    if r.status_code < 500 and "error" in envelope
                    else (f"failed: {raw[:200]!r}", None)
                )
            last = None
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    if first is None:
                        first = time.perf_counter() - start
                    last = json.loads(line[6:])
            if not (isinstance(last, dict) and last.get("stop") is True):
                return f"failed: stream ended without its last frame ({last!r:.200})", None
            return "ok", first
    except (httpx.HTTPError, ValueError) as exc:
        return f"failed: {type(exc).__name__}: {exc}", None


async def client_loop(base_url: str, who: int, until: float, out: list) -> None:
    async with loopback.AsyncClient(base_url=base_url, limits=httpx.Limits(max_keepalive_connections=1)) as client:
        i = who
        while time.perf_counter() < until:
            out.append(await stream_one(client, i))
            i += CLIENTS


@pytest.fixture(scope="module")
def server(twin_q4_1):
    from oracle.processes import COMMON_ARGS, mlxcel_server

    proc = mlxcel_server(twin_q4_1.mlx_model, [*COMMON_ARGS, "--parallel", str(SLOTS), "-c", str(SLOTS * 512)])
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


def test_many_streaming_clients_on_few_slots_all_finish_and_leak_nothing(server):
    pid = server.proc.pid

    async def run(seconds: float) -> list:
        out: list = []
        until = time.perf_counter() + seconds
        await asyncio.gather(*(client_loop(server.base_url, c, until, out) for c in range(CLIENTS)))
        return out

    warm = asyncio.run(run(2.0))  # every prompt seen, every slot used, MLX's buffers allocated
    assert all(r == "ok" for r, _ in warm), [r for r, _ in warm if r != "ok"][:5]
    time.sleep(1.0)
    rss_warm = rss_mib(pid)
    results = asyncio.run(run(SECONDS))
    with loopback.Client(base_url=server.base_url) as c:
        deadline = time.time() + 30
        while time.time() < deadline:
            slots = c.get("/slots").json()
            if not any(s["is_processing"] for s in slots):
                break
            time.sleep(0.2)
        leaked = sum(s["is_processing"] for s in slots)
    time.sleep(1.0)
    rss_end = rss_mib(pid)
    ok = [t for r, t in results if r == "ok"]
    failed = [r for r, _ in results if r.startswith("failed")]
    ttft = sorted(t for t in ok if t is not None)
    p99 = ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))] if ttft else float("nan")
    drift = (rss_end - rss_warm) / rss_warm
    figures.add(
        "load",
        clients=CLIENTS,
        slots=SLOTS,
        seconds=SECONDS,
        requests_tried=len(results),
        completed=len(ok),
        refused=sum(r == "refused" for r, _ in results),
        failures=len(failed),
        slots_leaked=leaked,
        ttft_p50_s=statistics.median(ttft) if ttft else float("nan"),
        ttft_p99_s=p99,
        rss_after_warmup_mib=round(rss_warm),
        rss_after_load_mib=round(rss_end),
        memory_drift_pct=round(100 * drift, 1),
    )
    assert not failed, failed[:5]
    assert len(ok) >= CLIENTS  # every client got at least one answer in the time
    assert leaked == 0, slots
    assert abs(drift) <= 0.10, (rss_warm, rss_end)
