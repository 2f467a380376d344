"""MiniCPM5 (common_chat_params_init_minicpm5 of b10621's common/chat.cpp): <think> reasoning, content, then
XML tool calls <function name="f"><param name="k">value</param></function>, a string value optionally in
<![CDATA[...]]> so that it may hold </param>.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left, of
`<<` left to right).
"""

from __future__ import annotations

from ..peg_chat import FORMAT_PEG_NATIVE, ChatPegBuilder, build_chat_peg_parser
from ._handler_kit import (
    TRIGGER_WORD,
    ChatParams,
    GenerationParams,
    Template,
    apply,
    continue_message,
    functions,
    generation_prompt_of,
    plus,
    resolves_to_string,
    tool_grammar,
)


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = ChatParams(
        prompt=apply(tmpl, inputs),
        generation_prompt=generation_prompt_of(tmpl, inputs),
        format=FORMAT_PEG_NATIVE,
        supports_thinking=True,
        preserved_tokens=["<function", "<param", "</function>", "</param>", "<think>", "</think>"],
        thinking_start_tag="<think>",
        thinking_end_tags=["</think>"],
        message_delimiters={
            "assistant": "<|im_start|>assistant",
            "tool": "<|im_start|>user\n<tool_response>",
            "user": "<|im_start|>user",
            "system": "<|im_start|>system",
        },
    )
    tools = inputs.has_tools()
    has_response_format = inputs.has_response_format()
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = has_response_format or (tools and inputs.tool_choice != "none")

    continue_message(data, inputs, "<|im_start|>assistant\n<think>\n", "\n</think>\n\n")

    def build(p: ChatPegBuilder):
        generation_prompt = p.literal("<|im_start|>assistant\n")

        reasoning = p.eps()
        if extract_reasoning:
            space = p.space()
            reasoning = ("<think>" << p.reasoning(p.until("</think>")) << "</think>") + space

        if has_response_format:
            return plus(generation_prompt, reasoning,
                        lambda: p.content(p.schema(p.json(), "response-format", inputs.json_schema)))

        if tools and inputs.tool_choice != "none":
            # CDATA lets a value hold what would close the tag (</param>); only its inner text is the value
            string_value = p.choice([
                plus(lambda: p.literal("<![CDATA["),
                     lambda: p.ac(plus(lambda: p.tool_arg_string_value(p.until("]]>")), lambda: p.literal("]]>")),
                                  "]]>"),
                     lambda: p.tool_arg_close(p.literal("</param>"))),
                plus(lambda: p.negate(p.literal("<![CDATA[")),
                     lambda: p.ac(plus(lambda: p.tool_arg_string_value(p.until("</param>")),
                                       lambda: p.tool_arg_close(p.literal("</param>"))), "</param>")),
            ])

            tool_choice = p.choice()
            for function in functions(inputs.tools):
                tool_choice = tool_choice | _tool_parser(p, function, string_value)

            max_calls = -1 if inputs.parallel_tool_calls else 1
            tool_calls = p.trigger_rule("tool-call", p.repeat(tool_choice + p.space(), 1, max_calls))
            content = p.content(p.until("<function"))
            return plus(generation_prompt, reasoning, content, tool_calls, p.end)

        return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), p.end)

    parser = build_chat_peg_parser(build)
    data.parser = parser
    if include_grammar:
        data.grammar_lazy = not (has_response_format or (tools and inputs.tool_choice == "required"))
        schemas = [f.get("parameters", {}) for f in functions(inputs.tools)]
        if has_response_format:
            schemas.append(inputs.json_schema)
        data.grammar = tool_grammar(parser, data.grammar_lazy, schemas)
        data.grammar_triggers = [(TRIGGER_WORD, "<function")]
    return data


def _tool_parser(p: ChatPegBuilder, function: dict, string_value):
    name = function["name"]
    params = function.get("parameters", {})
    args = p.eps()
    properties = params.get("properties") if isinstance(params, dict) else None
    if isinstance(properties, dict) and properties:
        arg_choice = p.choice()
        for prop_name, prop_schema in properties.items():
            arg_choice = arg_choice | _arg_parser(p, name, prop_name, prop_schema,
                                                  resolves_to_string(prop_schema, params), string_value)
        args = p.zero_or_more(arg_choice + p.space())
    tool_parser = p.tool(
        p.tool_open(plus(lambda: p.literal('<function name="'), lambda: p.tool_name(p.literal(name)),
                         lambda: p.literal('">')))
        << p.tool_args(args)
        << p.tool_close(p.literal("</function>")))
    return p.rule(f"tool-{name}", tool_parser)


def _arg_parser(p: ChatPegBuilder, name: str, prop_name: str, prop_schema: object, is_string: bool, string_value):
    value_parser = p.eps()
    if is_string:
        value_parser = string_value
    else:
        value_parser = plus(
            lambda: p.tool_arg_json_value(p.schema(p.json(), f"tool-{name}-arg-{prop_name}-schema", prop_schema,
                                                 False)),
            lambda: p.tool_arg_close(p.literal("</param>")))
    return p.tool_arg(plus(
        lambda: p.tool_arg_open(plus(lambda: p.literal('<param name="'), lambda: p.tool_arg_name(p.literal(prop_name)),
                                   lambda: p.literal('">'))),
        value_parser))
