"""Several prompts and n_cmpl > 1 in process: result order and indices, the shared prompt state of the
children, seeds per child, and streams whose frames carry their own task's index."""

from __future__ import annotations

import json

import httpx
import pytest

from server.api.app import create_app
from server.api.prompts import input_prompts
from server.api.state import AppState
from server.backends.fake import FakeBackend
from server.errors import UpstreamError
from tests.engines import running_engine


@pytest.fixture(scope="module")
def state(twin_q4_1):
    with running_engine(twin_q4_1.mlx_dir, fake=FakeBackend(n_vocab=49152), n_slots=3) as (engine, tok):  # no weights
        yield AppState(engine=engine, tokenizer=tok, model_name="smol")


def _client(state) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://t")


def test_prompt_shapes(state):
    tok = state.tokenizer
    assert len(input_prompts(tok, ["a", "b"])) == 2  # no integer anywhere: several prompts
    assert len(input_prompts(tok, ["a", 5])) == 1  # mixed: one prompt
    assert input_prompts(tok, [[1, 2], {"prompt_string": "a"}]) == [[1, 2], tok.tokenize("a", True, True)]
    for bad in ([], [["a", "b"]], {"text": "x"}, 1.5, [1.5]):
        with pytest.raises(UpstreamError):
            input_prompts(tok, bad)


async def test_n_cmpl_children_share_the_prompt_and_get_their_own_seeds(state):
    async with _client(state) as c:
        body = {
            "prompt": "The capital of France is",
            "n_predict": 6,
            "n_cmpl": 3,
            "seed": 7,
            "return_tokens": True,
            "temperature": 0,
        }
        r = await c.post("/completion", json=body)
        slots = (await c.get("/slots")).json()
    results = r.json()
    assert [x["index"] for x in results] == [0, 1, 2]
    assert len({x["id_slot"] for x in results}) == 3
    assert len({tuple(x["tokens"]) for x in results}) == 1  # greedy: the same continuation
    assert [x["generation_settings"]["seed"] for x in results] == [7, 8, 9]
    assert all(x["timings"]["prompt_n"] == results[0]["timings"]["prompt_n"] for x in results)
    kept = sorted(s["n_prompt_tokens"] for s in slots)
    assert kept[:2] == [0, 0] and kept[2] == results[0]["tokens_cached"]  # children keep no context


async def test_several_prompts_stream_frames_carry_their_index(state):
    async with _client(state) as c:
        body = {"prompt": ["Once upon a time", "Hello"], "n_predict": 4, "stream": True, "n_cmpl": 1, "temperature": 0}
        r = await c.post("/completion", json=body)
    frames = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: ")]
    finals = [f for f in frames if f["stop"]]
    assert sorted(f["index"] for f in finals) == [0, 1]
    for idx in (0, 1):
        partial = "".join(f["content"] for f in frames if not f["stop"] and f["index"] == idx)
        assert partial and all(
            f["tokens_evaluated"] == frames[0]["tokens_evaluated"] or f["index"] != frames[0]["index"]
            for f in frames
            if not f["stop"]
        )
