"""JSON in and out the way b10621 does it: compact, raw UTF-8, insertion-ordered keys."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from ..errors import ErrorKind, UpstreamError

CONTENT_TYPE = "application/json; charset=utf-8"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8", "replace")


class UpstreamJSON(Response):
    media_type = CONTENT_TYPE

    def render(self, content: Any) -> bytes:
        return dumps(content)

    def init_headers(self, headers=None) -> None:  # keep upstream's exact content-type spelling
        super().init_headers(headers)
        self.headers["content-type"] = CONTENT_TYPE


def error_response(err: UpstreamError) -> UpstreamJSON:
    return UpstreamJSON(err.body(), status_code=err.kind.status)


async def read_json_object(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError as exc:
        raise UpstreamError(f"[json.exception.parse_error] {exc}", ErrorKind.INVALID_REQUEST) from exc
    if not isinstance(body, dict):
        raise UpstreamError("request body must be a JSON object", ErrorKind.INVALID_REQUEST)
    return body
