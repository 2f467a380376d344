"""LFM2 / LFM2.5 (common_chat_params_init_lfm2 of b10621's common/chat.cpp): optional <think> reasoning, then
content, then <|tool_call_start|>[name(arg=value, ...), ...]<|tool_call_end|>, Python-style calls that also
take JSON's true/false/null. LFM2 templates wrap their tool list in <|tool_list_start|>/<|tool_list_end|>
(kept as preserved tokens); LFM2.5 templates write a plain "List of tools: [...]".

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

TOOL_CALL_START = "<|tool_call_start|>"
TOOL_CALL_END = "<|tool_call_end|>"
TOOL_LIST_START = "<|tool_list_start|>"
TOOL_LIST_END = "<|tool_list_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
GEN_PROMPT = "<|im_start|>assistant\n"


def params_init_lfm2(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    return params_init(tmpl, inputs, tool_list_tokens=True)


def params_init_lfm25(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    return params_init(tmpl, inputs, tool_list_tokens=False)


def params_init(tmpl: Template, inputs: GenerationParams, tool_list_tokens: bool) -> ChatParams:
    # the template reads a message's reasoning from its "thinking" field
    adjusted_messages = []
    for msg in inputs.messages:
        msg = dict(msg)
        if isinstance(msg.get("reasoning_content"), str):
            msg["thinking"] = msg["reasoning_content"]
        adjusted_messages.append(msg)

    data = kit.chat_params(
        tmpl,
        inputs,
        adjusted_messages,
        supports_thinking=True,
        preserved_tokens=[TOOL_CALL_START, TOOL_CALL_END, THINK_START, THINK_END],
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END],
    )
    if tool_list_tokens:
        data.preserved_tokens += [TOOL_LIST_START, TOOL_LIST_END]

    tools = inputs.has_tools()
    has_response_format = isinstance(inputs.json_schema, dict)
    # only a template that writes <think> has reasoning to extract
    extract_reasoning = inputs.reasoning_format != "none" and THINK_START in tmpl.source
    include_grammar = has_response_format or (tools and inputs.tool_choice != "none")

    kit.continue_message(data, inputs, GEN_PROMPT + THINK_START, THINK_END)

    def build(p: ChatPegBuilder):
        generation_prompt = p.literal(GEN_PROMPT)
        end = p.end()

        reasoning = p.eps()
        if extract_reasoning:
            reasoning = p.optional(plus(THINK_START, lambda: p.reasoning(p.until(THINK_END)), THINK_END))

        if not tools or inputs.tool_choice == "none":
            if has_response_format:
                response_format = p.content(p.schema(p.json(), "response-format-schema", inputs.json_schema))
                return plus(generation_prompt, reasoning, response_format, end)
            return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), end)

        tool_calls = p.rule(
            "tool-calls",
            p.trigger_rule(
                "tool-call",
                plus(
                    lambda: p.literal(TOOL_CALL_START),
                    lambda: p.python_style_tool_calls(inputs.tools, inputs.parallel_tool_calls, True),
                    lambda: p.literal(TOOL_CALL_END),
                ),
            ),
        )
        content = p.content(p.until(TOOL_CALL_START))
        return plus(generation_prompt, reasoning, content, tool_calls, end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not (has_response_format or (tools and inputs.tool_choice == "required")),
            [f["parameters"] for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, TOOL_CALL_START)],
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data
