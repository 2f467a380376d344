"""API keys as b10621 checks them (tools/server/server-http.cpp, middleware_validate_api_key).

With no key configured nothing is checked. With keys, every request except an OPTIONS preflight (answered by
the CORS layer first) and a request to a public path (any method) must present one of them:

- the key is read from ``Authorization``; when that header is missing or empty, from ``X-Api-Key``;
- one leading ``Bearer `` (case-sensitive, one space) is removed, whichever header it came from; the rest
  must equal a configured key byte for byte (so ``Authorization: k1`` without the scheme works too);
- the public paths are ``/health``, ``/v1/health`` and ``/`` (b10621's frontend root), compared with the
  full request path, prefix included: under ``--api-prefix /p`` even ``/p/health`` needs the key, exactly
  as upstream. Any other path, unknown ones included, answers 401 before routing.

The refusal is upstream's 401 byte for byte, and it is logged as upstream logs it. Keys are compared with
``hmac.compare_digest`` against every configured key, without stopping at the first match, so the time taken
does not depend on which key matched or how much of a wrong key was right.

Keys come from every source at once, as b10621's parser runs each option's handler for its environment
variable first and again for each command-line occurrence, and the key handlers append: ``LLAMA_API_KEY``
and mlxcel's own ``MLXCEL_API_KEY`` (comma lists), ``LLAMA_ARG_API_KEY_FILE``, then every ``--api-key``
(comma list, b10621's CSV rules: double quotes protect commas, empty fields dropped) and ``--api-key-file``
(one key per line, ``#`` lines and empty lines skipped, nothing trimmed). Verified against the reference:
``LLAMA_API_KEY=a --api-key b`` accepts both a and b. A key file that cannot be opened stops startup with
b10621's sentence.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..textparse import parse_csv_row

log = logging.getLogger("mlxcel.auth")

# b10621's get_public_endpoints: /health, /v1/health and its frontend paths ("/" plus the embedded UI assets;
# mlxcel embeds no UI, so "/" alone, as in a b10621 build without UI assets)
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/"})
FRONTEND_PATHS = frozenset({"/"})  # and the web UI's assets where it is served (api/webui.py: WebUI.paths)

# recorded from b10621 (tests/data/b10621_cors_auth.json "unauthorized")
UNAUTHORIZED_BODY = b'{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}'
BEARER = b"Bearer "


class KeyFileError(ValueError):
    """An API-key file cannot be opened: b10621's sentence, naming the argument or variable it came from."""


@dataclass(frozen=True)
class AuthConfig:
    """The resolved key list; empty: authentication off (b10621's default)."""

    keys: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @classmethod
    def from_args(cls, args: Any, environ: Mapping[str, str] | None = None) -> AuthConfig:
        """From the parser's api_key (list of raw --api-key values, or None) and api_key_file attributes."""
        return cls(
            resolve_api_keys(
                getattr(args, "api_key", None),
                getattr(args, "api_key_file", None),
                os.environ if environ is None else environ,
            )
        )


def read_key_file(path: str, source: str = 'argument "--api-key-file"') -> list[str]:
    """One key per line as std::getline reads them: only '\\n' ends a line, nothing is trimmed."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        raise KeyFileError(f"error while handling {source}: error: failed to open file '{path}'") from None
    keys = [line for line in data.decode("utf-8", "surrogateescape").split("\n") if line and line[0] != "#"]
    if not keys:
        log.warning("API-key file %s holds no key (only comments or empty lines): it adds none", path)
    return keys


def resolve_api_keys(
    api_key: Sequence[str] | str | None, api_key_file: Sequence[str] | str | None, environ: Mapping[str, str]
) -> tuple[str, ...]:
    """Every configured key: the environment's, then the command line's (api_key: the raw --api-key values;
    api_key_file: every --api-key-file, each adding its keys as b10621's handler does).

    A parser that already folded LLAMA_API_KEY into api_key only repeats a key, which changes nothing.
    """
    keys: list[str] = []
    for name in ("LLAMA_API_KEY", "MLXCEL_API_KEY"):
        if name in environ:
            keys += [key for key in parse_csv_row(environ[name]) if key]
    env_file = environ.get("LLAMA_ARG_API_KEY_FILE")
    if env_file is not None:
        keys += read_key_file(env_file, 'environment variable "LLAMA_ARG_API_KEY_FILE"')
    for value in [api_key] if isinstance(api_key, str) else api_key or ():
        keys += [key for key in parse_csv_row(value) if key]
    files = [api_key_file] if isinstance(api_key_file, str) else list(api_key_file or ())
    if env_file is not None and files and files[0] == env_file:
        files = files[1:]  # the parser's own copy of the variable, read above
    for path in files:
        keys += read_key_file(path)
    # HTTP strips a header value's ends and cannot carry CR/LF/NUL, so such a key never matches (in b10621
    # too: a CRLF key file leaves '\r' on every key); accepted as upstream accepts it, and said once
    if any(key != key.strip(" \t") or any(c in key for c in "\r\n\0") for key in keys):
        log.warning(
            "an API key ends in whitespace or holds a control character (a CRLF key file?): no request can present it"
        )
    return tuple(dict.fromkeys(keys))


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """What the request offers: Authorization, else X-Api-Key, with one 'Bearer ' prefix removed."""
    authorization = x_api_key = None
    for name, value in headers:
        name = name.lower()
        if name == b"authorization" and authorization is None:
            authorization = value.strip(b" \t")
        elif name == b"x-api-key" and x_api_key is None:
            x_api_key = value.strip(b" \t")
    key = authorization or x_api_key or b""
    return key.removeprefix(BEARER)


def key_matches(presented: bytes, keys: Sequence[bytes]) -> bool:
    """Constant-time membership: every key is compared, and compare_digest does not stop at a difference."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


class AuthMiddleware:
    """Ordered inside CORS and the loading gate, outside routing (b10621's pre-routing order)."""

    def __init__(self, app, config: AuthConfig, frontend: frozenset[str] = FRONTEND_PATHS) -> None:
        self.app = app
        self.keys = tuple(key.encode("utf-8", "surrogateescape") for key in config.keys)
        self.public = PUBLIC_PATHS | frontend  # the web UI's assets need no key (b10621's get_public_endpoints)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        if key_matches(presented_key(scope.get("headers", ())), self.keys):
            await self.app(scope, receive, send)
            return
        log.warning("unauthorized: Invalid API Key")
        # deferred: jsonio imports FastAPI, which reading the command line (AuthConfig.from_args) must not
        from .jsonio import CONTENT_TYPE

        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"Content-Type", CONTENT_TYPE.encode()),
                    (b"Content-Length", str(len(UNAUTHORIZED_BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
