"""The differential chat-template autoparser (server/chat/autoparser) against b10621.

Expected values come from b10621's tests (tests/test-chat-auto-parser.cpp, tests/test-chat.cpp) and, where
marked, from the b10621 llama-server binary's own debug log of its analysis (`--verbose`) for the template.
Templates are read from the pinned sdist's models/templates; those tests skip when it is not unpacked.
"""

from __future__ import annotations

import pytest

from oracle.reference import SOURCE_SUBDIR
from server.chat.autoparser.helpers import (
    DiffSplit,
    Segment,
    SegmentType,
    Template,
    TemplateParams,
    after_common_suffix,
    calculate_diff_split,
    compare_variants,
    segmentize_markers,
    until_common_prefix,
)
from server.chat.caps import template_caps
from server.models.cache import cache_root

TEMPLATES = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "models" / "templates"


def template_source(name: str) -> str:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"the b10621 sources are not unpacked ({path})")
    return path.read_text(encoding="utf-8")


def _template(source: str) -> Template:
    return Template(source, "", "", template_caps(source))


_ANALYSES: dict[str, object] = {}


def analysis(name: str):
    """The analysis of a b10621 template, as common_chat_template(source, "", "") is analysed upstream."""
    from server.chat.autoparser.analysis import Autoparser

    if name not in _ANALYSES:
        a = Autoparser()
        a.analyze_template(_template(template_source(name)))
        _ANALYSES[name] = a
    return _ANALYSES[name]


# ---------------------------------------------------------------------------------------------------------------
# helpers: test-chat-auto-parser.cpp's diff_split, common_prefix, common_suffix, segments, compare_variants


@pytest.mark.parametrize("left,right,prefix,lft,rgt,suffix", [
    # basic
    ("hello world", "hello test", "hello ", "world", "test", ""),
    ("abc", "xyz", "", "abc", "xyz", ""),
    ("prefixA suffix", "prefixB suffix", "prefix", "A", "B", " suffix"),
    # identical
    ("hello", "hello", "hello", "", "", ""),
    ("", "", "", "", "", ""),
    ("a", "a", "a", "", "", ""),
    ("<row><row><row><your><boat><gently>", "<row><row><row><your><boat><gently>",
     "<row><row><row><your><boat><gently>", "", "", ""),
    # common prefix
    ("abcdef", "abcxyz", "abc", "def", "xyz", ""),
    ("same", "sameagain", "same", "", "again", ""),
    ("test", "testing", "test", "", "ing", ""),
    # common suffix
    ("123end", "456end", "", "123", "456", "end"),
    ("start", "end", "", "start", "end", ""),
    ("abcsuffix", "xyzsuffix", "", "abc", "xyz", "suffix"),
    # common both
    ("helloXworld", "helloYworld", "hello", "X", "Y", "world"),
    ("ABCmiddleXYZ", "ABCdifferentXYZ", "ABC", "middle", "different", "XYZ"),
    ("startAend", "startBend", "start", "A", "B", "end"),
    ("aa", "ab", "a", "a", "b", ""),
    # empty cases
    ("", "hello", "", "", "hello", ""),
    ("hello", "", "", "hello", "", ""),
    ("a", "", "", "a", "", ""),
    ("", "a", "", "", "a", ""),
    # no common
    ("left", "right", "", "lef", "righ", "t"),
    ("123", "456", "", "123", "456", ""),
    # single char
    ("a", "b", "", "a", "b", ""),
    ("a", "ab", "a", "", "b", ""),
    ("ab", "a", "a", "b", "", ""),
    # overlaps
    ("testing", "test", "test", "ing", "", ""),
    ("Xtest", "Ytest", "", "X", "Y", "test"),
    ("testX", "testY", "test", "X", "Y", ""),
    ("abc", "cba", "", "abc", "cba", ""),
    # tag boundaries
    ("prefix<tag>", "prefix</tag>suffix", "prefix", "<tag>", "</tag>suffix", ""),
    ("prefix<div>content</div>", "prefix<div>different</div>", "prefix<div>", "cont", "differ", "ent</div>"),
    ("Hello <world>", "Hello test", "Hello ", "<world>", "test", ""),
    ("test [array]", "test other", "test ", "[array]", "other", ""),
    ("<tag>left</tag>", "<tag>righ</tag>", "<tag>", "left", "righ", "</tag>"),
    ("PREFIX</think>Sure", "PREFIX<think>Lemme think</think>Sure", "PREFIX", "", "<think>Lemme think",
     "</think>Sure"),
])
def test_calculate_diff_split(left, right, prefix, lft, rgt, suffix):
    assert calculate_diff_split(left, right) == DiffSplit(prefix, suffix, lft, rgt)


def test_calculate_diff_split_special_tokens():
    # the |> opening the common suffix completes <|END_RESPONSE and <|END_ACTION
    suffix = "|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    left = "SOME_PREFIX" + "<|START_RESPONSE|>Let me help you.<|END_RESPONSE" + suffix
    right = ("SOME_PREFIX" + "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n"
             '    {"tool_call_id": "0", "tool_name": "test_function_name", '
             '"parameters": {"param1": "value1", "param2": "value2"}}\n]<|END_ACTION' + suffix)
    result = calculate_diff_split(left, right)
    assert result.prefix == "SOME_PREFIX"
    assert result.left == "<|START_RESPONSE|>Let me help you.<|END_RESPONSE|>"
    assert "<|END_ACTION|>" in result.right
    assert result.suffix == "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"


def test_calculate_diff_split_unbalanced_brackets():
    result = calculate_diff_split("test<tag", "test>content")
    assert result.prefix.startswith("test")
    assert result.left or result.right or result.suffix
    result = calculate_diff_split("test[", "test]value")
    assert result.left or result.right or result.suffix


def test_calculate_diff_split_generation_prompt():
    # left is a prefix of right: the appended generation prompt is the whole right side, not rotated
    left = "<|im_start|>user\nHello<|im_end|>\n"
    assert calculate_diff_split(left, left + "<|im_start|>assistant\n<think>\n") == DiffSplit(
        left, "", "", "<|im_start|>assistant\n<think>\n")
    common = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\nSearch for files<|im_end|>\n"
              "<|im_start|>assistant\n<think>\nLet me search.\n</think>\n\n"
              "<tool_call>\n<function=search>\n</function>\n</tool_call><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nNo files found\n</tool_response><|im_end|>\n")
    result = calculate_diff_split(common, common + "<|im_start|>assistant\n<think>\n")
    assert (result.left, result.right) == ("", "<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize("full,left,right,expected", [
    ("<function name=foo><arg name=bar>", "<arg name=bar>", "<arg name=baz>", "<function name=foo>"),
    ("prefix<test>suffix", "<test>different", "<test>other", "prefix"),
    ("<common>rest", "<common>left", "<common>right", ""),
    ("something", "left", "right", ""),
    ("test", "", "right", ""),
    ("abcXYZ<shared_prefix>rest", "<shared_prefix>left", "<shared_prefix>right", "abcXYZ"),
])
def test_until_common_prefix(full, left, right, expected):
    assert until_common_prefix(full, left, right) == expected


@pytest.mark.parametrize("full,left,right,expected", [
    ("<function name=foo><arg name=bar>100</arg></function>", "<arg name=bar>100</arg>", "<arg name=baz>535</arg>",
     "</function>"),
    ("rest<common>", "left<common>", "right<common>", ""),
    ("test", "left", "", ""),
    ("<outer><inner>value</inner></outer>", "<inner>value</inner>", "<inner>different</inner>", "</outer>"),
    ("prefix<shared>rest</shared>", "prefix<shared>left</shared>", "prefix<shared>right</shared>", ""),
    ("<tag>content</tag><extra>", "<tag>value</tag>", "<tag>other</tag>", "<extra>"),
    ("start<middle>end</middle>", "prefix<middle>left</middle>", "prefix<middle>right</middle>", ""),
])
def test_after_common_suffix(full, left, right, expected):
    assert after_common_suffix(full, left, right) == expected


T, M = SegmentType.TEXT, SegmentType.MARKER


@pytest.mark.parametrize("text,expected", [
    ("pre_marker[marker]post_marker", [(T, "pre_marker"), (M, "[marker]"), (T, "post_marker")]),
    ("pre_marker<marker>post_marker", [(T, "pre_marker"), (M, "<marker>"), (T, "post_marker")]),
    ("<hello>world</hello>", [(M, "<hello>"), (T, "world"), (M, "</hello>")]),
    ("<hello>[hello]<world>[world]", [(M, "<hello>"), (M, "[hello]"), (M, "<world>"), (M, "[world]")]),
    ("im<blue>daba<dee>da[hey]", [(T, "im"), (M, "<blue>"), (T, "daba"), (M, "<dee>"), (T, "da"), (M, "[hey]")]),
])
def test_segmentize_markers(text, expected):
    assert segmentize_markers(text) == [Segment(t, v) for t, v in expected]


def _variants(source: str, params: TemplateParams, modify):
    return compare_variants(Template(source, caps=template_caps(source)), params, modify)


def test_compare_variants():
    echo = "{{ messages[0]['content'] }}"
    loop = "{% for message in messages %}{{ message['role'] }}:{{ message['content'] }}{% endfor %}"
    user = [{"role": "user", "content": "A"}]

    def content_b(p):
        p.messages[0]["content"] = "B"

    result = _variants(loop, TemplateParams(messages=user), content_b)
    assert (result.diff.left, result.diff.right) == ("A", "B")

    def role_and_content(p):
        p.messages[0]["content"], p.messages[0]["role"] = "B", "newuser"

    result = _variants(loop, TemplateParams(messages=user), role_and_content)
    assert (result.diff.left, result.diff.right) == ("user:A", "newuser:B")

    def tool_bar(p):
        p.tools[0]["name"] = "bar"

    result = _variants("{% for tool in tools %}{{ tool['name'] }}{% endfor %}",
                       TemplateParams(tools=[{"name": "foo"}]), tool_bar)
    assert (result.diff.left, result.diff.right) == ("foo", "bar")

    result = _variants(echo, TemplateParams(messages=[{"role": "user", "content": "Hello"}]), None)
    assert result.diff == DiffSplit("Hello", "", "", "")
    # a template that fails to render gives no comparison
    failing = "{{ messages.cahoot()[0]['nonexistent_field'] }}"
    assert _variants(failing, TemplateParams(messages=[{"role": "user", "content": "Hello"}]), content_b) is None
