"""Muse Glimmer (common_chat_params_init_muse_glimmer of b10621's common/chat.cpp): an assistant turn is one
or more messages "<|start|>assistant to=<recipient><|message|>{content}{END}", END being <|eom|> (more
follow) or <|eot|> (end of turn):

  - chain of thought: to=self, closed by <|eom|>
  - final answer:     to=user, closed by <|eot|>
  - tool call:        to=<tool>, <atem:function_calls><atem:invoke name="f"><atem:parameter name="k">v
                      </atem:parameter></atem:invoke></atem:function_calls>

The generation prompt is just "<|start|>assistant"; the model writes its own " to=...<|message|>".

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left, of
`<<` left to right).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

GEN_PROMPT = "<|start|>assistant"
# a message to a recipient other than self or user
TOOL_CALL_PATTERN = r"<\|start\|>assistant( to=(?!self<\|message\|>)(?!user<\|message\|>)[^<]*?<\|message\|>)"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = ChatParams(
        prompt=kit.apply(tmpl, inputs),
        generation_prompt=GEN_PROMPT,
        supports_thinking=True,
        preserved_tokens=[
            "<|start|>",
            "<|message|>",
            "<|eom|>",
            "<|eot|>",
            # the ATEM markup of " to=<tool>" messages
            "<atem:function_calls>",
            "<atem:invoke",
            "<atem:parameter",
            "</atem:parameter>",
            "</atem:invoke>",
            "</atem:function_calls>",
        ],
        message_delimiters={
            "assistant": "<|start|>assistant",
            "user": "<|start|>user",
            "system": "<|start|>system",
            "tool": "<|start|>tool",
        },
    )
    kit.continue_message(
        data, inputs, "<|start|>assistant to=self<|message|>", "<|eom|><|start|>assistant to=user<|message|>"
    )

    extract_reasoning = inputs.reasoning_format != "none"
    tools = inputs.has_tools()
    include_grammar = tools and inputs.tool_choice != "none"  # a grammar whenever tools are offered

    def build(p: ChatPegBuilder):
        start = p.rule("start", p.literal(GEN_PROMPT))

        if not extract_reasoning and not include_grammar:
            return start + p.content(p.rest())

        if extract_reasoning:
            p.rule(
                "analysis",
                plus(
                    lambda: p.literal(" to=self<|message|>"),
                    lambda: p.reasoning(p.until("<|eom|>")),
                    lambda: p.literal("<|eom|>"),
                ),
            )
        else:
            p.rule(
                "analysis",
                plus(
                    lambda: p.literal(" to=self<|message|>"),
                    lambda: p.content(p.until("<|eom|>")),
                    lambda: p.literal("<|eom|>"),
                ),
            )
        analysis = p.ref("analysis")

        recipient = p.optional(p.literal(" to=user"))
        final_msg = p.rule(
            "final",
            plus(
                recipient, lambda: p.literal("<|message|>"), lambda: p.content(p.until_one_of(["<|eot|>", "<|eom|>"]))
            ),
        )

        if tools and inputs.tool_choice != "none":
            string_value = p.ac(
                plus(
                    lambda: p.tool_arg_string_value(p.until("</atem:parameter>")),
                    lambda: p.tool_arg_close(p.literal("</atem:parameter>")),
                ),
                "</atem:parameter>",
            )
            tool_choice = p.choice_of(kit.functions(inputs.tools), lambda f: _tool_parser(p, f, string_value))

            if inputs.parallel_tool_calls:
                tool_calls = p.trigger_rule(
                    "tool-call", tool_choice + p.zero_or_more(plus(lambda: p.literal("<|eom|>"), start, tool_choice))
                )
            else:
                tool_calls = p.trigger_rule("tool-call", tool_choice)

            if inputs.tool_choice == "required":
                return plus(lambda: p.zero_or_more(start + analysis), start, tool_calls)
            trailing_calls = p.optional(plus(lambda: p.literal("<|eom|>"), start, tool_calls))
            return plus(
                lambda: p.zero_or_more(start + analysis), start, lambda: tool_calls | (final_msg + trailing_calls)
            )

        return plus(lambda: p.zero_or_more(start + analysis), start, final_msg)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            inputs.tool_choice != "required",
            (f.get("parameters", {}) for f in kit.functions(inputs.tools)),
            [(kit.TRIGGER_PATTERN, TOOL_CALL_PATTERN)],
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict, string_value):
    name = function["name"]
    args = kit.string_or_json_args(p, function, string_value, '<atem:parameter name="', "</atem:parameter>")
    tool_open = p.tool_open(
        plus(
            lambda: p.literal(" to="),
            lambda: p.until("<|message|>"),
            lambda: p.literal("<|message|><atem:function_calls>"),
            p.space,
            lambda: p.literal('<atem:invoke name="'),
            lambda: p.tool_name(p.literal(name)),
            lambda: p.literal('">'),
            p.space,
        )
    )
    tool_parser = p.tool(
        tool_open
        << p.tool_args(args)
        << p.tool_close(plus(lambda: p.literal("</atem:invoke>"), p.space, lambda: p.literal("</atem:function_calls>")))
    )
    return p.rule(f"tool-{name}", tool_parser)
