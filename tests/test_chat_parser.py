"""The chat answer readers: streamed deltas concatenate to the non-streamed message (b10621's diffs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.api.chat import message_parser
from server.chat.diffs import DiffError, MessageState, compute_diffs, delta_json, message_json
from server.chat.messages import ChatMsg, ToolCall
from server.chat.params import ChatInfo, ChatSettings, chat_request
from server.errors import UpstreamError


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


TEMPLATE = (Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "think-tools.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TEXT = st.text(alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=12)


def _info(**body) -> ChatInfo:
    return chat_request(
        {"messages": [{"role": "user", "content": "Weather?"}], **body}, ChatSettings(template=TEMPLATE)
    )[1]


def _call(city: str) -> str:
    return '<tool_call>\n{"name": "get_weather", "arguments": {"city": ' + json.dumps(city) + "}}\n</tool_call>"


@st.composite
def answers(draw) -> str:
    """What a thinking, tool-calling model writes: an optional think block, text, then calls."""
    out = ""
    if draw(st.booleans()):
        out += "<think>\n" + draw(TEXT) + "\n</think>\n\n"
    out += draw(TEXT).strip()
    for city in draw(st.lists(TEXT, max_size=2)):
        out += ("\n" if out else "") + _call(city)
    return out


def _chunks(text: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(text) + 1) for c in cuts})
    return [text[i:j] for i, j in zip([0, *at], [*at, len(text)], strict=True)]


@settings(max_examples=60, deadline=None)
@given(
    answers(),
    st.lists(st.integers(0, 400), max_size=10),
    st.sampled_from(["none", "auto", "deepseek", "deepseek-legacy"]),
    st.booleans(),
)
def test_streamed_deltas_fold_to_the_whole_message_under_every_reasoning_format(text, cuts, fmt, tools):
    parse = message_parser(_info(reasoning_format=fmt, **({"tools": TOOLS} if tools else {})))
    folded, whole = _streamed(parse, _chunks(text, cuts))
    assert folded["content"] == whole["content"]
    assert folded["reasoning_content"] == whole.get("reasoning_content", "")
    calls = [folded["tool_calls"][i] for i in sorted(folded["tool_calls"])]
    assert calls == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in whole.get("tool_calls", [])
    ]


def test_the_parser_splits_reasoning_content_and_tool_calls():
    parse = message_parser(_info(tools=TOOLS))
    msg = message_json(parse("<think>\nHm.\n</think>\n\nLet me check.\n" + _call("Paris"), False))
    assert msg["reasoning_content"] == "Hm.\n"  # as b10621: the newline before </think> stays reasoning
    assert msg["content"] == "Let me check.\n"  # content runs up to the call marker
    assert msg["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    none = message_json(message_parser(_info(reasoning_format="none"))("<think>\nHm.\n</think>\n\nHi", False))
    assert none == {"role": "assistant", "content": "<think>\nHm.\n</think>\n\nHi"}


def test_without_tools_a_tool_call_stays_content():
    msg = message_json(message_parser(_info())(_call("Paris"), False))
    assert "tool_calls" not in msg and msg["content"] == _call("Paris")


@settings(deadline=None)
@given(st.lists(st.text(max_size=6), max_size=12))
def test_plain_content_streams_to_the_whole(pieces):
    folded, whole = _streamed(message_parser(_info()), pieces)
    assert folded["content"] == whole["content"]


@settings(deadline=None)
@given(st.lists(st.text(max_size=6), max_size=12), st.sampled_from(["Sure:", "A"]))
def test_a_continued_message_streams_only_what_follows_the_prefill(pieces, continuation):
    info = _info(
        messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": continuation}],
        continue_final_message="content",
        add_generation_prompt=False,
    )
    folded, whole = _streamed(message_parser(info), pieces, continuation=True)
    assert whole["content"] == continuation + "".join(pieces)
    assert folded["content"] == "".join(pieces)


def test_tool_call_diffs_name_the_call_once_then_stream_its_arguments():
    prv = ChatMsg("assistant", tool_calls=[ToolCall("get_weather", '{"city": "Pa', "abc")])
    new = ChatMsg(
        "assistant", tool_calls=[ToolCall("get_weather", '{"city": "Paris"}', "abc"), ToolCall("f", "", "def")]
    )
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


def test_nesting_deeper_than_the_parser_can_follow_is_the_format_error_not_a_crash():
    parse = message_parser(
        _info(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    )
    deep = '<tool_call>\n{"name": "f", "arguments": {"a": ' + "[" * 400 + "]" * 400 + "}}\n</tool_call>"
    with pytest.raises(UpstreamError, match="does not match the expected peg-native format"):
        parse(deep, False)
