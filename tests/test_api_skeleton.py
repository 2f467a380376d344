"""The walking-skeleton HTTP surface, in process on the fake backend (a scripted model, no weights): loading gate,
health, tokenize, native completion."""

from __future__ import annotations

import json

import httpx
import pytest

from server.api.app import create_app
from server.api.state import AppState
from server.backends.fake import FakeBackend
from server.engine.engine import Engine
from server.models.tokenizer import ModelTokenizer
from tests.engines import running_engine

# b10621's to_json_non_oaicompat() key order; generation_settings is not produced yet (sampling issue)
NATIVE_KEYS = [
    "index",
    "content",
    "tokens",
    "id_slot",
    "stop",
    "model",
    "tokens_predicted",
    "tokens_evaluated",
    "generation_settings",
    "prompt",
    "has_new_line",
    "truncated",
    "stop_type",
    "stopping_word",
    "tokens_cached",
    "timings",
]
TIMING_KEYS = [
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
]


FRANCE = "The capital of France is"
SAY_HI = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"


def _scripted(tok: ModelTokenizer):
    """The fake model's rule: after these prompts, these continuations (then counting on); no weights loaded."""
    scripts = {
        tuple(tok.tokenize(FRANCE, True, True)): tok.tokenize(" Paris.\nThe answer is Paris.", False, False),
        tuple(tok.tokenize(SAY_HI, True, True)): [*tok.tokenize("Hi!", False, False), min(tok.eog_ids)],
    }

    def rule(history: list[int]) -> int:
        for prompt, script in scripts.items():
            n = len(history) - len(prompt)
            if tuple(history[: len(prompt)]) == prompt and n < len(script):
                return script[n]
        return (history[-1] + 1) % tok.vocab_size

    return rule


@pytest.fixture(scope="module")
def ready_state(twin_q4_1):
    fake = FakeBackend(
        n_vocab=ModelTokenizer(twin_q4_1.mlx_dir).vocab_size, rule=_scripted(ModelTokenizer(twin_q4_1.mlx_dir))
    )
    with running_engine(twin_q4_1.mlx_dir, fake=fake, n_slots=2) as (engine, tok):
        yield AppState(engine=engine, tokenizer=tok, model_name="smol")


def _client(state: AppState) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://t")


async def test_every_route_answers_503_loading_envelope_until_ready(twin_q4_1):
    tok = ModelTokenizer(twin_q4_1.mlx_dir)
    state = AppState(engine=Engine(twin_q4_1.mlx_dir), tokenizer=tok, model_name="smol")  # never started
    async with _client(state) as c:
        for method, path in (("GET", "/health"), ("POST", "/completion"), ("POST", "/tokenize")):
            r = await c.request(method, path, json={})
            assert r.status_code == 503
            assert r.content == b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'


async def test_health_ok_when_ready(ready_state):
    async with _client(ready_state) as c:
        r = await c.get("/health")
    assert r.status_code == 200 and r.content == b'{"status":"ok"}'
    assert r.headers["content-type"] == "application/json; charset=utf-8"


async def test_tokenize_pieces_are_strings_or_byte_arrays(ready_state):
    async with _client(ready_state) as c:
        r = await c.post("/tokenize", json={"content": "a 🤖", "with_pieces": True})
        plain = await c.post("/tokenize", json={"content": "a 🤖"})
    pieces = r.json()["tokens"]
    assert [p["id"] for p in pieces] == plain.json()["tokens"]
    assert any(isinstance(p["piece"], list) for p in pieces)
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw == "a 🤖".encode()


async def test_completion_has_native_keys_in_upstream_order(ready_state):
    async with _client(ready_state) as c:
        r = await c.post(
            "/completion",
            json={"prompt": "The capital of France is", "n_predict": 4, "return_tokens": True, "temperature": 0},
        )
    body = r.json()
    assert r.status_code == 200
    assert list(body) == NATIVE_KEYS
    assert list(body["timings"]) == TIMING_KEYS
    assert body["tokens_predicted"] == len(body["tokens"]) == 4
    assert body["stop_type"] == "limit" and body["tokens_evaluated"] == 5
    assert body["tokens_cached"] == 5 + 4 - 1
    assert body["content"] == ready_state.tokenizer.detokenize(body["tokens"], special=False)


async def test_completion_stops_on_end_of_generation(ready_state):
    async with _client(ready_state) as c:
        r = await c.post(
            "/completion", json={"prompt": SAY_HI, "n_predict": 64, "return_tokens": True, "temperature": 0}
        )
    body = r.json()
    assert body["stop_type"] == "eos"
    assert body["tokens"][-1] in ready_state.tokenizer.eog_ids
    assert "<|im_end|>" not in body["content"]


async def test_missing_prompt_is_upstreams_400(ready_state):
    async with _client(ready_state) as c:
        r = await c.post("/completion", json={"n_predict": 4})
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "code": 400,
            "message": "[json.exception.out_of_range.403] key 'prompt' not found",
            "type": "invalid_request_error",
        }
    }


async def test_empty_prompt_answers_an_empty_unstopped_result(ready_state):
    async with _client(ready_state) as c:
        r = await c.post("/completion", json={"prompt": "", "n_predict": 2})
    body = r.json()
    assert (body["content"], body["tokens_predicted"], body["stop_type"], body["tokens_cached"]) == ("", 0, "none", 0)


async def test_streamed_content_equals_the_non_streamed_content(ready_state):
    body = {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0}
    async with _client(ready_state) as c:
        whole = (await c.post("/completion", json=body)).json()
        r = await c.post("/completion", json={**body, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    frames = [json.loads(f.removeprefix("data: ")) for f in r.text.split("\n\n") if f.strip()]
    partials, final = frames[:-1], frames[-1]
    assert all(f["id_slot"] == -1 and f["stop"] is False and len(f["tokens"]) == 1 for f in partials)
    assert "".join(f["content"] for f in partials) == whole["content"]
    assert final["stop"] is True and final["content"] == "" and final["tokens_predicted"] == 12
    assert list(final) == NATIVE_KEYS


async def test_stop_string_cuts_content_and_names_the_word(ready_state):
    body = {"prompt": "The capital of France is", "n_predict": 16, "stop": ["answer"], "temperature": 0}
    async with _client(ready_state) as c:
        whole = (await c.post("/completion", json=body)).json()
        r = await c.post("/completion", json={**body, "stream": True})
    frames = [json.loads(f.removeprefix("data: ")) for f in r.text.split("\n\n") if f.strip()]
    assert (whole["stop_type"], whole["stopping_word"]) == ("word", "answer")
    assert whole["content"] == " Paris.\nThe "  # cut where the stop word starts
    assert "".join(f["content"] for f in frames[:-1]) == whole["content"]


async def test_fields_mlxcel_does_not_act_on_are_logged_not_silent(ready_state, caplog):
    async with _client(ready_state) as c:
        with caplog.at_level("WARNING", logger="mlxcel.api"):
            r = await c.post(
                "/completion",
                json={
                    "prompt": "x",
                    "n_predict": 1,
                    "dry_multiplier": 0.7,
                    "top_k": 5,
                    "samplers": ["top_k", "infill"],
                    "lora": [],
                },
            )
    assert r.status_code == 200
    assert "does not act on the request field(s) lora yet\n" in caplog.text  # the infill sampler runs
    assert "infill" not in caplog.text


async def test_score_route_agrees_with_greedy_generation(ready_state):
    async with _client(ready_state) as c:
        gen = (
            await c.post(
                "/completion",
                json={"prompt": "The capital of France is", "n_predict": 6, "return_tokens": True, "temperature": 0},
            )
        ).json()
        scored = (
            await c.post(
                "/mlxcel/score", json={"prompt": "The capital of France is", "tokens": gen["tokens"], "n_probs": 3}
            )
        ).json()
    positions = scored["positions"]
    assert [p["top_logprobs"][0]["id"] for p in positions] == gen["tokens"]
    assert all(p["logprob"] == p["top_logprobs"][0]["logprob"] <= 0 for p in positions)
    assert all(len(p["top_logprobs"]) == 3 for p in positions)
