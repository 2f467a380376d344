"""DeepSeek V3.2 / V4 (common_chat_params_init_deepseek_v3_2 and deepseek_v4_sort_tool_results of b10621's
common/chat.cpp): <think> reasoning and DSML tool calls,

    <｜DSML｜function_calls>            (V4: <｜DSML｜tool_calls>)
    <｜DSML｜invoke name="f">
    <｜DSML｜parameter name="k" string="true|false">value</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V4 also renders tool results in the order of the calls they answer, takes a response format into the
template, and its non-thinking generation prompt ends with a bare </think>.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

import copy

from ..peg_chat import ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

DSML = "｜DSML｜"
THINK_START = "<think>"
THINK_END = "</think>"
GEN_PROMPT = "<｜Assistant｜>"
TC_SEPARATOR = "\n\n"
INVOKE_START = "<" + DSML + "invoke"
INVOKE_END = "</" + DSML + "invoke>"
PARAM_START = "<" + DSML + "parameter"
PARAM_END = "</" + DSML + "parameter>"


def sort_tool_results(messages: list) -> list:  # noqa: C901
    """deepseek_v4_sort_tool_results(): each run of user/tool messages (one user block in the render) has its
    tool results stably reordered by the position of their tool_call_id among the calls of the assistant
    message before them (an unknown id counts as the first)."""
    adjusted = copy.deepcopy(messages)
    call_order: dict[str, int] = {}
    i = 0
    while i < len(adjusted):
        msg = adjusted[i]
        role = msg.get("role", "")
        calls = msg.get("tool_calls")
        if role == "assistant" and isinstance(calls, list) and calls:
            call_order.clear()
            for idx, call in enumerate(calls):
                call_id = call.get("id", "") if isinstance(call, dict) else ""
                if call_id:
                    call_order[call_id] = idx
            i += 1
            continue
        if role not in ("user", "tool"):
            i += 1
            continue
        # a maximal run of user/tool messages renders into one user block
        tool_positions = []
        run_end = i
        while run_end < len(adjusted):
            r = adjusted[run_end].get("role", "")
            if r == "tool":
                tool_positions.append(run_end)
            elif r != "user":
                break
            run_end += 1
        if len(tool_positions) > 1 and call_order:
            results = [adjusted[pos] for pos in tool_positions]
            results.sort(key=lambda m: call_order.get(m.get("tool_call_id", ""), 0))
            for pos, result in zip(tool_positions, results, strict=False):
                adjusted[pos] = result
        i = run_end
    return adjusted


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:  # noqa: C901
    is_v4 = "function_calls" not in tmpl.source
    adjusted_messages = sort_tool_results(inputs.messages) if is_v4 else None

    tools = inputs.has_tools()
    has_response_format = isinstance(inputs.json_schema, dict)
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = has_response_format or (tools and inputs.tool_choice != "none")
    additional_context = {"response_format": inputs.json_schema} if is_v4 and has_response_format else None

    tc_block = "tool_calls" if is_v4 else "function_calls"
    fc_start = "<" + DSML + tc_block + ">"
    fc_end = "</" + DSML + tc_block + ">"

    data = kit.chat_params(
        tmpl,
        inputs,
        adjusted_messages,
        additional_context,
        supports_thinking=True,
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END, fc_start],
        preserved_tokens=[DSML, THINK_START, THINK_END],
    )

    if is_v4 and inputs.has_continuation() and not inputs.continue_msg.reasoning_content:
        kit.continue_message(data, inputs, GEN_PROMPT + THINK_END, "")
    else:
        kit.continue_message(data, inputs, GEN_PROMPT + THINK_START, THINK_END)

    require_tools = inputs.tool_choice == "required"
    has_tool_calls = tools and inputs.tool_choice != "none"

    def build(p: ChatPegBuilder):
        generation_prompt = p.literal(GEN_PROMPT)
        end = p.end()

        # the tool call section comes first: the reasoning may need it
        tool_choice = p.choice_of(kit.functions(inputs.tools) if has_tool_calls else [], lambda f: _tool_parser(p, f))

        tool_calls = kit.spaced_tool_calls(p, fc_start, fc_end, tool_choice, inputs.parallel_tool_calls)

        reasoning = p.eps()
        reasoning_with_tc = p.eps()
        obligatory_tool_calls = tool_calls
        allow_reasoning_with_tc = False

        if not require_tools:
            tool_calls = p.optional(tool_calls)

        if extract_reasoning and inputs.enable_thinking:
            reasoning = p.optional(plus(THINK_START, lambda: p.reasoning(p.until(THINK_END)), THINK_END))
            reasoning_with_tc = plus(
                THINK_START,
                lambda: p.reasoning(p.until_one_of([TC_SEPARATOR + fc_start, fc_start, THINK_END])),
                p.space,
                obligatory_tool_calls,
            )
            allow_reasoning_with_tc = True
        elif extract_reasoning:
            # thinking off: the generation prompt's empty <think></think> (V3.2) or bare </think> (V4) is
            # still consumed
            if is_v4:
                reasoning = p.optional(p.literal(THINK_END))
            else:
                reasoning = p.optional(
                    plus(lambda: p.literal(THINK_START), lambda: p.until(THINK_END), lambda: p.literal(THINK_END))
                )

        if has_response_format:
            response_format = kit.fenced_json_response(p, inputs.json_schema)
            return plus(generation_prompt, reasoning, response_format, end)

        if not has_tool_calls:
            return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), end)

        content_before_tools = plus(
            lambda: p.negate(p.literal(THINK_START)),
            lambda: p.content(p.until_one_of([TC_SEPARATOR + fc_start, fc_start])),
            p.space,
        )
        if allow_reasoning_with_tc:
            return plus(
                generation_prompt, lambda: reasoning_with_tc | (reasoning + content_before_tools + tool_calls), end
            )
        return plus(generation_prompt, reasoning, content_before_tools, tool_calls, end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            tools and not require_tools,
            [f.get("parameters", {}) for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, fc_start)],
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data


def _tool_parser(p: ChatPegBuilder, function: dict):
    """One <｜DSML｜invoke name="..."> call: the required parameters in schema order, then the optional ones
    in any order; a parameter whose schema resolves to a string is raw text, any other a JSON value."""
    name = function["name"]
    params = function.get("parameters", {})
    props = params.get("properties", {})
    required = set(params.get("required", []))

    required_parsers, optional_parsers = [], []
    for param_name, param_schema in props.items():
        is_string = kit.resolves_to_string(param_schema, params)
        named_arg = _arg_parser(p, name, param_name, param_schema, is_string)
        (required_parsers if param_name in required else optional_parsers).append(named_arg)

    args_seq = p.required_then_any_optional(required_parsers, optional_parsers)
    func_parser = p.tool(
        plus(
            lambda: p.tool_open(
                plus(
                    lambda: p.literal(INVOKE_START + ' name="'),
                    lambda: p.tool_name(p.literal(name)),
                    lambda: p.literal('">\n'),
                )
            ),
            args_seq,
            p.space,
            lambda: p.tool_close(p.literal(INVOKE_END)),
        )
    )
    return p.rule(f"tool-{name}", func_parser)


def _arg_parser(p: ChatPegBuilder, name: str, param_name: str, param_schema: object, is_string: bool):
    """<｜DSML｜parameter name="k" string="true|false">value</｜DSML｜parameter>: raw text for a string, a JSON
    value otherwise."""

    def value():
        if is_string:
            return p.tool_arg_string_value(p.until(PARAM_END))
        return p.tool_arg_json_value(p.schema(p.json(), f"tool-{name}-arg-{param_name}-schema", param_schema, False))

    string_attr = "true" if is_string else "false"
    arg = p.tool_arg(
        plus(
            lambda: p.tool_arg_open(
                plus(
                    lambda: p.literal(PARAM_START + ' name="'),
                    lambda: p.tool_arg_name(p.literal(param_name)),
                    lambda: p.literal(f'" string="{string_attr}">'),
                )
            ),
            value,
            lambda: p.tool_arg_close(p.literal(PARAM_END)),
        )
    )
    return p.rule(f"tool-{name}-arg-{param_name}", arg)
