"""What the chat tests share (test_chat_autoparser.py, test_chat_specialized_a.py, test_chat_specialized_b.py):
b10621's templates, read from the pinned sdist's models/templates (not unpacked: a test skips, in CI fails), and
test-chat.cpp's tools, messages and harness: the inputs common_chat_templates_apply() hands a template path,
assert_msg_equals() and test_peg_parser()'s prefix-by-prefix streaming check.
"""

from __future__ import annotations

import json

from conftest import require
from oracle.reference import SOURCE_SUBDIR
from server.cachedir import cache_root
from server.chat.autoparser import ChatParams, GenerationParams
from server.chat.autoparser.helpers import Template
from server.chat.caps import template_caps
from server.chat.messages import ChatMsg, ToolCall, apply_workarounds, to_template_json

TEMPLATES = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "models" / "templates"


def template_source(name: str) -> str:
    path = TEMPLATES / name
    require(path.is_file(), f"the b10621 sources are not unpacked ({path})")
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's tools and messages


def tool(name: str, description: str, parameters: dict) -> dict:
    """common_chat_tools_to_json_oaicompat() of a common_chat_tool."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def obj(properties: dict, required: list | None = None) -> dict:
    out: dict = {"type": "object", "properties": properties}
    if required is not None:
        out["required"] = required
    return out


def integer(description: str = "") -> dict:
    return {"type": "integer", "description": description} if description else {"type": "integer"}


def string(description: str = "") -> dict:
    return {"type": "string", "description": description} if description else {"type": "string"}


def msg(content: str = "", reasoning: str = "", calls=(), role: str = "assistant") -> ChatMsg:
    """A message; `calls` are (name, arguments, id) triples."""
    return ChatMsg(
        role=role,
        content=content,
        reasoning_content=reasoning,
        tool_calls=[ToolCall(name, args, call_id) for name, args, call_id in calls],
    )


def message_user() -> ChatMsg:
    return msg("Hey there!", role="user")


def prefill_content() -> ChatMsg:
    return msg("Hello, ", "I'm thinking")


def prefill_reasoning() -> ChatMsg:
    return msg("", "I'm")


SPECIAL_FUNCTION = tool("special_function", "I'm special", obj({"arg1": integer("The arg.")}, ["arg1"]))
SPECIAL_FUNCTION_OPT = tool(
    "special_function_with_opt",
    "I'm special but have optional stuff",
    obj({"arg1": integer("The arg."), "arg2": integer("The optional arg.")}, ["arg1"]),
)
EMPTY_ARGS = tool("empty_args", "A tool that takes no arguments", obj({}))
PYTHON = tool("python", "an ipython interpreter", obj({"code": string("Python code to execute.")}, ["code"]))
HTML = tool("html", "an html validator", obj({"markup": string("HTML markup to validate.")}, ["markup"]))
GET_TIME = tool("get_time", "Get the current time in a city", obj({"city": string("City name")}, ["city"]))
GET_WEATHER = tool("get_weather", "Get the current weather in a city", obj({"city": string("City name")}, ["city"]))
TODO_LIST = tool(
    "todo_list",
    "Create or update the todo list",
    obj({"todos": {"type": "array", "description": "List of TODO list items"}}, ["todos"]),
)
MAGIC_INT = tool("magic_int", "Magic tool that takes a hash", obj({"ref": integer(), "name": string()}, ["ref"]))
AMOUNT = tool("amount", "Amount converter", obj({"orig": {"type": "number"}}, ["orig"]))
TOGGLE = tool(
    "toggle",
    "Toggle a feature",
    obj({"enabled": {"type": "boolean", "description": "Whether to enable the feature"}}, ["enabled"]),
)
NULLABLE = tool(
    "set_nullable", "Set a nullable value", obj({"value": {"type": "null", "description": "A null value"}}, ["value"])
)
CONFIG = tool(
    "set_config",
    "Set configuration",
    obj({"config": {"type": "object", "description": "Configuration dict"}}, ["config"]),
)
IMAGINARY_NUMBER = tool(
    "imaginary_number",
    "Imaginary number converter",
    obj(
        {"number": obj({"real": {"type": "number"}, "imaginary": {"type": "number"}}, ["real", "imaginary"])},
        ["number"],
    ),
)

INVOICE_SCHEMA = obj({"amount": {"type": "number"}, "date": {"type": "string"}})

HELLO = "Hello, world!\nWhat's up?"
THINKING = "I'm\nthinking"
CALL = ("special_function", '{"arg1": 1}', "")
MESSAGE_ASSIST = msg(HELLO)
MESSAGE_ASSIST_THOUGHTS = msg(HELLO, THINKING)
MESSAGE_ASSIST_CALL = msg(calls=[CALL])
PREFILLED = msg(HELLO, "I'm thinking")  # what a continued prefill_content() becomes
CONTINUE_CONTENT = {
    "messages": [message_user(), prefill_content()],
    "add_generation_prompt": False,
    "continue_final_message": "content",
}
CONTINUE_REASONING = {
    "messages": [message_user(), prefill_reasoning()],
    "add_generation_prompt": False,
    "continue_final_message": "reasoning",
}


# ---------------------------------------------------------------------------------------------------------------
# test-chat.cpp's harness


def request_inputs(
    name: str,
    *,
    messages=None,
    tools=(),
    tool_choice="auto",
    reasoning_format="none",
    enable_thinking=True,
    parallel_tool_calls=False,
    add_generation_prompt=True,
    continue_final_message="none",
    json_schema=None,
    extra_context=None,
) -> tuple[str, dict, GenerationParams]:
    """The template's source and caps, and a test request (common_chat_templates_inputs' defaults) as
    common_chat_templates_apply_jinja() prepares it for a template path: the template workarounds applied;
    when continuing, the continued message out of the messages."""
    source = template_source(name)
    caps = template_caps(source)
    messages = list(messages or [message_user()])
    rendered = [to_template_json(m) for m in messages]
    continue_msg = None
    if continue_final_message != "none":
        add_generation_prompt = False
        continue_msg, rendered = messages[-1], rendered[:-1]
    context = {"datetime": "Jan 01 2026", "date_string": "01 Jan 2026", **(extra_context or {})}
    inputs = GenerationParams(
        messages=apply_workarounds(rendered, caps, source),
        tools=list(tools) or None,
        tool_choice=tool_choice,
        json_schema=json_schema,
        parallel_tool_calls=parallel_tool_calls,
        reasoning_format=reasoning_format,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        continue_msg=continue_msg,
        enable_thinking=enable_thinking,
        extra_context=context,
    )
    return source, caps, inputs


def try_specialized(source: str, tmpl: Template, inputs: GenerationParams) -> ChatParams | None:
    """try_specialized(); a template it cannot render fails the test (no render difference is known)."""
    from server.chat.specialized import try_specialized

    return try_specialized(source, tmpl, inputs)


def specialized_params(name: str, *, bos: str = "", eos: str = "", **request) -> ChatParams:
    """common_chat_templates_apply() on a test request (request_inputs()) through try_specialized(); the
    template must be one of the specialized families."""
    source, caps, inputs = request_inputs(name, **request)
    params = try_specialized(source, Template(source, bos, eos, caps), inputs)
    assert params is not None, f"{name}: no specialized handler"
    return params


def _renormalize(arguments: str) -> str:
    """renormalize_json(): a partial JSON compares as ""."""
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)
    except json.JSONDecodeError:
        return ""


def assert_msg_equals(expected: ChatMsg, actual: ChatMsg) -> None:
    """test-chat.cpp's assert_msg_equals(..., ignore_whitespace_differences = true)."""
    ws = " \t\n\v\f\r"
    assert actual.role == expected.role
    assert actual.content.strip(ws) == expected.content.strip(ws)
    assert actual.reasoning_content.strip(ws) == expected.reasoning_content.strip(ws)
    assert len(actual.tool_calls) == len(expected.tool_calls), actual.tool_calls
    for a, e in zip(actual.tool_calls, expected.tool_calls, strict=False):
        assert a.name == e.name
        assert _renormalize(a.arguments) == _renormalize(e.arguments), (a.arguments, e.arguments)
        assert a.id == e.id


def assert_peg_parses(params: ChatParams, output: str, expected: ChatMsg, partial: bool = False) -> None:
    """test_peg_parser(): every prefix of `output` parsed as a partial answer must grow the message the way a
    stream would, the whole of it (unless `partial`) parse to `expected`; the grammar must load."""
    from server.chat.diffs import compute_diffs
    from server.chat.peg_chat import chat_peg_parse
    from server.grammar.gbnf import parse_gbnf

    def parse(text: str, is_partial: bool) -> ChatMsg:
        return chat_peg_parse(params.parser, text, is_partial, params.generation_prompt, params.format)

    prev, accum = ChatMsg(role="assistant"), ChatMsg(role="assistant")
    for i in range(1, len(output) + 1):
        current = parse(output[:i], i < len(output) or partial)
        for diff in compute_diffs(prev, current):
            accum.reasoning_content += diff.reasoning_content_delta
            accum.content += diff.content_delta
            if diff.tool_call_index >= 0:
                while len(accum.tool_calls) <= diff.tool_call_index:
                    accum.tool_calls.append(ToolCall("", ""))
                call, delta = accum.tool_calls[diff.tool_call_index], diff.tool_call_delta
                call.name = delta.name or call.name
                call.id = delta.id or call.id
                call.arguments += delta.arguments
        assert_msg_equals(current, accum)
        prev = current
    if not partial:
        assert_msg_equals(expected, parse(output, False))
    assert_msg_equals(expected, accum)
    if params.grammar:
        parse_gbnf(params.grammar)
