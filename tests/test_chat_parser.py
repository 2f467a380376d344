"""The chat answer readers: streamed deltas concatenate to the non-streamed content (b10621's diffs)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from server.api.chat import content_reader, response_format_content
from server.chat.params import ChatInfo


def _streamed(read, pieces: list[str]) -> str:
    """What chat_shape sends: at each piece, the content's growth since the last delta."""
    text, sent = "", ""
    for piece in pieces:
        text += piece
        content = read(text, True)
        if len(content) > len(sent) and content.startswith(sent):
            sent = content
    final = read(text, False)
    return sent + final[len(sent):] if final.startswith(sent) else final


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                   max_size=3), max_leaves=6)


@given(st.lists(st.text(max_size=6), max_size=12), st.sampled_from(["", "Sure:"]))
def test_plain_content_streams_to_the_whole(pieces, continuation):
    read = content_reader(ChatInfo(continuation=continuation))
    assert _streamed(read, pieces) == read("".join(pieces), False)


@given(JSONISH, st.booleans(), st.sampled_from(["", " ", "\n"]), st.integers(1, 7), st.sampled_from(["", "\n"]))
def test_response_format_streams_to_the_whole_json(value, fenced, lead, cut, trail):
    body = json.dumps(value, indent=2)
    text = lead + ("```json\n" + body + "\n```" if fenced else body + trail)
    pieces = [text[i:i + cut] for i in range(0, len(text), cut)]
    read = content_reader(ChatInfo(response_format=True))
    assert read(text, False) == body
    assert _streamed(read, pieces) == body


def test_response_format_withholds_a_fence_and_what_follows_the_json():
    assert response_format_content("```", True) == ""
    assert response_format_content("```json\n{\"a\": 1", True) == "{\"a\": 1"
    assert response_format_content("```json\n{\"a\": 1}\n``", True) == "{\"a\": 1}"
