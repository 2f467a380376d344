"""JSON in and out the way b10621 does it: compact, raw UTF-8, insertion-ordered keys."""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from ..errors import ErrorKind, UpstreamError, json_type_name
from ..jsonfloat import dump_float

CONTENT_TYPE = "application/json; charset=utf-8"


def _finite(obj: Any) -> Any:
    """The value with every NaN or infinity made null, as b10621's JSON library writes them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class RawBody:
    """An already rendered JSON body, for UpstreamJSON."""

    __slots__ = ("body",)

    def __init__(self, body: bytes):
        self.body = body


def dumps(obj: Any) -> bytes:
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or an infinity (a float field given 1e308, say): null, as upstream writes it
        text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "replace")


class RawJSON:
    """JSON text placed into a response as is (see float_array)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def float_array(values) -> RawJSON:
    """A float array printed as b10621's JSON library prints it (server/jsonfloat.py): the same bytes."""
    return RawJSON("[" + ",".join(dump_float(float(v)) for v in values) + "]")


def dumps_with_raw(obj: Any) -> bytes:
    """dumps() for a value holding RawJSON parts: each goes in as a placeholder string (with a nonce, so no
    request text can spell one), then its text replaces the quoted placeholder."""
    parts: list[str] = []
    tag = f"\x00raw{secrets.token_hex(8)}:"

    def swap(o: Any) -> Any:
        if isinstance(o, RawJSON):
            parts.append(o.text)
            return f"{tag}{len(parts) - 1}"
        if isinstance(o, dict):
            return {k: swap(v) for k, v in o.items()}
        if isinstance(o, list):
            return [swap(v) for v in o]
        return o

    text = dumps(swap(obj)).decode("utf-8")
    pieces = text.split('"' + json.dumps(tag)[1:-1])
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split('"', 1)
        out += [parts[int(index)], rest]
    return "".join(out).encode("utf-8")


class UpstreamJSON(Response):
    media_type = CONTENT_TYPE

    def render(self, content: Any) -> bytes:
        if isinstance(content, RawBody):
            return content.body
        return dumps(content)

    def init_headers(self, headers=None) -> None:  # keep upstream's exact content-type spelling
        super().init_headers(headers)
        self.headers["content-type"] = CONTENT_TYPE


def error_response(err: UpstreamError) -> UpstreamJSON:
    return UpstreamJSON(err.body(), status_code=err.kind.status)


MAX_DEPTH = 128  # JSON nesting a request may have (b10621's parser has no limit; Python's recursion has one)
TOO_DEEP = f"request body is nested more than {MAX_DEPTH} levels deep"


def _not_json(constant: str):
    # NaN, Infinity and -Infinity are not JSON: b10621's parser refuses them, Python's would read them
    raise ValueError(f"invalid literal; last read: '{constant}'")


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed value (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def loads(raw: bytes | str) -> Any:
    """A request body parsed as b10621 parses it: not JSON (NaN, invalid UTF-8 included) is its 500 parse error
    (wording differs); nesting deeper than MAX_DEPTH is a 400 (mlxcel's own limit)."""
    try:
        value = json.loads(raw, parse_constant=_not_json)
    except RecursionError:
        raise UpstreamError(TOO_DEEP, ErrorKind.INVALID_REQUEST) from None
    except ValueError as exc:
        raise UpstreamError(f"[json.exception.parse_error.101] parse error: {exc}", ErrorKind.SERVER) from exc
    if depth(value) > MAX_DEPTH:
        raise UpstreamError(TOO_DEEP, ErrorKind.INVALID_REQUEST)
    return value


async def read_json(request: Request) -> Any:
    """The parsed body (loads)."""
    return loads(await request.body())


async def read_json_object(request: Request) -> dict:
    """The body's fields; a JSON value that is not an object has none (b10621's json::count answers 0)."""
    body = await read_json(request)
    return body if isinstance(body, dict) else {}


def json_value(body: dict, key: str, default):
    """b10621's json_value(): the value when present and of the default's JSON type, else the default."""
    value = body.get(key)
    if value is None or json_type_name(value) != json_type_name(default):
        return default
    return value
