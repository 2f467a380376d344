"""Faults injected into a running server, over the wire (issue 10): clients that go away mid-prefill and
mid-stream, slow readers, requests cancelled while queued, SIGTERM during generation, corrupted or truncated
model files. After each, no slot is left busy and the server still serves (or, at startup, one clear line says
what is wrong). Slot saving (and so a full disk during it) is refused at startup until issue 12 brings it.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from oracle import loopback
from tests.reliability import figures

LONG_PROMPT = " ".join(f"word{i % 50}" for i in range(1500))


@pytest.fixture(scope="module")
def server(twin_q4_1):
    from oracle.processes import COMMON_ARGS, mlxcel_server

    proc = mlxcel_server(twin_q4_1.mlx_model, [*COMMON_ARGS, "--parallel", "2", "-c", "8192"])
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


def _idle(base_url: str, within: float = 20.0) -> bool:
    deadline = time.time() + within
    with loopback.Client(base_url=base_url) as c:
        while time.time() < deadline:
            if not any(s["is_processing"] for s in c.get("/slots").json()):
                return True
            time.sleep(0.1)
    return False


def _serves(base_url: str) -> bool:
    with loopback.Client(base_url=base_url, timeout=60) as c:
        r = c.post("/completion", json={"prompt": "Hello", "n_predict": 3})
        return r.status_code == 200 and r.json()["tokens_predicted"] == 3


def _raw_request(base_url: str, body: bytes) -> socket.socket:
    """A POST /completion written on a raw socket (so it can be dropped at any point)."""
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    return sock


def _fault(name: str) -> None:
    figures.add("faults", faults_injected=1, **{name: 1})


def test_a_client_gone_mid_prefill_frees_its_slot(server):
    import json

    for _ in range(3):
        sock = _raw_request(
            server.base_url, json.dumps({"prompt": LONG_PROMPT, "n_predict": 50, "stream": True}).encode()
        )
        time.sleep(0.05)  # the prompt is being processed
        sock.close()
        _fault("gone_mid_prefill")
    assert _idle(server.base_url)
    assert _serves(server.base_url)


def test_a_client_gone_mid_stream_stops_its_generation(server):
    with loopback.Client(base_url=server.base_url, timeout=60) as c:
        start = time.time()
        with c.stream(
            "POST",
            "/completion",
            json={"prompt": "Once upon a time", "n_predict": 2000, "ignore_eos": True, "stream": True},
        ) as r:
            frames = 0
            for line in r.iter_lines():
                frames += line.startswith("data: ")
                if frames == 3:
                    break  # leaving the block closes the connection
        _fault("gone_mid_stream")
    assert _idle(server.base_url, within=10)  # long before 2000 tokens could have been generated
    assert time.time() - start < 30
    assert _serves(server.base_url)


def test_a_slow_reader_holds_only_its_own_slot(server):
    """One client reads a frame a second; another request completes meanwhile, and the slow one gets every
    frame in the end."""
    result = {}

    def slow():
        with loopback.Client(base_url=server.base_url, timeout=120) as c:
            with c.stream(
                "POST", "/completion", json={"prompt": "Count:", "n_predict": 40, "ignore_eos": True, "stream": True}
            ) as r:
                frames, last = 0, None
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        frames, last = frames + 1, line
                        if frames <= 4:
                            time.sleep(1.0)
                result["frames"], result["last"] = frames, last

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.5)
    _fault("slow_reader")
    start = time.time()
    assert _serves(server.base_url)
    assert time.time() - start < 20
    t.join(120)
    assert result["frames"] == 41 and '"stop":true' in result["last"]
    assert _idle(server.base_url)


def test_requests_cancelled_while_queued_never_run(server):
    """Both slots busy, then three more requests queue and are dropped before a slot frees: the busy ones finish,
    the dropped ones never occupy a slot, and the queue is empty after."""
    import json

    busy = [
        _raw_request(
            server.base_url, json.dumps({"prompt": "Tell a story.", "n_predict": 60, "ignore_eos": True}).encode()
        )
        for _ in range(2)
    ]
    time.sleep(0.3)
    queued = [
        _raw_request(
            server.base_url, json.dumps({"prompt": f"Queued {i}", "n_predict": 3000, "ignore_eos": True}).encode()
        )
        for i in range(3)
    ]
    time.sleep(0.2)
    for sock in queued:
        sock.close()
        _fault("cancelled_while_queued")
    for sock in busy:
        sock.settimeout(120)
        data = b""
        while b'"stop_type"' not in data:
            chunk = sock.recv(65536)
            assert chunk, data[-300:]
            data += chunk
        assert b"200 OK" in data.split(b"\r\n", 1)[0]
        sock.close()
    assert _idle(server.base_url, within=15)  # 3000-token requests would still be running had they started
    assert _serves(server.base_url)


def test_sigterm_drains_the_generation_in_flight_then_exits(twin_q4_1):
    from oracle.processes import COMMON_ARGS, mlxcel_server

    proc = mlxcel_server(twin_q4_1.mlx_model, [*COMMON_ARGS, "--parallel", "2"])
    proc.start()
    result = {}

    def generate():
        with loopback.Client(base_url=proc.base_url, timeout=60) as c:
            with c.stream(
                "POST",
                "/completion",
                json={"prompt": "Once upon a time", "n_predict": 60, "ignore_eos": True, "stream": True},
            ) as r:
                lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        result["frames"], result["last"] = len(lines), lines[-1] if lines else ""

    try:
        t = threading.Thread(target=generate)
        t.start()
        time.sleep(1.0)
        proc.proc.send_signal(signal.SIGTERM)
        _fault("sigterm_during_generation")
        start = time.time()
        code = proc.proc.wait(60)
        t.join(10)
        drained = time.time() - start
    finally:
        log = proc.log_tail(lines=200, limit=4000)
        proc.cleanup()
    assert result.get("frames") == 61 and '"stop":true' in result["last"], (result, log)
    assert code == 0, log  # as b10621 exits (it cuts the stream; mlxcel lets it finish)
    assert "Traceback" not in log and "abort" not in log.lower(), log
    figures.add("faults", sigterm_drain_s=round(drained, 2))


def _start_on(checkpoint: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server", "-m", str(checkpoint), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "damage", ["truncated-weights", "garbage-weights", "missing-weights", "bad-config", "bad-tokenizer"]
)
def test_a_damaged_model_stops_startup_with_one_clear_line(twin_q4_1, tmp_path, damage):
    model = tmp_path / "model"
    shutil.copytree(twin_q4_1.mlx_dir, model)
    weights = sorted(model.glob("*.safetensors"))[0]
    if damage == "truncated-weights":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "garbage-weights":
        weights.write_bytes(b"\x00garbage" * 1000)
    elif damage == "missing-weights":
        weights.unlink()
    elif damage == "bad-config":
        (model / "config.json").write_text("{not json")
    else:
        (model / "tokenizer.json").write_text('{"version": "1.0", "model": 42}')
    _fault("damaged_model")
    out = _start_on(model)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert str(model) in last or model.name in last or "safetensors" in last, last


def test_sigterm_cuts_what_does_not_finish_within_the_drain_and_a_second_one_at_once(twin_q4_1):
    from oracle.processes import COMMON_ARGS, mlxcel_server
    from server.transport import DRAIN_SECONDS

    for signals in (1, 2):
        proc = mlxcel_server(twin_q4_1.mlx_model, [*COMMON_ARGS, "--parallel", "1"])
        proc.start()
        cut = {}

        def generate(proc=proc, cut=cut):  # (bound now: the thread runs within this iteration)
            try:
                with loopback.Client(base_url=proc.base_url, timeout=120) as c:
                    with c.stream(
                        "POST",
                        "/completion",
                        json={"prompt": "Once upon a time", "n_predict": 7000, "ignore_eos": True, "stream": True},
                    ) as r:
                        for _ in r.iter_lines():
                            pass
                cut["cut"] = False
            except httpx.HTTPError:
                cut["cut"] = True

        try:
            t = threading.Thread(target=generate)
            t.start()
            time.sleep(1.0)
            start = time.time()
            for _ in range(signals):
                proc.proc.send_signal(signal.SIGTERM)
                time.sleep(0.2)
            _fault("sigterm_past_the_drain")
            code = proc.proc.wait(DRAIN_SECONDS + 30)
            took = time.time() - start
            t.join(30)
        finally:
            log = proc.log_tail(lines=200, limit=3000)
            proc.cleanup()
        assert cut.get("cut") is True, log
        assert code == 0 and "Traceback" not in log, log
        if signals == 1:
            assert DRAIN_SECONDS - 1 <= took <= DRAIN_SECONDS + 15, took
        else:
            assert took < DRAIN_SECONDS - 2, took
