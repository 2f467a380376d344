"""The chat PEG builder, mappers and chat_peg_parse (server/chat/peg_chat.py, peg_mapper.py) against b10621.

Most cases port tests/test-chat-peg-parser.cpp; the expected values are what b10621's own code answered,
captured by fixtures/chat/capture_peg_chat.py into fixtures/chat/peg_chat_b10621.json: the GBNF, a digest
of the whole parser arena (every parser in id order), and the message mapped from the whole input and from
every prefix of it (partial parses, as a stream sees them). The parsers below rebuild the C++ ones in the
order GCC creates them (`plus` for a C++ `a + b + ...` whose operands build parsers).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fixtures.chat.capture_peg_chat import arena_digest
from server.chat.messages import ChatMsg
from server.chat.peg_chat import (
    COMMON_CHAT_MAX_PERMUTE,
    ChatPegBuilder,
    build_chat_peg_parser,
    build_tagged_peg_parser,
    chat_peg_parse,
)
from server.chat.peg_mapper import ChatPegMapper, normalize_quotes_to_json
from server.grammar.json_schema import build_grammar
from server.peg import LENIENT, NONE, ParseContext, PegArena, plus

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures/chat/peg_chat_b10621.json").read_text())
TOOLS = FIXTURE["tools"]
GP = "<|im_start|>assistant\n"


def _msg(m: ChatMsg) -> dict:
    return {
        "content": m.content,
        "reasoning": m.reasoning_content,
        "tool_calls": [[c.name, c.arguments, c.id] for c in m.tool_calls],
    }


def _arena_json(arena: PegArena) -> dict:
    """common_peg_arena::to_json() of the Python arena."""
    parsers = []
    for i in range(arena.size()):
        parser = arena.get(i)
        kind = type(parser).__name__.removesuffix("Parser").lower()  # EpsilonParser -> "epsilon"
        parsers.append({"type": kind, **dataclasses.asdict(parser)})
    return {"parsers": parsers, "rules": dict(arena.rules), "root": arena.root}


def _digest(arena: PegArena) -> str:
    return arena_digest(_arena_json(arena))


def _grammar(arena: PegArena, tools, lazy: bool, schema=None) -> str:
    def build(builder) -> None:
        for tool in tools or []:
            builder.resolve_refs(tool["function"]["parameters"])
        if schema:
            builder.resolve_refs(schema)
        arena.build_grammar(builder, lazy)

    return build_grammar(build)


def _raw_parse(arena: PegArena, text: str, lenient: bool) -> dict:
    ctx = ParseContext(text, LENIENT if lenient else NONE)
    result = arena.parse(ctx)
    msg = ChatMsg(role="")
    ChatPegMapper(msg).from_ast(ctx.ast, result)
    return {"input": text, "type": int(result.type), "end": result.end, "msg": _msg(msg)}


def _raw_stream(arena: PegArena, text: str) -> list:
    transitions, prev = [], None
    for k in range(1, len(text) + 1):
        r = _raw_parse(arena, text[:k], k < len(text))
        if [r["type"], r["msg"]] != prev:
            transitions.append([k, r["type"], r["msg"]])
        prev = [r["type"], r["msg"]]
    return transitions


def _chat_stream(arena: PegArena | None, case: dict) -> list:
    text = case["input"]
    transitions, prev = [], None
    for k in range(len(text) + 1):
        try:
            cur = _msg(chat_peg_parse(arena, text[:k], k < len(text), case["generation_prompt"], case["format"]))
        except ValueError as e:
            cur = str(e)
        if k == 0 or cur != prev:
            transitions.append([k, cur])
        prev = cur
    return transitions


# test_example_native


NATIVE_CASES = {  # name: (tools, reasoning format none, response schema, parallel)
    "content with reasoning": (None, False, None, False),
    "content without reasoning": (None, False, None, False),
    "reasoning format none": (None, True, None, False),
    "reasoning generation prompt": (None, False, None, False),
    "generation prompt, format none": (None, True, None, False),
    "closed reasoning generation prompt": (None, False, None, False),
    "tools": ("create_tools", False, None, False),
    "parallel tools": ("create_tools", False, None, True),
    "response format": (
        None,
        False,
        {
            "type": "object",
            "properties": {
                "invoice_number": {"type": "string"},
                "amount": {"type": "number"},
                "due_date": {"type": "string"},
            },
            "required": ["invoice_number", "amount", "due_date"],
        },
        False,
    ),
}


def _native_parser(tools, reasoning_none: bool, schema, parallel: bool) -> PegArena:
    def fn(p: ChatPegBuilder):
        reasoning = p.optional(plus("<think>", lambda: p.reasoning(p.until("</think>")), "</think>", p.space))
        if tools:
            tool_call = p.standard_json_tools("<tool_call>[", "]</tool_call>", tools, parallel, False)
            return p.sequence(
                [
                    p.eps() if reasoning_none else reasoning,
                    p.content(p.until("<tool_call>")),
                    p.optional(p.space() + tool_call),
                    p.space(),
                    p.end(),
                ]
            )
        if schema:
            return p.sequence(
                [
                    p.eps() if reasoning_none else reasoning,
                    p.content(p.schema(p.json(), "response-output", schema)),
                    p.space(),
                    p.end(),
                ]
            )
        return p.sequence([p.eps() if reasoning_none else reasoning, p.content(p.rest()), p.end()])

    return build_chat_peg_parser(fn)


@pytest.mark.parametrize("name", list(NATIVE_CASES))
def test_native(name):
    tools_key, reasoning_none, schema, parallel = NATIVE_CASES[name]
    tools = TOOLS[tools_key] if tools_key else None
    expected = FIXTURE["native"][name]
    arena = _native_parser(tools, reasoning_none, schema, parallel)
    assert _raw_parse(arena, expected["parse"]["input"], False) == expected["parse"]
    assert _grammar(arena, tools, bool(tools), schema) == expected["grammar"]
    assert _digest(arena) == expected["arena"]


def test_native_messages_as_upstream_asserts_them():
    """A few of test_example_native's literal expectations."""

    def parse(name: str, text: str) -> ChatMsg:
        tools_key, reasoning_none, schema, parallel = NATIVE_CASES[name]
        arena = _native_parser(TOOLS[tools_key] if tools_key else None, reasoning_none, schema, parallel)
        ctx = ParseContext(text)
        result = arena.parse(ctx)
        assert result.success()
        msg = ChatMsg(role="assistant")
        ChatPegMapper(msg).from_ast(ctx.ast, result)
        return msg

    msg = parse("reasoning generation prompt", "<think>The user said hello, I must say hello back</think>\nHello")
    assert (msg.reasoning_content, msg.content) == ("The user said hello, I must say hello back", "Hello")
    msg = parse("closed reasoning generation prompt", "<think></think>Hello")
    assert (msg.reasoning_content, msg.content) == ("", "Hello")
    msg = parse(
        "tools",
        '<think>I must get the weather in New York</think>\n<tool_call>[{"name": "get_current_weather", '
        '"arguments": {"location": "New York City, NY", "unit": "fahrenheit"}}]</tool_call>',
    )
    assert msg.reasoning_content == "I must get the weather in New York"
    assert [(c.name, c.arguments, c.id) for c in msg.tool_calls] == [
        ("get_current_weather", '{"location": "New York City, NY", "unit": "fahrenheit"}', "")
    ]


# test_example_qwen3_non_coder


def test_qwen3_non_coder():
    tools = TOOLS["create_tools"]

    def fn(p: ChatPegBuilder):
        tool_call = p.standard_json_tools("<tool_call>", "</tool_call>", tools, True, False)
        return p.sequence([p.content(p.until("<tool_call>")), p.optional(p.space() + tool_call), p.end()])

    arena = build_chat_peg_parser(fn)
    expected = FIXTURE["qwen3_non_coder"]
    assert _grammar(arena, tools, False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    assert _raw_stream(arena, expected["stream"]["input"]) == expected["stream"]["transitions"]


# the autoparser's Hermes / Qwen3 parser: build_tool_parser_json_native with <tool_call>\n ... </tool_call>


def _hermes_parser(parallel: bool, required: bool) -> PegArena:
    """autoparser::build_parser for Qwen3's template, in upstream's build order."""
    tools = TOOLS["weather"]

    def fn(p: ChatPegBuilder):
        p.eps()  # parser_build_context's reasoning parser
        reasoning = p.optional(
            plus(
                lambda: p.optspace("<think>\n"),
                lambda: p.reasoning(p.until("</think>")),
                lambda: p.optspace("\n</think>\n\n"),
            )
        )
        p.eps(), p.eps()  # the parser and tools parser placeholders
        single = p.standard_json_tools("<tool_call>\n", "</tool_call>", tools, parallel, required, "name", "arguments")
        tools_parser = p.trigger_rule("tool-calls", p.one_or_more(single + p.space()))
        parser = plus(reasoning, lambda: p.optional(p.content(p.until("<tool_call>\n"))), tools_parser, p.end)
        return p.prefix(GP, "<think>") << parser

    return build_chat_peg_parser(fn)


HERMES = [(parallel, required) for parallel in (False, True) for required in (False, True)]


def _hermes_key(parallel: bool, required: bool) -> str:
    return ("parallel" if parallel else "single") + ("_required" if required else "_auto")


@pytest.mark.parametrize("parallel,required", HERMES)
def test_hermes_grammar_and_arena(parallel, required):
    expected = FIXTURE["hermes"][_hermes_key(parallel, required)]
    arena = _hermes_parser(parallel, required)
    assert _grammar(arena, TOOLS["weather"], not required) == expected["grammar"]
    assert _digest(arena) == expected["arena"]


@pytest.mark.parametrize("parallel,required", HERMES)
def test_hermes_streams(parallel, required):
    arena = _hermes_parser(parallel, required)
    for case in FIXTURE["hermes"][_hermes_key(parallel, required)]["streams"]:
        assert _chat_stream(arena, case) == case["transitions"], case["input"]


def test_hermes_grammar_as_b10621_serves_it():
    """What b10621 sends with Qwen3's template, tools=[get_weather(city)], tool_choice=required."""
    grammar = _grammar(_hermes_parser(True, True), TOOLS["weather"], False)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["root"] == (
        '"<|im_start|>assistant\\n" space ("<think>" "\\n"? until-13 "\\n"? "</think>" "\\n"? '
        '"\\n"?)? until-191? tool-calls'
    )
    assert rules["tool-call"] == (
        '"<tool_call>\\n" space (tool-get-weather) (space "," space (tool-get-weather))* space "</tool_call>"'
    )
    assert rules["tool-calls"] == "(tool-call space)+"
    assert rules["tool-get-weather"] == (
        '"{" space "\\"name\\"" space ":" space ("\\"" "get_weather" "\\"") space "," space "\\"arguments\\"" '
        'space ":" space tool-get-weather-schema space "}"'
    )
    assert rules["tool-get-weather-schema"] == '"{" space tool-get-weather-schema-city-kv space "}"'
    assert rules["tool-get-weather-schema-city-kv"] == '"\\"city\\"" space ":" space string'
    lazy = dict(
        line.split(" ::= ", 1) for line in _grammar(_hermes_parser(True, False), TOOLS["weather"], True).splitlines()
    )
    assert (lazy["root"], lazy["tool-calls"]) == ("tool-call | tool-calls", "(tool-call? space)+")


def test_hermes_partial_arguments_stream_as_b10621():
    arena = _hermes_parser(False, False)
    head = '<think>\nLet me check.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'
    msg = chat_peg_parse(arena, head, True, GP)
    assert (msg.role, msg.reasoning_content, msg.content) == ("assistant", "Let me check.\n", "")
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city": "Pa')]
    # a name cut short is no tool call yet
    msg = chat_peg_parse(arena, '<tool_call>\n{"name": "get_wea', True, GP)
    assert msg.tool_calls == []
    with pytest.raises(
        ValueError, match="^The model produced output that does not match the expected peg-native format$"
    ):
        chat_peg_parse(arena, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', False, GP)


# standard_json_tools' layouts and tool-call ids


@pytest.mark.parametrize("name", list(FIXTURE["layouts"]))
def test_json_tool_layouts(name):
    layouts = {  # name_key, args_key, array_wrapped, function_is_key, call_id_key, gen_call_id_key, order, openai,
        # parallel
        "flat_id": ("", "", False, False, "id", "", ["id", "name", "arguments"], False, False),
        "flat_gen_id": ("", "", False, False, "", "tool_call_id", [], False, False),
        "nested": ("function.name", "function.arguments", False, False, "id", "", [], False, False),
        "nested_gen_id": ("function.name", "function.arguments", False, False, "", "call_id", [], False, False),
        "function_is_key": ("", "", False, True, "", "", [], False, False),
        "function_is_key_ids": ("", "arguments", False, True, "id", "gid", [], False, False),
        "array_parallel": ("", "", True, False, "", "", [], False, True),
        "openai_wrapper": ("", "", False, False, "", "", [], True, False),
        "custom_keys": ("tool", "params", False, False, "", "", ["params", "tool"], False, False),
    }
    name_key, args_key, wrapped, is_key, call_id, gen_id, order, openai, parallel = layouts[name]
    tools = TOOLS["weather"]

    def fn(p: ChatPegBuilder):
        calls = p.standard_json_tools(
            "<tool_call>",
            "</tool_call>",
            tools,
            parallel,
            False,
            name_key,
            args_key,
            wrapped,
            is_key,
            call_id,
            gen_id,
            order,
            openai,
        )
        return p.sequence([p.content(p.until("<tool_call>")), p.optional(p.space() + calls), p.end()])

    arena = build_chat_peg_parser(fn)
    expected = FIXTURE["layouts"][name]
    assert _grammar(arena, tools, False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    assert _chat_stream(arena, expected["stream"]) == expected["stream"]["transitions"]


def test_tool_call_ids():
    tools = TOOLS["weather"]
    arena = build_chat_peg_parser(
        lambda p: p.sequence(
            [
                p.content(p.until("<tool_call>")),
                p.optional(
                    p.space()
                    + p.standard_json_tools(
                        "<tool_call>",
                        "</tool_call>",
                        tools,
                        False,
                        False,
                        call_id_key="id",
                        parameters_order=["id", "name"],
                    )
                ),
                p.end(),
            ]
        )
    )
    msg = chat_peg_parse(
        arena, '<tool_call>{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', False
    )
    assert [(c.name, c.arguments, c.id) for c in msg.tool_calls] == [("get_weather", '{"city": "Paris"}', "call_1")]


# test_prefix_tool_names: standard_constructed_tools


def _constructed_parser(parallel: bool) -> PegArena:
    markers = {
        "tool_call_start_marker": "<tool_call>",
        "tool_call_end_marker": "</tool_call>",
        "function_opener": "<function=",
        "function_closer": "</function>",
        "function_name_suffix": ">",
        "parameter_key_prefix": "<param=",
        "parameter_key_suffix": ">",
        "parameter_closer": "</param>",
    }

    def fn(p: ChatPegBuilder):
        content = p.rule("content", p.content(p.until("<tool_call>")))
        tool_call = p.standard_constructed_tools(markers, TOOLS["prefix"], parallel, False)
        return plus(content, lambda: p.zero_or_more(p.space() + tool_call), p.end)

    return build_chat_peg_parser(fn)


@pytest.mark.parametrize("parallel", [False, True])
def test_prefix_tool_names(parallel):
    arena = _constructed_parser(parallel)
    expected = FIXTURE["constructed"]["parallel" if parallel else "single"]
    assert _grammar(arena, TOOLS["prefix"], False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    transitions = _raw_stream(arena, expected["stream"]["input"])
    assert transitions == expected["stream"]["transitions"]
    assert all(call[0] != "special_function" for _, _, msg in transitions for call in msg["tool_calls"])
    assert _raw_parse(arena, expected["short"]["input"], False) == expected["short"]


# test_example_qwen3_coder: tool_arg_string_value / tool_arg_json_value


def _qwen3_coder_parser() -> PegArena:
    tools = TOOLS["create_tools"]

    def fn(p: ChatPegBuilder):
        content = p.rule("content", p.content(p.until("<tool_call>")))
        tool_parsers = []
        for tool in tools:
            function = tool["function"]
            name = function["name"]
            required = set(function.get("required", []))  # upstream looks beside "parameters": none
            args = []
            for param, schema in function["parameters"]["properties"].items():
                rule_name = f"tool-{name}-arg-{param}"
                opening = p.tool_arg_open("<parameter=" + p.tool_arg_name(p.literal(param)) + ">")
                if schema.get("type", "object") == "string":
                    value = p.tool_arg_string_value(
                        p.schema(
                            p.until_one_of(["</parameter>\n<parameter=", "</parameter>\n</function>"]),
                            f"{rule_name}-schema",
                            schema,
                            True,
                        )
                    )
                else:
                    value = p.tool_arg_json_value(p.schema(p.json(), f"{rule_name}-schema", schema))
                function_close = p.literal("</function>")  # GCC builds `a | b` right to left
                ahead = p.literal("<parameter=") | function_close
                arg = p.tool_arg(p.sequence([opening, value, p.tool_arg_close("</parameter>\n" + p.peek(ahead))]))
                args.append(p.rule(rule_name, arg) if param in required else p.optional(p.rule(rule_name, arg)))
            tool_parsers.append(
                p.rule(
                    f"tool-{name}",
                    p.tool_open("<function=" + p.tool_name(p.literal(name)) + ">")
                    << p.sequence(args)
                    << p.tool_close(p.literal("</function>")),
                )
            )
        tool_call = p.trigger_rule("tool-call", "<tool_call>" << p.choice(tool_parsers) << "</tool_call>")
        return plus(content, lambda: p.zero_or_more(p.space() + tool_call), p.end)

    return build_chat_peg_parser(fn)


def test_qwen3_coder():
    arena = _qwen3_coder_parser()
    expected = FIXTURE["qwen3_coder"]
    assert _grammar(arena, TOOLS["create_tools"], False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    assert _raw_stream(arena, expected["stream"]["input"]) == expected["stream"]["transitions"]
    # an empty string value: upstream's closing quote logic
    assert _raw_parse(arena, expected["empty_string"]["input"], False) == expected["empty_string"]
    assert expected["empty_string"]["msg"]["tool_calls"][0][1] == '{"query":"","category":"api"}'


# python_style_tool_calls (LFM2)


@pytest.mark.parametrize("allow_json", [False, True])
@pytest.mark.parametrize("parallel", [False, True])
def test_python_style_tool_calls(allow_json, parallel):
    tools = TOOLS["python"]

    def fn(p: ChatPegBuilder):
        calls = p.python_style_tool_calls(tools, parallel, allow_json)
        return plus(
            lambda: p.content(p.until("<|tool_call_start|>")),
            lambda: p.optional(
                plus(lambda: p.literal("<|tool_call_start|>"), calls, lambda: p.literal("<|tool_call_end|>"))
            ),
            p.end,
        )

    arena = build_chat_peg_parser(fn)
    expected = FIXTURE["python_style"][("json" if allow_json else "python") + ("_parallel" if parallel else "_single")]
    assert _grammar(arena, tools, False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    for case in expected["streams"]:
        assert _chat_stream(arena, case) == case["transitions"], case["input"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("{'key': 'value'}", '{"key": "value"}'),
        ("{'code': 'print(\\'hello\\')'}", '{"code": "print(\'hello\')"}'),
        ("{'msg': 'He said \"hi\"'}", '{"msg": "He said \\"hi\\""}'),
        ("[True, False, None, Tr, Fals, N, Nothing, TrueX]", "[true, false, null, tr, fals, n, Nothing, TrueX]"),
        ("{\"a\": 'it\\'s', 'b': \"x'y\"}", '{"a": "it\'s", "b": "x\'y"}'),
        ("x_True", "x_True"),
    ],
)
def test_normalize_quotes_to_json(text, expected):
    assert normalize_quotes_to_json(text) == expected


# test_command7_parser_compare: tool ids from string_content, reasoning_block


def test_command7():
    def fn(p: ChatPegBuilder):
        thinking = p.reasoning_block(
            "<|START_THINKING|>" << p.reasoning(p.until("<|END_THINKING|>")) << "<|END_THINKING|>"
        )
        response = "<|START_RESPONSE|>" << p.content(p.until("<|END_RESPONSE|>")) << "<|END_RESPONSE|>"
        call_id = p.atomic('"tool_call_id"' << (":" << ('"' + p.tool_id(p.string_content('"')) + '"')))
        call_name = p.atomic('"tool_name"' << (":" << ('"' + p.tool_name(p.string_content('"')) + '"')))
        call_args = '"parameters"' << (":" << p.tool_args(p.json()))
        fields = p.rule("tool-call-fields", call_id | call_name | call_args)
        tool_call = p.rule(
            "tool-call",
            p.tool(
                p.tool_open(p.literal("{"))
                << fields
                << p.zero_or_more(p.literal(",") << fields)
                << p.tool_close(p.literal("}"))
            ),
        )
        tool_calls = p.rule(
            "tool-calls",
            "<|START_ACTION|>"
            << ("[" << tool_call << p.zero_or_more(p.literal(",") << tool_call) << "]")
            << "<|END_ACTION|>",
        )
        optional_thinking = p.optional(thinking)
        return optional_thinking << plus(lambda: tool_calls | response, p.end)

    arena = build_chat_peg_parser(fn)
    expected = FIXTURE["command7"]
    assert _digest(arena) == expected["arena"]
    assert _raw_stream(arena, expected["stream"]["input"]) == expected["stream"]["transitions"]
    assert expected["stream"]["transitions"][-1][2]["tool_calls"][0][2] == "call_0"
    assert _raw_parse(arena, expected["response"]["input"], False) == expected["response"]


# test_permute


def test_permute():
    def permute_of(prefix: str, letters: str):
        return build_chat_peg_parser(lambda p: plus(lambda: p.permute(prefix, [p.literal(c) for c in letters]), p.end))

    abc = permute_of("abc", "abc")
    for text in ("abc", "acb", "bac", "bca", "cab", "cba"):
        assert abc.parse(ParseContext(text)).success()
    for text in ("ab", "abca", "aab"):
        assert not abc.parse(ParseContext(text)).success()
    expected = FIXTURE["permute"]
    assert _grammar(abc, None, False) == expected["abc"]
    assert expected["abc"].splitlines()[6] == 'abc-7 ::= "a" abc-6 | "b" abc-5 | "c" abc-3'
    assert _digest(abc) == expected["abc_arena"]
    assert _grammar(permute_of("abcd", "abcd"), None, False) == expected["abcd"]
    one = permute_of("a", "a")
    assert _grammar(one, None, False) == expected["one"]
    assert not one.parse(ParseContext("aa")).success()
    big = permute_of("big", "abcdefg"[: COMMON_CHAT_MAX_PERMUTE + 1])
    assert _grammar(big, None, False) == expected["big"]


# tag_with_safe_content, optspace, prefix


@pytest.mark.parametrize("marker", ["<tool_call>", ""])
def test_tag_with_safe_content(marker):
    def fn(p: ChatPegBuilder):
        call = p.tool(
            plus(
                lambda: p.tool_open(p.literal("<tool_call>")),
                lambda: p.tool_name(p.until("</tool_call>")),
                lambda: p.tool_close(p.literal("</tool_call>")),
            )
        )
        return plus(lambda: p.tag_with_safe_content("content-chunk", marker, call), p.end)

    arena = build_chat_peg_parser(fn)
    expected = FIXTURE["misc"]["safe_content" if marker else "safe_content_no_marker"]
    assert _grammar(arena, None, False) == expected["grammar"]
    assert _digest(arena) == expected["arena"]
    assert _raw_stream(arena, expected["stream"]["input"]) == expected["stream"]["transitions"]


def test_optspace_and_prefix():
    arena = build_chat_peg_parser(
        lambda p: p.sequence(
            [
                p.optspace("\n <think>\n"),
                p.optspace("  "),
                p.optspace(""),
                p.prefix(GP + "<think>", "<think>"),
                p.prefix("abc"),
                p.prefix("abc", "x"),
                p.prefix("", "x"),
                p.reasoning_block(p.literal("r")),
                p.end(),
            ]
        )
    )
    assert _grammar(arena, None, False) == FIXTURE["misc"]["optspace_grammar"]
    assert _digest(arena) == FIXTURE["misc"]["optspace_arena"]
    assert arena.parse(ParseContext(" <think>" + GP + "abcabcr")).success()


# the gemma4 and minimax m3 mappers


def test_gemma4_mapper():
    tools = TOOLS["weather"]

    def fn(p: ChatPegBuilder):
        start = p.rule("start", p.optional(p.literal("<|turn>model\n")))
        p.rule(
            "thought",
            plus(
                lambda: p.literal("<|channel>thought"),
                p.space,
                lambda: p.reasoning(p.until("<channel|>")),
                lambda: p.literal("<channel|>"),
            ),
        )
        empty_channels = p.gbnf(
            p.zero_or_more(plus(lambda: p.literal("<|channel>"), lambda: p.negate(p.literal("thought")))), ""
        )
        no_channel = p.negate(p.literal("<|channel>"))
        thought = plus(lambda: p.peek(p.literal("<|channel>")), empty_channels, lambda: p.ref("thought")) | no_channel
        p.rule("gemma4-string-content", p.until('<|"|>'))
        p.rule(
            "gemma4-string",
            plus(lambda: p.literal('<|"|>'), lambda: p.ref("gemma4-string-content"), lambda: p.literal('<|"|>')),
        )
        p.rule("gemma4-bool", p.json_bool())
        p.rule("gemma4-null", p.json_null())
        p.rule("gemma4-number", p.json_number())
        p.rule(
            "gemma4-dict-key",
            plus(lambda: p.rule("gemma4-dict-key-name", p.chars("[^:}]", 1, -1)), lambda: p.literal(":")),
        )
        p.rule("gemma4-dict-kv", plus(lambda: p.ref("gemma4-dict-key"), p.space, lambda: p.ref("gemma4-value")))

        def container(opening: str, closing: str, item: str):
            def build():
                ws, member = p.space(), p.ref(item)
                members = p.sequence([member, p.zero_or_more(p.sequence([p.literal(","), ws, member]))])
                return p.sequence(
                    [
                        p.literal(opening),
                        ws,
                        p.choice([p.literal(closing), p.sequence([members, ws, p.literal(closing)])]),
                    ]
                )

            return build

        p.rule("gemma4-dict", container("{", "}", "gemma4-dict-kv"))
        p.rule("gemma4-array", container("[", "]", "gemma4-value"))
        p.rule(
            "gemma4-value",
            lambda: p.choice(
                [p.ref(f"gemma4-{kind}") for kind in ("string", "dict", "array", "number", "bool", "null")]
            ),
        )

        def tool_rule(name: str):
            opening = p.tool_open(plus(lambda: p.tool_name(p.literal(name)), lambda: p.peek(p.literal("{"))))
            return p.rule(f"tool-{name}", p.tool(p.sequence([opening, p.tool_args(p.ref("gemma4-dict"))])))

        tool_choice = p.choice()
        for tool in tools:
            tool_choice = tool_choice | tool_rule(tool["function"]["name"])
        tool_call = p.trigger_rule("tool-call", p.repeat("<|tool_call>call:" + tool_choice + "<tool_call|>", 0, -1))
        scan = p.rule("scan-to-toolcall", p.until("<|tool_call>"))
        content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>", "<|tool_call>"])))
        message = p.rule("message", thought + content)
        return start + p.zero_or_more(message) + scan + tool_call

    case = FIXTURE["gemma4"]
    assert _chat_stream(build_chat_peg_parser(fn), case) == case["transitions"]
    assert case["transitions"][-1][1]["tool_calls"] == [
        ["get_weather", '{"city":"Pa\\"ris","days":3,"opts":{"deep":true,"none":null,"list":[1,"a"]}}', ""]
    ]


def test_minimax_m3_mapper():
    def fn(p: ChatPegBuilder):
        def close(tag: str):
            return p.tool_arg_close(p.literal(f"</{tag}>"))

        def opening(tag: str):
            return p.tool_arg_open(
                plus(lambda: p.literal("<"), lambda: p.tool_arg_name(p.literal(tag)), lambda: p.literal(">"))
            )

        def str_el(tag: str):
            return p.tool_arg(
                plus(lambda: opening(tag), lambda: p.tool_arg_string_value(p.until(f"</{tag}>")), lambda: close(tag))
            )

        def num_el(tag: str):
            return p.tool_arg(
                plus(lambda: opening(tag), lambda: p.tool_arg_json_value(p.json_number()), lambda: close(tag))
            )

        item = p.tag(
            "tool-arg-item",
            plus(
                lambda: p.literal("<item>"),
                lambda: p.tool_arg_string_value(p.until("</item>")),
                lambda: p.tool_arg_close(p.literal("</item>")),
            ),
        )
        arr_el = p.tool_arg(
            plus(
                lambda: opening("tags"),
                lambda: p.tag("tool-arg-array", p.repeat(p.space() + item, 0, -1)),
                p.space,
                lambda: close("tags"),
            )
        )
        obj_el = p.tool_arg(
            plus(
                lambda: opening("where"),
                lambda: p.tag("tool-arg-object", plus(lambda: str_el("city"), p.space, lambda: num_el("zip"))),
                p.space,
                lambda: close("where"),
            )
        )
        n_el = num_el("n")
        body = p.zero_or_more(plus(p.space, str_el("q") | arr_el | obj_el | n_el))
        call = p.tool(
            plus(
                lambda: p.tool_open(
                    plus(
                        lambda: p.literal('<invoke name="'),
                        lambda: p.tool_name(p.literal("search")),
                        lambda: p.literal('">'),
                    )
                ),
                body,
                p.space,
                lambda: p.tool_close(p.literal("</invoke>")),
            )
        )
        return plus(lambda: p.content(p.until("<invoke")), lambda: p.zero_or_more(call + p.space()), p.end)

    case = FIXTURE["minimax_m3"]
    assert _chat_stream(build_chat_peg_parser(fn), case) == case["transitions"]
    assert case["transitions"][-1][1]["tool_calls"] == [
        ["search", '{"q":"cats \\"x\\"","n":12,"tags":["a","b"],"where":{"city":"Paris","zip":75001}}', ""]
    ]


# chat_peg_parse


def test_empty_parser_is_content_only():
    case = FIXTURE["empty_parser"]
    assert _chat_stream(None, case) == case["transitions"]
    assert _chat_stream(PegArena(), case) == case["transitions"]
    assert case["transitions"][-1][1]["content"] == "<gp>Hi <think>x</think>"


def test_chat_peg_parse_failures():
    arena = build_chat_peg_parser(lambda p: p.literal("ab") + p.content(p.literal("cd")))
    # a partial output that failed past its start gives what the failed parse mapped: nothing here
    assert chat_peg_parse(arena, "abx", True) == ChatMsg(role="assistant")
    with pytest.raises(
        ValueError, match="^The model produced output that does not match the expected peg-gemma4 format$"
    ):
        chat_peg_parse(arena, "abx", False, fmt="peg-gemma4")
    with pytest.raises(ValueError):  # failed at its start
        chat_peg_parse(arena, "x", True)
    # the generation prompt is parsed first; a complete output is still parsed leniently
    assert chat_peg_parse(arena, "c", False, generation_prompt="ab").content == "c"


# tagged_peg_parser


def test_tagged_peg_parser():
    parser = build_tagged_peg_parser(
        lambda p: p.tag("greeting", p.until(" ")) + " " + p.tag("name", p.rest()) + p.end()
    )
    result = parser.parse_and_extract("Hello World")
    assert result.result.success() and result.tags == {"greeting": "Hello", "name": "World"}

    parser = build_tagged_peg_parser(lambda p: p.tag("item", p.until(",")) + "," + p.tag("item", p.rest()) + p.end())
    assert parser.parse_and_extract("first,second").tags == {"item": "second"}

    parser = build_tagged_peg_parser(lambda p: p.rest() + p.end())
    assert parser.parse_and_extract("Hello").tags == {}

    parser = build_tagged_peg_parser(lambda p: p.tag("prefix", p.until(":")) + ":" + p.tag("value", p.rest()) + p.end())
    result = parser.parse_and_extract("key:val", LENIENT)
    assert not result.result.fail() and result.tags == {"prefix": "key", "value": "val"}

    def fun_name(p):
        return p.choice([p.literal("{"), p.literal(":")]) + p.space() + p.literal('"') + p.atomic(p.literal("fun_name"))

    text = "This is a very long jinja template string. We have tools. We will try to call them now: "
    parser = build_tagged_peg_parser(fun_name)
    assert parser.parse_anywhere_and_extract(
        text + '<tool_call>{ "fun_name" : { "arg" : 1 }</tool_call>'
    ).result.success()
    assert parser.parse_anywhere_and_extract(
        text + "<tool_call><fun=fun_name><arg name=arg>1</arg></tool_call>"
    ).result.fail()

    def function_tag(p):
        needle = "foofoo"
        return p.tag(
            "fun_marker",
            p.choice(
                [
                    p.tag("fun_pre", p.literal("<") + p.until_one_of([">", needle]))
                    + p.literal(needle)
                    + p.tag("fun_post", p.negate(p.space() + p.literal("<")) + p.until(">") + p.literal(">"))
                    + p.space(),
                    p.tag("fun_pre", p.literal("[") + p.until_one_of(["]", needle]))
                    + p.literal(needle)
                    + p.tag(
                        "fun_post", p.negate(p.space() + p.literal("[") + p.until("]") + p.literal("]")) + p.space()
                    ),
                ]
            ),
        )

    haystack = (
        "\n<tool_call>\n<function=foofoo>\n<parameter=first>\nXXXX\n</parameter>\n<parameter=second>\n"
        "YYYY\n</parameter>\n</function>\n</tool_call>\n"
    )
    result = build_tagged_peg_parser(function_tag).parse_anywhere_and_extract(haystack)
    assert result.result.success()
    assert (result.tags["fun_pre"], result.tags["fun_post"]) == ("<function=", ">")
