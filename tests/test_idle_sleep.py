"""--sleep-idle-seconds: an idle server frees its weights and prompt cache, answers /health, /props (is_sleeping)
and /metrics asleep, and the next request wakes it and gets what it would have got; nothing in flight is lost."""

from __future__ import annotations

import time

import pytest

from oracle import loopback
from oracle.processes import mlxcel_server

BODY = {"prompt": "The three primary colours are", "n_predict": 6, "temperature": 0}


def _asleep(url: str) -> bool:
    return loopback.get(url + "/props", timeout=30).json()["is_sleeping"]


def _wait_asleep(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _asleep(url):
        assert time.monotonic() < deadline, "the server never went to sleep"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def sleepy():
    proc = mlxcel_server("smollm2-135m-instruct-q4_1", ["--sleep-idle-seconds", "2", "--metrics"])
    proc.start()
    yield proc
    proc.cleanup()


def _rss_bytes(proc) -> int:
    """The server process's resident memory (Linux)."""
    for line in open(f"/proc/{proc.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _scrape(url: str) -> str:
    r = loopback.get(url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["Process-Start-Time-Unix"]
    return r.text


def test_sleep_frees_memory_and_a_request_wakes_it_unchanged(sleepy):
    url = sleepy.base_url
    awake = loopback.post(url + "/completion", json=BODY, timeout=120).json()
    _scrape(url)  # the first scrape resets the throughput buckets: the next reads what sleep will keep
    metrics_awake = _scrape(url)
    held = _rss_bytes(sleepy)
    _wait_asleep(url)
    assert _rss_bytes(sleepy) < held - 80 * 2**20  # the weights (~110 MB, kept 4-bit) and caches are gone
    assert loopback.get(url + "/health", timeout=30).json() == {"status": "ok"}
    # b10621 serves the snapshot it took on entering sleep: the same text as the last scrape awake
    assert _scrape(url) == metrics_awake and "llamacpp:tokens_predicted_total 6" in metrics_awake
    assert _asleep(url)  # none of those woke it
    woken = loopback.post(url + "/completion", json=BODY, timeout=300).json()
    assert woken["content"] == awake["content"] and woken["tokens_predicted"] == awake["tokens_predicted"]
    assert not _asleep(url)


def test_tokenize_wakes_it(sleepy):
    """b10621 wakes the server for every route that may need the model, tokenize included."""
    url = sleepy.base_url
    _wait_asleep(url)
    r = loopback.post(url + "/tokenize", json={"content": "Hello"}, timeout=300)
    assert r.status_code == 200 and r.json()["tokens"]
    assert not _asleep(url)


def test_a_generation_longer_than_the_window_is_not_interrupted(sleepy):
    url = sleepy.base_url
    r = loopback.post(
        url + "/completion",
        json={"prompt": "Count slowly:", "n_predict": 160, "temperature": 0, "ignore_eos": True},
        timeout=300,
    )
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 160
