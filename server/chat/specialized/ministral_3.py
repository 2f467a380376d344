"""Ministral 3 / Magistral / Mistral Large 3: common_chat_params_init_ministral_3() of b10621's
common/chat.cpp.

    [THINK]REASONING[/THINK]CONTENT[TOOL_CALLS]NAME[ARGS]{...}[TOOL_CALLS]NAME[ARGS]{...}

System and assistant messages are handed to the template as content blocks, the reasoning as a "thinking"
block (https://huggingface.co/mistralai/Ministral-3-14B-Reasoning-2512/blob/main/chat_template.jinja).
Parsers are created in the order b10621's GCC build creates them (their ids name grammar rules).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus


def adjust_messages(messages: list) -> list:
    """System and assistant messages with their reasoning and content as typed blocks."""
    out = []
    for msg in messages:
        if msg.get("role", "") not in ("system", "assistant"):
            out.append(msg)  # the system message may carry reasoning too
            continue
        content = []
        if isinstance(msg.get("reasoning_content"), str):
            content.append({"type": "thinking", "thinking": msg["reasoning_content"]})
        if "content" in msg:
            if isinstance(msg["content"], str):
                content.append({"type": "text", "text": msg["content"]})
            elif isinstance(msg["content"], list):
                content.extend(msg["content"])
        adjusted = dict(msg)
        adjusted["content"] = content
        adjusted.pop("reasoning_content", None)
        out.append(adjusted)
    return out


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    adjusted = adjust_messages(inputs.messages)
    with_tools = inputs.has_tools()
    with_response_format = inputs.has_response_format()
    extract_reasoning = inputs.reasoning_format != "none"

    data = kit.chat_params(tmpl, inputs, adjusted)
    data.supports_thinking = True
    data.thinking_start_tag = "[THINK]"
    data.thinking_end_tags = ["[/THINK]"]
    data.preserved_tokens = ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"]

    kit.continue_message(data, inputs, "[THINK]", "[/THINK]")

    include_grammar = True

    def build(p: ChatPegBuilder):
        nonlocal include_grammar
        gen_prefix = p.eps()
        if extract_reasoning:
            reasoning = p.optional(plus("[THINK]", lambda: p.reasoning(p.until("[/THINK]")), "[/THINK]"))
        else:
            reasoning = p.eps()

        if with_response_format:
            # Ministral writes its JSON in a code fence
            return gen_prefix + (
                reasoning << "```json" << p.content(p.schema(p.json(), "response-format", inputs.json_schema)) << "```"
            )

        if with_tools and inputs.tool_choice != "none":

            def tool_parser(name: str, schema: object):
                return plus(
                    lambda: p.tool_open(p.tool_name(p.literal(name)) + "[ARGS]"),
                    lambda: p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema)),
                )

            tool_choice = p.choice_of(
                kit.functions(inputs.tools),
                lambda f: p.rule(f"tool-{f['name']}", tool_parser(f["name"], f["parameters"])),
            )
            min_calls = 1 if inputs.tool_choice == "required" else 0
            max_calls = -1 if inputs.parallel_tool_calls else 1
            tool_calls = p.trigger_rule("tool-call", p.repeat("[TOOL_CALLS]" + tool_choice, min_calls, max_calls))
            return gen_prefix + (reasoning << p.content(p.until("[TOOL_CALLS]")) << tool_calls)

        include_grammar = False  # content only
        return gen_prefix + (reasoning << p.content(p.rest()))

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            with_tools and inputs.tool_choice == "auto",
            [f["parameters"] for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, "[TOOL_CALLS]")],
            response_format=inputs.json_schema if with_response_format else None,
        )
    return data
