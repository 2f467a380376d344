"""Kimi K2 Thinking (common_chat_params_init_kimi_k2 of b10621's common/chat.cpp): <think> reasoning, then
content, then <|tool_calls_section_begin|> ... calls whose id is functions.<name>:<index> ...
<|tool_calls_section_end|>. Also claims moonshotai-Kimi-K2 and Kimi-K2-Instruct, whose templates carry the
same markers.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
GEN_PROMPT = "<|im_assistant|>assistant<|im_middle|>"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        supports_thinking=True,
        preserved_tokens=[SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS_BEGIN, CALL_END, THINK_START, THINK_END],
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END],
    )
    tools = inputs.has_tools()
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = tools and inputs.tool_choice != "none"

    kit.continue_message(data, inputs, GEN_PROMPT + THINK_START, THINK_END)

    def build(p: ChatPegBuilder):
        end = p.end()
        # the model may call tools at the end of its reasoning without closing it
        if extract_reasoning:
            reasoning = p.optional(
                plus(
                    THINK_START,
                    lambda: p.reasoning(p.until_one_of([THINK_END, SECTION_BEGIN, CALL_BEGIN])),
                    lambda: p.optional(p.literal(THINK_END)),
                )
            )
        else:
            reasoning = p.eps()
        generation_prompt = p.literal(GEN_PROMPT)

        if not tools or inputs.tool_choice == "none":
            return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), end)

        tool_choice = p.choice_of(kit.functions(inputs.tools), lambda f: _tool_parser(p, f))

        min_calls = 1 if inputs.tool_choice == "required" else 0
        max_calls = -1 if inputs.parallel_tool_calls else 1
        tool_calls = p.rule(
            "tool-calls",
            plus(
                lambda: p.optional(p.literal(SECTION_BEGIN)),
                lambda: p.trigger_rule(
                    "tool-call",
                    plus(
                        lambda: p.repeat(CALL_BEGIN + tool_choice, min_calls, max_calls),
                        lambda: p.optional(p.literal(SECTION_END)),
                    ),
                ),
            ),
        )
        content_before_tools = p.content(p.until_one_of([SECTION_BEGIN, CALL_BEGIN]))
        return plus(generation_prompt, reasoning, content_before_tools, tool_calls, end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            inputs.tool_choice == "auto",
            (f["parameters"] for f in kit.functions(inputs.tools)),
            [(kit.TRIGGER_WORD, CALL_BEGIN)],
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """functions.<name>:<digits><|tool_call_argument_begin|>{json}<|tool_call_end|>, the whole call id
    (functions.<name>:<digits>) being the tool id."""
    name, schema = function["name"], function["parameters"]
    tool_id = p.tool_id(
        plus(
            lambda: p.literal("functions."),
            lambda: p.tool_name(p.literal(name)),
            lambda: p.literal(":"),
            lambda: p.chars("[0-9]", 1, -1),
        )
    )
    tool_parser = p.tool(
        plus(
            lambda: p.tool_open(tool_id + p.literal(ARGS_BEGIN)),
            lambda: p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema)),
            lambda: p.tool_close(p.optional(p.literal(CALL_END))),
        )
    )
    return p.rule(f"tool-{name}", tool_parser)
