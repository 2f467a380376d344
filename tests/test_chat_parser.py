"""The chat answer readers: streamed deltas concatenate to the non-streamed message (b10621's diffs)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.api.chat import message_parser, response_format_content
from server.chat.diffs import DiffError, MessageState, compute_diffs, delta_json, message_json
from server.chat.messages import ChatMsg, ToolCall
from server.chat.params import ChatInfo


def _streamed(parse, pieces: list[str], continuation: bool = False) -> tuple[dict, dict]:
    """What a stream sends (its deltas folded together) and what the final message is."""
    state = MessageState(parse, is_continuation=continuation)
    folded: dict = {"content": "", "reasoning_content": "", "tool_calls": {}}

    def fold(diffs):
        for d in diffs:
            delta = delta_json(d)
            folded["content"] += delta.get("content", "")
            folded["reasoning_content"] += delta.get("reasoning_content", "")
            for call in delta.get("tool_calls", []):
                slot = folded["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                slot["name"] += call.get("function", {}).get("name", "")
                slot["arguments"] += call.get("function", {}).get("arguments", "")
    for piece in pieces:
        fold(state.update(piece, True))
    fold(state.update("", False))
    whole = message_json(parse("".join(pieces), False))
    return folded, whole


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                   max_size=3), max_leaves=6)


@given(st.lists(st.text(max_size=6), max_size=12))
def test_plain_content_streams_to_the_whole(pieces):
    folded, whole = _streamed(message_parser(ChatInfo()), pieces)
    assert folded["content"] == whole["content"]


@given(st.lists(st.text(max_size=6), max_size=12), st.sampled_from(["Sure:", "A"]))
def test_a_continued_message_streams_only_what_follows_the_prefill(pieces, continuation):
    folded, whole = _streamed(message_parser(ChatInfo(continuation=continuation)), pieces, continuation=True)
    assert whole["content"] == continuation + "".join(pieces)
    assert folded["content"] == "".join(pieces)


@given(JSONISH, st.booleans(), st.sampled_from(["", " ", "\n"]), st.integers(1, 7), st.sampled_from(["", "\n"]))
def test_response_format_streams_to_the_whole_json(value, fenced, lead, cut, trail):
    body = json.dumps(value, indent=2)
    text = lead + ("```json\n" + body + "\n```" if fenced else body + trail)
    pieces = [text[i:i + cut] for i in range(0, len(text), cut)]
    folded, whole = _streamed(message_parser(ChatInfo(response_format=True)), pieces)
    assert whole["content"] == body
    assert folded["content"] == body


def test_response_format_withholds_a_fence_and_what_follows_the_json():
    assert response_format_content("```", True) == ""
    assert response_format_content("```json\n{\"a\": 1", True) == "{\"a\": 1"
    assert response_format_content("```json\n{\"a\": 1}\n``", True) == "{\"a\": 1}"


def test_tool_call_diffs_name_the_call_once_then_stream_its_arguments():
    prv = ChatMsg("assistant", tool_calls=[ToolCall("get_weather", '{"city": "Pa', "abc")])
    new = ChatMsg("assistant", tool_calls=[ToolCall("get_weather", '{"city": "Paris"}', "abc"),
                                           ToolCall("f", "", "def")])
    assert [delta_json(d) for d in compute_diffs(prv, new)] == [
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]},
        {"tool_calls": [{"index": 1, "id": "def", "type": "function", "function": {"name": "f"}}]},
    ]


def test_a_reparse_that_drops_streamed_text_is_an_error():
    with pytest.raises(DiffError, match="Invalid diff"):
        compute_diffs(ChatMsg("assistant", content="abc"), ChatMsg("assistant", content="xyz"))
    with pytest.raises(DiffError, match="less tool calls"):
        compute_diffs(ChatMsg("assistant", tool_calls=[ToolCall("f", "")]), ChatMsg("assistant"))


def test_tool_call_ids_are_handed_out_once_and_kept():
    calls = iter([[], [ToolCall("f", "{")], [ToolCall("f", "{}"), ToolCall("g", "")]])
    state = MessageState(lambda text, partial: ChatMsg("assistant", content="x", tool_calls=next(calls)))
    state.update("a", True)
    state.update("b", True)
    first = state.chat_msg.tool_calls[0].id
    state.update("c", False)
    assert len(first) == 32 and first.isalnum()
    assert state.chat_msg.tool_calls[0].id == first != state.chat_msg.tool_calls[1].id
