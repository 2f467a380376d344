"""The listening socket and the HTTP server around the app, as b10621's server_http_context binds and serves.

Options and what each one does here (b10621: tools/server/server-http.cpp, vendor/cpp-httplib):

- ``--host`` / ``--port``: a TCP socket bound the way cpp-httplib binds one: getaddrinfo(host, port,
  AF_UNSPEC, AI_PASSIVE), the first address that binds wins, SO_REUSEADDR always, IPV6_V6ONLY off, a backlog
  of 128. ``--port 0`` binds an ephemeral port, and the port chosen is the one logged and reported.
- a host ending in ``.sock``: an AF_UNIX stream socket at that path (the port is ignored). An existing file
  at the path is refused as upstream refuses it (bind fails); the socket file keeps the process umask's mode
  (uvicorn's own ``uds`` would chmod it 0666). mlxcel removes the socket file it created when it stops,
  where b10621 leaves it behind.
- ``--ssl-key-file`` / ``--ssl-cert-file``: TLS on that socket (TCP or Unix). Both files are loaded before
  anything binds; a missing, unreadable or non-PEM file stops startup with a sentence naming the option.
  Only one of the two given is refused too, where b10621 silently serves plain HTTP.
- ``--timeout N`` (default 3600): cpp-httplib's read and write timeout, applied per read and per write. Here
  each wait for request-body bytes and each wait for the client to take response bytes is bounded by N
  seconds (0: only what is already there, as select() with a zero timeout). A request body that stalls
  answers b10621's empty 400 with ``Connection: close`` (without the Access-Control-Allow-Origin that
  b10621's pre-routing handler had already put on it); a client that stops reading has its connection
  closed. Not covered, because uvicorn gives the app no hook there: the wait for the request line and
  headers (b10621 answers an empty 400 after N seconds; uvicorn waits). The idle wait between requests on a
  kept-alive connection is cpp-httplib's fixed 5 seconds in both (uvicorn's ``timeout_keep_alive``);
  cpp-httplib's 100-requests-per-connection cap has no uvicorn equivalent.
- ``--threads-http N``: accepted and inert. b10621 sizes cpp-httplib's pool of persistent worker threads
  (max(n_parallel + 4, cores - 1) when N < 1) but lets it grow by up to 1024 more threads on demand, so the
  value does not bound concurrency, it only tunes thread reuse. uvicorn serves every connection on one
  asyncio loop and has no per-request thread pool to size; nothing observable depends on the value.
- ``--reuse-port``: SO_REUSEPORT on the listening socket (set on the Unix socket too, as upstream does,
  where it has no effect); a platform without it logs b10621's warning.
- ``--api-prefix`` is routing, not transport: ServerSettings.api_prefix (server/api/prefix.py).

A request body over cpp-httplib's 100 MB payload limit (CPPHTTPLIB_PAYLOAD_MAX_LENGTH) is read and dropped,
then answered as b10621 answers it: an empty 413 with ``Connection: close``; the app never sees it.

Responses carry ``Server: llama.cpp`` and no Date header, as cpp-httplib's do.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import os
import socket
import ssl
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mlxcel.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_TIMEOUT = 3600  # --timeout: b10621's timeout_read / timeout_write
KEEPALIVE_TIMEOUT = 5  # CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND
LISTEN_BACKLOG = 128  # CPPHTTPLIB_LISTEN_BACKLOG
# SIGTERM or SIGINT: requests in flight get this long to finish (b10621 cuts them at once), then the process
# exits 0 as b10621's does; a second signal exits at once
DRAIN_SECONDS = 10.0
SERVER_HEADER = (b"Server", b"llama.cpp")  # srv->set_default_headers


# called once, at the first SIGTERM / SIGINT (before the drain): what would hold a request in flight lets go
# (an MCP server's call waiting on its reply: server/tools/mcp.py)
AT_SHUTDOWN: list[Callable[[], None]] = []


class TransportError(RuntimeError):
    """The server cannot listen as configured: one sentence for the operator, startup stops."""


@dataclass(frozen=True)
class ServeConfig:
    """--host, --port, --timeout, --threads-http, --reuse-port, --ssl-key-file, --ssl-cert-file."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    timeout: int = DEFAULT_TIMEOUT
    threads_http: int = -1  # inert (see the module docstring)
    reuse_port: bool = False
    ssl_key_file: str | None = None
    ssl_cert_file: str | None = None

    @property
    def is_unix(self) -> bool:
        return self.host.endswith(".sock")

    @property
    def tls(self) -> bool:
        return bool(self.ssl_key_file or self.ssl_cert_file)

    @classmethod
    def from_args(cls, args: Any) -> ServeConfig:
        """From the parser's attributes of the same names (missing or None ones keep b10621's defaults)."""
        values = {}
        for name in ("host", "port", "timeout", "threads_http", "reuse_port", "ssl_key_file", "ssl_cert_file"):
            value = getattr(args, name, None)
            if value is not None:
                values[name] = value
        return cls(**values)


def format_host(host: str) -> str:
    """common_http_format_host: an IPv6 literal is bracketed."""
    return f"[{host}]" if ":" in host else host


def listening_address(config: ServeConfig, port: int) -> str:
    """b10621's listening_address: unix://PATH, or http(s)://HOST:PORT with the port actually bound."""
    if config.is_unix:
        return f"unix://{config.host}"
    return f"{'https' if config.tls else 'http'}://{format_host(config.host)}:{port}"


def load_tls(config: ServeConfig) -> ssl.SSLContext | None:
    """The server-side TLS context, or None for plain HTTP; every problem is a TransportError sentence."""
    if not config.tls:
        return None
    if not config.ssl_key_file or not config.ssl_cert_file:
        given, missing = (
            ("--ssl-key-file", "--ssl-cert-file") if config.ssl_key_file else ("--ssl-cert-file", "--ssl-key-file")
        )
        raise TransportError(
            f"{given} was given without {missing}: TLS needs both a PEM certificate and its "
            f"PEM private key (b10621 would silently serve plain HTTP); give both, or neither"
        )
    for option, path in (("--ssl-cert-file", config.ssl_cert_file), ("--ssl-key-file", config.ssl_key_file)):
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            raise TransportError(f"{option} {path}: no such file") from None
        except IsADirectoryError:
            raise TransportError(f"{option} {path}: is a directory, not a PEM file") from None
        except OSError as exc:
            raise TransportError(f"{option} {path}: cannot be read ({exc.strerror})") from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(config.ssl_cert_file, config.ssl_key_file)
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(
            f"--ssl-cert-file {config.ssl_cert_file} / --ssl-key-file {config.ssl_key_file}: "
            f"not a PEM certificate and its matching private key ({exc})"
        ) from None
    return ctx


def _socket_options(sock: socket.socket, reuse_port: bool) -> None:
    """b10621's set_socket_options callback."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        else:
            log.warning("SO_REUSEPORT is not supported")


@dataclass
class Listener:
    sock: socket.socket
    port: int  # the TCP port bound (the ephemeral one for --port 0); the configured one for a Unix socket
    address: str  # listening_address
    unix_path: str | None = None
    unix_inode: tuple[int, int] | None = None

    def close(self) -> None:
        self.sock.close()
        if self.unix_path is None:
            return
        try:  # only the socket file this process created, still in place
            st = os.lstat(self.unix_path)
            if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self.unix_inode:
                os.unlink(self.unix_path)
        except OSError:
            pass


def bind(config: ServeConfig) -> Listener:  # noqa: C901
    """The listening socket, bound and listening before any weight is read (as b10621 starts HTTP first)."""

    def refuse(reason: str) -> TransportError:
        return TransportError(
            f"couldn't bind HTTP server socket, hostname: {config.host}, port: {config.port} ({reason})"
        )

    if config.is_unix:
        path = config.host
        if len(os.fsencode(path)) > 107:
            raise refuse(f"a Unix socket path holds at most 107 bytes, {path!r} has {len(os.fsencode(path))}")
        if os.path.lexists(path):
            raise refuse(f"{path} already exists; remove the stale socket or choose another path")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _socket_options(sock, config.reuse_port)
            sock.bind(path)
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            sock.close()
            raise refuse(exc.strerror or str(exc)) from None
        st = os.lstat(path)
        return Listener(sock, config.port, listening_address(config, config.port), path, (st.st_dev, st.st_ino))

    if not 0 <= config.port <= 65535:
        raise refuse("the port must be 0-65535")
    try:
        infos = socket.getaddrinfo(
            config.host or None, config.port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise refuse(f"the host does not resolve: {exc}") from None
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            last = exc
            continue
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            _socket_options(sock, config.reuse_port)
            sock.bind(addr)
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        port = sock.getsockname()[1]
        return Listener(sock, port, listening_address(config, port))
    reason = last.strerror if last is not None and last.strerror else str(last or "no address to bind")
    if last is not None and last.errno == errno.EADDRINUSE:
        reason += "; another server holds the port (--reuse-port lets several share it)"
    raise refuse(reason)


# --- --timeout ----------------------------------------------------------------------------------------------


class WriteTimeout(TimeoutError):
    """The client took no response bytes for --timeout seconds."""


_READ_TIMEOUT_HEAD = [(b"Connection", b"close"), (b"Content-Length", b"0")]  # cpp-httplib's 400, empty
PAYLOAD_MAX_LENGTH = 100 * 1024 * 1024  # CPPHTTPLIB_PAYLOAD_MAX_LENGTH
# cpp-httplib's 413: b10621's pre-routing handler has already set the (empty) Access-Control-Allow-Origin
_TOO_LARGE_HEAD = [(b"Access-Control-Allow-Origin", b""), (b"Connection", b"close"), (b"Content-Length", b"0")]


class HttpTimeouts:
    """cpp-httplib's read/write timeouts, per read and per write, on what ASGI exposes (see the docstring)."""

    def __init__(self, app, timeout: float) -> None:
        self.app = app
        self.timeout = max(float(timeout), 0.0)

    async def __call__(self, scope, receive, send) -> None:  # noqa: C901
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout = self.timeout
        body_done = read_expired = write_expired = started = answered = False
        received = 0
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > PAYLOAD_MAX_LENGTH

        async def refuse_too_large(message) -> dict:
            """Read the rest of the body and drop it, then answer cpp-httplib's 413 (the app is told the client
            is gone)."""
            nonlocal body_done, answered
            while message["type"] == "http.request" and message.get("more_body", False):
                async with asyncio.timeout(timeout or None):
                    message = await receive()
            body_done = answered = True
            log.warning("request body over %d bytes: answering 413", PAYLOAD_MAX_LENGTH)
            await send({"type": "http.response.start", "status": 413, "headers": _TOO_LARGE_HEAD})
            await send({"type": "http.response.body", "body": b""})
            return {"type": "http.disconnect"}

        async def bounded_receive():
            nonlocal body_done, read_expired, answered, received
            if read_expired or answered:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()  # after the body: waiting for a disconnect is not a read
            try:
                async with asyncio.timeout(timeout):
                    message = await receive()
            except TimeoutError:
                read_expired = True
                log.warning("request body not received within --timeout %gs: answering 400", timeout)
                if not started:
                    answered = True
                    await send({"type": "http.response.start", "status": 400, "headers": _READ_TIMEOUT_HEAD})
                    await send({"type": "http.response.body", "body": b""})
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if too_large or received > PAYLOAD_MAX_LENGTH:
                    try:
                        return await refuse_too_large(message)
                    except TimeoutError:
                        read_expired = True
                        return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def bounded_send(message) -> None:
            nonlocal write_expired, started
            if answered:
                return  # the read-timeout 400 went out; whatever the app answers after it is dropped
            if write_expired:
                raise WriteTimeout("--timeout expired on an earlier write")
            try:
                async with asyncio.timeout(timeout):
                    await send(message)
            except TimeoutError:
                write_expired = True
                log.warning("client took no response bytes within --timeout %gs: closing the connection", timeout)
                raise WriteTimeout(f"no response bytes taken within {timeout:g}s") from None
            if message["type"] == "http.response.start":
                started = True

        try:
            await self.app(scope, bounded_receive, bounded_send)
        except Exception:
            if read_expired or write_expired:
                return  # the app saw the timeout; uvicorn closes a connection whose response is incomplete
            raise


class CancelOnDisconnect:
    """A client that goes away before its answer is complete gets its handler cancelled (whose finally blocks
    cancel its engine requests: a queued one never takes a slot, a running one frees its slot), as b10621 stops
    a task whose connection is closed. Starlette notices a disconnect only while it streams; a plain JSON answer
    would otherwise be computed to the end for nobody. After the body, this wrapper alone reads the connection;
    the app's own reads then wait for the disconnect it sees."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:  # noqa: C901
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done, gone, finished = asyncio.Event(), asyncio.Event(), False

        async def app_receive():
            if body_done.is_set():
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_done.set()
            return message

        async def app_send(message) -> None:
            nonlocal finished
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True

        task = asyncio.ensure_future(self.app(scope, app_receive, app_send))

        async def watch() -> None:
            await body_done.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not finished:
                task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await task
        except asyncio.CancelledError:
            if not gone.is_set() or finished:
                raise  # cancelled from outside (shutdown), not by the client going away
        finally:
            watcher.cancel()


# --- serving ------------------------------------------------------------------------------------------------


class ServerHeader:
    """cpp-httplib's default header, first and spelled as it spells it (uvicorn's own would be lowercase)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_server(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [SERVER_HEADER, *message.get("headers", ())]}
            await send(message)

        await self.app(scope, receive, send_with_server)


class CutAtShutdown:
    """A request still running when the drain after SIGTERM ends is cancelled by uvicorn: one log line for it,
    not the cancellation's traceback (the engine frees its slot as for any client gone)."""

    def __init__(self, app, shutting_down: Callable[[], bool]) -> None:
        self.app, self.shutting_down = app, shutting_down

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if scope["type"] != "http" or not self.shutting_down():
                raise
            log.info("%s %s: cut at shutdown", scope.get("method", ""), scope.get("path", ""))


def announce_listening(address: str) -> None:
    """b10621's log lines once the server listens (server.cpp, after the model loaded)."""
    log.info("listening on %s", address)
    if address.endswith(":8080"):
        log.warning("NOTICE: server default port will be changed to :9931 in a future release")
        log.warning("        ref: https://github.com/ggml-org/llama.cpp/pull/26508")


class HttpServer:
    """Binds at construction (TLS files loaded first), serves with run(), stops with stop()."""

    def __init__(
        self,
        app,
        config: ServeConfig,
        *,
        log_level: str | None = "warning",
        announce: Callable[[str], None] | None = announce_listening,
        uvicorn_options: dict[str, Any] | None = None,
    ) -> None:
        # deferred: uvicorn (~90 ms) once a server binds; ServeConfig.from_args does without it
        import uvicorn

        self.config = config
        tls = load_tls(config)
        self.listener = bind(config)
        self.address = self.listener.address
        self.port = self.listener.port
        kwargs: dict[str, Any] = {}
        if tls is not None:
            if "ssl_context_factory" in inspect.signature(uvicorn.Config).parameters:
                kwargs["ssl_context_factory"] = lambda _config, _default: tls
            else:  # older uvicorn builds its own context from the same (already checked) files
                kwargs.update(ssl_keyfile=config.ssl_key_file, ssl_certfile=config.ssl_cert_file)
        # uvicorn_options (e.g. server.logs.uvicorn_log_settings()) override the logging defaults
        options = {"log_level": log_level, "access_log": False, **(uvicorn_options or {})}
        wrapped = CutAtShutdown(
            ServerHeader(HttpTimeouts(CancelOnDisconnect(app), config.timeout)), lambda: self._server.should_exit
        )
        uv_config = uvicorn.Config(
            wrapped,
            timeout_keep_alive=KEEPALIVE_TIMEOUT,
            backlog=LISTEN_BACKLOG,
            timeout_graceful_shutdown=DRAIN_SECONDS,
            lifespan="off",  # (no startup hooks)
            server_header=False,
            date_header=False,
            **options,
            **kwargs,
        )
        address = self.address

        class _Server(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:
                # uvicorn re-raises the signal once it has shut down (the process then dies of it): here the
                # drain ends in a plain exit, status 0; a second signal forces the exit
                if self.should_exit:
                    self.force_exit = True
                else:
                    for hook in AT_SHUTDOWN:
                        hook()
                self.should_exit = True

            async def startup(self, sockets=None) -> None:
                await super().startup(sockets=sockets)
                if self.started and announce is not None:
                    announce(address)

        self._server = _Server(uv_config)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def run(self) -> None:
        """Blocks until stop() or a signal; the socket (and a Unix socket's file) is released on return."""
        try:
            self._server.run(sockets=[self.listener.sock])
        finally:
            self.listener.close()

    def stop(self) -> None:
        self._server.should_exit = True


def serve(app, config: ServeConfig, **kwargs) -> None:
    """Listen as configured and serve the app until stopped; TransportError before anything listens."""
    HttpServer(app, config, **kwargs).run()
