"""llama.cpp's web UI, served by mlxcel, in a real browser: Debian's Chromium driven by Playwright (PyPI) through
its executable path. The UI is the one `mlxcel webui` built from the pinned sdist (nox -s tests builds it first).

One session as a user has it: the page loads and names the model it read from /props, the server's --ui-config
reaches the settings dialog, a sampling setting changed there is sent with the next message, and the streamed
answer appears: the same text the server gives the UI's own request replayed without streaming. The screenshot
is kept (.oracle/artifacts/webui-chat.png)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import require
from oracle import loopback
from oracle.processes import mlxcel_server

ALIAS = "tiny-twin"
UI_CONFIG = {"pasteLongTextToFileLen": 2500}  # a UI default the server overrides (b10621's ui_settings)
# as the machine's probe starts Chromium: its background connections are refused by this closed network
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACT = Path(__file__).resolve().parent.parent / ".oracle" / "artifacts" / "webui-chat.png"


@pytest.fixture(scope="module")
def ui_server(twin_q4_1):
    from server.cli.webui_build import built_dist

    require(built_dist() is not None, "the web UI is not built (mlxcel webui)")
    # -n bounds the answers: the UI sends no max_tokens, and the twin's greedy answer to the question need not end
    sp = mlxcel_server(twin_q4_1.mlx_model, ["--alias", ALIAS, "--ui-config", json.dumps(UI_CONFIG), "-n", "48"])
    sp.start()
    try:
        yield sp.base_url
    finally:
        sp.cleanup()


def _browser(pw):
    chromium = shutil.which("chromium")
    require(chromium is not None, "no chromium (apt install chromium)")
    return pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)


def test_a_chat_in_the_browser_streams_the_servers_answer_with_the_settings_it_was_given(ui_server):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page()
            with page.expect_response(lambda r: r.url.split("?")[0].endswith("/props")) as props:
                page.goto(ui_server + "/")
            assert props.value.json()["ui_settings"] == UI_CONFIG
            box = page.get_by_placeholder("Type a message...")
            box.wait_for()
            page.get_by_role("button", name=ALIAS).first.wait_for()  # the model the UI read from the server

            page.get_by_role("button", name="Settings").click()
            assert page.locator("#pasteLongTextToFileLen").input_value() == str(UI_CONFIG["pasteLongTextToFileLen"])
            page.get_by_role("link", name="Sampling & Penalties").first.click()
            page.locator("#temperature").fill("0")
            page.get_by_role("button", name="Save settings").click()
            page.keyboard.press("Escape")

            box.fill("What is the capital of France?")
            with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as sent:
                box.press("Enter")
            body = json.loads(sent.value.post_data)
            assert body["stream"] is True and body["temperature"] == 0
            answer = sent.value.response()
            assert answer is not None and answer.status == 200

            replay = loopback.post(ui_server + "/v1/chat/completions", json={**body, "stream": False}, timeout=120)
            text = replay.json()["choices"][0]["message"]["content"].strip()
            assert text
            page.get_by_text(text, exact=False).first.wait_for(timeout=30_000)  # the streamed answer, rendered
            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACT))
        finally:
            browser.close()


def test_the_ui_is_served_gzipped_revalidated_and_public_as_b10621_serves_it(ui_server):
    index = loopback.get(ui_server + "/", headers={"Accept-Encoding": "gzip"})
    assert index.status_code == 200 and index.headers["content-encoding"] == "gzip"
    assert index.headers["cache-control"] == "no-cache"
    assert index.headers["cross-origin-opener-policy"] == "same-origin"
    assert "<!doctype html>" in index.text
    etag = index.headers["etag"]
    again = loopback.get(ui_server + "/index.html", headers={"Accept-Encoding": "gzip", "If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    plain = loopback.get(ui_server + "/", headers={"Accept-Encoding": "identity"})
    assert (plain.status_code, plain.text) == (415, "Error: gzip is not supported by this browser")
    version = loopback.get(ui_server + "/_app/version.json")
    assert version.headers["cache-control"] == "no-cache" and "etag" not in version.headers
    bundle = next(a for a in _assets(index.text) if a.endswith(".js"))
    hashed = loopback.get(f"{ui_server}/{bundle}")
    assert hashed.status_code == 200 and hashed.headers["content-type"] == "application/javascript"
    assert hashed.headers["cache-control"] == "public, max-age=31536000, immutable"


def _assets(html: str) -> list[str]:
    import re

    return [m.removeprefix("./") for m in re.findall(r'href="(\./_app/[^"]+)"', html)]
