"""Kimi K3 (common_chat_params_init_kimi_k3 of b10621's common/chat.cpp): XTML sections built from
<|open|>tag attrs<|sep|> ... <|close|>tag<|sep|>,

    assistant := [think] [response] [tools] <|close|>message<|sep|> <|end_of_msg|>

The generation prompt already opens the think section, so its opener is optional.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

SEP = "<|sep|>"
MSG_START = '<|open|>message role="assistant"<|sep|>'
THINK_START = "<|open|>think<|sep|>"
THINK_END = "<|close|>think<|sep|>"
RESP_START = "<|open|>response<|sep|>"
RESP_END = "<|close|>response<|sep|>"
TOOLS_START = "<|open|>tools<|sep|>"
TOOLS_END = "<|close|>tools<|sep|>"
CALL_START = '<|open|>call tool="'
CALL_END = "<|close|>call<|sep|>"
ARG_START = '<|open|>argument key="'
ARG_END = "<|close|>argument<|sep|>"
MSG_END = "<|close|>message<|sep|>"
EOM_TOKEN = "<|end_of_msg|>"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        supports_thinking=True,
        # only the markers: the tag names are ordinary words
        preserved_tokens=["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END],
        # system and tool messages carry more attributes: their delimiters stop after the role
        message_delimiters={
            "assistant": '<|open|>message role="assistant"<|sep|>',
            "user": '<|open|>message role="user"<|sep|>',
            "tool": '<|open|>message role="tool"',
            "system": '<|open|>message role="system"',
        },
    )
    tools = inputs.has_tools()
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = tools and inputs.tool_choice != "none"

    kit.continue_message(data, inputs, MSG_START + THINK_START, THINK_END + RESP_START)

    def build(p: ChatPegBuilder):
        end = p.end()
        start = p.optional(p.literal(MSG_START))

        # the think section is always there (the generation prompt opens it); its text stops at its closer, or
        # at the response opener when the model skips the closer
        if extract_reasoning:
            think_body = p.reasoning(p.until_one_of([THINK_END, RESP_START]))
        else:
            think_body = p.content(p.until_one_of([THINK_END, RESP_START]))
        reasoning = p.optional(
            plus(lambda: p.optional(p.literal(THINK_START)), think_body, lambda: p.optional(p.literal(THINK_END)))
        )
        # content runs to the response closer, or to the next section when truncated
        response = plus(
            lambda: p.optional(p.literal(RESP_START)),
            lambda: p.content(p.until_one_of([RESP_END, TOOLS_START, MSG_END])),
            lambda: p.optional(p.literal(RESP_END)),
        )
        # the end-of-generation token after the message closer reaches the parser as text
        trailer = plus(lambda: p.optional(p.literal(MSG_END)), lambda: p.optional(p.literal(EOM_TOKEN)))

        if not tools or inputs.tool_choice == "none":
            return plus(start, reasoning, response, trailer, end)

        tool_choices = p.choice_of(kit.functions(inputs.tools), lambda f: _tool_parser(p, f))

        # all calls in one tools section, then the message closer: inside the trigger rule, or the lazy
        # grammar would reject it once the calls started
        tools_section = p.trigger_rule(
            "kimi-k3-tool-call",
            plus(
                lambda: p.literal(TOOLS_START),
                lambda: p.one_or_more(tool_choices),
                lambda: p.literal(TOOLS_END),
                lambda: p.optional(p.literal(MSG_END)),
                lambda: p.optional(p.literal(EOM_TOKEN)),
            ),
        )
        tools_parser = tools_section if inputs.tool_choice == "required" else p.optional(tools_section)
        return plus(start, reasoning, response, tools_parser, trailer, end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            inputs.tool_choice != "required",
            (f["parameters"] for f in kit.functions(inputs.tools) if "parameters" in f),
            [(kit.TRIGGER_WORD, TOOLS_START)],
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """<|open|>call tool="<name>" index="N"<|sep|> arguments <|close|>call<|sep|>, each argument
    <|open|>argument key="<key>" type="..."<|sep|>value<|close|>argument<|sep|>; the value is a string or
    JSON by the tool's schema, not by the type attribute."""
    name = function["name"]
    schema = function.get("parameters", {})
    args = p.eps()
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if properties:
        arg_choices = p.choice_of(properties.items(), lambda prop: _arg_parser(p, name, *prop))
        args = p.zero_or_more(arg_choices)
    # the index="N" attribute is skipped up to <|sep|>
    call = p.tool(
        plus(
            lambda: p.tool_open(
                plus(
                    lambda: p.literal(CALL_START),
                    lambda: p.tool_name(p.literal(name)),
                    lambda: p.literal('"'),
                    lambda: p.until(SEP),
                    lambda: p.literal(SEP),
                )
            ),
            lambda: p.tool_args(args),
            lambda: p.tool_close(p.literal(CALL_END)),
        )
    )
    return p.rule(f"kimi-k3-tool-{name}", call)


def _arg_parser(p: ChatPegBuilder, name: str, key: str, prop: object):
    kind = "string"
    if isinstance(prop, dict) and isinstance(prop.get("type"), str):
        kind = prop["type"]
    if kind == "string":
        value = p.tool_arg_string_value(p.until(ARG_END))
    else:
        value = p.tool_arg_value(p.until(ARG_END))
    # the type="..." attribute is skipped up to <|sep|>
    return p.rule(
        f"kimi-k3-arg-{name}-{key}",
        p.tool_arg(
            plus(
                lambda: p.tool_arg_open(p.literal(ARG_START)),
                lambda: p.tool_arg_name(p.literal(key)),
                lambda: p.literal('"'),
                lambda: p.until(SEP),
                lambda: p.literal(SEP),
                value,
                lambda: p.tool_arg_close(p.literal(ARG_END)),
            )
        ),
    )
