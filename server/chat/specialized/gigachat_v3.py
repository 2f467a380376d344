"""GigaChat V3 (common_chat_params_init_gigachat_v3 of b10621's common/chat.cpp): content, then at most one
<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": ..., "arguments": {...}}. No reasoning, no parallel
calls. (GigaChat 3.1, with <|function_call|>, is left to the autoparser.)

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left, of
`<<` left to right).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

TOOL_CALL_START_PREFIX = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
GEN_PROMPT = "assistant<|role_sep|>\n"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        supports_thinking=False,
        preserved_tokens=["<|message_sep|>\n\n", "<|role_sep|>\n"],
    )
    if inputs.has_continuation():
        data.generation_prompt = GEN_PROMPT + kit.render_content(inputs.continue_msg)
        data.prompt += data.generation_prompt

    tools = inputs.has_tools()
    include_grammar = tools and inputs.tool_choice != "none"

    def build(p: ChatPegBuilder):
        nonlocal include_grammar
        ret = p.eps()
        if tools and inputs.tool_choice != "none":
            # every tool, not only the function ones (upstream reads tool["function"])
            tool_choice = p.choice_of(inputs.tools, lambda tool: _tool_parser(p, tool["function"]))
            min_calls = 1 if inputs.tool_choice == "required" else 0
            max_calls = 1  # no parallel tool calls
            tool_call = p.rule("tool-call", p.literal(TOOL_CALL_START_PREFIX) + tool_choice)
            tool_calls = p.trigger_rule("tool-call-root", p.repeat(tool_call, min_calls, max_calls))
            ret = p.content(p.until("<|message_sep|>\n\n")) << tool_calls
        else:
            include_grammar = False
            ret = p.content(p.rest())
        return p.literal(GEN_PROMPT) + ret

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            tools and inputs.tool_choice == "auto",
            (f["parameters"] for f in kit.functions(inputs.tools)),
            [(kit.TRIGGER_WORD, TOOL_CALL_START_PREFIX)],
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """{"name": "<name>", "arguments": {...}}"""
    name, schema = function["name"], function["parameters"]
    tool_name = p.json_member("name", plus('"', lambda: p.tool_name(p.literal(name)), '"'))
    tool_args = p.json_member("arguments", p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema)))
    tool_open = p.tool_open(p.literal("{") << tool_name)
    return p.rule(f"tool-{name}", tool_open << "," << tool_args << "}")
