"""The web UI's routes in process (server/api/webui.py) over a small built tree laid out as `mlxcel webui` lays
it out (server/cli/webui_build.py): b10621's caching and gzip rules, its public asset paths (no API key, and
served while the model loads), and --no-ui. The real UI in a browser: tests/test_webui_browser.py."""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path

import httpx
import pytest

from server.api.app import create_app
from server.api.auth import AuthConfig
from server.api.state import ServerSettings
from server.api.webui_settings import WebUI
from server.cli.webui_build import fnv1a64, gzip_tree

FILES = {
    "index.html": b"<!doctype html><title>ui</title>",
    "_app/immutable/bundle.AbCd1234.js": b"console.log(1)",
    "_app/version.json": b'{"version":"1"}',
    "build.json": b'{"version":"0"}',
    "favicon.svg": b"<svg/>",
}


@pytest.fixture
def dist(tmp_path):
    root = tmp_path / "dist"
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    assert gzip_tree(root) == len(FILES)
    return root


def _client(ui: WebUI, ready: bool = True, keys: tuple[str, ...] = ()) -> httpx.AsyncClient:
    event = threading.Event()
    if ready:
        event.set()
    state = types.SimpleNamespace(
        engine=types.SimpleNamespace(ready=event, load_error=None),
        settings=ServerSettings(webui=ui, auth=AuthConfig(keys)),
    )
    app = create_app(state)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


GZ = {"Accept-Encoding": "gzip"}


async def test_assets_are_served_gzipped_with_b10621s_caching_rules(dist):
    async with _client(WebUI(dist=dist)) as c:
        index = await c.get("/", headers=GZ)
        assert index.status_code == 200 and index.content == FILES["index.html"]  # (httpx decompresses)
        etag = index.headers["etag"]
        assert etag == f'"0x{fnv1a64((dist / "_gzip" / "index.html").read_bytes()):016x}"'
        assert index.headers["content-type"] == "text/html; charset=utf-8"
        assert index.headers["cache-control"] == "no-cache"
        assert index.headers["cross-origin-embedder-policy"] == "require-corp"
        same = await c.get("/index.html", headers={**GZ, "If-None-Match": etag})
        assert same.status_code == 304 and same.headers["etag"] == etag
        weak = await c.get("/", headers={**GZ, "If-None-Match": "W/" + etag})
        assert weak.status_code == 304
        bundle = await c.get("/_app/immutable/bundle.AbCd1234.js", headers=GZ)
        assert bundle.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert bundle.headers["content-type"] == "application/javascript"
        assert "cross-origin-opener-policy" not in bundle.headers
        version = await c.get("/_app/version.json", headers=GZ)
        assert version.headers["cache-control"] == "no-cache" and "etag" not in version.headers
        assert version.headers["content-type"] == "application/json"
        refused = await c.get("/favicon.svg", headers={"Accept-Encoding": "identity"})
        assert (refused.status_code, refused.text) == (415, "Error: gzip is not supported by this browser")
        missing = await c.get("/nope.js", headers=GZ)
        assert missing.status_code == 404 and missing.json()["error"]["message"] == "File Not Found"


async def test_the_ui_needs_no_key_and_loads_while_the_model_does(dist):
    async with _client(WebUI(dist=dist), ready=False, keys=("k1",)) as c:
        assert (await c.get("/", headers=GZ)).status_code == 200
        assert (await c.get("/favicon.svg", headers=GZ)).status_code == 200
        assert (await c.get("/props")).status_code == 503  # an API route waits for the model
    async with _client(WebUI(dist=dist), keys=("k1",)) as c:
        assert (await c.get("/build.json", headers=GZ)).status_code == 200
        assert (await c.get("/props")).status_code == 401


async def test_no_ui_and_no_build_serve_nothing_at_the_root(dist):
    for ui in (WebUI(enabled=False, dist=dist), WebUI(dist=None)):
        async with _client(ui) as c:
            r = await c.get("/", headers=GZ)
            assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
            assert (await c.get("/favicon.svg", headers=GZ)).status_code == 404


def test_a_dist_the_reference_build_made_is_taken_as_it_is(tmp_path, monkeypatch, capsys):
    """`mlxcel webui build --from DIR` (what oracle/reference.py hands over after its own npm build): copied, its
    gzip twins and index made, no npm run; a folder without a built UI is refused in one line."""
    from server.cli import webui_build

    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(webui_build, "_npm", lambda *a, **k: pytest.fail("npm ran"))
    built = tmp_path / "dist"
    (built / "assets").mkdir(parents=True)
    (built / "index.html").write_text("<html>ui</html>")
    (built / "assets" / "app.js").write_text("console.log(1)")
    assert webui_build.main(["build", "--from", str(built)]) == 0
    dist = Path(capsys.readouterr().out.strip())
    assert (dist / "index.html").read_text() == "<html>ui</html>"
    assert sorted(json.loads((dist / "_gzip" / "assets.json").read_text())) == ["assets/app.js", "index.html"]
    assert webui_build.built_dist() == dist
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "other"))
    assert webui_build.main(["build", "--from", str(empty)]) == 1
    assert capsys.readouterr().err.strip().endswith(f"mlxcel webui: error: {empty} holds no built UI (no index.html)")
