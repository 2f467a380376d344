"""llama.cpp's web UI at / as b10621 serves its embedded assets (tools/server/server-http.cpp).

The assets are the ones `mlxcel webui` built from the pinned sdist (server/cli/webui_build.py): each served
gzipped (a client that does not accept gzip gets b10621's 415), with its ETag and a 304 for a matching
If-None-Match; index.html at / and /index.html with the cross-origin isolation headers and revalidated, the
PWA's revalidation files (sw.js, the manifest, the version files) without an ETag, every other (hashed) asset
cacheable forever. Every asset path is public: no API key, and served while the model loads.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import Response

from .webui_settings import CACHE_IMMUTABLE, CACHE_REVALIDATE, GZIP_DIR, NO_CACHE, NO_GZIP, WebUI, mime_type

log = logging.getLogger("mlxcel.api")


class _Asset:
    def __init__(self, ui: WebUI, name: str):
        self.path = ui.dist / GZIP_DIR / name if ui.dist is not None else None
        self.etag, self.type = ui.etags[name], mime_type(name)
        self.body: bytes | None = None  # read on first request

    def read(self) -> bytes:
        if self.body is None and self.path is not None:
            self.body = self.path.read_bytes()
        return self.body or b""


def _raw(content: bytes, status: int, content_type: str | None, headers: dict[str, str]) -> Response:
    response = Response(content, status_code=status, headers=headers)
    if content_type is not None:  # the exact spelling (Starlette would add a charset to text/*)
        response.headers["content-type"] = content_type
    else:
        del response.headers["content-length"]
    return response


def _accepts_gzip(request: Request) -> bool:
    return "gzip" in request.headers.get("accept-encoding", "")


def _cached(asset: _Asset, isolation: bool, cache_control: str):
    async def serve(request: Request) -> Response:
        if not _accepts_gzip(request):
            return _raw(NO_GZIP, 415, "text/plain", {})
        headers = {"Content-Encoding": "gzip", "ETag": asset.etag}
        match = request.headers.get("if-none-match", "")
        if match and match in (asset.etag, "W/" + asset.etag):
            return _raw(b"", 304, None, headers)
        if isolation:
            headers |= {"Cross-Origin-Embedder-Policy": "require-corp", "Cross-Origin-Opener-Policy": "same-origin"}
        return _raw(asset.read(), 200, asset.type, headers | {"Cache-Control": cache_control})

    return serve


def _nocache(asset: _Asset):
    async def serve(request: Request) -> Response:
        if not _accepts_gzip(request):
            return _raw(NO_GZIP, 415, "text/plain", {})
        return _raw(asset.read(), 200, asset.type, {"Content-Encoding": "gzip", "Cache-Control": "no-cache"})

    return serve


def register(app: FastAPI, ui: WebUI) -> None:
    """The UI's routes (none with --no-ui or without a build: / then answers b10621's 404)."""
    if not ui.enabled:
        log.info("The UI is disabled")
        log.info("Use --ui/--no-ui (or deprecated --webui/--no-webui) to enable/disable")
        return
    if ui.dist is None:  # (said at start: server/cli/startup.py)
        return
    index = _Asset(ui, "index.html")
    for path in ("/", "/index.html"):
        app.add_api_route(path, _cached(index, True, CACHE_REVALIDATE), methods=["GET"], include_in_schema=False)
    for name in ui.etags:
        if name == "index.html":
            continue
        asset = _Asset(ui, name)
        serve = _nocache(asset) if name in NO_CACHE else _cached(asset, False, CACHE_IMMUTABLE)
        app.add_api_route(f"/{name}", serve, methods=["GET"], include_in_schema=False)
