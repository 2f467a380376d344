"""What b10621's specialized handlers (common/chat.cpp) share: the template render with its overrides
(common_chat_template_direct_apply_impl / common_chat_template_generation_prompt_impl), foreach_function,
common_chat_msg::render_content and the tool-call grammar they build around their parsers.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...grammar.json_schema import build_grammar
from ...peg import PegArena
from ..autoparser import ChatParams, GenerationParams
from ..autoparser.generator import _resolves_to_string
from ..autoparser.helpers import Template
from ..caps import template_caps
from ..messages import ChatMsg, normalize
from ..template import render

# common_grammar_trigger_type
TRIGGER_TOKEN = 0
TRIGGER_WORD = 1
TRIGGER_PATTERN = 2
TRIGGER_PATTERN_FULL = 3

__all__ = ["TRIGGER_PATTERN", "TRIGGER_WORD", "ChatParams", "apply", "functions", "generation_prompt_of",
           "has_tools", "render_content", "resolves_to_string", "tool_grammar"]


def apply(tmpl: Template, inputs: GenerationParams, messages: list | None = None, tools: list | None = None,
          additional_context: dict | None = None, add_generation_prompt: bool | None = None) -> str:
    """common_chat_template_direct_apply_impl(): `messages` replaces the inputs' messages as they are (no
    typed/string content normalization, as upstream's messages_override), `tools` the inputs' tools, and
    `additional_context` goes over the extra context."""
    agp = inputs.add_generation_prompt if add_generation_prompt is None else add_generation_prompt
    caps = tmpl.caps or template_caps(tmpl.source)
    ctx: dict = {"messages": messages if messages is not None else normalize(inputs.messages, caps),
                 "bos_token": tmpl.bos_token, "eos_token": tmpl.eos_token, "enable_thinking": inputs.enable_thinking}
    if tools is not None or inputs.tools:
        ctx["tools"] = tools if tools is not None else inputs.tools
    ctx.update(inputs.extra_context or {})
    ctx.update(additional_context or {})
    if agp:
        ctx["add_generation_prompt"] = True
    preserve = ctx.get("preserve_reasoning")
    if isinstance(preserve, bool):  # jinja::caps_apply_preserve_reasoning
        ctx.update(preserve_thinking=preserve, clear_thinking=not preserve, truncate_history_thinking=not preserve,
                   drop_thinking=not preserve)
    effort = ctx.get("reasoning_effort")
    if isinstance(effort, str) and effort:  # jinja::caps_apply_reasoning_effort
        ctx["reasoning_strength"] = effort
    out = render(tmpl.source, ctx.pop("messages"), add_generation_prompt=ctx.pop("add_generation_prompt", False),
                 tools=ctx.pop("tools", None), **ctx)
    if inputs.add_bos and tmpl.bos_token and out.startswith(tmpl.bos_token):
        out = out[len(tmpl.bos_token):]
    if inputs.add_eos and tmpl.eos_token and out.endswith(tmpl.eos_token):
        out = out[:len(out) - len(tmpl.eos_token)]
    return out


def generation_prompt_of(tmpl: Template, inputs: GenerationParams, messages: list | None = None,
                         tools: list | None = None, additional_context: dict | None = None) -> str:
    """common_chat_template_generation_prompt_impl(): what add_generation_prompt appends to the render."""
    without = apply(tmpl, inputs, messages, tools, additional_context, add_generation_prompt=False)
    with_prompt = apply(tmpl, inputs, messages, tools, additional_context, add_generation_prompt=True)
    n = 0
    for a, b in zip(without, with_prompt):
        if a != b:
            break
        n += 1
    return with_prompt[n:]


def functions(tools: list | None) -> list[dict]:
    """foreach_function(): the `function` objects of the tools of type "function"."""
    return [t["function"] for t in tools or []
            if isinstance(t, dict) and t.get("type") == "function" and "function" in t]


def has_tools(inputs: GenerationParams) -> bool:
    return isinstance(inputs.tools, list) and bool(inputs.tools)


def render_content(msg: ChatMsg) -> str:
    """common_chat_msg::render_content(): the content, or its text parts joined by blank lines."""
    if msg.content and msg.content_parts:
        raise RuntimeError("Cannot specify both content and content_parts")
    if msg.content:
        return msg.content
    return "\n\n".join(text for kind, text in msg.content_parts if kind == "text")


def resolves_to_string(schema: object, root: object) -> bool:
    """common_schema_info (refs resolved from `root`)::resolves_to_string(schema)."""
    return _resolves_to_string(schema, root)


def tool_grammar(parser: PegArena, lazy: bool, schemas: Iterable[object]) -> str:
    """build_grammar() of a handler: the tool (and response-format) schemas' refs resolved, then the parser's
    grammar, lazy or not."""
    schemas = list(schemas)

    def add_rules(builder) -> None:
        for schema in schemas:
            builder.resolve_refs(schema)
        parser.build_grammar(builder, lazy)

    return build_grammar(add_rules)
