"""One request to one server, captured raw: status, headers, body bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class OracleRequest:
    method: str
    path: str
    body: Any = None  # JSON-serializable, sent as the same bytes to both servers

    @classmethod
    def from_file(cls, path) -> "OracleRequest":
        data = json.loads(open(path, encoding="utf-8").read())
        return cls(method=data.get("method", "POST").upper(), path=data["path"], body=data.get("body"))

    def body_bytes(self) -> bytes | None:
        if self.body is None:
            return None
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def send(base_url: str, request: OracleRequest, timeout: float = 300.0) -> Exchange:
    headers = {"Content-Type": "application/json"} if request.body is not None else {}
    r = httpx.request(request.method, base_url + request.path, content=request.body_bytes(), headers=headers,
                      timeout=timeout)
    return Exchange(status=r.status_code, headers={k.lower(): v for k, v in r.headers.items()}, body=r.content)
