"""GET and POST /cors-proxy with --ui-mcp-proxy on both servers (issue 30 point 6), against a target on loopback
that echoes what reached it: what the proxy forwards (the prefixed headers only, the body, redirects followed)
and what it answers (the target's status, headers and body; b10621's words for a target it refuses or cannot
reach) compared field by field. The echo leaves out User-Agent, which names each proxy's HTTP client
(cpp-httplib, httpx): the one header a target sees differ. Without the flag both answer 403
(corpus get-cors-proxy.disabled-403-f32)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import Pair

pytestmark = pytest.mark.reference

PROXY_HEADER = "x-llama-server-proxy-header-"


class Target(BaseHTTPRequestHandler):
    """/echo answers what it received; /redirect sends to /echo; /empty answers 204; /teapot a 418 with
    headers a proxy must not repeat."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/echo?from=redirect")
            self.send_header("Content-Length", "0")
            # (said outright: cpp-httplib follows on a fresh connection only when told this one ends)
            self.send_header("Connection", "close")
            self.end_headers()
            return
        if self.path.startswith("/empty"):
            self.send_response(204)
            self.end_headers()
            return
        seen = {k.lower(): v for k, v in self.headers.items() if k.lower() not in ("user-agent", "content-length")}
        out = json.dumps(
            {"method": self.command, "path": self.path, "headers": seen, "body": body.decode()}, sort_keys=True
        ).encode()
        self.send_response(418 if self.path.startswith("/teapot") else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Target", "yes")
        self.send_header("Access-Control-Allow-Origin", "https://elsewhere.example")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def target():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def pair(reference_binary):
    with Pair("f32", ("--ui-mcp-proxy",), reference_binary) as p:
        yield p


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seen(response: httpx.Response) -> dict:
    """What a client of the proxy sees: the status, the body, and the headers a proxy decides on."""
    headers = {k: response.headers.get(k) for k in ("content-type", "x-target", "location")}
    cors = response.headers.get("access-control-allow-origin")
    return {
        "status": response.status_code,
        "body": response.text,
        "headers": headers,
        "target_cors_repeated": cors == "https://elsewhere.example",
    }


CASES = [  # (name, method, url (target-relative where it starts with /), proxy headers, body)
    ("get-echo", "GET", "/echo?x=1&y=two", {}, None),
    (
        "headers",
        "GET",
        "/echo",
        {
            f"{PROXY_HEADER}Authorization": "Bearer mcp-token",
            f"{PROXY_HEADER}Mcp-Session-Id": "abc",
            f"{PROXY_HEADER}Accept-Encoding": "gzip",
            f"{PROXY_HEADER}": "no name",
            "X-Not-Forwarded": "1",
        },
        None,
    ),
    ("post-json", "POST", "/echo", {f"{PROXY_HEADER}Content-Type": "application/json"}, '{"jsonrpc":"2.0","id":1}'),
    ("redirect", "GET", "/redirect", {}, None),
    ("no-content", "POST", "/empty", {}, "{}"),
    ("target-status", "GET", "/teapot", {}, None),
    ("no-url", "GET", "", {}, None),
    ("no-scheme", "GET", "127.0.0.1/echo", {}, None),
    ("bad-scheme", "GET", "ftp://127.0.0.1/echo", {}, None),
    ("no-host", "GET", "http:///echo", {}, None),
    ("password", "GET", "http://user:pw@127.0.0.1/echo", {}, None),
    ("bad-port", "GET", "http://127.0.0.1:port/echo", {}, None),
    ("unreachable", "GET", "closed", {}, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_proxy_forwards_and_answers_as_b10621s(pair, target, case):
    name, method, url, headers, body = case
    if url == "closed":
        url = f"http://127.0.0.1:{_closed_port()}/echo"
    elif url.startswith("/"):
        url = target + url
    params = {"url": url} if url else {}

    def ask(base: str) -> dict:
        r = loopback.request(method, base + "/cors-proxy", params=params, headers=headers, content=body, timeout=60)
        return _seen(r)

    theirs, ours = ask(pair.reference.base_url), ask(pair.mlxcel.base_url)
    write_record(
        {
            "case": f"cors-proxy-{name}-f32",
            "entries": ["--ui-mcp-proxy", f"{method} /cors-proxy"],
            "twin": "f32",
            "request": {"method": method, "path": f"/cors-proxy?url={url}", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": ours == theirs,
            "bytes_identical": False,
            "normalizations_fired": ["user-agent"] if theirs["status"] < 300 else [],
            "divergences": [] if ours == theirs else [{"path": "$", "kind": "value"}],
            "reproduce": f"pytest conformance/test_cors_proxy.py -k {name}",
        }
    )
    assert ours == theirs
    if name == "headers":  # what the target saw: the prefixed headers, their prefix dropped, and no others
        seen = json.loads(ours["body"])["headers"]
        assert seen["authorization"] == "Bearer mcp-token" and seen["mcp-session-id"] == "abc"
        assert "x-not-forwarded" not in seen and "accept-encoding" not in seen


def test_props_says_the_proxy_is_on(pair):
    mine = loopback.get(pair.mlxcel.base_url + "/props").json()
    theirs = loopback.get(pair.reference.base_url + "/props").json()
    assert mine["cors_proxy_enabled"] is theirs["cors_proxy_enabled"] is True
