"""GET /props, POST /props and GET /slots in process: the live slot registry under load, the 503 of
fail_on_no_slot when every slot is busy, and the endpoint switches (the oracle compares the shapes)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from server.api.app import create_app
from server.api.state import AppState, ServerSettings
from server.backends.fake import FakeBackend
from tests.engines import running_engine


@pytest.fixture(scope="module")
def engine_and_tok(twin_q4_1):
    # no weights: the fake backend at a pace slow enough to watch both slots busy
    with running_engine(twin_q4_1.mlx_dir, fake=FakeBackend(n_vocab=49152, pass_seconds=0.02), n_slots=2) as pair:
        yield pair


def _client(engine, tok, **settings) -> httpx.AsyncClient:
    state = AppState(engine=engine, tokenizer=tok, model_name="smol", settings=ServerSettings(**settings))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://t")


async def test_slots_are_live_while_requests_run_and_503_when_none_is_free(engine_and_tok):
    engine, tok = engine_and_tok
    async with _client(engine, tok) as c:
        body = {"prompt": "Once upon a time", "n_predict": 40, "ignore_eos": True, "temperature": 0}
        runs = [asyncio.create_task(c.post("/completion", json=body)) for _ in range(2)]
        busy = None
        for _ in range(2000):
            slots = (await c.get("/slots")).json()
            if all(s["is_processing"] and s["next_token"][0]["n_decoded"] > 0 for s in slots):
                busy = slots
                break
            await asyncio.sleep(0.01)
        assert busy is not None, "both slots never showed as processing"
        blocked = await c.get("/slots?fail_on_no_slot=1")
        finals = [r.json() for r in await asyncio.gather(*runs)]
        after = (await c.get("/slots")).json()
    assert blocked.status_code == 503
    assert blocked.json() == {"error": {"code": 503, "message": "no slot available", "type": "unavailable_error"}}
    for s in busy:
        nt = s["next_token"][0]
        assert nt["has_next_token"] and nt["n_remain"] == 40 - nt["n_decoded"]
        assert s["params"]["n_predict"] == 40 and "stop" not in s["params"]  # the only_metrics subset
    assert {s["id_task"] for s in busy} == {s["id_task"] for s in after}
    assert sorted(f["id_slot"] for f in finals) == [0, 1]
    for s in after:  # released: counters back to zero, the slot keeps its tokens and last task
        assert not s["is_processing"] and s["next_token"][0] == {
            "has_next_token": False,
            "has_new_line": False,
            "n_remain": -1,
            "n_decoded": 0,
        }
        assert s["n_prompt_tokens"] == len(tok.tokenize("Once upon a time", True, True)) + 40 - 1
        assert "prompt" not in s


async def test_endpoint_switches_and_debug_text(engine_and_tok):
    engine, tok = engine_and_tok
    async with _client(engine, tok, endpoint_slots=False) as c:
        off = await c.get("/slots")
        props_off = await c.post("/props", json={})
    assert off.status_code == 501 and "Start it with `--slots`" in off.json()["error"]["message"]
    assert props_off.status_code == 501 and "Start it with `--props`" in props_off.json()["error"]["message"]
    async with _client(engine, tok, endpoint_props=True, slots_debug=True) as c:
        await c.post("/completion", json={"prompt": "Hi", "n_predict": 2})
        ok = await c.post("/props", json={})
        slots = (await c.get("/slots")).json()
        props = (await c.get("/props")).json()
    assert ok.json() == {"success": True}
    assert any(s.get("prompt") == "Hi" for s in slots)
    assert props["endpoint_props"] is True and props["endpoint_slots"] is True and props["ui"] is True
    assert props["default_generation_settings"]["n_ctx"] == engine.info.n_ctx
    assert props["total_slots"] == 2 and props["eos_token"] == "<|im_end|>"
