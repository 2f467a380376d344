"""b10621's specialized chat handlers for Qwen3-Coder (Nemotron Nano 3, Qwen3.5, StepFun), GPT-OSS, Gemma4 and
Ministral 3 (server/chat/specialized) against b10621.

The end-to-end cases are tests/test-chat.cpp's peg_tester cases for these templates (each output parsed
prefix by prefix as a stream and whole). The prompt, generation prompt, grammar, laziness and triggers of six
requests (tools, tool_choice required, a tool-call history, a JSON schema, no reasoning extraction, a continued
answer) on eight templates were recorded from the b10621 llama-server binary
(fixtures/chat/specialized_a_b10621.json). Templates are read from the pinned sdist's models/templates; those
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
from server.chat.specialized import try_specialized
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
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "specialized_a_b10621.json"

QWEN3_CODER = "Qwen3-Coder.jinja"
QWEN35 = "Qwen3.5-4B.jinja"
NEMOTRON = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"
STEPFUN = "StepFun3.5-Flash.jinja"
GPT_OSS = "openai-gpt-oss-120b.jinja"
GEMMA4 = "google-gemma-4-31B-it.jinja"
GEMMA4_OLD = "google-gemma-4-31B-it-interleaved.jinja"
MINISTRAL = "mistralai-Ministral-3-14B-Reasoning-2512.jinja"


# ------------------------------------------------------------------------------------------------------------
# test-chat.cpp's tools and messages


EMPTY_ARGS_NO_PROPS = tool(
    "empty_args_no_props", "A tool that takes no arguments and has no properties", {"type": "object"}
)
EDIT = tool(
    "edit",
    "Edit file",
    obj(
        {
            "filename": string("Path of file to edit"),
            "oldString": string("String to replace"),
            "newString": string("New (replacement) value"),
        },
        ["filename", "oldString", "newString"],
    ),
)
MANAGE_TODO_LIST = tool(
    "manage_todo_list",
    "Create or update the todo list",
    obj({"todos": {"type": "array", "description": "List of TODO list items"}}, ["todos"]),
)
RUN_IN_TERMINAL = tool(
    "run_in_terminal", "Run a shell command.", obj({"command": string("Shell command to run")}, ["command"])
)
MAGIC = tool("magic", "Magic tool that takes a hash", obj({"name": string(), "ref": string()}, ["name", "ref"]))
NULLABLE_STRING = tool(
    "set_nullable_str",
    "Set a nullable string value",
    obj({"name": {"type": ["string", "null"], "description": "A nullable string"}}, ["name"]),
)
NULLABLE_STRING_NULL_FIRST = tool(
    "set_nullable_str_nf",
    "Set a nullable string value with null first in type array",
    obj({"name": {"type": ["null", "string"], "description": "A nullable string with null first"}}, ["name"]),
)
NULLABLE_INT = tool(
    "set_nullable_int",
    "Set a nullable integer value",
    obj({"count": {"type": ["integer", "null"], "description": "A nullable integer"}}, ["count"]),
)
ENUM_NO_TYPE = tool(
    "set_unit",
    "Set a temperature unit",
    obj({"unit": {"enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, ["unit"]),
)
STRING_PARAM = tool(
    "string_param", "Tool with string parameter for testing", obj({"text": string("A text parameter")}, [])
)
QUOTED_UNQUOTED = tool(
    "quoted_unquoted",
    "Tool with two string parameters, one for quoted string, one for unquoted",
    obj({"quoted": string("Quoted value"), "unquoted": string("Unquoted value")}, ["quoted", "unquoted"]),
)
TOOL_2REQ_4OPT = tool(
    "tool_2req_4opt",
    "Tool with 2 required and 4 optional params",
    obj(
        {
            "req1": string("Required string"),
            "req2": integer("Required int"),
            "opt1": string("Optional string 1"),
            "opt2": integer("Optional int 1"),
            "opt3": string("Optional string 2"),
            "opt4": integer("Optional int 2"),
        },
        ["req1", "req2"],
    ),
)
TOOL_2REQ_5OPT = tool(
    "tool_2req_5opt",
    "Tool with 2 required and 5 optional params",
    obj(
        {
            "req1": string("Required string"),
            "req2": integer("Required int"),
            "opt1": string("Optional string 1"),
            "opt2": integer("Optional int 1"),
            "opt3": string("Optional string 2"),
            "opt4": integer("Optional int 2"),
            "opt5": string("Optional string 3"),
        },
        ["req1", "req2"],
    ),
)
EDIT_GPT_OSS = tool(
    "edit",
    "Edit a file",
    obj(
        {
            "oldString": string("Old string to replace."),
            "newString": string("New replacement string."),
            "replaceAll": {"type": "boolean", "description": "Whether to replace all occurrences."},
        },
        ["oldString", "newString"],
    ),
)

MESSAGE_ASSIST_CALL_THOUGHTS = msg("", THINKING, [CALL])


def _call(name: str, args: str, content: str = "", reasoning: str = "") -> ChatMsg:
    return msg(content, reasoning, [(name, args, "")])


def _calls(*calls: tuple[str, str], content: str = "", reasoning: str = "") -> ChatMsg:
    return msg(content, reasoning, [(name, args, "") for name, args in calls])


# ------------------------------------------------------------------------------------------------------------
# The harness: common_chat_templates_apply() through try_specialized(), and test_peg_parser()

chat_params = specialized_params


def peg_test(name: str, output: str, expected: ChatMsg, *, partial: bool = False, **request) -> None:
    assert_peg_parses(chat_params(name, **request), output, expected, partial)


def tool_call_xml(name: str, *args: tuple[str, str], opener: bool = True) -> str:
    """A Qwen3-Coder tool call."""
    body = f"<function={name}>\n" + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args)
    return ("<tool_call>\n" if opener else "") + body + "</function>\n</tool_call>"


@pytest.mark.parametrize(
    "name,kind",
    [
        (QWEN3_CODER, "Qwen3-Coder"),
        (QWEN35, "Qwen3-Coder"),
        (NEMOTRON, "Qwen3-Coder"),
        (STEPFUN, "Qwen3-Coder"),
        (GPT_OSS, "GPT-OSS"),
        (GEMMA4, "Gemma4"),
        (GEMMA4_OLD, "Gemma4"),
        (MINISTRAL, "Ministral/Magistral Large 3"),
        ("unsloth-mistral-Devstral-Small-2507.jinja", "Ministral/Magistral Large 3"),
    ],
)
def test_dispatch(name, kind):
    source = template_source(name)
    assert specialized_template_kind(source) == kind
    assert (
        try_specialized(
            source,
            Template(source, "", "", template_caps(source)),
            GenerationParams(messages=[to_template_json(message_user())], add_generation_prompt=True),
        )
        is not None
    )


def test_not_specialized():
    source = template_source("Qwen-Qwen3-0.6B.jinja")
    assert (
        try_specialized(
            source,
            Template(source, "", "", template_caps(source)),
            GenerationParams(messages=[to_template_json(message_user())]),
        )
        is None
    )


def test_grammar_next_to_tools_refused():
    source = template_source(QWEN3_CODER)
    with pytest.raises(RuntimeError, match="^Cannot specify grammar with tools$"):
        try_specialized(
            source,
            Template(source, "", "", template_caps(source)),
            GenerationParams(
                messages=[to_template_json(message_user())], tools=[SPECIAL_FUNCTION], grammar="root ::= [a]"
            ),
        )


# ------------------------------------------------------------------------------------------------------------
# Qwen3.5 (test-chat.cpp: "basically same as Nemotron")

RUN_PWD = ("run_in_terminal", '{"command": "pwd"}')
PWD_CALL = tool_call_xml("run_in_terminal", ("command", "pwd"))
SPECIAL_CALL_XML = tool_call_xml("special_function", ("arg1", "1"))
OPT_CALL_XML = tool_call_xml("special_function_with_opt", ("arg1", "1"), ("arg2", "2"))
PYTHON_CODE = 'def hello():\n    print("Hello, world!")\n\nhello()'
PYTHON_CALL_ARGS = json.dumps({"code": PYTHON_CODE})
AUTO = {"reasoning_format": "auto"}
AUTO_NO_THINK = {"reasoning_format": "auto", "enable_thinking": False}


def _todo_history():
    user_start = msg("Create a todo list, then inspect the repository.", role="user")
    todos = ChatMsg(
        role="assistant",
        tool_calls=[
            ToolCall("manage_todo_list", '{"todos":[{"item":"Inspect repository","selected":false}]}', "call_todos")
        ],
    )
    result = ChatMsg(role="tool", content="Successfully wrote todo list", tool_call_id="call_todos")
    return [user_start, todos, result, msg("Proceed.", role="user")]


QWEN35_CASES = [
    ("I'm\nthinking\n</think>\n\n" + HELLO, MESSAGE_ASSIST_THOUGHTS, AUTO),
    ("I'm\nthinking\n</think>\n\n" + HELLO, msg("<think>\nI'm\nthinking\n</think>\n\n" + HELLO), {}),
    (SPECIAL_CALL_XML, MESSAGE_ASSIST_CALL, dict(AUTO_NO_THINK, tools=[SPECIAL_FUNCTION])),
    (
        "I'm\nthinking\n</think>\n\n" + SPECIAL_CALL_XML,
        MESSAGE_ASSIST_CALL_THOUGHTS,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        SPECIAL_CALL_XML + "\n" + OPT_CALL_XML,
        _calls(("special_function", '{"arg1": 1}'), ("special_function_with_opt", '{"arg1": 1, "arg2": 2}')),
        dict(AUTO_NO_THINK, parallel_tool_calls=True, tools=[SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]),
    ),
    (
        tool_call_xml("python", ("code", PYTHON_CODE)),
        _call("python", PYTHON_CALL_ARGS),
        dict(AUTO_NO_THINK, tools=[PYTHON]),
    ),
    (
        tool_call_xml("edit", ("filename", "foo.c"), ("oldString", "#iclunde"), ("newString", "#include")),
        _call("edit", '{"filename": "foo.c", "oldString": "#iclunde", "newString": "#include"}'),
        dict(AUTO_NO_THINK, tools=[EDIT]),
    ),
    # a value ending in a newline keeps it
    (
        tool_call_xml("edit", ("filename", "foo.c"), ("oldString", "#iclunde"), ("newString", "#include\n")),
        _call("edit", '{"filename": "foo.c", "oldString": "#iclunde", "newString": "#include\\n"}'),
        dict(AUTO_NO_THINK, tools=[EDIT]),
    ),
    (
        tool_call_xml("python", ("code", '    print("Hello, world!")')),
        _call("python", json.dumps({"code": '    print("Hello, world!")'})),
        dict(AUTO_NO_THINK, tools=[PYTHON]),
    ),
    (
        'I need to output the invoice details in JSON\n</think>\n\n{"amount": 123.45, "date": "2025-12-03"}',
        msg('{"amount": 123.45, "date": "2025-12-03"}', "I need to output the invoice details in JSON"),
        dict(AUTO, json_schema=INVOICE_SCHEMA),
    ),
    # a tool call ends the prefilled thinking block, with or without a closing </think>
    (PWD_CALL, _call(*RUN_PWD), dict(AUTO, tools=[RUN_IN_TERMINAL])),
    (
        "Need to inspect the current directory.\n" + PWD_CALL,
        _call(*RUN_PWD, reasoning="Need to inspect the current directory."),
        dict(AUTO, tools=[RUN_IN_TERMINAL]),
    ),
    (tool_call_xml("empty_args"), _call("empty_args", "{}"), dict(AUTO_NO_THINK, tools=[EMPTY_ARGS])),
    (
        tool_call_xml("empty_args_no_props"),
        _call("empty_args_no_props", "{}"),
        dict(AUTO_NO_THINK, tools=[EMPTY_ARGS_NO_PROPS]),
    ),
    # reasoning traces not sent
    (
        "<think>\n\n</think>\n\n" + SPECIAL_CALL_XML,
        _call(*CALL[:2], reasoning="<think>\n\n"),
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    ("</think>\n\n" + SPECIAL_CALL_XML, MESSAGE_ASSIST_CALL, dict(AUTO, tools=[SPECIAL_FUNCTION])),
    ("</think>\n\n" + PWD_CALL, _call(*RUN_PWD), dict(AUTO, tools=[RUN_IN_TERMINAL])),
    (
        "</think>\n\nLet me inspect the current directory.\n" + PWD_CALL,
        _call(*RUN_PWD, content="Let me inspect the current directory.\n"),
        dict(AUTO, tools=[RUN_IN_TERMINAL]),
    ),
    (
        "</think>\n\nLet me inspect the current directory.\n" + PWD_CALL,
        _call(*RUN_PWD, content="Let me inspect the current directory.\n"),
        dict(AUTO, tools=[RUN_IN_TERMINAL], tool_choice="required"),
    ),
    (
        "I should inspect the directory.\n</think>\n\nLet me inspect it now.\n" + PWD_CALL,
        _call(*RUN_PWD, content="Let me inspect it now.\n", reasoning="I should inspect the directory."),
        dict(AUTO, tools=[RUN_IN_TERMINAL]),
    ),
    ("world!\nWhat's up?", PREFILLED, dict(AUTO, **CONTINUE_CONTENT)),
    (" thinking\n</think>\n\n" + HELLO, msg(HELLO, "I'm thinking"), dict(AUTO, **CONTINUE_REASONING)),
    (
        "I need to run a terminal command.\n</think>\n\n" + PWD_CALL,
        _call(*RUN_PWD, reasoning="I need to run a terminal command."),
        dict(AUTO, tools=[MANAGE_TODO_LIST, RUN_IN_TERMINAL], messages=_todo_history()),
    ),
    (
        "I need to run a terminal command.\n</think>\n\nLet me inspect the current directory.\n" + PWD_CALL,
        _call(
            *RUN_PWD, content="Let me inspect the current directory.\n", reasoning="I need to run a terminal command."
        ),
        dict(AUTO, tools=[MANAGE_TODO_LIST, RUN_IN_TERMINAL], tool_choice="required", messages=_todo_history()),
    ),
    (
        "</think>\n\n" + PWD_CALL,
        _call(*RUN_PWD),
        dict(AUTO, tools=[MANAGE_TODO_LIST, RUN_IN_TERMINAL], messages=_todo_history()),
    ),
]


@pytest.mark.parametrize("output,expected,request_", QWEN35_CASES)
def test_peg_qwen35(output, expected, request_):
    peg_test(QWEN35, output, expected, **request_)


# ------------------------------------------------------------------------------------------------------------
# Nemotron 3 Nano

NEMOTRON_CASES = [
    (HELLO, MESSAGE_ASSIST, AUTO_NO_THINK),
    ("I'm\nthinking\n</think>\n" + HELLO, msg("<think>\nI'm\nthinking\n</think>\n" + HELLO), {}),
    ("I'm\nthinking\n</think>\n" + HELLO, MESSAGE_ASSIST_THOUGHTS, AUTO),
    (SPECIAL_CALL_XML + "\n", MESSAGE_ASSIST_CALL, dict(AUTO_NO_THINK, tools=[SPECIAL_FUNCTION])),
    (
        "I'm\nthinking\n</think>\n" + SPECIAL_CALL_XML + "\n",
        MESSAGE_ASSIST_CALL_THOUGHTS,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        SPECIAL_CALL_XML + "\n" + OPT_CALL_XML + "\n",
        _calls(("special_function", '{"arg1": 1}'), ("special_function_with_opt", '{"arg1": 1, "arg2": 2}')),
        dict(AUTO_NO_THINK, parallel_tool_calls=True, tools=[SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]),
    ),
    (
        tool_call_xml("python", ("code", PYTHON_CODE)) + "\n",
        _call("python", PYTHON_CALL_ARGS),
        dict(AUTO_NO_THINK, tools=[PYTHON]),
    ),
    (
        'I need to output the invoice details in JSON\n</think>\n{"amount": 123.45, "date": "2025-12-03"}',
        msg('{"amount": 123.45, "date": "2025-12-03"}', "I need to output the invoice details in JSON"),
        dict(AUTO, json_schema=INVOICE_SCHEMA),
    ),
    ("world!\nWhat's up?", PREFILLED, dict(AUTO, **CONTINUE_CONTENT)),
    (" thinking\n</think>\n" + HELLO, msg(HELLO, "I'm thinking"), dict(AUTO, **CONTINUE_REASONING)),
]


@pytest.mark.parametrize("output,expected,request_", NEMOTRON_CASES)
def test_peg_nemotron_3_nano(output, expected, request_):
    peg_test(NEMOTRON, output, expected, **request_)


# ------------------------------------------------------------------------------------------------------------
# Qwen3-Coder

OPT_CALLS = _calls(("special_function", '{"arg1": 1}'), ("special_function_with_opt", '{"arg1": 1, "arg2": 2}'))
HTML_MARKUP = "<html>\n <head>\n  <title>Hello!</title>\n </head>\n</html>"
TODOS = '[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]'

QWEN3_CODER_CASES = [
    (HELLO, MESSAGE_ASSIST, {}),
    (SPECIAL_CALL_XML, MESSAGE_ASSIST_CALL, {"tools": [SPECIAL_FUNCTION]}),
    # some models skip the opening <tool_call>
    (
        tool_call_xml("special_function", ("arg1", "1"), opener=False),
        MESSAGE_ASSIST_CALL,
        {"tools": [SPECIAL_FUNCTION]},
    ),
    (
        "Let me call it.\n" + tool_call_xml("special_function", ("arg1", "1"), opener=False),
        _call(*CALL[:2], content="Let me call it.\n"),
        {"tools": [SPECIAL_FUNCTION]},
    ),
    # only the first call may leave it out
    (
        tool_call_xml("special_function", ("arg1", "1"), opener=False) + "\n" + OPT_CALL_XML,
        OPT_CALLS,
        {"parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]},
    ),
    (
        SPECIAL_CALL_XML + "\n" + OPT_CALL_XML,
        OPT_CALLS,
        {"parallel_tool_calls": True, "tools": [SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]},
    ),
    (tool_call_xml("python", ("code", PYTHON_CODE)), _call("python", PYTHON_CALL_ARGS), {"tools": [PYTHON]}),
    (tool_call_xml("python", ("code", "格")), _call("python", '{"code": "格"}'), {"tools": [PYTHON]}),
    (
        tool_call_xml("html", ("markup", HTML_MARKUP)),
        _call("html", json.dumps({"markup": HTML_MARKUP})),
        {"tools": [HTML]},
    ),
    (
        tool_call_xml("todo_list", ("todos", TODOS)),
        _call("todo_list", '{"todos": ' + TODOS + "}"),
        {"tools": [TODO_LIST]},
    ),
    # the required arguments in any order, then the optional ones in any order
    (
        tool_call_xml("edit", ("newString", "#include"), ("filename", "foo.c"), ("oldString", "#iclunde")),
        _call("edit", '{"newString": "#include", "filename": "foo.c", "oldString": "#iclunde"}'),
        {"tools": [EDIT]},
    ),
    (
        tool_call_xml("tool_2req_4opt", ("req2", "42"), ("req1", "hello"), ("opt2", "200")),
        _call("tool_2req_4opt", '{"req2": 42, "req1": "hello", "opt2": 200}'),
        {"tools": [TOOL_2REQ_4OPT]},
    ),
    (
        tool_call_xml("tool_2req_4opt", ("req1", "hello"), ("req2", "42"), ("opt4", "100"), ("opt2", "200")),
        _call("tool_2req_4opt", '{"req1": "hello", "req2": 42, "opt4": 100, "opt2": 200}'),
        {"tools": [TOOL_2REQ_4OPT]},
    ),
    (
        tool_call_xml(
            "tool_2req_5opt", ("req1", "world"), ("req2", "7"), ("opt5", "last"), ("opt3", "middle"), ("opt1", "first")
        ),
        _call("tool_2req_5opt", '{"req1": "world", "req2": 7, "opt5": "last", "opt3": "middle", "opt1": "first"}'),
        {"tools": [TOOL_2REQ_5OPT]},
    ),
    (
        tool_call_xml(
            "tool_2req_5opt",
            ("req1", "test"),
            ("req2", "99"),
            ("opt3", "c"),
            ("opt1", "a"),
            ("opt5", "e"),
            ("opt4", "4"),
            ("opt2", "2"),
        ),
        _call(
            "tool_2req_5opt",
            '{"req1": "test", "req2": 99, "opt3": "c", "opt1": "a", "opt5": "e", "opt4": 4, "opt2": 2}',
        ),
        {"tools": [TOOL_2REQ_5OPT]},
    ),
    (
        tool_call_xml("set_nullable_str", ("name", "hello world")),
        _call("set_nullable_str", '{"name": "hello world"}'),
        {"tools": [NULLABLE_STRING]},
    ),
    (
        tool_call_xml("set_nullable_str_nf", ("name", "hello world")),
        _call("set_nullable_str_nf", '{"name": "hello world"}'),
        {"tools": [NULLABLE_STRING_NULL_FIRST]},
    ),
    (
        tool_call_xml("set_nullable_int", ("count", "42")),
        _call("set_nullable_int", '{"count": 42}'),
        {"tools": [NULLABLE_INT]},
    ),
    # an enum of strings without a type is a string
    (
        tool_call_xml("set_unit", ("unit", "celsius")),
        _call("set_unit", '{"unit": "celsius"}'),
        {"tools": [ENUM_NO_TYPE]},
    ),
    ("world!\nWhat's up?", MESSAGE_ASSIST, CONTINUE_CONTENT),
]


@pytest.mark.parametrize("output,expected,request_", QWEN3_CODER_CASES)
def test_peg_qwen3_coder(output, expected, request_):
    peg_test(QWEN3_CODER, output, expected, **request_)


def test_qwen3_coder_reconstruction():
    # expect_reconstruction(): the parsed answer rendered back gives the prompt plus the output
    params = chat_params(QWEN3_CODER, tools=[SPECIAL_FUNCTION])
    again = chat_params(
        QWEN3_CODER,
        tools=[SPECIAL_FUNCTION],
        add_generation_prompt=False,
        messages=[message_user(), msg(calls=[("special_function", '{"arg1":1}', "")])],
    )
    assert again.prompt.startswith(params.prompt + SPECIAL_CALL_XML)


# ------------------------------------------------------------------------------------------------------------
# StepFun 3.5 Flash

DEEPSEEK = {"reasoning_format": "deepseek"}


def _think(reasoning: str, call: str) -> str:
    return reasoning + "\n</think>\n" + call


STEPFUN_CASES = [
    ("I was thinking\n</think>\nNow I'm not.", msg("Now I'm not.", "I was thinking"), DEEPSEEK),
    # numeric-looking strings stay strings when the schema says so
    (
        _think("Let me call the magic tool", tool_call_xml("magic", ("name", "fooBar"), ("ref", "5123123"))),
        _call("magic", '{"name": "fooBar", "ref": "5123123"}', reasoning="Let me call the magic tool"),
        dict(DEEPSEEK, tools=[MAGIC]),
    ),
    (
        _think("Let me call the special function", tool_call_xml("special_function", ("arg1", "42555916"))),
        _call("special_function", '{"arg1": 42555916}', reasoning="Let me call the special function"),
        dict(DEEPSEEK, tools=[SPECIAL_FUNCTION]),
    ),
    (
        _think(
            "Let me call the special function with opt",
            tool_call_xml("special_function_with_opt", ("arg1", "42555916")),
        ),
        _call("special_function_with_opt", '{"arg1": 42555916}', reasoning="Let me call the special function with opt"),
        dict(DEEPSEEK, tools=[SPECIAL_FUNCTION_OPT]),
    ),
    (
        _think("Let me call the magic_int function", tool_call_xml("magic_int", ("ref", "42555916"), ("name", "baz"))),
        _call("magic_int", '{"ref": 42555916, "name": "baz"}', reasoning="Let me call the magic_int function"),
        dict(DEEPSEEK, tools=[MAGIC_INT]),
    ),
    (
        _think(
            "Call string_param with empty text",
            "<tool_call>\n<function=string_param>\n<parameter=text>\n\n</parameter>\n</function>\n</tool_call>",
        ),
        _call("string_param", '{"text": ""}', reasoning="Call string_param with empty text"),
        dict(DEEPSEEK, tools=[STRING_PARAM]),
    ),
    (
        _think(
            "Test simple quoted unquoted", tool_call_xml("quoted_unquoted", ("quoted", '"foo"'), ("unquoted", "foo"))
        ),
        _call("quoted_unquoted", '{"quoted": "\\"foo\\"", "unquoted": "foo"}', reasoning="Test simple quoted unquoted"),
        dict(DEEPSEEK, tools=[QUOTED_UNQUOTED]),
    ),
    (
        _think(
            "Test complex quoted unquoted",
            tool_call_xml("quoted_unquoted", ("quoted", '"printf(\\"foo\\");"'), ("unquoted", 'printf("foo");')),
        ),
        _call(
            "quoted_unquoted",
            '{ "quoted" : "\\"printf(\\\\\\"foo\\\\\\");\\"", "unquoted": "printf(\\"foo\\");" }',
            reasoning="Test complex quoted unquoted",
        ),
        dict(DEEPSEEK, tools=[QUOTED_UNQUOTED]),
    ),
    (
        _think("Test negative number", tool_call_xml("magic_int", ("ref", "-14"))),
        _call("magic_int", '{ "ref" : -14 }', reasoning="Test negative number"),
        dict(DEEPSEEK, tools=[MAGIC_INT]),
    ),
    (
        _think("Test decimal number", tool_call_xml("amount", ("orig", "3.14"))),
        _call("amount", '{ "orig" : 3.14 }', reasoning="Test decimal number"),
        dict(DEEPSEEK, tools=[AMOUNT]),
    ),
    (
        _think(
            "Test imaginary number",
            tool_call_xml("imaginary_number", ("number", '{ "real": 3.14, "imaginary": 2.71 }')),
        ),
        _call("imaginary_number", '{ "number" : {"real":3.14,"imaginary":2.71 } }', reasoning="Test imaginary number"),
        dict(DEEPSEEK, tools=[IMAGINARY_NUMBER]),
    ),
    ("world!\nWhat's up?", PREFILLED, dict(DEEPSEEK, **CONTINUE_CONTENT)),
    (" thinking\n</think>\n" + HELLO, msg(HELLO, "I'm thinking"), dict(DEEPSEEK, **CONTINUE_REASONING)),
]


@pytest.mark.parametrize("output,expected,request_", STEPFUN_CASES)
def test_peg_stepfun(output, expected, request_):
    peg_test(STEPFUN, output, expected, **request_)


# ------------------------------------------------------------------------------------------------------------
# Ministral 3

MINISTRAL_CASES = [
    (HELLO, MESSAGE_ASSIST, {}),
    ("[THINK]I'm\nthinking[/THINK]" + HELLO, msg("[THINK]I'm\nthinking[/THINK]" + HELLO), {}),
    ("[THINK]I'm\nthinking[/THINK]" + HELLO, MESSAGE_ASSIST_THOUGHTS, AUTO),
    ('[TOOL_CALLS]special_function[ARGS]{"arg1":1}', MESSAGE_ASSIST_CALL, dict(AUTO, tools=[SPECIAL_FUNCTION])),
    (
        "[THINK]I'm\nthinking[/THINK]" + '[TOOL_CALLS]special_function[ARGS]{"arg1":1}',
        MESSAGE_ASSIST_CALL_THOUGHTS,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        (
            '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}'
            '[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}'
        ),
        OPT_CALLS,
        dict(AUTO, parallel_tool_calls=True, tools=[SPECIAL_FUNCTION, SPECIAL_FUNCTION_OPT]),
    ),
    (
        (
            "[THINK]I need to output the invoice details in JSON[/THINK]```json\n"
            '{"amount": 123.45, "date": "2025-12-03"}\n```'
        ),
        msg('{"amount": 123.45, "date": "2025-12-03"}', "I need to output the invoice details in JSON"),
        dict(AUTO, json_schema=INVOICE_SCHEMA),
    ),
    # a tool call marker inside the reasoning
    (
        (
            '[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more[/THINK]'
            '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}'
        ),
        _call(*CALL[:2], reasoning='Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more'),
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    ("world!\nWhat's up?", PREFILLED, dict(AUTO, **CONTINUE_CONTENT)),
    (" thinking[/THINK]" + HELLO, msg(HELLO, "I'm thinking"), dict(AUTO, **CONTINUE_REASONING)),
]


@pytest.mark.parametrize("output,expected,request_", MINISTRAL_CASES)
def test_peg_ministral_3(output, expected, request_):
    peg_test(MINISTRAL, output, expected, **request_)


# ------------------------------------------------------------------------------------------------------------
# GPT-OSS

ANALYSIS = "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
EDIT_ARGS = '{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}'
FINAL = "<|start|>assistant<|channel|>final<|message|>" + HELLO

GPT_OSS_CASES = [
    ("<|channel|>final<|message|>" + HELLO, MESSAGE_ASSIST, {}),
    ("<|channel|>commentary<|message|>" + HELLO, MESSAGE_ASSIST, {}),
    (ANALYSIS + FINAL, MESSAGE_ASSIST_THOUGHTS, AUTO),
    (ANALYSIS + FINAL, msg("<|channel|>analysis<|message|>I'm\nthinking<|end|>" + HELLO), {}),
    (
        ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        MESSAGE_ASSIST_CALL,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
        MESSAGE_ASSIST_CALL,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
        MESSAGE_ASSIST_CALL,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
        MESSAGE_ASSIST_CALL,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        ANALYSIS + '<|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        MESSAGE_ASSIST_CALL_THOUGHTS,
        dict(AUTO, tools=[SPECIAL_FUNCTION]),
    ),
    (
        (
            "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary "
            "to=functions.edit <|constrain|>json<|message|>" + EDIT_ARGS
        ),
        _call("edit", EDIT_ARGS, reasoning="Thinking about edit..."),
        dict(AUTO, tools=[EDIT_GPT_OSS]),
    ),
    (
        (
            "<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant"
            '<|channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}'
        ),
        msg('{"amount": 123.45, "date": "2025-12-03"}', "I need to output the invoice details in JSON"),
        dict(AUTO, json_schema=INVOICE_SCHEMA),
    ),
    # unsolicited tool calls (builtin functions) leave the content empty
    (
        (
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
            "<|start|>assistant to=container.exec"
            "<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'"
        ),
        msg("", "I will execute python to say hello"),
        AUTO,
    ),
    (
        (
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
            "<|start|>assistant<|channel|>commentary"
            ' to=python <|constrain|>code<|message|>print("hello")'
        ),
        msg("", "I will execute python to say hello"),
        AUTO,
    ),
    # a stray "<|channel|>commentary to=assistant" before the reasoning, or before the final message
    ("<|channel|>commentary to=assistant" + ANALYSIS + FINAL, MESSAGE_ASSIST_THOUGHTS, AUTO),
    (
        ANALYSIS + "<|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>" + HELLO,
        MESSAGE_ASSIST_THOUGHTS,
        AUTO,
    ),
    ("world!\nWhat's up?", PREFILLED, dict(AUTO, **CONTINUE_CONTENT)),
    (" thinking<|end|>" + FINAL, msg(HELLO, "I'm thinking"), dict(AUTO, **CONTINUE_REASONING)),
]


@pytest.mark.parametrize("output,expected,request_", GPT_OSS_CASES)
def test_peg_gpt_oss(output, expected, request_):
    peg_test(GPT_OSS, output, expected, **request_)


def test_peg_gpt_oss_partial_analysis():
    peg_test(GPT_OSS, "<|channel|>analysis<|message|>I'm\nthinking", msg("", "I'm\nthinking"), partial=True, **AUTO)


def test_gpt_oss_return_token():
    # a rendered final answer ends with <|return|>; without a generation prompt it becomes <|end|>
    history = [message_user(), msg("Hi!")]
    params = chat_params(GPT_OSS, messages=history, add_generation_prompt=False)
    assert params.prompt.endswith("<|end|>") and "<|return|>" not in params.prompt


# ------------------------------------------------------------------------------------------------------------
# Gemma 4

GEMMA4_CASES = [
    ("Hello, world!", msg("Hello, world!"), {}),
    ("<|channel>thought\nI'm\nthinking<channel|>" + HELLO, MESSAGE_ASSIST_THOUGHTS, AUTO),
    # empty reasoning (budget 0: the end tag forced before the newline)
    ("<|channel>thought<channel|>" + HELLO, MESSAGE_ASSIST, AUTO),
    (
        "<|channel>thought\nI'm\nthinking<channel|>" + HELLO,
        msg("<|channel>thought\nI'm\nthinking<channel|>" + HELLO),
        {},
    ),
    (
        '<|tool_call>call:get_time{city:<|"|>London<|"|>}<tool_call|>',
        _call("get_time", '{"city": "London"}'),
        {"tools": [GET_TIME]},
    ),
    (
        '<|tool_call>call:get_time{city:<|"|>San Francisco<|"|>}<tool_call|>',
        _call("get_time", '{"city": "San Francisco"}'),
        {"tools": [GET_TIME]},
    ),
    ("<|tool_call>call:empty_args{}<tool_call|>", _call("empty_args", "{}"), {"tools": [EMPTY_ARGS]}),
    (
        HELLO + '<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>',
        _call("get_time", '{"city": "Paris"}', content=HELLO),
        {"tools": [GET_TIME]},
    ),
    (
        (
            '<|tool_call>call:get_time{city:<|"|>London<|"|>}<tool_call|>'
            '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
        ),
        _calls(("get_time", '{"city": "London"}'), ("get_weather", '{"city": "Paris"}')),
        {"tools": [GET_TIME, GET_WEATHER], "parallel_tool_calls": True},
    ),
    (
        "<|tool_call>call:special_function{arg1:42}<tool_call|>",
        _call("special_function", '{"arg1": 42}'),
        {"tools": [SPECIAL_FUNCTION]},
    ),
    (
        "<|tool_call>call:special_function{arg1:-7}<tool_call|>",
        _call("special_function", '{"arg1": -7}'),
        {"tools": [SPECIAL_FUNCTION]},
    ),
    ("<|tool_call>call:amount{orig:3.14}<tool_call|>", _call("amount", '{"orig": 3.14}'), {"tools": [AMOUNT]}),
    ("<|tool_call>call:toggle{enabled:true}<tool_call|>", _call("toggle", '{"enabled": true}'), {"tools": [TOGGLE]}),
    ("<|tool_call>call:toggle{enabled:false}<tool_call|>", _call("toggle", '{"enabled": false}'), {"tools": [TOGGLE]}),
    (
        "<|tool_call>call:set_nullable{value:null}<tool_call|>",
        _call("set_nullable", '{"value": null}'),
        {"tools": [NULLABLE]},
    ),
    (
        '<|tool_call>call:todo_list{todos:[<|"|>buy milk<|"|>,<|"|>walk dog<|"|>]}<tool_call|>',
        _call("todo_list", '{"todos":["buy milk","walk dog"]}'),
        {"tools": [TODO_LIST]},
    ),
    (
        '<|tool_call>call:set_config{config:{theme:<|"|>dark<|"|>,count:3}}<tool_call|>',
        _call("set_config", '{"config":{"theme":"dark","count":3}}'),
        {"tools": [CONFIG]},
    ),
    ("<|tool_call>call:todo_list{todos:[]}<tool_call|>", _call("todo_list", '{"todos":[]}'), {"tools": [TODO_LIST]}),
    ("<|tool_call>call:set_config{config:{}}<tool_call|>", _call("set_config", '{"config":{}}'), {"tools": [CONFIG]}),
    ("<|tool_call>call:amount{orig:1.5e10}<tool_call|>", _call("amount", '{"orig": 1.5e10}'), {"tools": [AMOUNT]}),
    # edge cases: empty and trailing reasoning blocks, a stray <channel|>, an empty channel
    ("<|channel>thought\n<channel|>" + HELLO + "<channel|>", MESSAGE_ASSIST, AUTO),
    ("<|channel>thought\n<channel|>" + HELLO + "<|channel>thought\n<channel|>", MESSAGE_ASSIST, AUTO),
    ("<|channel>thought\n<channel|>" + HELLO + "<|channel>thought\n<channel|><channel|>", MESSAGE_ASSIST, AUTO),
    ("<|channel><|channel>thought\n<channel|>" + HELLO, MESSAGE_ASSIST, AUTO),
    ("world!\nWhat's up?", PREFILLED, dict(AUTO, **CONTINUE_CONTENT)),
    (" thinking<channel|>" + HELLO, msg(HELLO, "I'm thinking"), dict(AUTO, **CONTINUE_REASONING)),
]


@pytest.mark.parametrize("output,expected,request_", GEMMA4_CASES)
def test_peg_gemma4(output, expected, request_):
    peg_test(GEMMA4, output, expected, **request_)


GEMMA4_TOOL_TURN = [
    message_user(),
    ChatMsg(role="assistant", content="Let me check.", tool_calls=[ToolCall("special_function", '{"arg1": 1}', "c0")]),
    ChatMsg(role="tool", content='{"r":"ok"}', tool_name="special_function", tool_call_id="c0"),
]


def test_gemma4_generation_prompt_after_tool_response():
    # https://github.com/ggml-org/llama.cpp/pull/21760: a model turn is opened after the tool response
    params = chat_params(GEMMA4, messages=GEMMA4_TOOL_TURN, tools=[SPECIAL_FUNCTION])
    assert params.prompt.endswith("<turn|>\n<|turn>model\n")
    assert params.generation_prompt == "<|turn>model\n"
    params = chat_params(GEMMA4, messages=GEMMA4_TOOL_TURN, tools=[SPECIAL_FUNCTION], add_generation_prompt=False)
    assert not params.prompt.endswith("<|turn>model\n")


def test_gemma4_convert_tool_responses():
    from server.chat.specialized.gemma4 import convert_tool_responses

    user = {"role": "user", "content": "Hi"}
    call = {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "hmm",
        "tool_calls": [
            {"type": "function", "function": {"name": "a", "arguments": {}}},
            {"type": "function", "function": {"name": "", "arguments": {}}},
        ],
    }
    results = [
        {"role": "tool", "content": '{"r": "ok"}', "tool_call_id": "c0"},
        {"role": "tool", "content": "not json", "tool_call_id": "c1"},
        {"role": "tool", "tool_call_id": "c2"},
    ]
    answer = {"role": "assistant", "content": "Done."}
    assert convert_tool_responses([user, call, *results, answer, user]) == [
        user,
        {
            "role": "assistant",
            "tool_calls": call["tool_calls"],
            "tool_responses": [
                {"name": "a", "response": {"r": "ok"}},
                {"name": "c1", "response": "not json"},
                {"name": "c2", "response": None},
            ],
            "content": "Done.",
            "reasoning_content": "hmm",
        },
        user,
    ]
    # an answer with tool calls of its own, or with no content, starts its own turn
    empty = {"role": "assistant", "content": ""}
    assert convert_tool_responses([call, empty]) == [
        {"role": "assistant", "tool_calls": call["tool_calls"], "reasoning_content": "hmm"},
        empty,
    ]
    # NaN is no JSON for nlohmann
    assert convert_tool_responses([call, {"role": "tool", "content": "NaN"}])[0]["tool_responses"] == [
        {"name": "a", "response": "NaN"}
    ]


def test_gemma4_old_template_workaround():
    # the interleaved template predates the official one: the tool results are folded into the model turn
    from server.chat.specialized.gemma4 import OFFICIAL_TEMPLATE_MARK

    assert OFFICIAL_TEMPLATE_MARK not in template_source(GEMMA4_OLD)
    assert OFFICIAL_TEMPLATE_MARK in template_source(GEMMA4)
    params = chat_params(GEMMA4_OLD, messages=GEMMA4_TOOL_TURN, tools=[SPECIAL_FUNCTION])
    assert "<|tool_response>" in params.prompt and '<|"|>ok<|"|>' in params.prompt


# ------------------------------------------------------------------------------------------------------------
# test_template_generation_prompt(): the generation prompt and its continuations

SYSTEM = msg("You are a helpful assistant.", role="system")
TOOL_CALL_MSG = msg(calls=[("special_function", '{"arg1": 1}', "")])
TOOL_MSG = ChatMsg(role="tool", content="Sunny", tool_name="special_function", tool_call_id="call0")


@pytest.mark.parametrize(
    "name,basic,content,reasoning",
    [
        (
            QWEN35,
            "<|im_start|>assistant\n<think>\n",
            "<|im_start|>assistant\n<think>\nI'm thinking\n</think>\n\nHello, ",
            "<|im_start|>assistant\n<think>\nI'm",
        ),
        (
            GPT_OSS,
            "<|start|>assistant",
            (
                "<|start|>assistant<|channel|>analysis<|message|>I'm thinking<|end|><|start|>assistant<|channel|>final"
                "<|message|>Hello, "
            ),
            "<|start|>assistant<|channel|>analysis<|message|>I'm",
        ),
        (MINISTRAL, "", "[THINK]I'm thinking[/THINK]Hello, ", "[THINK]I'm"),
        (
            GEMMA4,
            "<|turn>model\n",
            "<|turn>model\n<|channel>thought\nI'm thinking<channel|>Hello, ",
            "<|turn>model\n<|channel>thought\nI'm",
        ),
    ],
)
def test_generation_prompt(name, basic, content, reasoning):
    cases = [
        ({"messages": [SYSTEM, message_user()]}, basic),
        (
            {
                "messages": [SYSTEM, message_user(), prefill_content()],
                "add_generation_prompt": False,
                "continue_final_message": "content",
            },
            content,
        ),
        (
            {
                "messages": [SYSTEM, message_user(), prefill_reasoning()],
                "add_generation_prompt": False,
                "continue_final_message": "reasoning",
            },
            reasoning,
        ),
    ]
    for request, expected in cases:
        params = chat_params(name, **request)
        assert SYSTEM.content in params.prompt and message_user().content in params.prompt
        assert params.generation_prompt == expected
        assert params.prompt.endswith(expected)


def test_gemma4_generation_prompt_continuing_after_tool_response():
    history = [SYSTEM, message_user(), TOOL_CALL_MSG, TOOL_MSG, prefill_reasoning()]
    params = chat_params(GEMMA4, messages=history, add_generation_prompt=False, continue_final_message="reasoning")
    assert params.generation_prompt == "<|channel>thought\nI'm"
    assert params.prompt.endswith(params.generation_prompt)


# ------------------------------------------------------------------------------------------------------------
# The chat parameters of the b10621 llama-server binary for one request with tools per family
# (fixtures/chat/specialized_a_b10621.json, recorded from `"verbose": true` answers and /apply-template)


FIXTURE_DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
SERVER_CASES = [(name, request) for name, entry in FIXTURE_DATA["templates"].items() for request in entry["answers"]]


def _server_params(name: str, body: dict, bos: str, eos: str, today: datetime.date):
    """The request as b10621's server hands it to its chat handler (oaicompat_chat_params_parse with its
    defaults: reasoning format deepseek, a trailing assistant message continued)."""
    source = template_source(name)
    caps = template_caps(source)
    messages = parse_messages(body["messages"])
    continue_msg = None
    if messages[-1].role == "assistant":  # --prefill-assistant
        continue_msg, messages = messages[-1], messages[:-1]
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "parameters": t["function"].get("parameters", {}),
            },
        }
        for t in body.get("tools", [])
    ]
    response_format = body.get("response_format")
    inputs = GenerationParams(
        messages=apply_workarounds([to_template_json(m) for m in messages], caps, source),
        tools=tools or None,
        tool_choice=body.get("tool_choice", "auto"),
        json_schema=response_format["json_schema"]["schema"] if response_format else None,
        parallel_tool_calls=body.get("parallel_tool_calls", caps["supports_parallel_tool_calls"]),
        reasoning_format=body.get("reasoning_format", "deepseek"),
        add_generation_prompt=continue_msg is None,
        continue_final_message="auto" if continue_msg else "none",
        continue_msg=continue_msg,
        extra_context={
            "bos_token": bos,
            "eos_token": eos,
            "datetime": today.strftime("%b %d %Y"),
            "date_string": today.strftime("%d %b %Y"),
        },
    )
    return try_specialized(source, Template(source, bos, eos, caps), inputs)


@pytest.mark.parametrize("name,request_name", SERVER_CASES)
def test_matches_b10621_server(name, request_name):
    entry = FIXTURE_DATA["templates"][name]
    answer = entry["answers"][request_name]
    today = datetime.date.today()
    body = FIXTURE_DATA["requests"][request_name]
    params = _server_params(name, body, entry["bos_token"], entry["eos_token"], today)
    # gpt-oss renders the date of the day (strftime_now)
    assert params.prompt == answer["prompt"].replace(FIXTURE_DATA["captured_on"], today.isoformat())
    assert params.generation_prompt == answer["generation_prompt"]
    assert params.format == answer["chat_format"]
    assert params.grammar == (FIXTURE_DATA["grammars"][answer["grammar"]] if answer["grammar"] else "")
    assert params.grammar_lazy == answer["grammar_lazy"]
    triggers = [{"type": kind, "value": value} for kind, value in params.grammar_triggers]
    assert triggers == answer["grammar_triggers"]
