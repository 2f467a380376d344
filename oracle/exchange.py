"""One request to one server, captured raw: status, headers, body bytes and, for SSE, every frame.

Also one command line run to its end: exit status, stdout and stderr (startup behaviour).
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

from . import loopback


@dataclass(frozen=True)
class OracleRequest:
    method: str
    path: str
    body: Any = None  # JSON-serializable, sent as the same bytes to both servers
    raw_body: str | None = None  # sent verbatim instead of `body` (malformed JSON cases)
    headers: tuple[tuple[str, str], ...] = ()  # request headers (an API key, an Origin), sent to both
    compare_headers: tuple[str, ...] = ()  # response headers compared besides content-type (CORS, auth)
    # response headers whose presence and spelling on the wire are compared, not their value (a clock): a
    # client that reads headers into a plain dict sees "Process-Start-Time-Unix" and "process-start-time-unix"
    # as different names
    header_names: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict) -> "OracleRequest":
        return cls(
            method=data.get("method", "POST").upper(),
            path=data["path"],
            body=data.get("body"),
            raw_body=data.get("raw_body"),
            headers=tuple((data.get("headers") or {}).items()),
            compare_headers=tuple(h.lower() for h in data.get("compare_headers", ())),
            header_names=tuple(h.lower() for h in data.get("header_names", ())),
        )

    def body_bytes(self) -> bytes | None:
        if self.raw_body is not None:
            return self.raw_body.encode("utf-8")
        if self.body is None:
            return None
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @property
    def streaming(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    def sha256(self) -> str:
        head = f"{self.method} {self.path}\n".encode()
        if self.headers or self.compare_headers or self.header_names:  # only then: older digests stay
            extra = [list(self.header_names)] if self.header_names else []
            head += json.dumps([list(self.headers), list(self.compare_headers), *extra]).encode() + b"\n"
        return hashlib.sha256(head + (self.body_bytes() or b"")).hexdigest()


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: dict[str, str]
    body: bytes
    frames: tuple[bytes, ...] = field(default=())  # SSE frames, each without its blank-line terminator
    compared: tuple[tuple[str, str | None], ...] = ()  # the request's compare_headers and their values
    spelled: tuple[tuple[str, str | None], ...] = ()  # the request's header_names and their wire spellings

    def json(self) -> Any:
        return json.loads(self.body)

    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    def to_record(self) -> dict:
        try:
            body = {"text": self.body.decode("utf-8")}
        except UnicodeDecodeError:
            body = {"base64": base64.b64encode(self.body).decode()}
        rec = {
            "status": self.status,
            "content_type": self.headers.get("content-type"),
            "body": body,
            "frames": [f.decode("utf-8", "replace") for f in self.frames],
        }
        if self.compared:
            rec["compared_headers"] = [list(h) for h in self.compared]
        if self.spelled:
            rec["header_spellings"] = [list(h) for h in self.spelled]
        return rec

    @classmethod
    def from_record(cls, rec: dict) -> "Exchange":
        body = rec["body"]
        raw = body["text"].encode("utf-8") if "text" in body else base64.b64decode(body["base64"])
        headers = {"content-type": rec["content_type"]} if rec.get("content_type") else {}
        return cls(
            status=rec["status"],
            headers=headers,
            body=raw,
            frames=tuple(f.encode("utf-8") for f in rec.get("frames", [])),
            compared=tuple((k, v) for k, v in rec.get("compared_headers", [])),
            spelled=tuple((k, v) for k, v in rec.get("header_spellings", [])),
        )


def split_sse(body: bytes) -> tuple[bytes, ...]:
    """The stream's events; comment frames (":", the SSE keep-alive pings) are left out: when they come
    depends on how long the server was silent, a clock, so they are never compared."""
    frames = body.replace(b"\r\n", b"\n").split(b"\n\n")
    return tuple(f for f in frames if f.strip() and not f.startswith(b":"))


def send(base_url: str, request: OracleRequest, timeout: float = 300.0) -> Exchange:
    headers = {"Content-Type": "application/json"} if request.body_bytes() is not None else {}
    headers.update(request.headers)
    r = loopback.request(
        request.method, base_url + request.path, content=request.body_bytes(), headers=headers, timeout=timeout
    )
    hdrs = {k.lower(): v for k, v in r.headers.items()}
    frames = split_sse(r.content) if hdrs.get("content-type", "").startswith("text/event-stream") else ()
    compared = tuple((name, hdrs.get(name)) for name in request.compare_headers)
    raw_names = [k.decode("latin-1") for k, _ in r.headers.raw]
    spelled = tuple((name, next((k for k in raw_names if k.lower() == name), None)) for name in request.header_names)
    return Exchange(
        status=r.status_code, headers=hdrs, body=r.content, frames=frames, compared=compared, spelled=spelled
    )


@dataclass(frozen=True)
class CommandExchange:
    """A command line run to its end: what a user sees at startup."""

    returncode: int
    stdout: str
    stderr: str


def run_command(argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0) -> CommandExchange:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    return CommandExchange(proc.returncode, proc.stdout, proc.stderr)
