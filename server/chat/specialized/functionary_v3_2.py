"""Functionary v3.2 (common_chat_params_init_functionary_v3_2 of b10621's common/chat.cpp): the generation
prompt ends with ">>>" and the model names a recipient: "all\\n{content}" for the user, "<function>\\n{json}"
for a tool call.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

GEN_PROMPT = "<|start_header_id|>assistant<|end_header_id|>\n\n>>>"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        preserved_tokens=[">>>all"],
    )
    tools = inputs.has_tools()
    include_grammar = tools and inputs.tool_choice != "none"

    if inputs.has_continuation():
        data.generation_prompt = GEN_PROMPT + "all\n" + kit.render_content(inputs.continue_msg)
        data.prompt += data.generation_prompt

    def build(p: ChatPegBuilder):
        # with tools the content stops at the next ">>>" (a tool call), without it runs to the end
        content_until_tool = plus(lambda: p.literal("all\n"), lambda: p.content(p.until(">>>")))
        content_until_end = plus(lambda: p.literal("all\n"), lambda: p.content(p.rest()))
        generation_prompt = p.literal(GEN_PROMPT)

        if not tools or inputs.tool_choice == "none":
            return plus(generation_prompt, content_until_end, p.end)

        tool_choice = p.choice_of(kit.functions(inputs.tools), lambda f: _tool_parser(p, f))

        content_only = content_until_end
        tools_only = p.trigger_rule("tools", p.one_or_more(tool_choice))
        content_and_tools = content_until_tool + tools_only

        ret = p.eps()
        if inputs.tool_choice == "required":
            if inputs.parallel_tool_calls:
                ret = plus(lambda: p.choice([content_and_tools, tools_only]), p.end)
            else:
                ret = plus(lambda: p.choice([content_until_tool + tool_choice, tools_only]), p.end)
        elif inputs.parallel_tool_calls:
            ret = plus(lambda: p.choice([content_and_tools, content_only, tools_only]), p.end)
        else:
            content_and_tool = content_until_tool + tool_choice
            ret = plus(lambda: p.choice([content_and_tool, content_only, tool_choice]), p.end)
        return generation_prompt + ret

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        # triggered by a recipient other than "all" after the generation prompt's ">>>"
        kit.add_grammar(
            data,
            inputs.tool_choice == "auto",
            (f["parameters"] for f in kit.functions(inputs.tools)),
            [(kit.TRIGGER_PATTERN, ">>>(?!all)")],
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """<name>\\n{json arguments}"""
    name, schema = function["name"], function["parameters"]
    tool_parser = p.tool(
        plus(
            lambda: p.tool_open(plus(lambda: p.tool_name(p.literal(name)), lambda: p.literal("\n"))),
            lambda: p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema)),
        )
    )
    return p.rule(f"tool-{name}", tool_parser)
