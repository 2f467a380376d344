"""--path DIR: the files of DIR served at the API prefix's root in place of the built-in web UI, as b10621's
cpp-httplib mount point serves them (Server::handle_file_request): a directory's index.html, a directory named
without its slash redirected (301) to it, the content type from httplib's extension table (else
application/octet-stream), a weak ETag of the file's mtime and size and its Last-Modified, 304 for a matching
If-None-Match (or, without one, an If-Modified-Since no older than the file), ".." refused, a symlink out of DIR
403; what is no file falls through to the routes (and their 404). Unlike the built-in UI's assets, these files
need the API key where one is set (b10621 makes only its embedded assets public)."""

from __future__ import annotations

import os
from email.utils import formatdate, parsedate_to_datetime

from fastapi import Request
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import FileResponse, RedirectResponse, Response

# httplib's find_content_type (no user mapping): by extension, lowercase
CONTENT_TYPES = {
    "css": "text/css",
    "csv": "text/csv",
    "htm": "text/html",
    "html": "text/html",
    "js": "text/javascript",
    "mjs": "text/javascript",
    "txt": "text/plain",
    "vtt": "text/vtt",
    "apng": "image/apng",
    "avif": "image/avif",
    "bmp": "image/bmp",
    "gif": "image/gif",
    "png": "image/png",
    "svg": "image/svg+xml",
    "webp": "image/webp",
    "ico": "image/x-icon",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "mp4": "video/mp4",
    "mpeg": "video/mpeg",
    "webm": "video/webm",
    "mp3": "audio/mp3",
    "mpga": "audio/mpeg",
    "weba": "audio/webm",
    "wav": "audio/wave",
    "otf": "font/otf",
    "ttf": "font/ttf",
    "woff": "font/woff",
    "woff2": "font/woff2",
    "7z": "application/x-7z-compressed",
    "atom": "application/atom+xml",
    "pdf": "application/pdf",
    "json": "application/json",
    "rss": "application/rss+xml",
    "tar": "application/x-tar",
    "xht": "application/xhtml+xml",
    "xhtml": "application/xhtml+xml",
    "xslt": "application/xslt+xml",
    "xml": "application/xml",
    "gz": "application/gzip",
    "zip": "application/zip",
    "wasm": "application/wasm",
}
DEFAULT_TYPE = "application/octet-stream"


def content_type(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return CONTENT_TYPES.get(name.rsplit(".", 1)[-1].lower(), DEFAULT_TYPE) if "." in name else DEFAULT_TYPE


def _valid(sub: str) -> bool:
    """detail::is_valid_path: no segment climbs above the root ("..", counted as it goes)."""
    level = 0
    for part in sub.split("/"):
        if part in ("", "."):
            continue
        level = level - 1 if part == ".." else level + 1
        if level < 0:
            return False
    return True


def _not_modified(request: Request, etag: str, mtime: int) -> bool:
    if "if-none-match" in request.headers:
        return any(v.strip() in ("*", etag) for v in request.headers["if-none-match"].split(","))
    since = request.headers.get("if-modified-since")
    if since:
        try:
            return mtime <= int(parsedate_to_datetime(since).timestamp())
        except (TypeError, ValueError):
            return False
    return False


class StaticPath(BaseHTTPMiddleware):
    """DIR's files for GET and HEAD ahead of the routes, as httplib's mount point is consulted first (below the
    API key and the prefix: app.py adds it innermost)."""

    def __init__(self, app, directory: str):
        super().__init__(app)
        self.base = os.path.realpath(directory)

    async def dispatch(self, request: Request, call_next):
        sub = request.scope["path"]
        if request.method not in ("GET", "HEAD") or not _valid(sub):
            return await call_next(request)
        path = self.base + sub
        if path.endswith("/"):
            path += "index.html"
        if os.path.isdir(path):
            return RedirectResponse(sub + "/", status_code=301)
        if not os.path.isfile(path):
            return await call_next(request)
        if not os.path.realpath(path).startswith(self.base + os.sep):  # (a symlink out of DIR)
            return Response(status_code=403)
        st = os.stat(path)
        etag = f'W/"{int(st.st_mtime):x}-{st.st_size:x}"'
        headers = {"ETag": etag, "Last-Modified": formatdate(int(st.st_mtime), usegmt=True)}
        if _not_modified(request, etag, int(st.st_mtime)):
            return Response(status_code=304, headers=headers)
        # (the type as given, no charset added: httplib's own)
        return FileResponse(path, headers={**headers, "content-type": content_type(path)})
