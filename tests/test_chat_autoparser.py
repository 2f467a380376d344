"""The differential chat-template autoparser (server/chat/autoparser) against b10621.

Expected values come from b10621's tests (tests/test-chat-auto-parser.cpp, tests/test-chat.cpp) and, where
marked, from the b10621 llama-server binary's own debug log of its analysis (`--verbose`) for the template.
Templates are read from the pinned sdist's models/templates; those tests skip when it is not unpacked.
"""

from __future__ import annotations

import pytest

from server.chat.autoparser import generate_chat_params, specialized_template_kind
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
from tests.chat_support import (
    CALL,
    CONTINUE_CONTENT,
    HELLO,
    SPECIAL_FUNCTION,
    assert_peg_parses,
    message_user,
    msg,
    prefill_reasoning,
    request_inputs,
    template_source,
    tool,
)


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


@pytest.mark.parametrize(
    "left,right,prefix,lft,rgt,suffix",
    [
        # basic
        ("hello world", "hello test", "hello ", "world", "test", ""),
        ("abc", "xyz", "", "abc", "xyz", ""),
        ("prefixA suffix", "prefixB suffix", "prefix", "A", "B", " suffix"),
        # identical
        ("hello", "hello", "hello", "", "", ""),
        ("", "", "", "", "", ""),
        ("a", "a", "a", "", "", ""),
        (
            "<row><row><row><your><boat><gently>",
            "<row><row><row><your><boat><gently>",
            "<row><row><row><your><boat><gently>",
            "",
            "",
            "",
        ),
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
        (
            "PREFIX</think>Sure",
            "PREFIX<think>Lemme think</think>Sure",
            "PREFIX",
            "",
            "<think>Lemme think",
            "</think>Sure",
        ),
    ],
)
def test_calculate_diff_split(left, right, prefix, lft, rgt, suffix):
    assert calculate_diff_split(left, right) == DiffSplit(prefix, suffix, lft, rgt)


def test_calculate_diff_split_special_tokens():
    # the |> opening the common suffix completes <|END_RESPONSE and <|END_ACTION
    suffix = "|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    left = "SOME_PREFIX" + "<|START_RESPONSE|>Let me help you.<|END_RESPONSE" + suffix
    right = (
        "SOME_PREFIX" + "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "test_function_name", '
        '"parameters": {"param1": "value1", "param2": "value2"}}\n]<|END_ACTION' + suffix
    )
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
        left, "", "", "<|im_start|>assistant\n<think>\n"
    )
    common = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nSearch for files<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nLet me search.\n</think>\n\n"
        "<tool_call>\n<function=search>\n</function>\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nNo files found\n</tool_response><|im_end|>\n"
    )
    result = calculate_diff_split(common, common + "<|im_start|>assistant\n<think>\n")
    assert (result.left, result.right) == ("", "<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize(
    "full,left,right,expected",
    [
        ("<function name=foo><arg name=bar>", "<arg name=bar>", "<arg name=baz>", "<function name=foo>"),
        ("prefix<test>suffix", "<test>different", "<test>other", "prefix"),
        ("<common>rest", "<common>left", "<common>right", ""),
        ("something", "left", "right", ""),
        ("test", "", "right", ""),
        ("abcXYZ<shared_prefix>rest", "<shared_prefix>left", "<shared_prefix>right", "abcXYZ"),
    ],
)
def test_until_common_prefix(full, left, right, expected):
    assert until_common_prefix(full, left, right) == expected


@pytest.mark.parametrize(
    "full,left,right,expected",
    [
        (
            "<function name=foo><arg name=bar>100</arg></function>",
            "<arg name=bar>100</arg>",
            "<arg name=baz>535</arg>",
            "</function>",
        ),
        ("rest<common>", "left<common>", "right<common>", ""),
        ("test", "left", "", ""),
        ("<outer><inner>value</inner></outer>", "<inner>value</inner>", "<inner>different</inner>", "</outer>"),
        ("prefix<shared>rest</shared>", "prefix<shared>left</shared>", "prefix<shared>right</shared>", ""),
        ("<tag>content</tag><extra>", "<tag>value</tag>", "<tag>other</tag>", "<extra>"),
        ("start<middle>end</middle>", "prefix<middle>left</middle>", "prefix<middle>right</middle>", ""),
    ],
)
def test_after_common_suffix(full, left, right, expected):
    assert after_common_suffix(full, left, right) == expected


T, M = SegmentType.TEXT, SegmentType.MARKER


@pytest.mark.parametrize(
    "text,expected",
    [
        ("pre_marker[marker]post_marker", [(T, "pre_marker"), (M, "[marker]"), (T, "post_marker")]),
        ("pre_marker<marker>post_marker", [(T, "pre_marker"), (M, "<marker>"), (T, "post_marker")]),
        ("<hello>world</hello>", [(M, "<hello>"), (T, "world"), (M, "</hello>")]),
        ("<hello>[hello]<world>[world]", [(M, "<hello>"), (M, "[hello]"), (M, "<world>"), (M, "[world]")]),
        ("im<blue>daba<dee>da[hey]", [(T, "im"), (M, "<blue>"), (T, "daba"), (M, "<dee>"), (T, "da"), (M, "[hey]")]),
    ],
)
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

    result = _variants(
        "{% for tool in tools %}{{ tool['name'] }}{% endfor %}", TemplateParams(tools=[{"name": "foo"}]), tool_bar
    )
    assert (result.diff.left, result.diff.right) == ("foo", "bar")

    result = _variants(echo, TemplateParams(messages=[{"role": "user", "content": "Hello"}]), None)
    assert result.diff == DiffSplit("Hello", "", "", "")
    # a template that fails to render gives no comparison
    failing = "{{ messages.cahoot()[0]['nonexistent_field'] }}"
    assert _variants(failing, TemplateParams(messages=[{"role": "user", "content": "Hello"}]), content_b) is None


# ---------------------------------------------------------------------------------------------------------------
# The analysis of b10621's templates


def summary(a) -> dict[str, str]:
    """The analysis as b10621 logs it (common_chat_templates_apply_jinja at LOG_DBG), default fields left out."""
    r, c, t = a.reasoning, a.content, a.tools
    f, fn, ar, ci = t.format, t.function, t.arguments, t.call_id
    fields = {
        "user_msg_start": a.user_start,
        "assistant_msg_start": a.assistant_start,
        "reasoning_mode": r.mode.value,
        "reasoning_start": r.start,
        "reasoning_end": r.end,
        "content_mode": c.mode.value,
        "content_start": c.start,
        "content_end": c.end,
        "tool_mode": f.mode.value,
        "tool_section_start": f.section_start,
        "tool_section_end": f.section_end,
        "per_call_start": f.per_call_start,
        "per_call_end": f.per_call_end,
        "func_name_prefix": fn.name_prefix,
        "func_name_suffix": fn.name_suffix,
        "func_args_separator": fn.args_separator,
        "func_close": fn.close,
        "call_id_prefix": ci.prefix,
        "call_id_suffix": ci.suffix,
        "call_id_pos": ci.pos.value,
        "args_start": ar.start,
        "args_end": ar.end,
        "arg_name_prefix": ar.name_prefix,
        "arg_name_suffix": ar.name_suffix,
        "arg_value_prefix": ar.value_prefix,
        "arg_value_suffix": ar.value_suffix,
        "name_field": f.name_field,
        "args_field": f.args_field,
        "id_field": f.id_field,
        "gen_id_field": f.gen_id_field,
        "parameter_order": ", ".join(f.parameter_order),
    }
    defaults = {
        "reasoning_mode": "NONE",
        "content_mode": "PLAIN",
        "tool_mode": "NONE",
        "call_id_pos": "NONE",
        "name_field": "name",
        "args_field": "arguments",
    }
    return {k: v for k, v in fields.items() if v != defaults.get(k, "")}


# The b10621 llama-server binary's debug log of its analysis of each template (`--verbose`), default fields
# left out. 34 of the 42 templates its autoparser handles analyse identically here; the other 8 need what the
# project's jinja2 renderer lacks (strftime_now, the {% generation %} tag, `str + undefined`, tojson of a
# generator), and 41 of 42 match once those are patched in.
B10621_ANALYSIS = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": {
        "user_msg_start": "<|im_start|>user",
        "assistant_msg_start": "<|im_start|>assistant",
        "tool_mode": "JSON_NATIVE",
        "per_call_start": "<tool_call>\n",
        "per_call_end": "</tool_call>",
        "parameter_order": "name, arguments",
    },
    "Qwen-Qwen3-0.6B.jinja": {
        "user_msg_start": "<|im_start|>user",
        "assistant_msg_start": "<|im_start|>assistant",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>\n",
        "reasoning_end": "\n</think>\n\n",
        "tool_mode": "JSON_NATIVE",
        "per_call_start": "<tool_call>\n",
        "per_call_end": "</tool_call>",
        "parameter_order": "name, arguments",
    },
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": {
        "user_msg_start": "<|im_start|>user",
        "assistant_msg_start": "<|im_start|>assistant",
        "tool_mode": "JSON_NATIVE",
        "per_call_start": "<tool_call>\n",
        "per_call_end": "</tool_call>",
        "parameter_order": "name, arguments",
    },
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {
        "user_msg_start": "<｜User｜>",
        "assistant_msg_start": "<｜Assistant｜>",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>",
        "reasoning_end": "</think>",
        "tool_mode": "TAG_WITH_JSON",
        "tool_section_start": "<｜tool▁calls▁begin｜>",
        "tool_section_end": "<｜tool▁calls▁end｜>",
        "per_call_start": "<｜tool▁call▁begin｜>function",
        "per_call_end": "<｜tool▁call▁end｜>",
        "func_name_prefix": "<｜tool▁sep｜>",
        "func_name_suffix": "\n```json\n",
        "func_close": "```",
    },
    "HuggingFaceTB-SmolLM3-3B.jinja": {
        "user_msg_start": "<|im_start|>user",
        "assistant_msg_start": "<|im_start|>assistant",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>",
        "reasoning_end": "</think>",
    },
    "meta-llama-Llama-3.1-8B-Instruct.jinja": {
        "user_msg_start": "<|start_header_id|>user<|end_header_id|>",
        "assistant_msg_start": "<|start_header_id|>assistant<|end_header_id|>",
        "tool_mode": "JSON_NATIVE",
        "args_field": "parameters",
        "parameter_order": "name, parameters",
    },
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {
        "user_msg_start": "[INST]",
        "tool_mode": "JSON_NATIVE",
        "tool_section_start": "[TOOL_CALLS]",
        "id_field": "id",
        "parameter_order": "name, arguments, id",
    },
    "google-gemma-2-2b-it.jinja": {
        "user_msg_start": "<start_of_turn>user",
        "assistant_msg_start": "<start_of_turn>model",
    },
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": {
        "user_msg_start": "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
        "assistant_msg_start": "<|START_RESPONSE|>",
        "reasoning_mode": "TOOLS_ONLY",
        "reasoning_start": "<|START_THINKING|>",
        "reasoning_end": "<|END_THINKING|>",
        "content_mode": "ALWAYS_WRAPPED",
        "content_start": "<|START_RESPONSE|>",
        "content_end": "<|END_RESPONSE|>",
        "tool_mode": "JSON_NATIVE",
        "tool_section_start": "<|START_ACTION|>",
        "tool_section_end": "<|END_ACTION|>",
        "name_field": "tool_name",
        "args_field": "parameters",
        "gen_id_field": "tool_call_id",
        "parameter_order": "tool_call_id, tool_name, parameters",
    },
    "ByteDance-Seed-OSS.jinja": {
        "user_msg_start": "<seed:bos>user",
        "assistant_msg_start": "<seed:bos>assistant",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<seed:think>",
        "reasoning_end": "</seed:think>\n",
        "tool_mode": "TAG_WITH_TAGGED",
        "per_call_start": "<seed:tool_call>\n",
        "per_call_end": "</seed:tool_call>",
        "func_name_prefix": "<function=",
        "func_name_suffix": ">\n",
        "func_close": "</function>\n",
        "arg_name_prefix": "<parameter=",
        "arg_name_suffix": ">",
        "arg_value_suffix": "</parameter>\n",
    },
    "deepseek-ai-DeepSeek-V3.1.jinja": {
        "user_msg_start": "<｜User｜>",
        "assistant_msg_start": "<｜Assistant｜>",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>",
        "reasoning_end": "</think>",
        "tool_mode": "TAG_WITH_JSON",
        "tool_section_start": "<｜tool▁calls▁begin｜>",
        "tool_section_end": "<｜tool▁calls▁end｜>",
        "per_call_start": "<｜tool▁call▁begin｜>",
        "per_call_end": "<｜tool▁call▁end｜>",
        "func_name_suffix": "<｜tool▁sep｜>",
    },
    "GLM-4.6.jinja": {
        "user_msg_start": "<|user|>",
        "assistant_msg_start": "<|assistant|>",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>",
        "reasoning_end": "</think>\n",
        "tool_mode": "TAG_WITH_TAGGED",
        "per_call_start": "<tool_call>",
        "per_call_end": "</tool_call>",
        "func_name_suffix": "\n",
        "arg_name_prefix": "<arg_key>",
        "arg_name_suffix": "</arg_key>\n",
        "arg_value_prefix": "<arg_value>",
        "arg_value_suffix": "</arg_value>\n",
    },
    "MiniMax-M2.jinja": {
        "user_msg_start": "]~b]user",
        "assistant_msg_start": "]~b]ai",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>\n",
        "reasoning_end": "\n</think>\n\n",
        "tool_mode": "TAG_WITH_TAGGED",
        "tool_section_start": "<minimax:tool_call>\n",
        "tool_section_end": "</minimax:tool_call>",
        "func_name_prefix": '<invoke name="',
        "func_name_suffix": '">\n',
        "func_close": "</invoke>\n",
        "arg_name_prefix": '<parameter name="',
        "arg_value_prefix": '">',
        "arg_value_suffix": "</parameter>\n",
    },
    "NVIDIA-Nemotron-Nano-v2.jinja": {
        "user_msg_start": "<SPECIAL_11>User",
        "assistant_msg_start": "<SPECIAL_11>Assistant",
        "reasoning_mode": "TAG_BASED",
        "reasoning_start": "<think>\n",
        "reasoning_end": "</think>",
        "tool_mode": "JSON_NATIVE",
        "per_call_start": "<TOOLCALL>",
        "per_call_end": "</TOOLCALL>",
        "parameter_order": "name, arguments",
    },
    "meetkai-functionary-medium-v3.1.jinja": {
        "user_msg_start": "<|start_header_id|>user<|end_header_id|>",
        "assistant_msg_start": "<|start_header_id|>assistant<|end_header_id|>",
        "tool_mode": "TAG_WITH_JSON",
        "per_call_start": "<function=",
        "per_call_end": "</function>",
        "func_name_suffix": ">",
    },
}


@pytest.mark.parametrize("name", sorted(B10621_ANALYSIS))
def test_analysis_matches_b10621(name):
    assert summary(analysis(name)) == B10621_ANALYSIS[name]


def test_nemotron_3_nano_analysis():
    # test-chat-auto-parser.cpp's Nemotron tests (b10621 serves this template with its Qwen3-Coder handler, but
    # analyses it all the same)
    a = analysis("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja")
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.mode.value) == ("<think>\n", "\n</think>\n", "TAG_BASED")
    assert (a.content.start, a.content.end, a.content.mode.value) == ("", "", "PLAIN")
    f, fn, ar = a.tools.format, a.tools.function, a.tools.arguments
    assert (f.section_start, f.section_end, f.per_call_start, f.per_call_end) == (
        "",
        "",
        "<tool_call>\n",
        "</tool_call>",
    )
    assert (fn.name_prefix, fn.name_suffix, fn.close) == ("<function=", ">\n", "</function>\n")
    assert (ar.name_prefix, ar.name_suffix, ar.value_suffix) == ("<parameter=", ">\n", "\n</parameter>\n")
    assert f.mode.value == "TAG_WITH_TAGGED"
    assert a.jinja_caps["supports_tools"] and a.jinja_caps["supports_parallel_tool_calls"]


def test_cohere_r7b_analysis():
    a = analysis("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja")
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.mode.value) == (
        "<|START_THINKING|>",
        "<|END_THINKING|>",
        "TOOLS_ONLY",
    )
    assert (a.content.start, a.content.end, a.content.mode.value) == (
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "ALWAYS_WRAPPED",
    )


def test_smollm3_analysis():
    # the system message changes with enable_thinking: the markers come from the generation prompts' tails
    a = analysis("HuggingFaceTB-SmolLM3-3B.jinja")
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.mode.value) == ("<think>", "</think>", "TAG_BASED")
    assert (a.content.start, a.content.end, a.content.mode.value) == ("", "", "PLAIN")
    assert "<think>" in a.preserved_tokens and "</think>" in a.preserved_tokens


# test_role_markers_all_templates, less the templates jinja2 cannot render as b10621 does (strftime_now, the
# {% generation %} tag, `str + undefined`)
ROLE_MARKERS = [
    ("Bielik-11B-v3.0-Instruct.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("HuggingFaceTB-SmolLM3-3B.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("MiMo-VL.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("Qwen3.5-4B.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("Qwen3-Coder.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("Qwen-Qwen3-0.6B.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("Qwen-QwQ-32B.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("StepFun3.5-Flash.jinja", "<|im_start|>user", "<|im_start|>assistant"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜User｜>", "<｜Assistant｜>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜User｜>", "<｜Assistant｜>"),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "<｜User｜>", "<｜Assistant｜>"),
    (
        "meetkai-functionary-medium-v3.1.jinja",
        "<|start_header_id|>user<|end_header_id|>",
        "<|start_header_id|>assistant<|end_header_id|>",
    ),
    (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "<|start_header_id|>user<|end_header_id|>",
        "<|start_header_id|>assistant<|end_header_id|>",
    ),
    (
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "<|start_header_id|>user<|end_header_id|>",
        "<|start_header_id|>assistant<|end_header_id|>",
    ),
    (
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        "<|start_header_id|>user<|end_header_id|>",
        "<|start_header_id|>assistant<|end_header_id|>",
    ),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<|user|>", "<|assistant|>"),
    ("GLM-4.6.jinja", "<|user|>", "<|assistant|>"),
    ("unsloth-Apriel-1.5.jinja", "<|user|>", "<|assistant|>"),
    ("GLM-4.7-Flash.jinja", "<|user|>", "<|assistant|>"),
    ("google-gemma-2-2b-it.jinja", "<start_of_turn>user", "<start_of_turn>model"),
    (
        "ibm-granite-granite-4.0.jinja",
        "<|start_of_role|>user<|end_of_role|>",
        "<|start_of_role|>assistant<|end_of_role|>",
    ),
    (
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
        "<|START_RESPONSE|>",
    ),
    (
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    ),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "[INST]", ""),
    ("Apriel-1.6-15b-Thinker-fixed.jinja", "<|begin_user|>", "<|begin_assistant|>"),
    ("ByteDance-Seed-OSS.jinja", "<seed:bos>user", "<seed:bos>assistant"),
    ("GigaChat3.1-10B-A1.8B.jinja", "user<|role_sep|>", "assistant<|role_sep|>"),
    ("MiniMax-M2.jinja", "]~b]user", "]~b]ai"),
    ("tencent-Hy3.jinja", "<｜hy_User:opensource｜>", "<｜hy_Assistant:opensource｜>"),
    ("NVIDIA-Nemotron-Nano-v2.jinja", "<SPECIAL_11>User", "<SPECIAL_11>Assistant"),
    ("Reka-Edge.jinja", "human:", "assistant:"),
    ("llama-cpp-rwkv-world.jinja", "User:", "Assistant:"),
]


@pytest.mark.parametrize("name,user_start,assistant_start", ROLE_MARKERS)
def test_role_markers(name, user_start, assistant_start):
    a = analysis(name)
    assert (a.user_start, a.assistant_start) == (user_start, assistant_start)


BAILING_V3 = """
{# Bailing V3 chat template #}
{%- if tools %}{{ tools | tojson }}{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<role>HUMAN</role>' + message.content + '<|role_end|>' }}
    {%- elif message.role == "assistant" %}
        {{- '<role>ASSISTANT</role>' }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- set tc = tool_call.function %}
                {{- '<tool_call>' + tc.name }}
                {%- for k, v in tc.arguments.items() %}
                    {{- '<arg_key>' + k + '</arg_key>' }}
                    {{- '\\n<arg_value>' + v + '</arg_value>' }}
                {%- endfor %}
                {{- '\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|role_end|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}{%- endif %}
"""


def test_bailing_v3_tool_format():
    from server.chat.autoparser.analysis import Autoparser
    from server.chat.autoparser.generator import GenerationParams, build_parser
    from server.peg import ParseContext, ParseFlags

    a = Autoparser()
    a.analyze_template(_template(BAILING_V3))
    assert a.tools.arguments.value_suffix == "</arg_value>"
    assert a.tools.arguments.tolerate_intertag_whitespace
    string = {"type": "string"}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "test_function_name",
                "parameters": {"type": "object", "properties": {"param1": string, "param2": string}},
            },
        }
    ]
    parser = build_parser(a, GenerationParams(tools=tools, reasoning_format="none"), "")
    output = (
        "<tool_call>test_function_name\n<arg_key>param1</arg_key>\n<arg_value>value1</arg_value>"
        "<arg_key>param2</arg_key>\n<arg_value>value2</arg_value>\n</tool_call>"
    )
    assert parser.parse(ParseContext(output, ParseFlags.LENIENT)).success()


def test_seed_oss_diffs():
    source = template_source("ByteDance-Seed-OSS.jinja")
    params = {
        "type": "object",
        "properties": {
            "param1": {"type": "string", "description": "First parameter"},
            "param2": {"type": "string", "description": "Second parameter"},
        },
        "required": ["param1", "param2"],
    }
    tools = [
        {
            "type": "function",
            "function": {
                "name": "test_function_name",
                "description": "A test function for debugging",
                "parameters": params,
            },
        }
    ]
    call = {
        "id": "call_001",
        "type": "function",
        "function": {"name": "test_function_name", "arguments": {"param1": "value1", "param2": "value2"}},
    }
    user = {"role": "user", "content": "Hello, please help me."}
    tool_only = {"role": "assistant", "content": None, "tool_calls": [call]}

    def no_tools_to_tools(p):
        p.messages = [user, tool_only]

    diff = _variants(
        source,
        TemplateParams(messages=[user, {"role": "assistant", "content": "Let me help you."}], tools=tools),
        no_tools_to_tools,
    ).diff
    assert "system" in diff.prefix and "user" in diff.prefix and "assistant" in diff.prefix
    assert diff.left == "Let me help you."
    for needle in (
        "<seed:tool_call>",
        "<function=test_function_name>",
        "<parameter=param1>",
        "<parameter=param2>",
        "value1",
        "value2",
        "</seed:tool_call>",
    ):
        assert needle in diff.right
    assert diff.suffix == "<seed:eos>"

    def with_reasoning(p):
        p.messages = [user, dict(tool_only, reasoning_content="I need to call the tool first.")]

    diff = _variants(source, TemplateParams(messages=[user, tool_only], tools=tools), with_reasoning).diff
    assert diff.left == ""
    for needle in ("<seed:think>", "I need to call the tool first.", "</seed:think>"):
        assert needle in diff.right
    assert "assistant" in diff.prefix
    for needle in ("<seed:tool_call>", "test_function_name", "<seed:eos>"):
        assert needle in diff.suffix


def test_upstreams_errors():
    from server.chat.autoparser import GenerationParams, generate_chat_params

    user = [{"role": "user", "content": "x"}]
    with pytest.raises(
        ValueError, match="^Unable to generate parser for this template. Automatic parser generation failed: "
    ):
        generate_chat_params("{{ raise_exception('no') }}", GenerationParams(messages=user))
    with pytest.raises(RuntimeError, match="^Cannot specify grammar with tools$"):
        generate_chat_params(
            "{{ messages }}", GenerationParams(messages=user, tools=[SPECIAL_FUNCTION], grammar="root ::= [a]")
        )


@pytest.mark.parametrize(
    "name,kind",
    [
        ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "Ministral/Magistral Large 3"),
        ("openai-gpt-oss-120b.jinja", "GPT-OSS"),
        ("muse-glimmer.jinja", "Muse Glimmer"),
        ("meetkai-functionary-medium-v3.2.jinja", "Functionary v3.2"),
        ("Kimi-K2-Thinking.jinja", "Kimi K2 Thinking"),
        ("Kimi-K3.jinja", "Kimi K3"),
        ("Cohere2MoE.jinja", "Cohere2 MoE"),
        ("LFM2-8B-A1B.jinja", "LFM2"),
        ("LFM2.5-Instruct.jinja", "LFM2.5"),
        ("GigaChat3-10B-A1.8B.jinja", "GigaChatV3"),
        ("MiniMax-M3.jinja", "MiniMax-M3"),
        ("deepseek-ai-DeepSeek-V3.2.jinja", "DeepSeek V3.2/V4"),
        ("google-gemma-4-31B-it.jinja", "Gemma4"),
        ("openbmb-MiniCPM5-1B.jinja", "MiniCPM5"),
        ("Qwen3-Coder.jinja", "Qwen3-Coder"),
        ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "Qwen3-Coder"),
        ("Mistral-Small-3.2-24B-Instruct-2506.jinja", None),
        ("GigaChat3.1-10B-A1.8B.jinja", None),
        ("Qwen-Qwen3-0.6B.jinja", None),
    ],
)
def test_specialized_template_kind(name, kind):
    # which templates b10621's server analysed with its autoparser (--verbose) and which it did not
    assert specialized_template_kind(template_source(name)) == kind


# ---------------------------------------------------------------------------------------------------------------
# End to end: test-chat.cpp's peg_tester cases (template + request -> parser -> the model's output parsed back)


CONST_SCHEMA = {"const": "42"}


def chat_params(name: str, **request):
    """common_chat_templates_apply() on a test request (request_inputs()), through generate_chat_params()."""
    source, _caps, inputs = request_inputs(name, **request)
    return generate_chat_params(source, inputs)


def peg_test(name: str, output: str, expected, **request) -> None:
    assert_peg_parses(chat_params(name, **request), output, expected)


@pytest.mark.parametrize("output", ["Hello, world!", "Line 1\nLine 2\nLine 3", HELLO])
def test_peg_gemma2(output):
    peg_test("google-gemma-2-2b-it.jinja", output, msg(output))


@pytest.mark.parametrize(
    "name",
    [
        "google-gemma-2-2b-it.jinja",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        "MiMo-VL.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
    ],
)
def test_peg_continuation(name):
    peg_test(name, "world!\nWhat's up?", msg(HELLO), **CONTINUE_CONTENT)


def test_peg_hermes_2_pro():
    name = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"
    call = '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>'
    peg_test(name, call, msg(calls=[CALL]), tools=[SPECIAL_FUNCTION])
    peg_test(name, "Hello, world!\nWhat's up?" + call, msg(HELLO, calls=[CALL]), tools=[SPECIAL_FUNCTION])


@pytest.mark.parametrize(
    "name", ["MiMo-VL.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"]
)
def test_peg_tool_call_json(name):
    peg_test(name, HELLO, msg(HELLO))
    peg_test(
        name,
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        msg(calls=[CALL]),
        tools=[SPECIAL_FUNCTION],
    )


def test_peg_mistral_nemo():
    name = "mistralai-Mistral-Nemo-Instruct-2407.jinja"
    peg_test(name, HELLO, msg(HELLO))
    peg_test(
        name,
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
        msg(calls=[("special_function", '{"arg1":1}', "123456789")]),
        tools=[SPECIAL_FUNCTION],
    )


def test_peg_deepseek_r1_distill_qwen():
    # the generation prompt ends with <think>: the output starts inside the reasoning
    name = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    peg_test(name, "</think>" + HELLO, msg(HELLO), reasoning_format="deepseek")
    peg_test(name, "I'm\nthinking</think>" + HELLO, msg(HELLO, "I'm\nthinking"), reasoning_format="deepseek")
    peg_test(
        name,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        msg(calls=[CALL]),
        tools=[SPECIAL_FUNCTION],
        enable_thinking=False,
        reasoning_format="deepseek",
    )
    peg_test(name, "world!\nWhat's up?", msg(HELLO, "I'm thinking"), reasoning_format="deepseek", **CONTINUE_CONTENT)
    peg_test(
        name,
        " thinking</think>" + HELLO,
        msg(HELLO, "I'm thinking"),
        reasoning_format="deepseek",
        messages=[message_user(), prefill_reasoning()],
        add_generation_prompt=False,
        continue_final_message="reasoning",
    )


def test_peg_qwq():
    # thinking forced open: the output starts after the prompt's <think>\n
    name = "Qwen-QwQ-32B.jinja"
    peg_test(
        name,
        "Let me think about this...\n</think>\nThe answer is 42.",
        msg("The answer is 42.", "Let me think about this..."),
        reasoning_format="auto",
    )
    peg_test(name, "</think>Hello, world!", msg("Hello, world!"), reasoning_format="auto")
    peg_test(name, "world!\nWhat's up?", msg(HELLO, "I'm thinking"), reasoning_format="auto", **CONTINUE_CONTENT)
    peg_test(
        name,
        " thinking\n</think>\n" + HELLO,
        msg(HELLO, "I'm thinking"),
        reasoning_format="auto",
        messages=[message_user(), prefill_reasoning()],
        add_generation_prompt=False,
        continue_final_message="reasoning",
    )


def test_peg_llama_3_1():
    name = "meta-llama-Llama-3.1-8B-Instruct.jinja"
    peg_test(name, HELLO, msg(HELLO), tools=[SPECIAL_FUNCTION])
    peg_test(name, '```json\n"42"\n```', msg('"42"'), reasoning_format="auto", json_schema=CONST_SCHEMA)
    peg_test(name, '"42"\n', msg('"42"'), reasoning_format="auto", json_schema=CONST_SCHEMA)


def test_peg_qwen3():
    # not among test-chat.cpp's peg_tester templates: the parser is b10621's (see test_qwen3_chat_params), the
    # outputs are the ones its QwQ/Hermes cases use
    name = "Qwen-Qwen3-0.6B.jinja"
    peg_test(
        name, "<think>\nI'm\nthinking\n</think>\n\n" + HELLO, msg(HELLO, "I'm\nthinking"), reasoning_format="deepseek"
    )
    peg_test(name, HELLO, msg(HELLO), reasoning_format="deepseek")
    peg_test(
        name,
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        msg(calls=[CALL]),
        tools=[SPECIAL_FUNCTION],
        reasoning_format="deepseek",
    )


def test_peg_smollm3():
    peg_test(
        "HuggingFaceTB-SmolLM3-3B.jinja",
        "<think>\nI'm\nthinking\n</think>\n" + HELLO,
        msg(HELLO, "I'm\nthinking"),
        reasoning_format="deepseek",
    )


# ---------------------------------------------------------------------------------------------------------------
# The chat parameters against b10621's binary (its --verbose log of a request with tools=[get_weather])

GET_WEATHER = tool(
    "get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)


def test_qwen3_chat_params():
    auto = chat_params(
        "Qwen-Qwen3-0.6B.jinja", tools=[GET_WEATHER], reasoning_format="deepseek", parallel_tool_calls=True
    )
    assert auto.generation_prompt == "<|im_start|>assistant\n"
    assert auto.grammar_lazy and auto.grammar_triggers == [(1, "<tool_call>\n")]
    assert auto.preserved_tokens == ["<think>", "</think>", "<tool_call>", "</tool_call>"]
    assert "root ::= tool-call | tool-calls\n" in auto.grammar
    assert (
        'tool-call ::= "<tool_call>\\n" space (tool-get-weather) (space "," space (tool-get-weather))* space '
        '"</tool_call>"\n'
    ) in auto.grammar
    assert (auto.supports_thinking, auto.thinking_start_tag, auto.thinking_end_tags) == (True, "<think>", ["</think>"])
    assert auto.message_delimiters == {"assistant": "<|im_start|>assistant", "user": "<|im_start|>user"}

    required = chat_params(
        "Qwen-Qwen3-0.6B.jinja",
        tools=[GET_WEATHER],
        reasoning_format="deepseek",
        parallel_tool_calls=True,
        tool_choice="required",
    )
    assert not required.grammar_lazy and required.grammar_triggers == []
    assert (
        'root ::= "<|im_start|>assistant\\n" space ("<think>" "\\n"? until-13 "\\n"? "</think>" "\\n"? '
        '"\\n"?)? until-191? tool-calls\n'
    ) in required.grammar


def test_seed_oss_required_grammar_root():
    # a tagged-arguments template: the parser ids in the rule names match b10621's
    params = chat_params(
        "ByteDance-Seed-OSS.jinja",
        tools=[GET_WEATHER],
        reasoning_format="deepseek",
        parallel_tool_calls=True,
        tool_choice="required",
    )
    assert (
        'root ::= "<seed:bos>assistant\\n" space ("<seed:think>" until-7 "</seed:think>" "\\n"?)? until-86? tool-call\n'
    ) in params.grammar
