"""The HTTP server over real sockets: TCP (port 0), a Unix socket, TLS, --timeout, --reuse-port, --api-prefix.

Each server is mlxcel's app behind server.transport.HttpServer in a thread, answered by a real client
(httpx over TCP, over AF_UNIX, over TLS with a self-signed certificate made by openssl). No model is loaded:
the engine stands in as ready, so /health answers and the layers around it are what is tested. The b10621
behaviours pinned here were observed on the reference binary (noted per test).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import types

import httpx
import pytest

from conftest import require
from oracle import loopback
from server.api.app import create_app
from server.api.auth import AuthConfig
from server.api.state import ServerSettings
from server.transport import (
    HttpServer,
    HttpTimeouts,
    ServeConfig,
    TransportError,
    WriteTimeout,
    bind,
    listening_address,
)


def _app(**settings):
    event = threading.Event()
    event.set()
    state = types.SimpleNamespace(
        engine=types.SimpleNamespace(ready=event, load_error=None), settings=ServerSettings(**settings)
    )
    return create_app(state)


@contextlib.contextmanager
def running(config: ServeConfig, app=None, **settings):
    server = HttpServer(app or _app(**settings), config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.stop()
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    require(shutil.which("openssl") is not None, "openssl is needed to make a self-signed certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return str(d / "key.pem"), str(d / "cert.pem")


@pytest.fixture
def short_dir():
    # AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be longer
    import tempfile

    d = tempfile.mkdtemp(prefix="mlxt", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --- TCP ------------------------------------------------------------------------------------------------------


def test_port_zero_binds_an_ephemeral_port_and_logs_it(caplog):
    caplog.set_level(logging.INFO, logger="mlxcel.http")
    with running(ServeConfig(port=0)) as server:
        assert server.port > 0
        r = loopback.get(f"http://127.0.0.1:{server.port}/health")
        assert r.status_code == 200 and r.content == b'{"status":"ok"}'
        # cpp-httplib's default header, and no Date (b10621 sends Server: llama.cpp and nothing else of its own)
        assert r.headers["server"] == "llama.cpp" and "date" not in r.headers
        assert r.headers["access-control-allow-origin"] == ""  # b10621 sends the empty echo too
    # b10621: "listening on http://127.0.0.1:43311" with the port the kernel chose
    assert f"listening on http://127.0.0.1:{server.port}" in caplog.messages


def test_listening_address_is_b10621s():
    assert listening_address(ServeConfig(host="::1"), 38381) == "http://[::1]:38381"
    assert listening_address(ServeConfig(host="localhost"), 1) == "http://localhost:1"
    assert listening_address(ServeConfig(ssl_key_file="k", ssl_cert_file="c"), 8080) == "https://127.0.0.1:8080"
    assert listening_address(ServeConfig(host="/tmp/x.sock", port=0), 0) == "unix:///tmp/x.sock"


def test_default_port_notice(caplog):
    from server.transport import announce_listening

    caplog.set_level(logging.INFO, logger="mlxcel.http")
    announce_listening("http://127.0.0.1:8080")
    # b10621's two warnings after "listening on ...:8080"
    assert caplog.messages == [
        "listening on http://127.0.0.1:8080",
        "NOTICE: server default port will be changed to :9931 in a future release",
        "        ref: https://github.com/ggml-org/llama.cpp/pull/26508",
    ]


def test_port_in_use_is_refused_with_b10621s_sentence():
    with running(ServeConfig(port=0)) as server, pytest.raises(TransportError) as err:
        bind(ServeConfig(port=server.port))
    assert str(err.value).startswith(f"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {server.port}")
    assert "--reuse-port" in str(err.value)


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT on this platform")
def test_reuse_port_lets_two_servers_share_a_port():
    first = bind(ServeConfig(port=0, reuse_port=True))
    try:
        assert first.sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        second = bind(ServeConfig(port=first.port, reuse_port=True))
        assert second.port == first.port
        second.close()
    finally:
        first.close()
    plain = bind(ServeConfig(port=0))
    try:
        assert plain.sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 0
    finally:
        plain.close()


def test_401_over_the_wire_is_b10621s_response_byte_for_byte():
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).parent / "data" / "b10621_cors_auth.json").read_text())["unauthorized"]
    expected = (
        b"HTTP/1.1 401 Unauthorized\r\n"
        + b"".join(f"{k}: {v}\r\n".encode() for k, v in rec["headers"])
        + b"\r\n"
        + rec["body"].encode()
    )
    with running(ServeConfig(port=0), auth=AuthConfig(("k1",))) as server:
        out, _ = _raw(
            server.port, b"GET /props HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: http://a.example\r\n\r\n"
        )
    assert out == expected  # status line, header order and spelling, body: as recorded from b10621


def test_api_prefix_over_the_wire():
    # b10621 with --api-prefix /pfx: routes only under the prefix
    with running(ServeConfig(port=0), api_prefix="/pfx", auth=AuthConfig(("k1",))) as server:
        base = f"http://127.0.0.1:{server.port}"
        assert loopback.get(base + "/pfx/health", headers={"Authorization": "Bearer k1"}).status_code == 200
        assert loopback.get(base + "/pfx/health").status_code == 401
        assert loopback.get(base + "/health").status_code == 404


# --- Unix socket ----------------------------------------------------------------------------------------------


def test_unix_socket_when_the_host_ends_in_sock(caplog, short_dir):
    caplog.set_level(logging.INFO, logger="mlxcel.http")
    path = os.path.join(short_dir, "mlxcel.sock")
    with running(ServeConfig(host=path, port=0)) as server:
        assert server.address == f"unix://{path}"
        mode = os.stat(path).st_mode & 0o777
        assert mode & 0o002 == 0  # umask's mode, as bind(2) leaves it (uvicorn's own uds would chmod 0666)
        with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as c:
            r = c.get("http://localhost/health")
        assert r.status_code == 200 and r.content == b'{"status":"ok"}'
        # an existing file at the path is refused, as b10621's bind fails on it
        with pytest.raises(TransportError, match="already exists"):
            bind(ServeConfig(host=path))
    assert f"listening on unix://{path}" in caplog.messages
    assert not os.path.exists(path)  # the socket file this process made is removed on stop


def test_unix_socket_path_too_long_is_refused():
    with pytest.raises(TransportError, match="at most 107 bytes"):
        bind(ServeConfig(host="/tmp/" + "x" * 120 + ".sock"))


# --- TLS ------------------------------------------------------------------------------------------------------


def test_tls_over_tcp(cert):
    key, crt = cert
    with running(ServeConfig(port=0, ssl_key_file=key, ssl_cert_file=crt)) as server:
        assert server.address == f"https://127.0.0.1:{server.port}"
        ctx = ssl.create_default_context(cafile=crt)
        r = httpx.get(f"https://127.0.0.1:{server.port}/health", verify=ctx)
        assert r.status_code == 200 and r.content == b'{"status":"ok"}'
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on a TLS socket
            loopback.get(f"http://127.0.0.1:{server.port}/health", timeout=5)


def test_tls_over_a_unix_socket(cert, short_dir):
    key, crt = cert
    path = os.path.join(short_dir, "tls.sock")
    with running(ServeConfig(host=path, ssl_key_file=key, ssl_cert_file=crt)):
        ctx = ssl.create_default_context(cafile=crt)
        with httpx.Client(transport=httpx.HTTPTransport(uds=path, verify=ctx)) as c:
            assert c.get("https://localhost/health").status_code == 200


def test_tls_files_are_checked_before_binding(cert, tmp_path):
    key, crt = cert
    cases = [
        (ServeConfig(port=0, ssl_key_file=key), "--ssl-key-file was given without --ssl-cert-file"),
        (ServeConfig(port=0, ssl_cert_file=crt), "--ssl-cert-file was given without --ssl-key-file"),
        (
            ServeConfig(port=0, ssl_key_file=str(tmp_path / "no.pem"), ssl_cert_file=crt),
            f"--ssl-key-file {tmp_path / 'no.pem'}: no such file",
        ),
        (ServeConfig(port=0, ssl_key_file=key, ssl_cert_file=str(tmp_path)), "is a directory"),
        (ServeConfig(port=0, ssl_key_file=crt, ssl_cert_file=crt), "not a PEM certificate and its matching"),
    ]
    for config, sentence in cases:
        with pytest.raises(TransportError) as err:
            HttpServer(_app(), config)
        assert sentence in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_tls_file_is_refused(cert, tmp_path):
    key, crt = cert
    locked = tmp_path / "key.pem"
    shutil.copy(key, locked)
    locked.chmod(0)
    with pytest.raises(TransportError, match="cannot be read"):
        HttpServer(_app(), ServeConfig(port=0, ssl_key_file=str(locked), ssl_cert_file=crt))


# --- --timeout ------------------------------------------------------------------------------------------------


def _raw(port: int, data: bytes, wait: float = 10) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        s.sendall(data)
        start = time.monotonic()
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out, time.monotonic() - start


def test_stalled_request_body_gets_b10621s_400_after_the_timeout():
    # b10621 --timeout 2, a body that stops short: "HTTP/1.1 400 Bad Request", Connection: close, empty body
    # after 2 s (plus its Access-Control-Allow-Origin, which mlxcel's transport layer does not add here)
    with running(ServeConfig(port=0, timeout=1)) as server:
        out, waited = _raw(
            server.port,
            b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"content":',
        )
    head = out.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 400 Bad Request"
    assert {h.lower() for h in head[1:]} >= {b"connection: close", b"content-length: 0"}
    assert out.endswith(b"\r\n\r\n")
    assert 0.9 <= waited < 5


async def _echo(scope, receive, send):
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def test_a_body_that_arrives_in_time_is_served():
    with (
        running(ServeConfig(port=0, timeout=2), app=_echo) as server,
        socket.create_connection(("127.0.0.1", server.port)) as s,
    ):
        s.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 4\r\n\r\nab")
        time.sleep(0.5)  # a pause shorter than --timeout between two reads
        s.sendall(b"cd")
        s.settimeout(10)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"\r\n\r\nabcd")


def test_timeout_zero_serves_only_what_already_arrived():
    # b10621 --timeout 0: a request sent in one piece is served, a body split by a pause gets the 400
    with running(ServeConfig(port=0, timeout=0), app=_echo) as server:
        whole, _ = _raw(
            server.port, b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 4\r\n\r\nabcd"
        )
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 4\r\n\r\nab")
            time.sleep(0.3)
            with contextlib.suppress(OSError):
                s.sendall(b"cd")
            s.settimeout(5)
            split = s.recv(1000)
    assert whole.startswith(b"HTTP/1.1 200") and whole.endswith(b"abcd")
    assert split.startswith(b"HTTP/1.1 400 Bad Request")


async def test_write_timeout_gives_up_on_a_client_that_stops_reading():
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await send({"type": "http.response.body", "body": b"y", "more_body": True})

    async def stuck_send(message):
        sent.append(message["type"])
        if message.get("body") == b"x":
            await asyncio.sleep(3600)  # the transport's buffer is full: the client reads nothing

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    start = time.monotonic()
    await HttpTimeouts(app, 0.3)({"type": "http"}, receive, stuck_send)  # returns: uvicorn then closes
    assert 0.25 <= time.monotonic() - start < 3
    assert sent == ["http.response.start", "http.response.body"]


async def test_write_timeout_error_reaches_the_app():
    seen = []

    async def app(scope, receive, send):
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except WriteTimeout:
            seen.append("timeout")
            raise

    async def stuck_send(message):
        await asyncio.sleep(3600)

    await HttpTimeouts(app, 0)({"type": "http"}, None, stuck_send)
    assert seen == ["timeout"]


def test_threads_http_is_accepted_and_inert():
    # b10621 sizes a pool that grows by up to 1024 threads on demand: nothing observable depends on it
    assert ServeConfig.from_args(types.SimpleNamespace(threads_http=3)).threads_http == 3
    defaults = ServeConfig.from_args(types.SimpleNamespace())
    assert (defaults.host, defaults.port, defaults.timeout, defaults.reuse_port) == ("127.0.0.1", 8080, 3600, False)
