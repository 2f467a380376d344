"""The official openai Python client against a live mlxcel, as users reach a llama-server."""

from __future__ import annotations

import json

import openai
import pytest

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def client(mlxcel_f32):
    return openai.OpenAI(base_url=f"{mlxcel_f32.base_url}/v1", api_key="sk-no-key-required")


def test_chat_completion_round_trip(client):
    r = client.chat.completions.create(model="smollm2-135m-instruct", messages=HI, max_tokens=8, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0


def test_streamed_deltas_concatenate_to_the_non_streamed_content(client):
    args = dict(model="smollm2-135m-instruct", messages=HI, max_tokens=12, temperature=0)
    answer = client.chat.completions.create(**args).choices[0]
    whole = answer.message.content
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [answer.finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_logprobs_in_openai_shape(client):
    r = client.chat.completions.create(
        model="m", messages=HI, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    assert all(len(entry.top_logprobs) == 2 and entry.logprob <= 0 for entry in content)
    assert "".join(entry.token for entry in content) == r.choices[0].message.content


def test_response_format_json_schema_gives_valid_json(client):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    r = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Give JSON"}],
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    )
    value = json.loads(r.choices[0].message.content)
    assert isinstance(value["a"], int)


def test_bad_request_surfaces_as_openai_error(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=HI, response_format={"type": "bogus"})
    assert "response_format type must be one of" in str(err.value)


def test_responses_api_round_trip_and_stream(client):
    r = client.responses.create(model="m", input="Hi", max_output_tokens=8, temperature=0)
    assert r.status == "completed" and r.output[0].type == "message"
    text = r.output_text
    assert text and r.usage.output_tokens <= 8
    events = list(client.responses.create(model="m", input="Hi", max_output_tokens=8, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text


def test_text_completions_route(client):
    r = client.completions.create(model="m", prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="m", prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == r.choices[0].text
