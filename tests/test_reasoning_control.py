"""reasoning_control and POST /v1/chat/completions/control's reasoning_end, in the engine: a running completion
named by its id has its open reasoning block ended now (the forced message and end tag come next), and the
control's answers follow b10621's server_task_result_control."""

from __future__ import annotations

import asyncio

import pytest

from server.api.chat import CONTROL_ANSWERS  # the engine's outcomes in b10621's words
from server.engine.reasoning_budget import INT32_MAX
from server.engine.types import FinalEvent, GenerationRequest, ReasoningBudgetSpec, SamplingParams, TokenEvent
from server.models.bundled import BUNDLED_MODELS
from tests.engines import running_engine

PROMPT = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n<think>"


@pytest.fixture(scope="module")
def engine():
    with running_engine(BUNDLED_MODELS["smollm2-135m-instruct-f32"].materialize(), n_slots=2) as pair:
        yield pair


def _request(tok, control: bool, cmpl_id: str) -> GenerationRequest:
    def ids(text: str) -> tuple[int, ...]:
        return tuple(tok.tokenize(text, add_special=False, parse_special=True))

    spec = ReasoningBudgetSpec(
        start=ids("<think>"),
        ends=(ids("</think>"),),
        forced=ids(" (cut)") + ids("</think>"),
        budget=INT32_MAX,
        prefill=ids("<think>"),
    )
    return GenerationRequest(
        prompt_tokens=tuple(tok.tokenize(PROMPT, False, True)),
        n_predict=24,
        cache_prompt=False,
        sampling=SamplingParams(temperature=0.0),
        reasoning_budget=spec,
        reasoning_control=control,
        cmpl_id=cmpl_id,
    )


async def _run(engine, request: GenerationRequest, control_after: int | None) -> tuple[bytes, list[dict]]:
    handle = engine.submit(request)
    text, answers, n = b"", [], 0
    async for event in handle:
        if isinstance(event, TokenEvent):
            text += event.text
            n += 1
            if n == control_after:
                answers.append(
                    CONTROL_ANSWERS[await asyncio.wrap_future(engine.control(request.cmpl_id, "reasoning_end"))]
                )
        elif isinstance(event, FinalEvent):
            break
    return text, answers


def test_reasoning_end_forces_the_end_of_the_block_now(engine):
    eng, tok = engine
    plain, _ = asyncio.run(_run(eng, _request(tok, True, "chatcmpl-plain"), None))
    assert b"</think>" not in plain  # left alone, the model keeps reasoning for all 24 tokens
    ended, answers = asyncio.run(_run(eng, _request(tok, True, "chatcmpl-ended"), 4))
    assert answers == [{"success": True}]
    assert ended.startswith(plain[: len(ended.split(b" (cut)")[0])])  # the same tokens up to the control
    assert b" (cut)</think>" in ended


def test_control_answers_follow_b10621(engine):
    eng, tok = engine
    unknown = CONTROL_ANSWERS[eng.control("chatcmpl-nobody", "reasoning_end").result(timeout=60)]
    assert unknown == {"success": False, "message": "no active completion for this id"}
    _, answers = asyncio.run(_run(eng, _request(tok, False, "chatcmpl-unarmed"), 2))
    assert answers == [{"success": False, "message": "reasoning control not enabled for this completion"}]
