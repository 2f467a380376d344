"""CORS as b10621's pre-routing handler does it (tools/server/server-http.cpp, set_pre_routing_handler).

Every request gets Access-Control-Allow-Origin, chosen before routing from --cors-origins and
--cors-credentials:

- ``*`` with credentials (the default): the request's Origin is echoed back, an empty value when the request
  sent none (b10621 sends ``Access-Control-Allow-Origin:`` with nothing after it);
- ``localhost``: the Origin is echoed only when its host is localhost, 127.0.0.1 or ::1 (any scheme http or
  https, any port); otherwise no header at all, and a warning is logged for a non-empty foreign origin;
- anything else: the configured string verbatim, a comma list included (no per-origin matching).

An OPTIONS request to any path is a preflight and is answered here, before the loading gate, the API-key
check and routing: 200, empty text/html body, the origin header above plus Access-Control-Allow-Credentials,
-Methods and -Headers (those three are sent on preflights only). Access-Control-Expose-Headers is never sent.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mlxcel.cors")

DEFAULT_ORIGINS = "*"
DEFAULT_HEADERS = "*"
DEFAULT_METHODS = "GET, POST, DELETE, OPTIONS"

ALLOW_ORIGIN = b"Access-Control-Allow-Origin"
ALLOW_CREDENTIALS = b"Access-Control-Allow-Credentials"
ALLOW_METHODS = b"Access-Control-Allow-Methods"
ALLOW_HEADERS = b"Access-Control-Allow-Headers"

# RFC 9110 field-value as h11 writes it: visible bytes, inner spaces/tabs, nothing at either end; or empty
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[\t \x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")


@dataclass(frozen=True)
class CorsConfig:
    """--cors-origins, --cors-headers, --cors-methods, --cors-credentials / --no-cors-credentials."""

    origins: str = DEFAULT_ORIGINS
    headers: str = DEFAULT_HEADERS
    methods: str = DEFAULT_METHODS
    credentials: bool = True

    def __post_init__(self) -> None:
        # b10621 sends these strings as header values; one that HTTP cannot carry would break every response
        for option, value in (
            ("--cors-origins", self.origins),
            ("--cors-headers", self.headers),
            ("--cors-methods", self.methods),
        ):
            if not _FIELD_VALUE.fullmatch(value.encode("utf-8", "surrogateescape")):
                raise ValueError(
                    f"{option} {value!r}: not a valid HTTP header value (control characters or "
                    "leading/trailing whitespace); give the list without them"
                )

    @classmethod
    def from_args(cls, args: Any) -> CorsConfig:
        """From the parser's attributes (cors_origins, cors_headers, cors_methods, cors_credentials)."""

        def pick(name: str, default):
            value = getattr(args, name, None)
            return default if value is None else value

        return cls(
            origins=pick("cors_origins", DEFAULT_ORIGINS),
            headers=pick("cors_headers", DEFAULT_HEADERS),
            methods=pick("cors_methods", DEFAULT_METHODS),
            credentials=bool(pick("cors_credentials", True)),
        )


def _stoi_ok(text: str) -> bool:
    """Whether std::stoi(text) returns: optional leading whitespace and sign, one digit at least, an int32."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    return m is not None and -(2**31) <= int(m.group(1)) < 2**31


def origin_is_localhost(origin: str) -> bool:
    """b10621's origin_is_localhost: common_http_parse_url's host is localhost, 127.0.0.1 or ::1."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme not in ("http", "https"):
        return False
    at = rest.find("@")
    if at >= 0:
        rest = rest[at + 1 :]
    host = rest.split("/", 1)[0]
    if host.startswith("["):
        close = host.find("]")
        if close < 0:
            return False
        after = host[close + 1 :]
        port = after[1:] if after.startswith(":") else ""
        host = host[1:close]
    else:
        host, _, port = host.partition(":")
    if port and not _stoi_ok(port):
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def allow_origin(config: CorsConfig, origin: bytes | None) -> bytes | None:
    """The Access-Control-Allow-Origin value for a request's Origin header; None: no header."""
    if config.credentials and config.origins == "*":
        return origin or b""
    if config.origins == "localhost":
        if origin and origin_is_localhost(origin.decode("latin-1")):
            return origin
        if origin:
            log.warning("(CORS) skip non-localhost origin: %s", origin.decode("latin-1"))
        return None
    return config.origins.encode("utf-8", "surrogateescape")


def _header(scope: dict, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


class CorsMiddleware:
    """The outermost layer: preflights answered here, the origin header added to every other response."""

    def __init__(self, app, config: CorsConfig) -> None:
        self.app = app
        self.config = config
        self._preflight = [
            (ALLOW_CREDENTIALS, b"true" if config.credentials else b"false"),
            (ALLOW_METHODS, config.methods.encode("utf-8", "surrogateescape")),
            (ALLOW_HEADERS, config.headers.encode("utf-8", "surrogateescape")),
            (b"Content-Type", b"text/html"),
            (b"Content-Length", b"0"),
        ]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = allow_origin(self.config, _header(scope, b"origin"))
        origin_header = [] if origin is None else [(ALLOW_ORIGIN, origin)]
        if scope["method"] == "OPTIONS":
            # browsers send no Authorization on a preflight: answered before auth and routing, on any path
            await send({"type": "http.response.start", "status": 200, "headers": origin_header + self._preflight})
            await send({"type": "http.response.body", "body": b""})
            return
        if not origin_header:
            await self.app(scope, receive, send)
            return

        async def send_with_origin(message) -> None:
            if message["type"] == "http.response.start":
                # first, where b10621's pre-routing handler puts it, before the handler's own headers
                message = {**message, "headers": [*origin_header, *message.get("headers", ())]}
            await send(message)

        await self.app(scope, receive, send_with_origin)
