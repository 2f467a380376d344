"""GPT-OSS's harmony channels: common_chat_params_init_gpt_oss() of b10621's common/chat.cpp.

    <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>final<|message|>CONTENT

A tool call names its recipient in the role header or in the channel header:

    <|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>ARGS
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS

Parsers are created in the order b10621's GCC build creates them (their ids name grammar rules).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, alt, plus

TRIGGERS = [
    "^\\s+to$",
    "^<\\|channel\\|>(?:commentary|analysis)\\s+to=functions$",
    "<\\|start\\|>assistant(\\s+to)",
    "<\\|start\\|>assistant(<\\|channel\\|>(?:commentary|analysis)\\s+to)",
]


def adjust_messages(messages: list) -> list:
    """The reasoning copied to the "thinking" field the template reads; a message with tool calls and
    reasoning loses its content."""
    out = []
    for msg in messages:
        msg = dict(msg)
        if isinstance(msg.get("reasoning_content"), str):
            msg["thinking"] = msg["reasoning_content"]
            if isinstance(msg.get("tool_calls"), list) and msg["tool_calls"]:
                msg.pop("content", None)
        out.append(msg)
    return out


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:  # noqa: C901
    adjusted = adjust_messages(inputs.messages)
    prompt = kit.apply(tmpl, inputs, adjusted)
    # a rendered history ends its last answer with <|return|>; during inference it is an <|end|>
    # (https://github.com/ggml-org/llama.cpp/issues/15417)
    if getattr(inputs, "is_inference", True) and not inputs.add_generation_prompt:
        at = prompt.rfind("<|return|>")
        if at >= 0:
            prompt = prompt[:at] + "<|end|>" + prompt[at + len("<|return|>") :]

    data = ChatParams(prompt=prompt, generation_prompt=kit.generation_prompt_of(tmpl, inputs, adjusted))
    # b10621 lists two system delimiters (developer, then system); a dict keeps the first
    data.message_delimiters = {
        "assistant": "<|start|>assistant",
        "user": "<|start|>user",
        "system": "<|start|>developer",
        "tool": "<|start|>functions",
    }
    data.supports_thinking = True
    data.thinking_start_tag = "<|channel|>analysis<|message|>"
    data.thinking_end_tags = ["<|end|>"]
    # needed to parse, so preserved even when no tool call is parsed
    data.preserved_tokens = ["<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"]

    kit.continue_message(
        data,
        inputs,
        "<|start|>assistant<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant<|channel|>final<|message|>",
    )

    with_tools = inputs.has_tools()
    with_response_format = isinstance(inputs.json_schema, dict)  # an empty object too
    include_grammar = with_response_format or (with_tools and inputs.tool_choice != "none")
    extract_reasoning = inputs.reasoning_format != "none"

    def build(p: ChatPegBuilder):
        start = p.rule("start", p.literal("<|start|>assistant"))
        end = p.rule("end", p.literal("<|end|>"))
        content = p.rule("message-content", p.until("<|end|>"))
        channel = plus(
            lambda: p.literal("<|channel|>"),
            lambda: alt(lambda: p.literal("commentary"), lambda: p.literal("analysis")),
        )
        constrain_type = p.chars("[A-Za-z0-9_-]", 1, -1)

        # gpt-oss-20b occasionally prefixes a channel with this commentary
        stray_commentary = p.optional(
            plus(lambda: p.literal("<|channel|>commentary"), lambda: p.optional(p.literal(" to=assistant")))
        )
        start_analysis = stray_commentary + p.literal("<|channel|>analysis<|message|>")

        if extract_reasoning:
            p.rule("analysis", plus(start_analysis, lambda: p.reasoning(content), end))
        else:
            p.rule("analysis", p.content(plus(start_analysis, content, end)))

        analysis = p.ref("analysis")
        preamble = p.rule(
            "preamble", plus(lambda: p.literal("<|channel|>commentary<|message|>"), lambda: p.content(content), end)
        )
        final_msg = p.rule(
            "final",
            plus(stray_commentary, lambda: p.literal("<|channel|>final<|message|>"), lambda: p.content(content)),
        )
        # unsolicited tool calls (builtin functions) are consumed
        unsolicited = p.rule(
            "unsolicited", p.atomic(plus(lambda: p.optional(channel), lambda: p.literal(" to="), content, end))
        )
        any_ = p.rule("any", preamble | analysis)

        def constraint():
            return p.optional(plus(p.space, lambda: p.optional(p.literal("<|constrain|>")), constrain_type))

        if with_response_format:
            constraint_ = constraint()
            response_format = p.rule(
                "response-format",
                plus(
                    lambda: p.literal("<|channel|>final"),
                    constraint_,
                    lambda: p.literal("<|message|>"),
                    lambda: p.content(p.schema(p.json(), "response-format-schema", inputs.json_schema)),
                ),
            )
            return plus(lambda: p.zero_or_more(start + analysis), start, response_format)

        if with_tools and inputs.tool_choice != "none":

            def tool_parser(name: str, schema: object):
                func_name = plus(lambda: p.literal(" to=functions."), lambda: p.tool_name(p.literal(name)))
                constraint_ = constraint()
                args = p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema))
                # recipient in the role header:
                #   <|start|>assistant to=functions.NAME<|channel|>(commentary|analysis)[constraint]
                #   <|message|>ARGS
                tool_in_role = p.tool(
                    p.tool_open(plus(func_name, channel, constraint_, lambda: p.literal("<|message|>"))) + args
                )
                # recipient in the channel header:
                #   <|channel|>(commentary|analysis) to=functions.NAME[constraint]<|message|>ARGS
                tool_in_channel = p.tool(
                    p.tool_open(plus(channel, func_name, constraint_, lambda: p.literal("<|message|>"))) + args
                )
                return tool_in_role | tool_in_channel

            tool_choice = p.choice_of(
                kit.functions(inputs.tools),
                lambda f: p.rule(f"tool-{f['name']}", tool_parser(f["name"], f["parameters"])),
            )

            tool_call = p.trigger_rule("tool-call", tool_choice)
            if inputs.tool_choice == "required":
                return plus(lambda: p.zero_or_more(start + any_), start, tool_call)
            return plus(lambda: p.zero_or_more(start + any_), start, lambda: tool_call | final_msg)

        return plus(lambda: p.zero_or_more(start + any_), start, lambda: final_msg | unsolicited)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not (with_response_format or (with_tools and inputs.tool_choice == "required")),
            [f["parameters"] for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_PATTERN, t) for t in TRIGGERS],
            response_format=inputs.json_schema if with_response_format else None,
        )
    return data
