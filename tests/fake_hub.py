"""A Hugging Face-style hub on loopback for the model-store and -hf tests: the model API with each file's size and
SHA-256 (mlxcel's store), the refs and tree API b10621 reads (common/hf-cache.cpp), HEAD and file downloads
honouring HTTP ranges; it can cut a download short once, lie about a checksum, or gate a repository behind a
token (401 without it), and records each request's Authorization header."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # every repository's main (b10621 wants 40 hex digits)


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]):  # noqa: C901
        self.repos = repos
        self.cut_after: dict[str, int] = {}  # file -> bytes sent before the connection drops (once)
        self.wrong_sha: set[str] = set()
        self.ranges: list[tuple[str, str | None]] = []  # (file, Range header) of every file request
        self.auth: list[tuple[str, str | None]] = []  # ("api" or the file, Authorization header) of every request
        self.requests: list[tuple[str, str | None]] = []  # (path, Authorization header) of every request
        self.gated: dict[str, str] = {}  # repo -> the token it needs (401 without it)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_HEAD(self):
                self.do_GET(head=True)

            def do_GET(self, head: bool = False):
                path = unquote(urlparse(self.path).path)
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/main", path)
                hub.auth.append(("api" if m else path.rsplit("/", 1)[-1], self.headers.get("Authorization")))
                hub.requests.append((path, self.headers.get("Authorization")))
                repo = re.fullmatch(r"/(?:api/models/)?([^/]+/[^/]+)/.*", path)
                if (
                    repo
                    and repo.group(1) in hub.gated
                    and self.headers.get("Authorization") != (f"Bearer {hub.gated[repo.group(1)]}")
                ):
                    return self._json({"error": f"Access to model {repo.group(1)} is restricted."}, 401)
                if m:
                    return self._listing(m.group(1))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/refs", path)
                if m:
                    return self._refs(m.group(1))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([0-9a-f]{40})", path)
                if m:
                    return self._tree(m.group(1))
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m and m.group(1) in hub.repos and m.group(3) in hub.repos[m.group(1)]:
                    return self._file(m.group(1), m.group(3), head)
                self._json({"error": "Repository not found"}, 404)

            def _json(self, doc, status=200):
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refs(self, repo):
                if repo not in hub.repos:
                    return self._json({"error": "Repository not found"}, 404)
                self._json({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": COMMIT}]})

            def _tree(self, repo):
                if repo not in hub.repos:
                    return self._json({"error": "Repository not found"}, 404)
                items = []
                for name, data in sorted(hub.repos[repo].items()):
                    item = {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    if name.endswith((".gguf", ".safetensors")):
                        item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
                    items.append(item)
                self._json(items)

            def _listing(self, repo):
                files = hub.repos.get(repo)
                if files is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                siblings = []
                for name, data in files.items():
                    sha = hashlib.sha256(data).hexdigest()
                    if name in hub.wrong_sha:
                        sha = "0" * 64
                    siblings.append({"rfilename": name, "size": len(data), "lfs": {"sha256": sha, "size": len(data)}})
                body = json.dumps({"id": repo, "sha": "abc123", "siblings": siblings}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, repo, name, head=False):
                data = hub.repos[repo][name]
                rng = self.headers.get("Range")
                if not head:
                    hub.ranges.append((name, rng))
                start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1)) if rng else 0
                body = data[start:]
                self.send_response(206 if rng else 200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.end_headers()
                if head:
                    return
                cut = hub.cut_after.pop(name, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
