"""What b10621's specialized handlers (common/chat.cpp) share: the request renders with their overrides
(common_chat_template_direct_apply_impl / common_chat_template_generation_prompt_impl), foreach_function /
foreach_parameter, common_chat_msg::render_content and common_schema_info::resolves_to_string (all of them
shared with the autoparser: server/chat/autoparser/helpers.py), a handler's chat params with the continued
message, the grammar trigger types, the tool-call grammar built around a handler's parser, and the parsers
several handlers build alike (XML arguments, a spaced tool-call section, a fenced JSON response).

Parsers are created in the order of b10621's GCC build: the operands of a C++ `a + b` or `a | b` right to
left (server.peg.plus / alt), of `<<` and braced lists left to right.
"""

from __future__ import annotations

from ...peg import PegParser, alt, plus
from ..autoparser.generator import ChatParams, GenerationParams, add_grammar, tool_grammar
from ..autoparser.helpers import (
    Template,
    apply,
    functions,
    generation_prompt_of,
    parameters,
    render_content,
    resolves_to_string,
)
from ..peg_chat import ChatPegBuilder

# common_grammar_trigger_type
TRIGGER_TOKEN = 0
TRIGGER_WORD = 1
TRIGGER_PATTERN = 2
TRIGGER_PATTERN_FULL = 3

__all__ = [
    "TRIGGER_PATTERN",
    "TRIGGER_PATTERN_FULL",
    "TRIGGER_TOKEN",
    "TRIGGER_WORD",
    "ChatParams",
    "GenerationParams",
    "Template",
    "add_grammar",
    "alt",
    "apply",
    "chat_params",
    "continue_message",
    "fenced_json_response",
    "functions",
    "generation_prompt_of",
    "parameters",
    "plus",
    "render_content",
    "resolves_to_string",
    "spaced_tool_calls",
    "string_or_json_args",
    "tool_grammar",
]


def chat_params(
    tmpl: Template,
    inputs: GenerationParams,
    messages: list | None = None,
    additional_context: dict | None = None,
    **fields,
) -> ChatParams:
    """A handler's common_chat_params: the request's prompt and generation prompt (rendered with the
    messages override and additional context), and `fields`."""
    return ChatParams(
        prompt=apply(tmpl, inputs, messages, additional_context),
        generation_prompt=generation_prompt_of(tmpl, inputs, messages, additional_context),
        **fields,
    )


def continue_message(data: ChatParams, inputs: GenerationParams, reasoning_prefix: str, content_prefix: str) -> None:
    """The continued message (continue_final_message) written after the prompt as the model would have
    written it: `reasoning_prefix` and its reasoning, then, when its content is continued too,
    `content_prefix` and its content; the generation prompt becomes all of that."""
    if not inputs.has_continuation():
        return
    msg = inputs.continue_msg
    data.generation_prompt = reasoning_prefix + msg.reasoning_content
    if inputs.continue_final_message == "content":
        data.generation_prompt += content_prefix + render_content(msg)
    data.prompt += data.generation_prompt


def string_or_json_args(
    p: ChatPegBuilder, function: dict, string_value: PegParser, arg_open: str, arg_close: str
) -> PegParser:
    """The arguments of MiniCPM5's and Muse Glimmer's XML calls: any number of `<arg_open>NAME">VALUE`, in
    any order, each followed by space(). A value whose schema resolves to a string is `string_value` (which
    reads its closer too), any other a JSON value then `arg_close`."""
    name = function["name"]
    params = function.get("parameters", {})
    args = p.eps()
    properties = params.get("properties") if isinstance(params, dict) else None
    if not isinstance(properties, dict) or not properties:
        return args

    def arg(prop: tuple[str, object]) -> PegParser:
        prop_name, prop_schema = prop
        is_string = resolves_to_string(prop_schema, params)
        value = p.eps()  # upstream's placeholder, kept for the parser ids
        if is_string:
            value = string_value
        else:
            schema_name = f"tool-{name}-arg-{prop_name}-schema"
            value = plus(
                lambda: p.tool_arg_json_value(p.schema(p.json(), schema_name, prop_schema, False)),
                lambda: p.tool_arg_close(p.literal(arg_close)),
            )
        return p.tool_arg(
            plus(
                lambda: p.tool_arg_open(
                    plus(
                        lambda: p.literal(arg_open),
                        lambda: p.tool_arg_name(p.literal(prop_name)),
                        lambda: p.literal('">'),
                    )
                ),
                value,
            )
        )

    return p.zero_or_more(p.choice_of(properties.items(), arg) + p.space())


def spaced_tool_calls(p: ChatPegBuilder, start: str, end: str, tool_choice: PegParser, parallel: bool) -> PegParser:
    """The trigger rule "tool-call": `start`, one call (or, with parallel calls, one or more), `end`, with
    space() between them."""
    p.eps()  # upstream's placeholder, kept for the parser ids
    calls = (tool_choice, lambda: p.zero_or_more(p.space() + tool_choice)) if parallel else (tool_choice,)
    return p.trigger_rule("tool-call", plus(lambda: p.literal(start), p.space, *calls, p.space, lambda: p.literal(end)))


def fenced_json_response(p: ChatPegBuilder, schema: object) -> PegParser:
    """The rule "response-format": the response format's JSON as content, in a ```json code fence."""
    return p.rule(
        "response-format",
        plus(
            lambda: p.literal("```json"),
            p.space,
            lambda: p.content(p.schema(p.json(), "response-format-schema", schema)),
            p.space,
            lambda: p.literal("```"),
        ),
    )
