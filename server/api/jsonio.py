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


async def read_json(request: Request) -> Any:
    """The parsed body; like b10621, a body that is not JSON is a 500 parse error (wording differs)."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UpstreamError(f"[json.exception.parse_error.101] parse error: {exc}", ErrorKind.SERVER) from exc


async def read_json_object(request: Request) -> dict:
    """The body's fields; a JSON value that is not an object has none (b10621's json::count answers 0)."""
    body = await read_json(request)
    return body if isinstance(body, dict) else {}


def json_value(body: dict, key: str, default):
    """b10621's json_value(): the value when present and of the default's JSON type, else the default."""
    from ..errors import json_type_name

    value = body.get(key)
    if value is None or json_type_name(value) != json_type_name(default):
        return default
    return value
