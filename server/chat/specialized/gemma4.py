"""Gemma 4: common_chat_params_init_gemma4() of b10621's common/chat.cpp, and the workaround it applies for
the templates that predate the official one (workaround::convert_tool_responses_gemma4).

    <|channel>thought
    REASONING<channel|>CONTENT<|tool_call>call:NAME{key:<|"|>string<|"|>,n:1}<tool_call|>

The arguments are Gemma's own dict syntax, turned into JSON by the peg-gemma4 mapper
(peg_mapper.ChatPegGemma4Mapper). Parsers are created in the order b10621's GCC build creates them
(their ids name grammar rules).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from ..peg_chat import FORMAT_PEG_GEMMA4, ChatPegBuilder, build_chat_peg_parser
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, alt, plus

log = logging.getLogger("mlxcel.chat")

OFFICIAL_TEMPLATE_MARK = "{#- OpenAI Chat Completions:"


# ------------------------------------------------------------------------------------------------------------
# workaround::convert_tool_responses_gemma4


def _reject_constant(name: str):
    raise ValueError(f"not JSON: {name}")


def _parse_json(text: str):
    """json::parse(): strict JSON (no NaN or Infinity)."""
    return json.loads(text, parse_constant=_reject_constant)


def _has_content(msg: dict) -> bool:
    content = msg.get("content")
    return (isinstance(content, str) and content != "") or (isinstance(content, list) and bool(content))


def _has_tool_calls(msg: dict) -> bool:
    return isinstance(msg.get("tool_calls"), list) and bool(msg["tool_calls"])


def _model_turn(messages: list, pos: int) -> tuple[dict, int]:  # noqa: C901
    """gemma4_model_turn_builder: an assistant message with tool calls, the tool results that follow it
    and the assistant's answer after them, as one assistant message with a tool_responses field."""
    tool_calls, tool_responses = [], []
    content = reasoning_content = None
    msg = messages[pos]
    if isinstance(msg.get("reasoning_content"), str):
        # the prompt formatting guide keeps the reasoning between function calls (the templates drop it)
        reasoning_content = msg["reasoning_content"]
    tool_calls.extend(msg["tool_calls"])
    pos += 1

    while pos < len(messages) and messages[pos].get("role", "") == "tool":
        curr = messages[pos]
        response = None
        if "content" in curr:
            response = curr["content"]
            if isinstance(response, str):
                try:  # JSON where it parses, the raw string otherwise
                    response = _parse_json(response)
                except ValueError:
                    pass
        name = ""
        idx = len(tool_responses)  # the call at the same position
        if idx < len(tool_calls) and isinstance(tool_calls[idx], dict) and "function" in tool_calls[idx]:
            name = tool_calls[idx]["function"].get("name", "")
        if not name:
            name = curr.get("tool_call_id", "")
        tool_responses.append({"name": name, "response": response})
        pos += 1

    if pos < len(messages) and messages[pos].get("role", "") == "assistant":
        nxt = messages[pos]
        if not _has_tool_calls(nxt) and _has_content(nxt):  # the final answer of the turn
            content = nxt["content"]
            pos += 1

    out: dict = {"role": "assistant", "tool_calls": tool_calls}
    if tool_responses:
        out["tool_responses"] = tool_responses
    if content is not None:
        out["content"] = content
    if reasoning_content is not None:
        out["reasoning_content"] = reasoning_content
    return out, pos


def convert_tool_responses(messages: list) -> list:
    """assistant(tool_call+) -> tool+ -> assistant(content) becomes assistant(content + tool_calls +
    tool_responses), the shape the older Gemma 4 templates read
    (https://ai.google.dev/gemma/docs/core/prompt-formatting-gemma4)."""
    result, i = [], 0
    while i < len(messages):
        msg = messages[i]
        if msg.get("role", "") != "assistant" or not _has_tool_calls(msg):
            result.append(msg)
            i += 1
            continue
        turn, i = _model_turn(messages, i)
        result.append(turn)
    return result


def prepare(template_source: str, inputs: GenerationParams) -> GenerationParams:
    """What common_chat_try_specialized_template() does to the messages of an outdated Gemma 4 template."""
    if OFFICIAL_TEMPLATE_MARK in template_source:
        return inputs
    log.warning(
        "detected an outdated gemma4 chat template, applying compatibility workarounds. Consider "
        "updating to the official template."
    )
    return replace(inputs, messages=convert_tool_responses(inputs.messages))


# ------------------------------------------------------------------------------------------------------------
# common_chat_params_init_gemma4


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    inputs = prepare(tmpl.source, inputs)
    data = kit.chat_params(tmpl, inputs, format=FORMAT_PEG_GEMMA4)
    if inputs.add_generation_prompt and data.prompt.endswith("<turn|>\n"):
        # after content + tool call the template opens no model turn, which keeps the model from its
        # reasoning sequence
        data.generation_prompt = "<|turn>model\n"
        data.prompt += data.generation_prompt

    data.message_delimiters = {"user": "<|turn>user", "assistant": "<|turn>model"}
    data.supports_thinking = True
    data.thinking_start_tag = "<|channel>thought"
    data.thinking_end_tags = ["<channel|>"]
    data.preserved_tokens = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|turn>"]

    turn = "<|turn>model\n" if data.prompt.endswith("<turn|>\n") else ""
    kit.continue_message(data, inputs, turn + "<|channel>thought\n", "<channel|>")

    with_tools = inputs.has_tools()
    with_response_format = isinstance(inputs.json_schema, dict)  # an empty object too
    include_grammar = with_response_format or (with_tools and inputs.tool_choice != "none")
    extract_reasoning = inputs.reasoning_format != "none"

    def build(p: ChatPegBuilder):
        start = p.rule("start", p.optional(p.literal("<|turn>model\n")))
        if extract_reasoning:
            p.rule(
                "thought",
                plus(
                    lambda: p.literal("<|channel>thought"),
                    p.space,
                    lambda: p.reasoning(p.until("<channel|>")),
                    lambda: p.literal("<channel|>"),
                ),
            )
        else:
            p.rule(
                "thought",
                p.content(
                    plus(
                        lambda: p.literal("<|channel>thought"),
                        p.space,
                        lambda: p.until("<channel|>"),
                        lambda: p.literal("<channel|>"),
                    )
                ),
            )

        consume_empty_channels = p.gbnf(
            p.zero_or_more(plus(lambda: p.literal("<|channel>"), lambda: p.negate(p.literal("thought")))), ""
        )
        thought = alt(
            lambda: plus(lambda: p.peek(p.literal("<|channel>")), consume_empty_channels, lambda: p.ref("thought")),
            lambda: p.negate(p.literal("<|channel>")),
        )

        if with_response_format:
            response_format = (
                p.literal("```json")
                << p.content(p.schema(p.json(), "response-format-schema", inputs.json_schema))
                << p.literal("```")
            )
            return start + p.optional(thought) + response_format

        if with_tools and inputs.tool_choice != "none":
            # Gemma 4's values; the rules match the traversal of gemma4_to_json() in the mapper
            p.rule("gemma4-string-content", p.until('<|"|>'))
            p.rule(
                "gemma4-string",
                plus(lambda: p.literal('<|"|>'), lambda: p.ref("gemma4-string-content"), lambda: p.literal('<|"|>')),
            )
            p.rule("gemma4-bool", p.json_bool())
            p.rule("gemma4-null", p.json_null())
            p.rule("gemma4-number", p.json_number())
            p.rule(
                "gemma4-dict-key",
                plus(lambda: p.rule("gemma4-dict-key-name", p.chars("[^:}]", 1, -1)), lambda: p.literal(":")),
            )
            p.rule("gemma4-dict-kv", plus(lambda: p.ref("gemma4-dict-key"), p.space, lambda: p.ref("gemma4-value")))

            def container(opening: str, closing: str, element: str):
                def build_container():
                    ws = p.space()
                    item = p.ref(element)
                    items = p.sequence([item, p.zero_or_more(p.sequence([p.literal(","), ws, item]))])
                    closed = p.choice([p.literal(closing), p.sequence([items, ws, p.literal(closing)])])
                    return p.sequence([p.literal(opening), ws, closed])

                return build_container

            p.rule("gemma4-dict", container("{", "}", "gemma4-dict-kv"))
            p.rule("gemma4-array", container("[", "]", "gemma4-value"))
            p.rule(
                "gemma4-value",
                lambda: p.choice(
                    [
                        p.ref("gemma4-string"),
                        p.ref("gemma4-dict"),
                        p.ref("gemma4-array"),
                        p.ref("gemma4-number"),
                        p.ref("gemma4-bool"),
                        p.ref("gemma4-null"),
                    ]
                ),
            )

            def tool_parser(name: str):
                # the arguments are not held to the schema (json-schema-to-grammar writes JSON rules only)
                return p.tool(
                    p.sequence(
                        [
                            p.tool_open(plus(lambda: p.tool_name(p.literal(name)), lambda: p.peek(p.literal("{")))),
                            p.tool_args(p.ref("gemma4-dict")),
                        ]
                    )
                )

            tool_choice = p.choice_of(
                kit.functions(inputs.tools), lambda f: p.rule(f"tool-{f['name']}", tool_parser(f["name"]))
            )

            tool_call = p.trigger_rule(
                "tool-call",
                p.repeat(
                    "<|tool_call>call:" + tool_choice + "<tool_call|>",
                    1 if inputs.tool_choice == "required" else 0,
                    -1 if inputs.parallel_tool_calls else 1,
                ),
            )
            scan_to_toolcall = p.rule("scan-to-toolcall", p.until("<|tool_call>"))
            content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>", "<|tool_call>"])))
            message = p.rule("message", thought + content)
            return start + p.zero_or_more(message) + scan_to_toolcall + tool_call

        # Gemma 4 may end its content with an extra <|channel>thought\n<channel|>, or a lone <channel|>:
        # every complete reasoning block is consumed, and the content stops at an unmatched <channel|>
        content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>"])))
        message = p.rule("message", thought + content)
        return start + p.one_or_more(message)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not (with_response_format or (with_tools and inputs.tool_choice == "required")),
            [f["parameters"] for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, "<|tool_call>")],
            response_format=inputs.json_schema if with_response_format else None,
        )
    return data
