"""HTTP to the servers under test, with one TLS context for the whole process.

httpx makes a new SSL context for every client it builds (each `httpx.get` builds one) and loads certifi's CA
bundle into it: ~50 ms of CPU a call on CI's machines, where the suite makes tens of thousands of calls (a start-up's
health polls, a shared corpus case's slot erases). The servers answer plain http on loopback, so the context is
never used for them; the calls here hand httpx one context, made on first use, and behave as httpx's own
otherwise (a new connection a call, the same timeouts). A test of TLS passes its own `verify`.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from typing import Any

import httpx


@lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def _kw(kw: dict[str, Any]) -> dict[str, Any]:
    kw.setdefault("verify", tls_context())
    return kw


def request(method: str, url: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, url, **_kw(kw))


def get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, **_kw(kw))


def post(url: str, **kw: Any) -> httpx.Response:
    return httpx.post(url, **_kw(kw))


def put(url: str, **kw: Any) -> httpx.Response:
    return httpx.put(url, **_kw(kw))


def delete(url: str, **kw: Any) -> httpx.Response:
    return httpx.delete(url, **_kw(kw))


def options(url: str, **kw: Any) -> httpx.Response:
    return httpx.options(url, **_kw(kw))


def head(url: str, **kw: Any) -> httpx.Response:
    return httpx.head(url, **_kw(kw))


def stream(method: str, url: str, **kw: Any):
    """httpx.stream: a context manager over the streamed response."""
    return httpx.stream(method, url, **_kw(kw))


def Client(**kw: Any) -> httpx.Client:  # noqa: N802  (httpx's name, so that a call site reads the same)
    return httpx.Client(**_kw(kw))


def AsyncClient(**kw: Any) -> httpx.AsyncClient:  # noqa: N802
    return httpx.AsyncClient(**_kw(kw))
