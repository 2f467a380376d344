"""Functionary v3.2 (common_chat_params_init_functionary_v3_2 of b10621's common/chat.cpp): the generation
prompt ends with ">>>" and the model names a recipient: "all\\n{content}" for the user, "<function>\\n{json}"
for a tool call.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import FORMAT_PEG_NATIVE, ChatPegBuilder, build_chat_peg_parser
from ._handler_kit import (
    TRIGGER_PATTERN,
    ChatParams,
    GenerationParams,
    Template,
    apply,
    functions,
    generation_prompt_of,
    plus,
    render_content,
    tool_grammar,
)

GEN_PROMPT = "<|start_header_id|>assistant<|end_header_id|>\n\n>>>"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = ChatParams(
        prompt=apply(tmpl, inputs),
        generation_prompt=generation_prompt_of(tmpl, inputs),
        format=FORMAT_PEG_NATIVE,
        preserved_tokens=[">>>all"],
    )
    tools = inputs.has_tools()
    include_grammar = tools and inputs.tool_choice != "none"

    if inputs.has_continuation():
        data.generation_prompt = GEN_PROMPT + "all\n" + render_content(inputs.continue_msg)
        data.prompt += data.generation_prompt

    def build(p: ChatPegBuilder):
        # with tools the content stops at the next ">>>" (a tool call), without it runs to the end
        content_until_tool = plus(lambda: p.literal("all\n"), lambda: p.content(p.until(">>>")))
        content_until_end = plus(lambda: p.literal("all\n"), lambda: p.content(p.rest()))
        generation_prompt = p.literal(GEN_PROMPT)

        if not tools or inputs.tool_choice == "none":
            return plus(generation_prompt, content_until_end, p.end)

        tool_choice = p.choice()
        for function in functions(inputs.tools):
            tool_choice = tool_choice | _tool_parser(p, function)

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

    parser = build_chat_peg_parser(build)
    data.parser = parser
    if include_grammar:
        data.grammar_lazy = inputs.tool_choice == "auto"
        data.grammar = tool_grammar(parser, data.grammar_lazy, (f["parameters"] for f in functions(inputs.tools)))
        # a recipient other than "all" after the generation prompt's ">>>"
        data.grammar_triggers = [(TRIGGER_PATTERN, ">>>(?!all)")]
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """<name>\\n{json arguments}"""
    name, schema = function["name"], function["parameters"]
    tool_parser = p.tool(plus(
        lambda: p.tool_open(plus(lambda: p.tool_name(p.literal(name)), lambda: p.literal("\n"))),
        lambda: p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema))))
    return p.rule(f"tool-{name}", tool_parser)
