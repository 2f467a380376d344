"""b10621's specialized chat handlers for Kimi K2 Thinking, Kimi K3, LFM2/LFM2.5, GigaChat V3, DeepSeek V3.2/V4,
MiniCPM5, Functionary v3.2, Cohere2 MoE, MiniMax-M3 and Muse Glimmer (server/chat/specialized) against b10621.

The end-to-end cases are tests/test-chat.cpp's peg_tester cases for these templates (each output parsed prefix
by prefix as a stream and whole), its test_template_generation_prompt cases and its DeepSeek V4 history
tests; the chat parameters of requests with tools were recorded from the b10621 llama-server binary
(fixtures/chat/specialized_b_b10621.json). Templates are read from the pinned sdist's models/templates; those
tests skip when it is not unpacked.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from server.chat.autoparser import GenerationParams, specialized_template_kind
from server.chat.autoparser.helpers import Template
from server.chat.caps import template_caps
from server.chat.messages import ChatMsg, ToolCall, apply_workarounds, parse_messages, to_template_json
from server.chat.specialized import HANDLERS
from server.chat.specialized.deepseek_v3_2 import sort_tool_results
from tests.chat_support import (
    AMOUNT,
    CALL,
    CONFIG,
    CONTINUE_CONTENT,
    CONTINUE_REASONING,
    EMPTY_ARGS,
    GET_TIME,
    GET_WEATHER,
    HELLO,
    HTML,
    IMAGINARY_NUMBER,
    INVOICE_SCHEMA,
    MAGIC_INT,
    MESSAGE_ASSIST,
    MESSAGE_ASSIST_CALL,
    MESSAGE_ASSIST_THOUGHTS,
    NULLABLE,
    PREFILLED,
    PYTHON,
    SPECIAL_FUNCTION,
    SPECIAL_FUNCTION_OPT,
    THINKING,
    TODO_LIST,
    TOGGLE,
    assert_peg_parses,
    integer,
    message_user,
    msg,
    obj,
    prefill_content,
    prefill_reasoning,
    specialized_params,
    string,
    template_source,
    tool,
    try_specialized,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "specialized_b_b10621.json"

KIMI_K2 = "Kimi-K2-Thinking.jinja"
KIMI_K2_OLD = "moonshotai-Kimi-K2.jinja"
KIMI_K2_INSTRUCT = "Kimi-K2-Instruct.jinja"
KIMI_K3 = "Kimi-K3.jinja"
LFM2 = "LFM2-8B-A1B.jinja"
LFM25 = "LFM2.5-Instruct.jinja"
LFM25_THINKING = "LFM2.5-8B-A1B.jinja"
GIGACHAT = "GigaChat3-10B-A1.8B.jinja"
DEEPSEEK_V32 = "deepseek-ai-DeepSeek-V3.2.jinja"
DEEPSEEK_V4 = "deepseek-ai-DeepSeek-V4.jinja"
DEEPSEEK_V4_FLASH = "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"
MINICPM5 = "openbmb-MiniCPM5-1B.jinja"
FUNCTIONARY = "meetkai-functionary-medium-v3.2.jinja"
COHERE2MOE = "Cohere2MoE.jinja"
MINIMAX_M3 = "MiniMax-M3.jinja"
MUSE = "muse-glimmer.jinja"


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's tools and messages


CALENDAR = tool(
    "Calendar.create_event",
    "Create a calendar event",
    obj(
        {
            "title": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}},
            "metadata": {"type": "object"},
        },
        ["title", "participants", "metadata"],
    ),
)
NESTED_ARGS = tool(
    "nested_args",
    "Tool with nested array arguments",
    obj(
        {
            "tags": {"type": "array", "items": {"type": "string"}},
            "entries": {
                "type": "array",
                "items": obj({"id": {"type": "integer"}, "label": {"type": "string"}}, ["id", "label"]),
            },
        },
        ["tags", "entries"],
    ),
)
UNION_ARGS = tool(
    "union_args",
    "Tool with union arguments",
    obj(
        {
            "filter": {
                "anyOf": [
                    {"type": "array", "items": {"type": "string"}},
                    obj({"field": {"type": "string"}, "op": {"type": "string"}}, ["field", "op"]),
                ]
            },
            "label": {"oneOf": [{"type": "string"}, obj({"text": {"type": "string"}})]},
            "limit": {"oneOf": [{"type": "integer"}, obj({"max": {"type": "integer"}}, ["max"])]},
        }
    ),
)
EXECUTE_COMMAND = tool(
    "execute_command",
    "Execute shell command",
    obj(
        {
            "command": string("Shell command to execute"),
            "cwd": string("Working directory"),
            "timeout": integer("The timeout in seconds"),
        },
        ["command"],
    ),
)


def _call(name: str, args: str, call_id: str = "") -> tuple[str, str, str]:
    return (name, args, call_id)


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's harness: common_chat_templates_apply() on a request, test_peg_parser()


chat_params = specialized_params


def peg_test(
    name: str, output: str, expected: ChatMsg, *, partial: bool = False, reconstruct: bool = False, **request
) -> None:
    """test_peg_parser(): every prefix of `output` parsed as a partial answer must grow the message the way a
    stream would, the whole of it parse to `expected`; the grammar must load. With `reconstruct`, the expected
    message (its arguments as parsed) rendered after the request's messages must give the prompt followed by
    the output (and maybe an end of turn)."""
    from server.chat.peg_chat import chat_peg_parse

    params = chat_params(name, **request)
    assert_peg_parses(params, output, expected, partial)
    if reconstruct and not partial:
        parsed = chat_peg_parse(params.parser, output, False, params.generation_prompt, params.format)
        calls = [
            ToolCall(c.name, p.arguments, c.id) for c, p in zip(expected.tool_calls, parsed.tool_calls, strict=False)
        ]
        answer = ChatMsg(
            role=expected.role, content=expected.content, reasoning_content=expected.reasoning_content, tool_calls=calls
        )
        messages = [*(request.get("messages") or [message_user()]), answer]
        rendered = chat_params(name, **{**request, "messages": messages, "add_generation_prompt": False}).prompt
        assert rendered.startswith(params.prompt + output), (rendered, params.prompt + output)


def test_handlers_cover_the_families():
    # which templates each handler claims, by b10621's detection substrings
    for name, kind in [
        (KIMI_K2, "Kimi K2 Thinking"),
        (KIMI_K2_OLD, "Kimi K2 Thinking"),
        (KIMI_K2_INSTRUCT, "Kimi K2 Thinking"),
        (KIMI_K3, "Kimi K3"),
        (LFM2, "LFM2"),
        (LFM25, "LFM2.5"),
        (LFM25_THINKING, "LFM2.5"),
        (GIGACHAT, "GigaChatV3"),
        (DEEPSEEK_V32, "DeepSeek V3.2/V4"),
        (DEEPSEEK_V4, "DeepSeek V3.2/V4"),
        (DEEPSEEK_V4_FLASH, "DeepSeek V3.2/V4"),
        (MINICPM5, "MiniCPM5"),
        (FUNCTIONARY, "Functionary v3.2"),
        (COHERE2MOE, "Cohere2 MoE"),
        (MINIMAX_M3, "MiniMax-M3"),
        (MUSE, "Muse Glimmer"),
    ]:
        assert specialized_template_kind(template_source(name)) == kind, name
        assert kind in HANDLERS


# ---------------------------------------------------------------------------------------------------------------
# DeepSeek V3.2 / V4: DSML tool calls


def _dsml(block: str, *invokes: str) -> str:
    return f"<｜DSML｜{block}>\n" + "".join(invokes) + f"</｜DSML｜{block}>"


def _invoke(name: str, *params: tuple[str, bool, str]) -> str:
    body = "".join(
        f'<｜DSML｜parameter name="{k}" string="{"true" if s else "false"}">{v}</｜DSML｜parameter>\n'
        for k, s, v in params
    )
    return f'<｜DSML｜invoke name="{name}">\n{body}</｜DSML｜invoke>\n'


DS = {"reasoning_format": "deepseek"}


def _deepseek_cases(block: str) -> list:
    think = {**DS, "enable_thinking": True}
    no_think = {**DS, "enable_thinking": False}
    return [
        (HELLO, MESSAGE_ASSIST, no_think),
        ("I'm\nthinking</think>" + HELLO, MESSAGE_ASSIST_THOUGHTS, think),
        (
            "Let me check the time</think>\n\n" + _dsml(block, _invoke("get_time", ("city", True, "Tokyo"))),
            msg("", "Let me check the time", [_call("get_time", '{"city": "Tokyo"}')]),
            {**think, "tools": [GET_TIME]},
        ),
        (
            _dsml(block, _invoke("special_function", ("arg1", False, "1"))),
            MESSAGE_ASSIST_CALL,
            {**no_think, "tools": [SPECIAL_FUNCTION]},
        ),
        (
            "Calling both</think>\n\n"
            + _dsml(
                block, _invoke("get_time", ("city", True, "Paris")), _invoke("get_weather", ("city", True, "Paris"))
            ),
            msg(
                "", "Calling both", [_call("get_time", '{"city": "Paris"}'), _call("get_weather", '{"city": "Paris"}')]
            ),
            {**think, "parallel_tool_calls": True, "tools": [GET_TIME, GET_WEATHER]},
        ),
        (
            "Thinking about it</think>Let me call the function.\n\n"
            + _dsml(block, _invoke("special_function", ("arg1", False, "1"))),
            msg("Let me call the function.", "Thinking about it", [CALL]),
            {**think, "tools": [SPECIAL_FUNCTION], "reconstruct": True},
        ),
        (
            "Multi-arg call</think>\n\n"
            + _dsml(block, _invoke("magic_int", ("ref", False, "42"), ("name", True, "foo bar"))),
            msg("", "Multi-arg call", [_call("magic_int", '{"ref": 42, "name": "foo bar"}')]),
            {**think, "tools": [MAGIC_INT]},
        ),
        ("world!\nWhat's up?", PREFILLED, {**think, **CONTINUE_CONTENT}),
        (" thinking</think>" + HELLO, PREFILLED, {**think, **CONTINUE_REASONING}),
    ]


V32_ONLY = [
    (
        "Test negative</think>\n\n" + _dsml("function_calls", _invoke("magic_int", ("ref", False, "-14"))),
        msg("", "Test negative", [_call("magic_int", '{"ref": -14}')]),
        {"tools": [MAGIC_INT]},
    ),
    (
        "Test decimal</think>\n\n" + _dsml("function_calls", _invoke("amount", ("orig", False, "3.14"))),
        msg("", "Test decimal", [_call("amount", '{"orig": 3.14}')]),
        {"tools": [AMOUNT]},
    ),
    (
        "Test boolean</think>\n\n" + _dsml("function_calls", _invoke("toggle", ("enabled", False, "true"))),
        msg("", "Test boolean", [_call("toggle", '{"enabled": true}')]),
        {"tools": [TOGGLE]},
    ),
    (
        "Test array</think>\n\n"
        + _dsml("function_calls", _invoke("todo_list", ("todos", False, '["buy milk","walk dog"]'))),
        msg("", "Test array", [_call("todo_list", '{"todos": ["buy milk", "walk dog"]}')]),
        {"tools": [TODO_LIST]},
    ),
    (
        "Test object</think>\n\n"
        + _dsml("function_calls", _invoke("set_config", ("config", False, '{"theme":"dark","level":2}'))),
        msg("", "Test object", [_call("set_config", '{"config": {"theme": "dark", "level": 2}}')]),
        {"tools": [CONFIG]},
    ),
    (
        "</think>\n\n" + _dsml("function_calls", _invoke("get_time", ("city", True, "XYZCITY"))),
        msg(calls=[_call("get_time", '{"city": "XYZCITY"}')]),
        {"tools": [GET_TIME]},
    ),
]

V4_ONLY = [
    # no </think> after the calls: the grammar ends the output there
    (
        "Let me check the time\n\n" + _dsml("tool_calls", _invoke("get_time", ("city", True, "Tokyo"))),
        msg("", "Let me check the time", [_call("get_time", '{"city": "Tokyo"}')]),
        {"tools": [GET_TIME]},
    ),
]


@pytest.mark.parametrize(
    "case", _deepseek_cases("function_calls") + [(o, e, {**DS, **r}) for o, e, r in V32_ONLY], ids=lambda c: c[0][:40]
)
def test_peg_deepseek_v3_2(case):
    output, expected, request = case
    peg_test(DEEPSEEK_V32, output, expected, **request)


@pytest.mark.parametrize(
    "case", _deepseek_cases("tool_calls") + [(o, e, {**DS, **r}) for o, e, r in V4_ONLY], ids=lambda c: c[0][:40]
)
def test_peg_deepseek_v4(case):
    output, expected, request = case
    peg_test(DEEPSEEK_V4, output, expected, **request)


def test_peg_deepseek_v4_flash_separator():
    # the \n\n before the DSML block belongs to the tool call block, not to the content
    peg_test(
        DEEPSEEK_V4_FLASH,
        "\n\n" + _dsml("tool_calls", _invoke("special_function", ("arg1", False, "1"))),
        MESSAGE_ASSIST_CALL,
        enable_thinking=False,
        reasoning_format="deepseek",
        tools=[SPECIAL_FUNCTION],
        reconstruct=True,
    )


# ---------------------------------------------------------------------------------------------------------------
# Kimi K2 Thinking: functions.<name>:<index> call ids


def _kimi_call(name: str, index: int, args: str, end: bool = True) -> str:
    return f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{args}" + (
        "<|tool_call_end|>" if end else ""
    )


def _kimi_section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


AUTO = {"reasoning_format": "auto"}
KIMI_SF = _call("special_function", '{"arg1": 1}', "functions.special_function:0")
KIMI_K2_CASES = [
    (HELLO, MESSAGE_ASSIST, {}, False),
    (
        _kimi_section(_kimi_call("special_function", 0, '{"arg1": 1}')),
        msg(calls=[KIMI_SF]),
        {"tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        "<think>I'm thinking about this</think>" + _kimi_section(_kimi_call("special_function", 0, '{"arg1": 1}')),
        msg("", "I'm thinking about this", [KIMI_SF]),
        {**AUTO, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        HELLO + _kimi_section(_kimi_call("special_function", 0, '{"arg1": 1}')),
        msg(HELLO, calls=[KIMI_SF]),
        {"tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        _kimi_section(
            _kimi_call("special_function", 0, '{"arg1": 1}'),
            _kimi_call("special_function_with_opt", 1, '{"arg1": 1, "arg2": 2}'),
        ),
        msg(
            calls=[
                KIMI_SF,
                _call("special_function_with_opt", '{"arg1": 1, "arg2": 2}', "functions.special_function_with_opt:1"),
            ]
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]},
        False,
    ),
    (
        "<think>I need to call two functions</think>"
        + _kimi_section(
            _kimi_call("special_function", 0, '{"arg1": 1}'), _kimi_call("python", 1, '{"code": "print(\'hey\')"}')
        ),
        msg(
            "",
            "I need to call two functions",
            [KIMI_SF, _call("python", '{"code": "print(\'hey\')"}', "functions.python:1")],
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, PYTHON]},
        False,
    ),
    (
        _kimi_section(
            _kimi_call("python", 0, '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}')
        ),
        msg(
            calls=[
                _call(
                    "python",
                    '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}',
                    "functions.python:0",
                )
            ]
        ),
        {"tools": [PYTHON]},
        False,
    ),
    (
        _kimi_section(_kimi_call("empty_args", 0, "{}")),
        msg(calls=[_call("empty_args", "{}", "functions.empty_args:0")]),
        {"tools": [EMPTY_ARGS]},
        False,
    ),
    (
        (
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin|>"
            '{"arg1": '
        ),
        msg(calls=[_call("special_function", '{"arg1": ', "functions.special_function:0")]),
        {**AUTO, "tools": [SPECIAL_FUNCTION]},
        True,
    ),
    (
        _kimi_section(
            _kimi_call("special_function", 0, '{"arg1": 1}'),
            _kimi_call("python", 1, '{"code": "print(1)"}'),
            _kimi_call("html", 2, '{"markup": "<p>test</p>"}'),
        ),
        msg(
            calls=[
                KIMI_SF,
                _call("python", '{"code": "print(1)"}', "functions.python:1"),
                _call("html", '{"markup": "<p>test</p>"}', "functions.html:2"),
            ]
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, PYTHON, HTML]},
        False,
    ),
    # calls inside the thinking block
    (
        "<think>I need to call two functions"
        + _kimi_section(
            _kimi_call("special_function", 0, '{"arg1": 1}'), _kimi_call("python", 1, '{"code": "print(\'hey\')"}')
        ),
        msg(
            "",
            "I need to call two functions",
            [KIMI_SF, _call("python", '{"code": "print(\'hey\')"}', "functions.python:1")],
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, PYTHON]},
        False,
    ),
    # ... without the section markers nor the end markers
    (
        "<think>I need to call two functions"
        + _kimi_call("special_function", 0, '{"arg1": 1}', end=False)
        + _kimi_call("python", 1, '{"code": "print(\'hey\')"}', end=False),
        msg(
            "",
            "I need to call two functions",
            [KIMI_SF, _call("python", '{"code": "print(\'hey\')"}', "functions.python:1")],
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, PYTHON]},
        False,
    ),
    (
        _kimi_call(
            "execute_command",
            0,
            '{"command": "ls -lah", "cwd": "/home/user/development/exllamav3", "timeout": 10}',
            end=False,
        ),
        msg(
            calls=[
                _call(
                    "execute_command",
                    '{"command": "ls -lah", "cwd": "/home/user/development/exllamav3", "timeout": 10}',
                    "functions.execute_command:0",
                )
            ]
        ),
        {**AUTO, "parallel_tool_calls": True, "tools": [EXECUTE_COMMAND]},
        False,
    ),
    ("world!\nWhat's up?", PREFILLED, {**AUTO, **CONTINUE_CONTENT}, False),
    (" thinking</think>" + HELLO, PREFILLED, {**AUTO, **CONTINUE_REASONING}, False),
]


@pytest.mark.parametrize("case", KIMI_K2_CASES, ids=lambda c: c[0][:40])
def test_peg_kimi_k2_thinking(case):
    output, expected, request, partial = case
    peg_test(KIMI_K2, output, expected, partial=partial, **request)


@pytest.mark.parametrize("name", [KIMI_K2_OLD, KIMI_K2_INSTRUCT])
def test_peg_kimi_k2_older_templates(name):
    peg_test(name, HELLO, MESSAGE_ASSIST, reconstruct=True)
    peg_test(
        name,
        _kimi_section(_kimi_call("special_function", 0, '{"arg1": 1}')),
        msg(calls=[KIMI_SF]),
        tools=[SPECIAL_FUNCTION],
        reconstruct=True,
    )
    peg_test(name, "world!\nWhat's up?", PREFILLED, **AUTO, **CONTINUE_CONTENT)
    peg_test(name, " thinking</think>" + HELLO, PREFILLED, **AUTO, **CONTINUE_REASONING)


# ---------------------------------------------------------------------------------------------------------------
# Kimi K3: <|open|>/<|close|>/<|sep|> sections


def _k3_call(name: str, index: int, *args: tuple[str, str, str]) -> str:
    body = "".join(f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>' for k, t, v in args)
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{body}<|close|>call<|sep|>'


K3_EMPTY_RESPONSE = "<|open|>response<|sep|><|close|>response<|sep|>"
K3_END = "<|close|>message<|sep|>"


def _k3_tools(*calls: str) -> str:
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>" + K3_END


KIMI_K3_CASES = [
    ("<|open|>response<|sep|>" + HELLO + "<|close|>response<|sep|>" + K3_END, MESSAGE_ASSIST, {}, False),
    (
        "I'm thinking about this<|close|>think<|sep|><|open|>response<|sep|>"
        + HELLO
        + "<|close|>response<|sep|>"
        + K3_END,
        msg(HELLO, "I'm thinking about this"),
        AUTO,
        False,
    ),
    (
        "<|open|>response<|sep|>Use the response tag, then message the handler.<|close|>response<|sep|>" + K3_END,
        msg("Use the response tag, then message the handler."),
        {},
        False,
    ),
    (
        "I was still thinking when the budget ran out",
        msg("", "I was still thinking when the budget ran out"),
        AUTO,
        False,
    ),
    (
        K3_EMPTY_RESPONSE + _k3_tools(_k3_call("special_function", 1, ("arg1", "number", "1"))),
        msg(calls=[_call("special_function", '{"arg1":1}')]),
        {"tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        "I should call it<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|>"
        + _k3_tools(_k3_call("special_function", 1, ("arg1", "number", "1"))),
        msg("On it.", "I should call it", [_call("special_function", '{"arg1":1}')]),
        {**AUTO, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        K3_EMPTY_RESPONSE
        + _k3_tools(_k3_call("special_function_with_opt", 1, ("arg1", "number", "1"), ("arg2", "number", "2"))),
        msg(calls=[_call("special_function_with_opt", '{"arg1":1,"arg2":2}')]),
        {"tools": [SPECIAL_FUNCTION_OPT]},
        False,
    ),
    (
        K3_EMPTY_RESPONSE
        + _k3_tools(
            _k3_call("special_function", 1, ("arg1", "number", "1")),
            _k3_call("special_function_with_opt", 2, ("arg1", "number", "1"), ("arg2", "number", "2")),
        ),
        msg(calls=[_call("special_function", '{"arg1":1}'), _call("special_function_with_opt", '{"arg1":1,"arg2":2}')]),
        {"parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]},
        False,
    ),
    # a string-typed argument keeps its text
    (
        K3_EMPTY_RESPONSE + _k3_tools(_k3_call("python", 1, ("code", "string", "print('hey')"))),
        msg(calls=[_call("python", '{"code":"print(\'hey\')"}')]),
        {"tools": [PYTHON]},
        False,
    ),
]


@pytest.mark.parametrize("case", KIMI_K3_CASES, ids=lambda c: c[0][:40])
def test_peg_kimi_k3(case):
    output, expected, request, partial = case
    peg_test(KIMI_K3, output, expected, partial=partial, **request)


# ---------------------------------------------------------------------------------------------------------------
# LFM2 / LFM2.5: <|tool_call_start|>[name(arg=value)]<|tool_call_end|>


def _lfm(calls: str) -> str:
    return f"<|tool_call_start|>[{calls}]<|tool_call_end|>"


LFM2_CASES = [
    (HELLO, MESSAGE_ASSIST, {}, False),
    (_lfm("special_function(arg1=1)"), MESSAGE_ASSIST_CALL, {"tools": [SPECIAL_FUNCTION]}, False),
    (
        _lfm('get_time(city="XYZCITY")'),
        msg(calls=[_call("get_time", '{"city":"XYZCITY"}')]),
        {"tools": [GET_TIME]},
        False,
    ),
    # Python literals become JSON
    (_lfm("toggle(enabled=True)"), msg(calls=[_call("toggle", '{"enabled": true}')]), {"tools": [TOGGLE]}, False),
    (
        _lfm("set_nullable(value=None)"),
        msg(calls=[_call("set_nullable", '{"value": null}')]),
        {"tools": [NULLABLE]},
        False,
    ),
    (
        _lfm('set_config(config={"enabled": True, "count": 3})'),
        msg(calls=[_call("set_config", '{"config": {"enabled": true, "count": 3}}')]),
        {"tools": [CONFIG]},
        False,
    ),
    # JSON literals too
    (
        _lfm('set_config(config={"enabled": true, "note": null})'),
        msg(calls=[_call("set_config", '{"config": {"enabled": true, "note": null}}')]),
        {"tools": [CONFIG]},
        False,
    ),
    (
        _lfm(
            'Calendar.create_event(title="demo", participants=["Alice", "Bob"], '
            'metadata={"priority": "high", "reminder": true})'
        ),
        msg(
            calls=[
                _call(
                    "Calendar.create_event",
                    '{"title": "demo", "participants": ["Alice", "Bob"], '
                    '"metadata": {"priority": "high", "reminder": true}}',
                )
            ]
        ),
        {"tools": [CALENDAR]},
        False,
    ),
    # markdown links stay content
    (
        "Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).",
        msg("Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org)."),
        {"tools": [GET_TIME]},
        False,
    ),
    # escapes in a string decode to their characters
    (
        _lfm("python(code=\"def hello():\\n    print('hey')\")"),
        msg(calls=[_call("python", '{"code": "def hello():\\n    print(\'hey\')"}')]),
        {"tools": [PYTHON]},
        False,
    ),
    (
        _lfm('python(code="First line\\nSecond line\\tindented")'),
        msg(calls=[_call("python", '{"code": "First line\\nSecond line\\tindented"}')]),
        {"tools": [PYTHON]},
        False,
    ),
    (
        _lfm('python(code="print(\\"hi\\")")'),
        msg(calls=[_call("python", '{"code": "print(\\"hi\\")"}')]),
        {"tools": [PYTHON]},
        False,
    ),
    (
        "Let me check the time." + _lfm('get_time(city="Paris")'),
        msg("Let me check the time.", calls=[_call("get_time", '{"city":"Paris"}')]),
        {"tools": [GET_TIME]},
        False,
    ),
    (
        _lfm("special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)"),
        msg(
            calls=[
                _call("special_function", '{"arg1": 1}'),
                _call("special_function_with_opt", '{"arg1": 1, "arg2": 2}'),
            ]
        ),
        {"parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]},
        False,
    ),
    (
        "<|tool_call_start|>[special_function(arg1=",
        msg(calls=[_call("special_function", '{"arg1": ')]),
        {"tools": [SPECIAL_FUNCTION]},
        True,
    ),
    (_lfm("empty_args()"), msg(calls=[_call("empty_args", "{}")]), {"tools": [EMPTY_ARGS]}, False),
]


@pytest.mark.parametrize("name", [LFM2, LFM25, LFM25_THINKING])
@pytest.mark.parametrize("case", LFM2_CASES, ids=lambda c: c[0][:40])
def test_peg_lfm2(name, case):
    output, expected, request, partial = case
    peg_test(name, output, expected, partial=partial, **request)


LFM25_THINKING_CASES = [
    (
        "<think>I'm\nthinking</think>" + _lfm("special_function(arg1=1)"),
        msg("", THINKING, [CALL]),
        {**AUTO, "tools": [SPECIAL_FUNCTION]},
    ),
    (
        "<think>I need to call a function</think>Let me check the time." + _lfm('get_time(city="Paris")'),
        msg("Let me check the time.", "I need to call a function", [_call("get_time", '{"city":"Paris"}')]),
        {**AUTO, "tools": [GET_TIME]},
    ),
    # a tool call marker inside the reasoning is not a call
    (
        "<think>Let me think about "
        + _lfm("special_function(arg1=1)")
        + " hmm</think>"
        + _lfm("special_function(arg1=1)"),
        msg("", "Let me think about " + _lfm("special_function(arg1=1)") + " hmm", [CALL]),
        {**AUTO, "tools": [SPECIAL_FUNCTION]},
    ),
    # enable_thinking false still takes the reasoning the model writes
    ("<think>I'm\nthinking</think>" + HELLO, MESSAGE_ASSIST_THOUGHTS, {**AUTO, "enable_thinking": False}),
    (
        "<think>I'm\nthinking</think>" + _lfm("special_function(arg1=1)"),
        msg("", THINKING, [CALL]),
        {**AUTO, "enable_thinking": False, "tools": [SPECIAL_FUNCTION]},
    ),
    ("world!\nWhat's up?", PREFILLED, {**AUTO, **CONTINUE_CONTENT}),
    (" thinking</think>" + HELLO, PREFILLED, {**AUTO, **CONTINUE_REASONING}),
]


@pytest.mark.parametrize("case", LFM25_THINKING_CASES, ids=lambda c: c[0][:40])
def test_peg_lfm25_thinking(case):
    output, expected, request = case
    peg_test(LFM25_THINKING, output, expected, **request)


# ---------------------------------------------------------------------------------------------------------------
# GigaChat V3, Functionary v3.2, MiniCPM5


GIGACHAT_CALL = '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "special_function", "arguments": {"arg1": 1}}'


@pytest.mark.parametrize(
    "case",
    [
        (HELLO, MESSAGE_ASSIST, {"reconstruct": True}),
        (GIGACHAT_CALL, MESSAGE_ASSIST_CALL, {"tools": [SPECIAL_FUNCTION], "reconstruct": True}),
        (HELLO + GIGACHAT_CALL, msg(HELLO, calls=[CALL]), {"tools": [SPECIAL_FUNCTION], "reconstruct": True}),
        ("world!\nWhat's up?", MESSAGE_ASSIST, CONTINUE_CONTENT),
    ],
    ids=lambda c: c[0][:40],
)
def test_peg_gigachat_v3(case):
    output, expected, request = case
    peg_test(GIGACHAT, output, expected, **request)


@pytest.mark.parametrize(
    "case",
    [
        ("all\n" + HELLO, MESSAGE_ASSIST, {"reconstruct": True}),
        ('special_function\n{"arg1": 1}', MESSAGE_ASSIST_CALL, {"tools": [SPECIAL_FUNCTION]}),
        ("world!\nWhat's up?", MESSAGE_ASSIST, CONTINUE_CONTENT),
    ],
    ids=lambda c: c[0][:40],
)
def test_peg_functionary_v3_2(case):
    output, expected, request = case
    peg_test(FUNCTIONARY, output, expected, **request)


def test_peg_functionary_v3_2_call_reconstruction():
    peg_test(
        FUNCTIONARY, 'special_function\n{"arg1": 1}', MESSAGE_ASSIST_CALL, tools=[SPECIAL_FUNCTION], reconstruct=True
    )


MINICPM5_CASES = [
    (HELLO, MESSAGE_ASSIST, {"enable_thinking": False}),
    (
        '<function name="python"><param name="code">print(\'Hello, World!\')</param></function>',
        msg(calls=[_call("python", '{"code": "print(\'Hello, World!\')"}')]),
        {"enable_thinking": False, "tools": [PYTHON]},
    ),
    (
        '<function name="empty_args"></function>',
        msg(calls=[_call("empty_args", "{}")]),
        {"enable_thinking": False, "tools": [EMPTY_ARGS]},
    ),
    (
        '<function name="python"><param name="code">print(\'x\')</param></function>',
        msg(calls=[_call("python", '{"code": "print(\'x\')"}')]),
        {"enable_thinking": False, "parallel_tool_calls": True, "tools": [PYTHON]},
    ),
    # CDATA lets a string value hold what would close the tag
    (
        '<function name="html"><param name="markup"><![CDATA[<a href="/x">hi</a> </param>]]></param></function>',
        msg(calls=[_call("html", '{"markup": "<a href=\\"/x\\">hi</a> </param>"}')]),
        {"enable_thinking": False, "tools": [HTML]},
    ),
    (
        'I\'m thinking</think><function name="python"><param name="code">print(\'hey\')</param></function>',
        msg("", "I'm thinking", [_call("python", '{"code": "print(\'hey\')"}')]),
        {"enable_thinking": True, "tools": [PYTHON]},
    ),
    (
        (
            '<function name="python"><param name="code">print(\'x\')</param></function>\n'
            '<function name="python"><param name="code">print(\'y\')</param></function>'
        ),
        msg(calls=[_call("python", '{"code": "print(\'x\')"}'), _call("python", '{"code": "print(\'y\')"}')]),
        {"enable_thinking": False, "parallel_tool_calls": True, "tools": [PYTHON]},
    ),
    (" thinking</think>" + HELLO, PREFILLED, {"enable_thinking": True, **CONTINUE_REASONING}),
]


@pytest.mark.parametrize("case", MINICPM5_CASES, ids=lambda c: c[0][:40])
def test_peg_minicpm5(case):
    output, expected, request = case
    peg_test(MINICPM5, output, expected, reasoning_format="auto", **request)


# ---------------------------------------------------------------------------------------------------------------
# Cohere2 MoE: <|START_THINKING|>, <|START_TEXT|> or <|START_ACTION|>[...]


def _action(*calls: str) -> str:
    return "<|START_ACTION|>[\n" + ",\n".join(f"    {c}" for c in calls) + "\n]<|END_ACTION|>"


COHERE_SF = '{"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}'
COHERE_TEXT = "<|START_TEXT|>" + HELLO + "<|END_TEXT|>"

COHERE2MOE_CASES = [
    ("I'm\nthinking<|END_THINKING|>" + COHERE_TEXT, MESSAGE_ASSIST_THOUGHTS, DS, False),
    # reasoning_format none: the thinking block stays in the content, markers included
    (
        "I'm\nthinking<|END_THINKING|>" + COHERE_TEXT,
        msg("<|START_THINKING|>I'm\nthinking<|END_THINKING|>Hello, world!\nWhat's up?"),
        {},
        False,
    ),
    ("<|END_THINKING|>" + COHERE_TEXT, MESSAGE_ASSIST, DS, False),
    (
        (
            'I need to output the invoice details in JSON<|END_THINKING|><|START_TEXT|>{"amount": 123.45, '
            '"date": "2025-12-03"}<|END_TEXT|>'
        ),
        msg('{"amount": 123.45, "date": "2025-12-03"}', "I need to output the invoice details in JSON"),
        {**DS, "json_schema": INVOICE_SCHEMA, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        "I'm\nthinking<|END_THINKING|>" + _action(COHERE_SF),
        msg("", THINKING, [_call("special_function", '{"arg1": 1}', "0")]),
        {**DS, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        "<|END_THINKING|>" + _action(COHERE_SF),
        msg(calls=[_call("special_function", '{"arg1":1}', "0")]),
        {**DS, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    (
        "<|END_THINKING|>"
        + _action('{"tool_call_id": "0", "tool_name": "todo_list", "parameters": {"todos": ["buy milk", "walk dog"]}}'),
        msg(calls=[_call("todo_list", '{"todos": ["buy milk", "walk dog"]}', "0")]),
        {**DS, "tools": [TODO_LIST]},
        False,
    ),
    (
        "I'm\nthinking<|END_THINKING|>"
        + _action(COHERE_SF, '{"tool_call_id": "1", "tool_name": "python", "parameters": {"code": "print(\'hey\')"}}'),
        msg(
            "",
            THINKING,
            [_call("special_function", '{"arg1": 1}', "0"), _call("python", '{"code": "print(\'hey\')"}', "1")],
        ),
        {**DS, "parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, PYTHON]},
        False,
    ),
    (
        "I'm\nthinking<|END_THINKING|>" + COHERE_TEXT,
        MESSAGE_ASSIST_THOUGHTS,
        {**DS, "tools": [SPECIAL_FUNCTION]},
        False,
    ),
    # streaming: the name and id come before the arguments
    (
        'I\'m\nthinking<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", ',
        msg("", THINKING, [_call("special_function", "", "0")]),
        {**DS, "tools": [SPECIAL_FUNCTION]},
        True,
    ),
]


@pytest.mark.parametrize("case", COHERE2MOE_CASES, ids=lambda c: c[0][:40])
def test_peg_cohere2moe(case):
    output, expected, request, partial = case
    peg_test(COHERE2MOE, output, expected, partial=partial, **request)


# ---------------------------------------------------------------------------------------------------------------
# MiniMax-M3: namespaced XML tool calls, nested arguments


NS = "]<]minimax[>["


def _mm_el(tag: str, inner: str) -> str:
    return f"{NS}<{tag}>{inner}{NS}</{tag}>"


def _mm_calls(*invokes: tuple[str, str]) -> str:
    body = "".join(f'{NS}<invoke name="{name}">{args}{NS}</invoke>\n' for name, args in invokes)
    return f"{NS}<tool_call>\n{body}{NS}</tool_call>"


def _mm_case(reasoning: str, invoke: tuple[str, str], tool: dict, args: str) -> tuple:
    return (
        f"<mm:think>{reasoning}</mm:think>" + _mm_calls(invoke),
        msg("", reasoning, [_call(invoke[0], args)]),
        {"tools": [tool], "reconstruct": True},
    )


MINIMAX_M3_CASES = [
    ("</mm:think>" + HELLO, MESSAGE_ASSIST, {"reconstruct": True}),
    ("<mm:think>I'm\nthinking</mm:think>" + HELLO, MESSAGE_ASSIST_THOUGHTS, {"reconstruct": True}),
    _mm_case("Let me check the time", ("get_time", _mm_el("city", "Tokyo")), GET_TIME, '{"city": "Tokyo"}'),
    (
        "</mm:think>" + _mm_calls(("special_function", _mm_el("arg1", "1"))),
        MESSAGE_ASSIST_CALL,
        {"tools": [SPECIAL_FUNCTION], "reconstruct": True},
    ),
    _mm_case("Let's call a tool:", ("empty_args", ""), EMPTY_ARGS, "{}"),
    (
        "<mm:think>Calling both</mm:think>"
        + _mm_calls(("get_time", _mm_el("city", "Paris")), ("get_weather", _mm_el("city", "Paris"))),
        msg("", "Calling both", [_call("get_time", '{"city": "Paris"}'), _call("get_weather", '{"city": "Paris"}')]),
        {"parallel_tool_calls": True, "tools": [GET_TIME, GET_WEATHER], "reconstruct": True},
    ),
    (
        "<mm:think>Thinking about it</mm:think>Let me call the function."
        + _mm_calls(("special_function", _mm_el("arg1", "1"))),
        msg("Let me call the function.", "Thinking about it", [CALL]),
        {"tools": [SPECIAL_FUNCTION], "reconstruct": True},
    ),
    _mm_case("Test negative", ("magic_int", _mm_el("ref", "-14")), MAGIC_INT, '{"ref": -14}'),
    _mm_case("Test decimal", ("amount", _mm_el("orig", "3.14")), AMOUNT, '{"orig": 3.14}'),
    _mm_case("Test boolean", ("toggle", _mm_el("enabled", "true")), TOGGLE, '{"enabled": true}'),
    _mm_case(
        "Multi-arg call",
        ("magic_int", _mm_el("ref", "42") + _mm_el("name", "foo bar")),
        MAGIC_INT,
        '{"ref": 42, "name": "foo bar"}',
    ),
    _mm_case(
        "Nested object",
        ("imaginary_number", _mm_el("number", _mm_el("real", "1.5") + _mm_el("imaginary", "-2.5"))),
        IMAGINARY_NUMBER,
        '{"number": {"real": 1.5, "imaginary": -2.5}}',
    ),
    _mm_case(
        "Nested arrays",
        (
            "nested_args",
            _mm_el("tags", _mm_el("item", "alpha") + _mm_el("item", "beta"))
            + _mm_el("entries", _mm_el("item", _mm_el("id", "1") + _mm_el("label", "one"))),
        ),
        NESTED_ARGS,
        '{"tags": ["alpha", "beta"], "entries": [{"id": 1, "label": "one"}]}',
    ),
    _mm_case(
        "Union array",
        ("union_args", _mm_el("filter", _mm_el("item", "alpha") + _mm_el("item", "beta"))),
        UNION_ARGS,
        '{"filter": ["alpha", "beta"]}',
    ),
    _mm_case("Union scalar", ("union_args", _mm_el("limit", "5")), UNION_ARGS, '{"limit": 5}'),
    _mm_case(
        "Union nested", ("union_args", _mm_el("limit", _mm_el("max", "10"))), UNION_ARGS, '{"limit": {"max": 10}}'
    ),
    # a union with a string alternative is a string, even when the value looks structured
    _mm_case("Union string", ("union_args", _mm_el("label", "hi")), UNION_ARGS, '{"label": "hi"}'),
    _mm_case(
        "Union string",
        ("union_args", _mm_el("label", _mm_el("text", "hi"))),
        UNION_ARGS,
        json.dumps({"label": _mm_el("text", "hi")}),
    ),
    (
        "<mm:think></mm:think>" + _mm_calls(("get_time", _mm_el("city", "XYZCITY"))),
        msg(calls=[_call("get_time", '{"city": "XYZCITY"}')]),
        {"tools": [GET_TIME]},
    ),
    ("world!\nWhat's up?", PREFILLED, CONTINUE_CONTENT),
    (" thinking</mm:think>" + HELLO, PREFILLED, CONTINUE_REASONING),
]


@pytest.mark.parametrize("case", MINIMAX_M3_CASES, ids=lambda c: c[0][:40])
def test_peg_minimax_m3(case):
    output, expected, request = case
    peg_test(MINIMAX_M3, output, expected, enable_thinking=True, reasoning_format="auto", **request)


# ---------------------------------------------------------------------------------------------------------------
# Muse Glimmer: " to=<recipient><|message|>" messages


MUSE_CALL_MARKUP = (
    '<atem:function_calls>\n<atem:invoke name="special_function">\n'
    '<atem:parameter name="arg1">1</atem:parameter>\n</atem:invoke>\n</atem:function_calls>'
)

MUSE_CASES = [
    (" to=user<|message|>" + HELLO + "<|eot|>", MESSAGE_ASSIST, {}),
    # inform then act: the answer closed by <|eom|>, then the call
    (
        " to=user<|message|>" + HELLO + "<|eom|><|start|>assistant to=special_function<|message|>" + MUSE_CALL_MARKUP,
        msg(HELLO, calls=[_call("special_function", '{"arg1":1}')]),
        {"tools": [SPECIAL_FUNCTION]},
    ),
    # markup quoted in an answer (no <|eom|> before it) stays content
    (
        " to=user<|message|>You invoke it like this:\n" + MUSE_CALL_MARKUP + "<|eot|>",
        msg("You invoke it like this:\n" + MUSE_CALL_MARKUP),
        {"tools": [SPECIAL_FUNCTION]},
    ),
    # markup in the analysis channel is reasoning
    (
        " to=self<|message|>I could use " + MUSE_CALL_MARKUP + " here<|eom|><|start|>assistant to=user<|message|>"
        "Hello!<|eot|>",
        msg("Hello!", "I could use " + MUSE_CALL_MARKUP + " here"),
        {"tools": [SPECIAL_FUNCTION]},
    ),
]


@pytest.mark.parametrize("case", MUSE_CASES, ids=lambda c: c[0][:40])
def test_peg_muse_glimmer(case):
    output, expected, request = case
    peg_test(MUSE, output, expected, reasoning_format="auto", **request)


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's test_template_generation_prompt


SYSTEM = msg("You are a helpful assistant.", role="system")
TOOL_CALL_MSG = msg(calls=[_call("special_function", '{"arg1": 1}')])


def _tool_msg(content: str, call_id: str, name: str = "special_function") -> ChatMsg:
    return ChatMsg(role="tool", content=content, tool_name=name, tool_call_id=call_id)


def check_generation_prompt(name: str, kind: str, expected: str, **request) -> None:
    messages = {
        "basic": [SYSTEM, message_user()],
        "content": [SYSTEM, message_user(), prefill_content()],
        "reasoning": [SYSTEM, message_user(), prefill_reasoning()],
    }[kind]
    cont = {"basic": "none", "content": "content", "reasoning": "reasoning"}[kind]
    params = chat_params(name, messages=request.pop("messages", messages), continue_final_message=cont, **request)
    assert SYSTEM.content in params.prompt
    assert message_user().content in params.prompt
    assert params.generation_prompt == expected
    assert params.prompt.endswith(expected)


@pytest.mark.parametrize(
    "name,basic,content,reasoning",
    [
        (
            FUNCTIONARY,
            "<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
            "<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\nHello, ",
            "<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\n",
        ),
        (
            KIMI_K2_OLD,
            "<|im_assistant|>assistant<|im_middle|>",
            "<|im_assistant|>assistant<|im_middle|><think>I'm thinking</think>Hello, ",
            "<|im_assistant|>assistant<|im_middle|><think>I'm",
        ),
        (
            LFM2,
            "<|im_start|>assistant\n",
            "<|im_start|>assistant\n<think>I'm thinking</think>Hello, ",
            "<|im_start|>assistant\n<think>I'm",
        ),
        (
            LFM25,
            "<|im_start|>assistant\n",
            "<|im_start|>assistant\n<think>I'm thinking</think>Hello, ",
            "<|im_start|>assistant\n<think>I'm",
        ),
        (
            LFM25_THINKING,
            "<|im_start|>assistant\n",
            "<|im_start|>assistant\n<think>I'm thinking</think>Hello, ",
            "<|im_start|>assistant\n<think>I'm",
        ),
        (GIGACHAT, "assistant<|role_sep|>\n", "assistant<|role_sep|>\nHello, ", "assistant<|role_sep|>\n"),
        (
            DEEPSEEK_V32,
            "<｜Assistant｜><think>",
            "<｜Assistant｜><think>I'm thinking</think>Hello, ",
            "<｜Assistant｜><think>I'm",
        ),
        (
            DEEPSEEK_V4,
            "<｜Assistant｜><think>",
            "<｜Assistant｜><think>I'm thinking</think>Hello, ",
            "<｜Assistant｜><think>I'm",
        ),
        (
            DEEPSEEK_V4_FLASH,
            "<｜Assistant｜><think>",
            "<｜Assistant｜><think>I'm thinking</think>Hello, ",
            "<｜Assistant｜><think>I'm",
        ),
        (
            MINICPM5,
            "<|im_start|>assistant\n<think>\n",
            "<|im_start|>assistant\n<think>\nI'm thinking\n</think>\n\nHello, ",
            "<|im_start|>assistant\n<think>\nI'm",
        ),
    ],
)
def test_generation_prompt(name, basic, content, reasoning):
    check_generation_prompt(name, "basic", basic)
    check_generation_prompt(name, "content", content)
    check_generation_prompt(name, "reasoning", reasoning)


def test_lfm25_renders_reasoning_from_the_thinking_field():
    params = chat_params(
        LFM25_THINKING, messages=[message_user(), msg("", THINKING, [CALL]), _tool_msg("Sunny", "call0")]
    )
    assert "<think>I'm\nthinking</think>" in params.prompt


@pytest.mark.parametrize("name", [DEEPSEEK_V4, DEEPSEEK_V4_FLASH])
def test_deepseek_v4_continuation_without_thinking(name):
    check_generation_prompt(
        name,
        "content",
        "<｜Assistant｜></think>Hello, ",
        messages=[SYSTEM, message_user(), msg("Hello, ")],
        enable_thinking=False,
    )


EFFORT_MAX = "Reasoning Effort: Absolute maximum"
EFFORT_BEYOND = "Reasoning Effort: Beyond maximum"


def _prompt(name: str, **request) -> str:
    return chat_params(name, **request).prompt


def test_deepseek_v4_reasoning_effort_and_response_format():
    msgs = [SYSTEM, message_user()]
    assert EFFORT_MAX in _prompt(DEEPSEEK_V4, messages=msgs, extra_context={"reasoning_effort": "max"})
    for effort in ("high", "low"):
        assert EFFORT_MAX not in _prompt(DEEPSEEK_V4, messages=msgs, extra_context={"reasoning_effort": effort})
    assert EFFORT_MAX not in _prompt(DEEPSEEK_V4, messages=msgs)
    assert EFFORT_MAX not in _prompt(
        DEEPSEEK_V4, messages=msgs, extra_context={"reasoning_effort": "max"}, enable_thinking=False
    )

    # the response format goes into the prompt, after the tools
    prompt = _prompt(
        DEEPSEEK_V4,
        messages=msgs,
        tools=[GET_TIME],
        json_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
    )
    tools_at = prompt.find("## Tools")
    format_at = prompt.find("## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n")
    assert 0 <= tools_at < format_at
    assert '"answer": {"type": "string"}' in prompt
    prompt = _prompt(DEEPSEEK_V4, messages=msgs, tools=[GET_TIME], json_schema={})
    assert "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{}" in prompt


def test_deepseek_v4_history_reasoning():
    history = [message_user(), msg("Previous answer", "Previous reasoning"), msg("Follow up", role="user")]
    assert "<｜Assistant｜></think>Previous answer" in _prompt(DEEPSEEK_V4, messages=history)
    kept = "<｜Assistant｜><think>Previous reasoning</think>Previous answer"
    assert kept in _prompt(DEEPSEEK_V4, messages=history, extra_context={"drop_thinking": False})
    assert kept in _prompt(DEEPSEEK_V4, messages=history, extra_context={"preserve_reasoning": True})
    assert "<｜Assistant｜></think>Previous answer" in _prompt(
        DEEPSEEK_V4, messages=history, extra_context={"preserve_reasoning": False}
    )
    prompt = _prompt(DEEPSEEK_V4, messages=[message_user(), msg(calls=[_call("empty_args", "{}")])], tools=[EMPTY_ARGS])
    assert '<｜DSML｜invoke name="empty_args">\n\n</｜DSML｜invoke>' in prompt


def test_deepseek_v4_supports_preserve_reasoning():
    assert template_caps(template_source(DEEPSEEK_V4))["supports_preserve_reasoning"]


def test_deepseek_v4_flash_reasoning_effort_and_response_format():
    msgs = [SYSTEM, message_user()]
    assert EFFORT_MAX in _prompt(DEEPSEEK_V4_FLASH, messages=msgs, extra_context={"reasoning_effort": "high"})
    assert EFFORT_BEYOND in _prompt(DEEPSEEK_V4_FLASH, messages=msgs, extra_context={"reasoning_effort": "max"})
    for request in ({"extra_context": {"reasoning_effort": "low"}}, {}):
        prompt = _prompt(DEEPSEEK_V4_FLASH, messages=msgs, **request)
        assert EFFORT_MAX not in prompt and EFFORT_BEYOND not in prompt
    assert EFFORT_BEYOND not in _prompt(
        DEEPSEEK_V4_FLASH, messages=msgs, extra_context={"reasoning_effort": "max"}, enable_thinking=False
    )
    prompt = _prompt(
        DEEPSEEK_V4_FLASH,
        messages=msgs,
        tools=[GET_TIME],
        json_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
    )
    assert "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" in prompt
    assert '"answer": {"type": "string"}' in prompt


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's test_deepseek_v4_thinking_retention and test_deepseek_v4_tool_result_ordering


def test_deepseek_v4_thinking_retention():
    q1, q2 = msg("Question 1", role="user"), msg("Question 2", role="user")
    a1, a2 = msg("Answer 1", "thinking A1"), msg("Answer 2", "thinking A2")
    tool_assist = msg(calls=[_call("special_function", '{"arg1": 1}')])
    tool_result = _tool_msg("result", "0")
    think_a1 = "<｜Assistant｜><think>thinking A1</think>"
    think_a2 = "<｜Assistant｜><think>thinking A2</think>"

    def render(messages, drop_thinking: bool) -> str:
        return _prompt(
            DEEPSEEK_V4,
            messages=messages,
            add_generation_prompt=False,
            extra_context={"thinking": True, "drop_thinking": drop_thinking},
        )

    prompt = render([q1, a1, q2, a2], False)
    assert think_a1 in prompt and think_a2 in prompt
    # only the last reasoning is kept; the dropped turn opens with the bare end token
    prompt = render([q1, a1, q2, a2], True)
    assert think_a1 not in prompt and think_a2 in prompt
    assert "<｜Assistant｜></think>Answer 1" in prompt
    assert think_a1 in render([q1, a1], True)
    assert think_a1 in render([q1, a1], False)
    # tool calls keep every reasoning
    for drop in (True, False):
        prompt = render([q1, a1, q2, tool_assist, tool_result, a2], drop)
        assert think_a1 in prompt and think_a2 in prompt


def test_deepseek_v4_tool_result_ordering():
    calls = msg(
        calls=[_call("get_time", '{"city": "Paris"}', "call_1"), _call("get_weather", '{"city": "Paris"}', "call_2")]
    )
    time_result = _tool_msg("12:00", "call_1", "get_time")
    weather_result = _tool_msg("sunny", "call_2", "get_weather")
    in_order = "<tool_result>12:00</tool_result>\n\n<tool_result>sunny</tool_result>"

    def render(messages) -> str:
        return _prompt(DEEPSEEK_V4, messages=messages, add_generation_prompt=False)

    user = msg("Question", role="user")
    assert in_order in render([user, calls, weather_result, time_result])
    assert in_order in render([user, calls, time_result, weather_result])
    # without ids there is nothing to match: the order stays
    no_ids = msg(calls=[_call("get_time", '{"city": "Paris"}'), _call("get_weather", '{"city": "Paris"}')])
    prompt = render([user, no_ids, _tool_msg("sunny", "", "get_weather"), _tool_msg("12:00", "", "get_time")])
    assert "<tool_result>sunny</tool_result>\n\n<tool_result>12:00</tool_result>" in prompt


def test_sort_tool_results_runs():
    # a run of user/tool messages is sorted by the call order of the assistant message before it; an unknown
    # id counts as the first call, and a later assistant message starts a new order
    messages = [
        {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}, {"id": "c"}]},
        {"role": "tool", "tool_call_id": "c", "content": "C"},
        {"role": "user", "content": "between"},
        {"role": "tool", "tool_call_id": "x", "content": "X"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "system", "content": "stop"},
        {"role": "tool", "tool_call_id": "b", "content": "B2"},
        {"role": "tool", "tool_call_id": "a", "content": "A2"},
    ]
    out = sort_tool_results(messages)
    assert [m.get("content") for m in out] == [None, "X", "between", "B", "C", "stop", "A2", "B2"]
    assert messages[1]["content"] == "C"  # the input is left alone


# ---------------------------------------------------------------------------------------------------------------
# The chat parameters against b10621's binary (fixtures/chat/specialized_b_b10621.json)


def _fixture_cases() -> list[dict]:
    if not FIXTURE.is_file():
        return []
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


def _server_inputs(case: dict, source: str, bos: str, eos: str) -> GenerationParams:
    """The request as b10621's server hands it to common_chat_templates_apply(): a trailing assistant message is
    continued (auto), the response format's schema is the json_schema, reasoning_format is the server's."""
    body = case["request"]
    caps = template_caps(source)
    messages = parse_messages(body["messages"])
    continue_final, continue_msg, add_generation_prompt = "none", None, True
    if messages[-1].role == "assistant":
        continue_final, add_generation_prompt = "auto", False
        continue_msg, messages = messages[-1], messages[:-1]
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema")
    day = datetime.date.fromisoformat(case["date"])
    extra = {
        "bos_token": bos,
        "eos_token": eos,
        "datetime": day.strftime("%b %d %Y"),
        "date_string": day.strftime("%d %b %Y"),
    }
    return GenerationParams(
        messages=apply_workarounds([to_template_json(m) for m in messages], caps, source),
        tools=body.get("tools"),
        tool_choice=body.get("tool_choice", "auto"),
        json_schema=schema,
        parallel_tool_calls=body.get("parallel_tool_calls", True),
        reasoning_format=case.get("expect", {}).get("reasoning_format", "deepseek"),
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final,
        continue_msg=continue_msg,
        extra_context=extra,
    )


@pytest.mark.parametrize("case", _fixture_cases(), ids=lambda c: f"{c['template']}-{c['variant']}")
def test_chat_params_match_b10621(case):
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    bos, eos = fixture["bos_token"], fixture["eos_token"]
    name = case["template"]
    source = template_source(name)
    params = try_specialized(
        source, Template(source, bos, eos, template_caps(source)), _server_inputs(case, source, bos, eos)
    )
    if "error" in case:
        # the model's one token did not parse: the binary answered an error, only the prompt was recorded
        assert params.prompt == case["apply_prompt"]
        return
    expect = case["expect"]
    assert params.prompt == expect["prompt"] == expect["apply_prompt"]
    assert params.generation_prompt == expect["generation_prompt"]
    assert params.format == expect["chat_format"]
    assert params.grammar == expect["grammar"]
    assert params.grammar_lazy == expect["grammar_lazy"]
    assert [{"type": t, "value": v} for t, v in params.grammar_triggers] == expect["grammar_triggers"]
    # the binary lists the preserved tokens that are single tokens of its vocabulary
    assert set(expect["preserved_tokens"]) <= set(params.preserved_tokens)
