"""Qwen3-Coder's XML tool calls, also Nemotron Nano 3's, Qwen3.5's and StepFun-3.5-Flash's:
common_chat_params_init_qwen3_coder() of b10621's common/chat.cpp.

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    VALUE
    </parameter>
    </function>
    </tool_call>

A string-typed argument is raw text up to "\\n</parameter>\\n", any other a JSON value; the required
arguments come in any order, then the optional ones. Models that drop the first <tool_call> are read too.
Parsers are created in the order b10621's GCC build creates them (their ids name grammar rules).
"""

from __future__ import annotations

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, alt, plus

GEN_PREFIX = "<|im_start|>assistant\n"
ARG_CLOSE = "\n</parameter>\n"


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:  # noqa: C901
    data = kit.chat_params(tmpl, inputs)
    supports_reasoning = "<think>" in tmpl.source
    data.supports_thinking = supports_reasoning
    data.preserved_tokens = ["<tool_call>", "</tool_call>"]
    if supports_reasoning:
        data.thinking_start_tag = "<think>"
        # a tool call ends the reasoning too; <function= does not (Qwen3-Coder is no thinking model)
        data.thinking_end_tags = ["</think>", "<tool_call>"]
        data.preserved_tokens += ["<think>", "</think>"]
    # b10621 lists the tool role twice: "<|im_start|>user\n<tool_response>" (Qwen3-Coder, Qwen3.5,
    # Nemotron Nano 3) and "<|im_start|>tool_response" (StepFun-3.5-Flash); a dict keeps the first
    data.message_delimiters = {
        "assistant": "<|im_start|>assistant",
        "tool": "<|im_start|>user\n<tool_response>",
        "user": "<|im_start|>user",
        "system": "<|im_start|>system",
    }

    with_tools = inputs.has_tools()
    with_response_format = inputs.has_response_format()
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = with_response_format or (with_tools and inputs.tool_choice != "none")

    if inputs.has_continuation():
        msg = inputs.continue_msg
        data.generation_prompt = GEN_PREFIX
        if supports_reasoning:
            data.generation_prompt += "<think>\n" + msg.reasoning_content
            if inputs.continue_final_message == "content":
                data.generation_prompt += "\n</think>\n\n"
        if inputs.continue_final_message == "content":
            data.generation_prompt += kit.render_content(msg)
        data.prompt += data.generation_prompt

    # the whole <function=NAME> opener also starts a call, for models that leave out <tool_call>: a
    # hallucinated name beats constraining on "<function", which may be content (#include <functional>)
    tool_call_starts = ["<tool_call>"] + [f"<function={f['name']}>" for f in kit.functions(inputs.tools)]

    def build(p: ChatPegBuilder):
        gen_prefix = p.literal(GEN_PREFIX)
        reasoning = p.eps()
        if supports_reasoning and extract_reasoning:
            reasoning = p.optional(
                plus(
                    "<think>",
                    p.space,
                    lambda: p.reasoning(p.until_one_of(["</think>", "<tool_call>"])),
                    lambda: alt(lambda: p.literal("</think>"), lambda: p.peek(p.literal("<tool_call>"))),
                )
            )

        if with_response_format:
            schema = p.schema(p.json(), "response-format", inputs.json_schema)
            return gen_prefix + (reasoning << p.content(schema))

        if with_tools and inputs.tool_choice != "none":
            arg_close = p.tool_arg_close(p.literal(ARG_CLOSE))
            arg_string = p.rule(
                "xml-arg-string", p.ac(p.tool_arg_string_value(p.until(ARG_CLOSE)) + arg_close, ARG_CLOSE)
            )

            def arg_rule(name: str, param_name: str, param_schema: object, schema_root: object):
                rule_name = f"tool-{name}-arg-{param_name}"
                arg_open = p.tool_arg_open(plus("<parameter=", lambda: p.tool_arg_name(p.literal(param_name)), ">\n"))
                if kit.resolves_to_string(param_schema, schema_root):
                    arg_value = arg_string
                else:
                    arg_value = plus(
                        lambda: p.tool_arg_json_value(p.schema(p.json(), f"{rule_name}-schema", param_schema)),
                        arg_close,
                    )
                return p.rule(rule_name, p.tool_arg(arg_open + arg_value))

            def tool_parser(name: str, function: dict):
                schema_root = function.get("parameters", {})
                required_args, optional_args = [], []
                for param_name, param_schema, is_required in kit.parameters(function):
                    rule = arg_rule(name, param_name, param_schema, schema_root)
                    (required_args if is_required else optional_args).append(rule)
                # the required arguments in any order: Qwen does not always keep to the schema's
                args = p.permute(f"tool-{name}-args", required_args)
                if optional_args:
                    args = args + p.zero_or_more(p.choice(optional_args))
                return p.tool(
                    plus(
                        lambda: p.tool_open(plus("<function=", lambda: p.tool_name(p.literal(name)), ">\n")),
                        lambda: p.tool_args(args),
                        lambda: p.tool_close(p.literal("</function>\n")),
                    )
                )

            tool_choice = p.choice_of(
                kit.functions(inputs.tools), lambda f: p.rule(f"tool-{f['name']}", tool_parser(f["name"], f))
            )

            min_calls = 1 if inputs.tool_choice == "required" else 0
            # Qwen3-Coder models may leave out the first <tool_call>
            tool_call_body = plus(tool_choice, "</tool_call>", p.space)
            tool_call_first = p.rule(
                "tool-call-first", plus(lambda: p.optional(p.literal("<tool_call>\n")), tool_call_body)
            )
            tool_call = p.rule("tool-call", "<tool_call>\n" + tool_call_body)
            calls = tool_call_first
            if inputs.parallel_tool_calls:
                calls = tool_call_first + p.zero_or_more(tool_call)
            tool_calls = p.trigger_rule("tool-call-root", p.repeat(calls, min_calls, 1))
            return gen_prefix + ((reasoning << p.content(p.until_one_of(tool_call_starts))) << tool_calls)

        return gen_prefix + (reasoning << p.content(p.rest()))

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        lazy = with_tools and inputs.tool_choice == "auto"
        kit.add_grammar(
            data,
            lazy,
            [f.get("parameters", {}) for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, start) for start in tool_call_starts] if lazy else [],
            response_format=inputs.json_schema if with_response_format else None,
        )
    return data
