"""--log-prompts-dir (server/api/prompt_log.py): each completion's prompt, as given, in a file of its own named by
the milliseconds since start, as b10621's handle_completions_impl writes it; the chat routes log the prompt their
template rendered."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from server.api import prompt_log
from server.api.app import create_app
from server.api.state import AppState, ServerSettings
from server.backends.fake import FakeBackend
from tests.engines import running_engine


@pytest.fixture(scope="module")
def engine_and_tok(twin_q4_1):
    with running_engine(twin_q4_1.mlx_dir, fake=FakeBackend(n_vocab=49152), n_slots=1) as pair:
        yield pair


def test_a_prompt_is_written_as_given(tmp_path):
    prompt_log.write(str(tmp_path), "Hello there")
    prompt_log.write(str(tmp_path / "missing"), "lost")  # (a directory that is not there: logged, nothing raised)
    prompt_log.write(str(tmp_path), [1, 2, "x"])
    files = sorted(tmp_path.glob("*.txt"))
    assert files and all(re.fullmatch(r"\d{12}\.txt", f.name) for f in files)
    texts = {f.read_text(encoding="utf-8") for f in files}
    assert json.dumps([1, 2, "x"], indent=2) in texts  # nlohmann's dump(2): "[\n  1,\n  2,\n  \"x\"\n]"
    assert '[\n  1,\n  2,\n  "x"\n]' in texts


async def test_completions_and_chats_log_their_prompts(engine_and_tok, tmp_path):
    engine, tok = engine_and_tok
    state = AppState(
        engine=engine, tokenizer=tok, model_name="smol", settings=ServerSettings(prompts_log_dir=str(tmp_path))
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://t") as c:
        r = await c.post("/completion", json={"prompt": "Once upon a time", "n_predict": 2})
        assert r.status_code == 200
        logged = {f.read_text(encoding="utf-8") for f in tmp_path.glob("*.txt")}
        assert "Once upon a time" in logged
        r = await c.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 2}
        )
        assert r.status_code == 200
    chats = [t for t in (f.read_text(encoding="utf-8") for f in tmp_path.glob("*.txt")) if "Hi!" in t]
    assert chats and "<|im_start|>user\nHi!<|im_end|>" in chats[0]  # the template's rendering, as b10621 logs it
