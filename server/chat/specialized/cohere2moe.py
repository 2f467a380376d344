"""Cohere2 MoE / North Code (common_chat_params_init_cohere2moe of b10621's common/chat.cpp): a fully
marker-wrapped assistant turn,

    <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>
      <|START_THINKING|>{reasoning}<|END_THINKING|>
      then <|START_TEXT|>{content}<|END_TEXT|>
      or   <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}, ...]<|END_ACTION|>
    <|END_OF_TURN_TOKEN|>

The generation prompt forces <|START_THINKING|>, so the parser's literal only covers the turn opener and the
reasoning rule takes the thinking markers wherever they came from.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

TURN_START = "<|START_OF_TURN_TOKEN|>"
TURN_END = "<|END_OF_TURN_TOKEN|>"
CHATBOT = "<|CHATBOT_TOKEN|>"
USER = "<|USER_TOKEN|>"
SYSTEM = "<|SYSTEM_TOKEN|>"
THINK_START = "<|START_THINKING|>"
THINK_END = "<|END_THINKING|>"
TEXT_START = "<|START_TEXT|>"
TEXT_END = "<|END_TEXT|>"
ACTION_START = "<|START_ACTION|>"
ACTION_END = "<|END_ACTION|>"
RESULT_START = "<|START_TOOL_RESULT|>"
RESULT_END = "<|END_TOOL_RESULT|>"
GEN_PREFIX = TURN_START + CHATBOT  # the stable part of the generation prompt, before <|START_THINKING|>


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        supports_thinking=True,
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END],
        preserved_tokens=[
            TURN_START,
            TURN_END,
            CHATBOT,
            USER,
            SYSTEM,
            THINK_START,
            THINK_END,
            TEXT_START,
            TEXT_END,
            ACTION_START,
            ACTION_END,
            RESULT_START,
            RESULT_END,
        ],
        # a tool result opens with the system token then <|START_TOOL_RESULT|>: before the plain system one
        message_delimiters={
            "assistant": GEN_PREFIX,
            "user": TURN_START + USER,
            "tool": TURN_START + SYSTEM + RESULT_START,
            "system": TURN_START + SYSTEM,
        },
    )
    tools = inputs.has_tools()
    has_response_format = inputs.has_response_format()
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = has_response_format or (tools and inputs.tool_choice != "none")
    kit.continue_message(data, inputs, GEN_PREFIX + THINK_START, THINK_END + TEXT_START)

    def build(p: ChatPegBuilder):
        generation_prompt = p.literal(GEN_PREFIX)
        end = p.end()

        # the thinking block is always there: its body is the reasoning, or (markers included) content
        reasoning = p.eps()
        if extract_reasoning:
            reasoning = p.optional(
                plus(
                    lambda: p.literal(THINK_START),
                    lambda: p.reasoning(p.until_one_of([THINK_END, TEXT_START, ACTION_START])),
                    lambda: p.optional(p.literal(THINK_END)),
                )
            )
        else:
            reasoning = p.optional(
                p.content(
                    plus(
                        lambda: p.literal(THINK_START),
                        lambda: p.until_one_of([THINK_END, TEXT_START, ACTION_START]),
                        lambda: p.optional(p.literal(THINK_END)),
                    )
                )
            )

        if has_response_format:
            text_content = plus(
                lambda: p.literal(TEXT_START),
                lambda: p.content(p.schema(p.json(), "response-format-schema", inputs.json_schema)),
                lambda: p.optional(p.literal(TEXT_END)),
            )
        else:
            text_content = plus(
                lambda: p.literal(TEXT_START),
                lambda: p.content(p.until(TEXT_END)),
                lambda: p.optional(p.literal(TEXT_END)),
            )

        if not tools or inputs.tool_choice == "none":
            return plus(generation_prompt, reasoning, text_content, lambda: p.optional(p.literal(TURN_END)), end)

        require_tools = inputs.tool_choice == "required"
        tool_calls = p.standard_json_tools(
            ACTION_START,
            ACTION_END,
            inputs.tools,
            inputs.parallel_tool_calls,
            True,
            name_key="tool_name",
            args_key="parameters",
            array_wrapped=True,
            function_is_key=False,
            call_id_key="",
            gen_call_id_key="tool_call_id",
            parameters_order=("tool_call_id", "tool_name", "parameters"),
        )
        # content and tool calls are exclusive in this format
        body = tool_calls if require_tools else p.choice([tool_calls, text_content])
        return plus(generation_prompt, reasoning, body, lambda: p.optional(p.literal(TURN_END)), end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not has_response_format and inputs.tool_choice == "auto",
            [f["parameters"] for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, ACTION_START)],
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data
