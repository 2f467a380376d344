"""MiniCPM5 (common_chat_params_init_minicpm5 of b10621's common/chat.cpp): <think> reasoning, content, then
XML tool calls <function name="f"><param name="k">value</param></function>, a string value optionally in
<![CDATA[...]]> so that it may hold </param>.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left, of
`<<` left to right).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
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

    kit.continue_message(data, inputs, "<|im_start|>assistant\n<think>\n", "\n</think>\n\n")

    def build(p: ChatPegBuilder):
        generation_prompt = p.literal("<|im_start|>assistant\n")

        reasoning = p.eps()
        if extract_reasoning:
            space = p.space()
            reasoning = ("<think>" << p.reasoning(p.until("</think>")) << "</think>") + space

        if has_response_format:
            return plus(
                generation_prompt,
                reasoning,
                lambda: p.content(p.schema(p.json(), "response-format", inputs.json_schema)),
            )

        if tools and inputs.tool_choice != "none":
            # CDATA lets a value hold what would close the tag (</param>); only its inner text is the value
            string_value = p.choice(
                [
                    plus(
                        lambda: p.literal("<![CDATA["),
                        lambda: p.ac(
                            plus(lambda: p.tool_arg_string_value(p.until("]]>")), lambda: p.literal("]]>")), "]]>"
                        ),
                        lambda: p.tool_arg_close(p.literal("</param>")),
                    ),
                    plus(
                        lambda: p.negate(p.literal("<![CDATA[")),
                        lambda: p.ac(
                            plus(
                                lambda: p.tool_arg_string_value(p.until("</param>")),
                                lambda: p.tool_arg_close(p.literal("</param>")),
                            ),
                            "</param>",
                        ),
                    ),
                ]
            )

            tool_choice = p.choice_of(kit.functions(inputs.tools), lambda f: _tool_parser(p, f, string_value))

            max_calls = -1 if inputs.parallel_tool_calls else 1
            tool_calls = p.trigger_rule("tool-call", p.repeat(tool_choice + p.space(), 1, max_calls))
            content = p.content(p.until("<function"))
            return plus(generation_prompt, reasoning, content, tool_calls, p.end)

        return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), p.end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not (has_response_format or (tools and inputs.tool_choice == "required")),
            [f.get("parameters", {}) for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, "<function")],
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict, string_value):
    name = function["name"]
    args = kit.string_or_json_args(p, function, string_value, '<param name="', "</param>")
    tool_parser = p.tool(
        p.tool_open(
            plus(lambda: p.literal('<function name="'), lambda: p.tool_name(p.literal(name)), lambda: p.literal('">'))
        )
        << p.tool_args(args)
        << p.tool_close(p.literal("</function>"))
    )
    return p.rule(f"tool-{name}", tool_parser)
