"""The official anthropic Python client against a live mlxcel's /v1/messages."""

from __future__ import annotations

import anthropic
import pytest

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def client(mlxcel_f32):
    return anthropic.Anthropic(base_url=mlxcel_f32.base_url, api_key="sk-no-key-required")


def test_message_round_trip(client):
    m = client.messages.create(model="smollm2-135m-instruct", max_tokens=8, messages=HI, extra_body={"temperature": 0})
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 8


def test_stream_text_equals_the_message_text(client):
    args = dict(model="m", max_tokens=12, messages=HI, extra_body={"temperature": 0}, system="Be friendly.")
    message = client.messages.create(**args)
    whole = message.content[0].text
    with client.messages.stream(**args) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == whole == final.content[0].text
    assert final.stop_reason == message.stop_reason


def test_stop_sequence_is_reported(client):
    m = client.messages.create(
        model="m", max_tokens=32, messages=HI, extra_body={"temperature": 0}, stop_sequences=["assist"]
    )
    assert m.stop_reason == "end_turn" and m.stop_sequence == "assist"
    assert "assist" not in m.content[0].text


def test_count_tokens_matches_what_the_message_used(client):
    counted = client.messages.count_tokens(model="m", messages=HI)
    used = client.messages.create(model="m", max_tokens=1, messages=HI, extra_body={"temperature": 0})
    assert counted.input_tokens == used.usage.input_tokens + (used.usage.cache_read_input_tokens or 0)
