"""MCP servers as tools (--mcp-servers-config FILE, --mcp-servers-json JSON; server-mcp.cpp): each configured server
spawned over stdio (newline-delimited JSON-RPC 2.0, protocol 2024-11-05), its tools discovered once at startup
(ten seconds a server) and served through /tools as "<server>_<tool>"; a call opens (or reuses) that server's
session, and a server that will not start rests five seconds before the next try. Results as b10621 normalizes
them: the text parts joined with newlines, isError and JSON-RPC errors as {"error": ...}."""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("mlxcel")

PROTOCOL_VERSION = "2024-11-05"
WARMUP_TIMEOUT_S = 10  # MCP_WARMUP_TIMEOUT_SECONDS: one server's tool discovery at startup
COOLDOWN_S = 5  # MCP_COOLDOWN_SECONDS: a server that failed to start is not retried before this
MAX_LINE = 8 * 1024 * 1024  # a longer line from a server is dropped


class MCPConfigError(Exception):
    """b10621's mcp_mgr.start failure (the server exits): its words."""


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # merged over the server's own environment
    cwd: str = ""
    timeout_ms: int = 30000  # a call's budget


@dataclass(frozen=True)
class ToolDef:
    server: str
    name: str
    description: str
    input_schema: object = None


def parse_config(text: str) -> list[ServerConfig]:
    """parse_cursor_format: {"mcpServers": {name: {command, args, env, cwd, timeout_ms}}}; an entry without a
    command is skipped (with b10621's warning); ValueError for text that is not JSON."""
    data = json.loads(text)
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        return []
    out = []
    for name, cfg in servers.items():
        cfg = cfg if isinstance(cfg, dict) else {}
        command = cfg.get("command") if isinstance(cfg.get("command"), str) else ""
        if not command:
            log.warning("MCP server '%s' has no command, skipping", name)
            continue
        args = tuple(str(a) for a in cfg.get("args", []) if isinstance(cfg.get("args"), list))
        env = tuple((str(k), str(v)) for k, v in cfg.get("env", {}).items()) if isinstance(cfg.get("env"), dict) else ()
        timeout = cfg.get("timeout_ms", 30000)
        cwd = cfg.get("cwd")
        out.append(
            ServerConfig(
                name,
                command,
                args,
                env,
                cwd if isinstance(cwd, str) else "",
                timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else 30000,
            )
        )
    return out


def load_configs(config_file: str | None, config_json: str | None) -> list[ServerConfig]:
    """server_mcp::start's configuration: the file's servers, then the inline JSON's, names unique."""
    configs: list[ServerConfig] = []

    def append(text: str) -> None:
        try:
            parsed = parse_config(text)
        except ValueError as exc:
            raise MCPConfigError(f"failed to parse MCP config JSON: {exc}") from None
        if not parsed:
            log.warning("MCP config: no servers found in JSON")
        for cfg in parsed:
            if any(c.name == cfg.name for c in configs):
                log.warning("MCP config: duplicate server name '%s', skipping", cfg.name)
                continue
            configs.append(cfg)

    if config_file:
        try:
            with open(config_file, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            raise MCPConfigError(f"failed to open MCP config file: {config_file}") from None
        append(text)
    if config_json:
        append(config_json)
    return configs


class Session:
    """One server's process and JSON-RPC session (server_mcp_stdio with server_mcp_transport's handshake)."""

    def __init__(self, config: ServerConfig, stopping: threading.Event | None = None):
        self.config = config
        self.stopping = stopping or threading.Event()  # the server shutting down: a waiting call gives up
        self.proc: subprocess.Popen | None = None
        self.replies: queue.Queue[str | None] = queue.Queue(maxsize=65536)
        self.lock = threading.Lock()  # one call at a time on a session
        self.next_id = 1
        self.initialized = False
        self.tools: list[ToolDef] = []
        self.last_error = ""

    def start(self) -> bool:
        env = None
        if self.config.env:
            env = {**os.environ, **dict(self.config.env)}
        try:
            self.proc = subprocess.Popen(
                [self.config.command, *self.config.args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=self.config.cwd or None,
            )
        except OSError:
            log.warning("MCP '%s': failed to spawn '%s'", self.config.name, self.config.command)
            return False
        threading.Thread(target=self._read, name=f"mcp-{self.config.name}", daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            if len(raw) > MAX_LINE:
                log.warning("MCP: dropping oversized line (> %d bytes) from child pipe", MAX_LINE)
                continue
            line = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
            if line:
                try:
                    self.replies.put_nowait(line)
                except queue.Full:
                    pass
        self.replies.put(None)

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            log.debug("MCP '%s' stderr: %s", self.config.name, raw.decode("utf-8", "replace").rstrip())

    def _send(self, message: dict) -> bool:
        if not self.alive() or self.proc is None or self.proc.stdin is None:
            return False
        try:
            self.proc.stdin.write((json.dumps(message, separators=(",", ":")) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        return True

    def rpc(self, request: dict, deadline: float) -> dict:
        """send_rpc: the reply with the request's id (notifications and stale replies skipped), or an error."""
        if not self._send(request):
            return {"error": {"code": -32603, "message": "transport closed"}}
        while True:
            if self.stopping.is_set():
                return {"error": {"code": -32603, "message": "cancelled"}}
            left = deadline - time.monotonic()
            if left <= 0:
                return {"error": {"code": -32603, "message": "request timed out"}}
            try:
                frame = self.replies.get(timeout=min(left, 0.05))  # (in slices: a shutdown is seen at once)
            except queue.Empty:
                continue
            if frame is None:
                self.replies.put(None)  # (the next caller sees the end too)
                return {"error": {"code": -32603, "message": "transport closed"}}
            try:
                reply = json.loads(frame)
            except ValueError:
                continue
            if "id" not in request or (isinstance(reply, dict) and reply.get("id") == request["id"]):
                return reply if isinstance(reply, dict) else {}

    def _request(self, method: str, params: dict | None = None) -> dict:
        message: dict = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        self.next_id += 1
        if params is not None:
            message["params"] = params
        return message

    def _ensure_init(self, deadline: float) -> bool:
        if self.initialized:
            return True
        reply = self.rpc(
            self._request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "llama.cpp", "version": "1.0"},
                },
            ),
            deadline,
        )
        if "result" not in reply:
            self.last_error = f"initialize failed: {_rpc_error(reply)}"
            return False
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.initialized = True
        return True

    def list_tools(self, deadline: float) -> list[ToolDef]:
        with self.lock:
            if not self._ensure_init(deadline):
                return []
            if self.tools:
                return self.tools
            reply = self.rpc(self._request("tools/list"), deadline)
            if "result" not in reply:
                self.last_error = f"tools/list failed: {_rpc_error(reply)}"
                return []
            result = reply["result"] if isinstance(reply["result"], dict) else {}
            tools = result.get("tools")
            listed: list = tools if isinstance(tools, list) else []
            self.tools = [
                ToolDef(
                    self.config.name,
                    t.get("name", "") if isinstance(t.get("name"), str) else "",
                    t.get("description", "") if isinstance(t.get("description"), str) else "",
                    t.get("inputSchema"),
                )
                for t in listed
                if isinstance(t, dict)
            ]
            return self.tools

    def call(self, tool: str, arguments: object) -> dict:
        with self.lock:
            deadline = time.monotonic() + self.config.timeout_ms / 1000
            if not self._ensure_init(deadline):
                return {"error": self.last_error}
            reply = self.rpc(self._request("tools/call", {"name": tool, "arguments": arguments}), deadline)
            if "error" in reply:
                return {"error": _rpc_error(reply)}
            if "result" in reply:
                return _to_response(reply["result"])
            return {"error": "invalid response from MCP server"}


def _rpc_error(reply: dict) -> str:
    error = reply.get("error")
    if isinstance(error, dict):
        message = error.get("message", "unknown error")
        return message if isinstance(message, str) else "unknown error"
    return error if isinstance(error, str) else "unknown error"


def _to_response(result: object) -> dict:
    """mcp_result_to_response: the text parts joined by newlines; isError surfaced as an error."""
    parts = result.get("content") if isinstance(result, dict) else None
    text = "\n".join(
        p.get("text", "")
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and p.get("type") == "text"
    )
    if isinstance(result, dict) and result.get("isError") is True:
        return {"error": text or "MCP tool returned an error"}
    return {"plain_text_response": text}


@dataclass
class Manager:
    """server_mcp: the configured servers, the tools discovered at startup, one live session per server."""

    configs: list[ServerConfig]
    registry: list[ToolDef] = field(default_factory=list)
    sessions: dict[str, Session] = field(default_factory=dict)
    dead_until: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    def warm_up(self) -> None:
        """Each server started, asked for its tools (ten seconds at most), and stopped."""
        discovered: list[ToolDef] = []
        for cfg in self.configs:
            session = Session(cfg, self.stopping)
            if not session.start():
                log.warning("MCP warmup: failed to spawn '%s': %s", cfg.name, session.last_error)
                continue
            tools = session.list_tools(time.monotonic() + WARMUP_TIMEOUT_S)
            log.info("MCP warmup: '%s' discovered %d tools", cfg.name, len(tools))
            discovered += tools
            session.close()
        self.registry = discovered

    def call(self, server: str, tool: str, arguments: object) -> dict:
        session = self._session(server)
        if session is None:
            return {"error": f"MCP server unavailable: {server}"}
        return session.call(tool, arguments)

    def _session(self, name: str) -> Session | None:
        with self.lock:
            if self.stopping.is_set():
                return None
            now = time.monotonic()
            if self.dead_until.get(name, 0) > now:
                return None
            self.dead_until.pop(name, None)
            session = self.sessions.get(name)
            if session is not None:
                if session.alive():
                    return session
                log.warning("MCP '%s' is no longer alive: %s", name, session.last_error)
                session.close()
                del self.sessions[name]
            cfg = next((c for c in self.configs if c.name == name), None)
            if cfg is None:
                return None
            fresh = Session(cfg, self.stopping)
            if fresh.start() and fresh.alive():
                self.sessions[name] = fresh
                return fresh
            log.warning("MCP '%s': failed to start: %s", name, fresh.last_error)
            fresh.close()
            self.dead_until[name] = now + COOLDOWN_S
            return None

    def shutdown(self) -> None:
        self.stopping.set()  # (first: a call waiting on a reply under the lock gives up)
        with self.lock:
            for session in self.sessions.values():
                session.close()
            self.sessions.clear()
