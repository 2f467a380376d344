"""Tool calls and reasoning through the official openai and anthropic clients, against a live mlxcel serving a
template with <tool_call> and <think> syntax (fixtures/chat/think-tools.jinja). SmolLM2 never calls a tool on
its own, so each request continues a started call (a prefilled assistant turn) under tool_choice required:
the grammar makes it finish the call, the parser turns it into the clients' tool-call objects."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai
import pytest

from conftest import COMMON_ARGS, _serve

TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "think-tools.jinja"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}}
]
ASK = {"role": "user", "content": "What is the weather in Paris?"}
STARTED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'


@pytest.fixture(scope="module")
def server(twin_f32):
    from oracle.processes import mlxcel_server

    yield from _serve(mlxcel_server(twin_f32.mlx_model, [*COMMON_ARGS, "--chat-template-file", str(TEMPLATE)]))


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="sk-no-key-required")


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="sk-no-key-required")


def _tool_call_args(**extra) -> dict:
    return dict(
        model="m",
        messages=[ASK, {"role": "assistant", "content": STARTED}],
        tools=OPENAI_TOOLS,
        tool_choice="required",
        max_tokens=24,
        temperature=0,
        **extra,
    )


def test_openai_client_reads_a_tool_call(oai):
    r = oai.chat.completions.create(**_tool_call_args())
    (call,) = r.choices[0].message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert len(call.id) == 32 and r.choices[0].finish_reason in ("tool_calls", "length")


def test_openai_streamed_tool_call_deltas_rebuild_the_call(oai):
    whole = oai.chat.completions.create(**_tool_call_args()).choices[0].message.tool_calls[0]
    name, arguments, ids = "", "", set()
    for chunk in oai.chat.completions.create(**_tool_call_args(), stream=True):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert delta.index == 0
            ids.add(delta.id) if delta.id else None
            name += (delta.function.name or "") if delta.function else ""
            arguments += (delta.function.arguments or "") if delta.function else ""
    assert name == whole.function.name and arguments == whole.function.arguments
    assert len(ids) == 1  # the id comes once, with the name


def test_openai_tool_result_round_trip_renders_and_answers(oai):
    call = oai.chat.completions.create(**_tool_call_args()).choices[0].message.tool_calls[0]
    r = oai.chat.completions.create(
        model="m",
        tools=OPENAI_TOOLS,
        max_tokens=8,
        temperature=0,
        messages=[
            ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ],
    )
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_openai_reasoning_content_is_split_from_the_answer(oai):
    r = oai.chat.completions.create(
        model="m",
        max_tokens=6,
        temperature=0,
        messages=[ASK, {"role": "assistant", "content": "", "reasoning_content": "The user wants"}],
    )
    message = r.choices[0].message
    assert message.model_extra["reasoning_content"].startswith("The user wants")
    assert "<think>" not in (message.content or "")


def _claude_args(**extra) -> dict:
    return dict(
        model="m",
        max_tokens=24,
        extra_body={"temperature": 0},
        tool_choice={"type": "any"},
        tools=[{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}],
        messages=[ASK, {"role": "assistant", "content": STARTED}],
        **extra,
    )


def test_anthropic_client_reads_a_tool_use_block(claude):
    m = claude.messages.create(**_claude_args())
    (block,) = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "get_weather" and isinstance(block.input["city"], str)
    assert m.stop_reason in ("tool_use", "max_tokens")


def test_anthropic_stream_assembles_the_same_tool_input(claude):
    whole = next(b for b in claude.messages.create(**_claude_args()).content if b.type == "tool_use")
    with claude.messages.stream(**_claude_args()) as stream:
        final = stream.get_final_message()
    (block,) = [b for b in final.content if b.type == "tool_use"]
    assert block.name == whole.name and block.input == whole.input


def test_anthropic_thinking_block_streams_as_thinking(claude):
    args = {
        "model": "m",
        "max_tokens": 6,
        "extra_body": {"temperature": 0},
        "messages": [
            ASK,
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "The user wants", "signature": ""}]},
        ],
    }
    m = claude.messages.create(**args)
    with claude.messages.stream(**args) as stream:
        final = stream.get_final_message()
    assert m.content[0].type == final.content[0].type == "thinking"
    assert final.content[0].thinking == m.content[0].thinking
