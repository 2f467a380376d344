"""Security suites over the wire (issue 10): API-key bypass attempts on every route (preflights, error paths and
path spellings included), key comparison timing, path traversal, the SSRF surface, log redaction canaries,
request-size limits and SSE framing. Stream sessions (and so their per-key isolation) come with issue 12.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time

import pytest

from oracle import loopback
from server.api.auth import PUBLIC_PATHS, key_matches
from tests.reliability import figures
from tests.reliability.routes import ROUTES, path_of

KEY = "sk-canary-7f3a9c1e5b2d4086"
PROMPT_CANARY = "prompt-canary-4b1d"


@pytest.fixture(scope="module")
def secured(twin_q4_1, tmp_path_factory):
    from oracle.processes import COMMON_ARGS, mlxcel_server

    log_file = tmp_path_factory.mktemp("seclog") / "server.log"
    proc = mlxcel_server(
        twin_q4_1.mlx_model, [*COMMON_ARGS, "--api-key", KEY, "--log-file", str(log_file), "--log-verbose", "-np", "2"]
    )
    proc.start()
    try:
        yield proc, log_file
    finally:
        proc.cleanup()


def _spellings(path: str) -> list[str]:
    """The path, and spellings a lax router might take for it."""
    out = [
        path,
        path + "/",
        "/" + path,
        path.upper(),
        path + "?api_key=" + KEY,
        path + "%00",
        path + "/.",
        "/health/.." + path,
        "/health%2f..%2f" + path.lstrip("/"),
    ]
    return out


WRONG = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "bearer " + KEY},
    {"Authorization": KEY[:-1]},
    {"Authorization": "Bearer " + KEY + "x"},
    {"X-Api-Key": KEY[1:]},
    {"Authorization": "Basic " + KEY},
    {"Authorization": "Bearer"},
    {"Cookie": "api_key=" + KEY},
]


def _raw(base_url: str, method: str, target: str, headers: dict, body: bytes) -> tuple[int, bytes]:
    """One request sent byte for byte (an HTTP client would normalize the path), its status and body."""
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(head.encode() + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data.split(b"\r\n\r\n", 1)[-1]


def test_no_route_answers_without_the_key(secured):
    """Every route, every spelling, every wrong credential, a valid body and a broken one: 401 (b10621's), except
    the public paths b10621 leaves open. With the key, no route answers 401."""
    from server.api.webui_settings import WebUI
    from server.cli.webui_build import built_dist

    proc, _ = secured
    tried = bypasses = 0
    frontend = WebUI(dist=built_dist()).paths  # the web UI's assets, public as b10621's frontend_paths
    for method, route, _ in ROUTES:
        for path in _spellings(path_of(route)):
            public = path.split("?")[0] in PUBLIC_PATHS | frontend
            for headers in WRONG:
                for body in (b'{"prompt": "x", "n_predict": 1}', b'{"prompt": '):
                    status, answer = _raw(proc.base_url, method, path, headers, body)
                    tried += 1
                    if not public and status != 401:
                        bypasses += 1
                        print("bypass?", method, path, headers, status, answer[:100])
        status, _ = _raw(
            proc.base_url,
            method,
            path_of(route),
            {"Authorization": "Bearer " + KEY},
            b'{"prompt": "x", "n_predict": 1}',
        )
        tried += 1
        assert status not in (0, 401), (method, route)
    figures.add("security", key_bypass_attempts=tried, key_bypasses=bypasses)
    assert bypasses == 0


def test_a_preflight_runs_no_handler(secured):
    """b10621 answers CORS preflights before the key check: what comes back is the CORS answer, never a route's."""
    proc, _ = secured
    with loopback.Client(base_url=proc.base_url) as c:
        for method, route, _ in ROUTES:
            r = c.request(
                "OPTIONS",
                path_of(route),
                headers={"Origin": "http://evil.example", "Access-Control-Request-Method": method},
            )
            assert r.status_code in (200, 204) and b"content" not in r.content and b"tokens" not in r.content
            figures.add("security", preflights_tried=1)


def test_the_key_comparison_takes_the_same_time_however_much_of_it_matches():
    """key_matches compares every key with compare_digest: a key right but for its last byte takes as long
    as one wrong from the first (medians of interleaved batches within 25%)."""
    keys = (KEY.encode(), b"another-key-of-some-length-0001")
    near, far = KEY[:-1].encode() + b"x", b"x" * len(KEY)
    times = {near: [], far: []}
    for _ in range(30):
        for probe in (near, far):
            start = time.perf_counter()
            for _ in range(2000):
                key_matches(probe, keys)
            times[probe].append(time.perf_counter() - start)
    ratio = statistics.median(times[near]) / statistics.median(times[far])
    figures.add("security", key_timing_ratio=round(ratio, 3))
    assert 0.8 < ratio < 1.25


def test_paths_that_climb_out_never_reach_a_file(secured):
    proc, _ = secured
    host, port = proc.base_url.removeprefix("http://").split(":")
    probes = [
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/index.html/../../etc/passwd",
        "/..%2f..%2fetc%2fpasswd",
        "/slots/..%2f..%2fetc%2fpasswd",
        "/slots/0?action=save&filename=../../x",
        "/slots/0?action=restore&filename=/etc/passwd",
        "//etc/passwd",
        "/static/../../etc/passwd",
    ]
    for target in probes:
        for key in (None, KEY):
            sock = socket.create_connection((host, int(port)))
            auth = b"" if key is None else b"Authorization: Bearer " + key.encode() + b"\r\n"
            sock.sendall(b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"Connection: close\r\n\r\n")
            data = b""
            sock.settimeout(30)
            while chunk := sock.recv(65536):
                data += chunk
            sock.close()
            assert b"root:x:0:0" not in data and data.startswith(b"HTTP/1.1 4"), (target, data[:200])
            figures.add("security", traversal_attempts=1)


def test_the_cors_proxy_fetches_nothing(secured):
    """The SSRF matrix: /cors-proxy (and /tools) answer b10621's 403 whatever the target, and nothing connects
    to it (mlxcel refuses --ui-mcp-proxy and --agent at startup)."""
    proc, _ = secured
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    hits = []

    def accept():
        try:
            while True:
                conn, _ = listener.accept()
                hits.append(conn)
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    own = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    targets = [
        own,
        "http://localhost:%d/" % listener.getsockname()[1],
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:25/",
        "http://0x7f000001/",
        "http://2130706433/",
        own + "redirect?to=http://127.0.0.1/",
    ]
    with loopback.Client(base_url=proc.base_url, headers={"Authorization": "Bearer " + KEY}) as c:
        for target in targets:
            for method in ("GET", "POST"):
                r = c.request(
                    method, "/cors-proxy", params={"url": target}, json={"url": target} if method == "POST" else None
                )
                assert r.status_code == 403, (target, r.status_code)
                figures.add("security", ssrf_attempts=1)
    time.sleep(0.5)
    listener.close()
    assert hits == []


def test_the_key_and_header_values_never_reach_the_log(secured):
    """Log redaction canaries: the configured key (presented rightly and in wrong forms) never appears in the
    log file, even with --log-verbose."""
    proc, log_file = secured
    with loopback.Client(base_url=proc.base_url) as c:
        c.post(
            "/completion",
            headers={"Authorization": "Bearer " + KEY},
            json={"prompt": PROMPT_CANARY + " " + KEY, "n_predict": 2},
        )
        c.post("/completion", headers={"Authorization": "Bearer " + KEY + "-wrong"}, json={"prompt": "x"})
        c.post("/completion", headers={"X-Api-Key": KEY}, content=b'{"prompt": "' + KEY.encode() + b'"')
    time.sleep(0.5)
    text = log_file.read_text(errors="replace") + proc.log_path.read_text(errors="replace")
    figures.add("security", log_canaries=3, log_canaries_leaked=text.count(KEY))
    assert KEY not in text


def test_request_bodies_over_the_payload_limit_get_b10621s_413(secured):
    from server.transport import PAYLOAD_MAX_LENGTH

    proc, _ = secured
    host, port = proc.base_url.removeprefix("http://").split(":")
    for size, chunked in ((PAYLOAD_MAX_LENGTH + 1, False), (PAYLOAD_MAX_LENGTH + (1 << 20), True)):
        sock = socket.create_connection((host, int(port)))
        head = b"POST /completion HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n"
        sock.sendall(
            head
            + (
                b"Transfer-Encoding: chunked\r\n\r\n"
                if chunked
                else b"Content-Length: " + str(size).encode() + b"\r\n\r\n"
            )
        )
        block = b" " * (1 << 20)
        sent = 0
        sock.settimeout(60)
        try:
            while sent < size:
                n = min(len(block), size - sent)
                sock.sendall(b"%x\r\n" % n + block[:n] + b"\r\n" if chunked else block[:n])
                sent += n
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server may close as soon as it has answered
        data = sock.recv(65536)
        sock.close()
        assert data.startswith(b"HTTP/1.1 413"), data[:200]
        figures.add("security", oversize_bodies=1)
    with loopback.Client(base_url=proc.base_url, headers={"Authorization": "Bearer " + KEY}) as c:
        r = c.post("/completion", json={"prompt": "word " * 2_000_000, "n_predict": 1}, timeout=120)  # ~10 MB
        assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"
        assert c.post("/completion", json={"prompt": "Hi", "n_predict": 2}).status_code == 200


def test_sse_frames_cannot_be_forged_from_request_text(secured):
    """Text from the request (the prompt echoed in the last frame, stop words) is JSON-escaped inside its data
    line: every event is one data line that parses, and no line is the forged one."""
    proc, _ = secured
    forged = 'data: {"content":"forged","stop":true}'
    prompt = f"Say:\n\n{forged}\n\nevent: error\r\ndata: x\n\n"
    with loopback.Client(base_url=proc.base_url, headers={"Authorization": "Bearer " + KEY}, timeout=60) as c:
        for path, body in (
            ("/completion", {"prompt": prompt, "n_predict": 4, "stream": True, "stop": [forged]}),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "stream": True},
            ),
        ):
            with c.stream("POST", path, json=body) as r:
                raw = b"".join(r.iter_bytes())
            events = [e for e in raw.decode().split("\n\n") if e.strip()]
            for event in events:
                lines = event.split("\n")
                assert len(lines) == 1 and lines[0].startswith("data: "), event[:200]
                assert lines[0] != forged
                if lines[0] != "data: [DONE]":
                    json.loads(lines[0][6:])
            figures.add("security", sse_frames_checked=len(events))


FILE_OPTIONS = [
    "--lookup-cache-static",
    "--lookup-cache-dynamic",
    "--grammar-file",
    "--json-schema-file",
    "--mmproj",
    "--lora",
    "--control-vector",
    "--hf-file",
    "--path",
    "--ui-config-file",
    "--mcp-servers-config",
    "--api-key-file",
    "--ssl-key-file",
    "--ssl-cert-file",
    "--slot-save-path",
    "--media-path",
    "--models-dir",
    "--models-preset",
    "--chat-template-file",
    "--log-prompts-dir",
    "--spec-draft-model",
]


# two starts of the server each (~2.7 s): a CI landing takes a third of them in turn (the module rotates:
# oracle/rotation.py), every option once in three landings; a developer's run takes them all
@pytest.mark.parametrize("option", FILE_OPTIONS)
def test_a_file_option_pointed_outside_never_prints_the_file(twin_q4_1, option):
    """Every file-taking option given /etc/passwd, then a climbing relative path: the server reads what it reads
    of it (every file option is read before the socket binds) and stops, at its option check or at the port
    taken here, with one line; nothing of the file reaches its output."""
    import subprocess
    import sys

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        for target in ("/etc/passwd", "../../../../../../../../etc/passwd"):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "server",
                    "-m",
                    str(twin_q4_1.mlx_model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(taken.getsockname()[1]),
                    option,
                    target,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=120,
            ).stdout
            figures.add("security", file_option_probes=1)
            assert "root:x:0:0" not in out and "Traceback" not in out, out[-2000:]
    finally:
        taken.close()
