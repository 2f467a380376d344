"""What the Qwen3-Coder, GPT-OSS, Gemma4 and Ministral 3 handlers of b10621's common/chat.cpp share: the
template renders (common_chat_template_direct_apply_impl / common_chat_template_generation_prompt_impl with
their messages override), foreach_function / foreach_parameter, common_schema_info::resolves_to_string,
common_chat_msg::render_content and the C++ operand order of `a + b` and `a | b`.
"""

from __future__ import annotations

from dataclasses import replace

from ...peg import alt, plus  # noqa: F401 - the handlers' operators
from ..autoparser.generator import GenerationParams
from ..autoparser.helpers import Template, direct_apply
from ..messages import ChatMsg

# a messages override is already built for the template: its content parts are left as they are
_NO_NORMALIZE = {"supports_string_content": True, "supports_typed_content": True}


def apply(tmpl: Template, inputs: GenerationParams, messages: list | None = None,
          add_generation_prompt: bool | None = None) -> str:
    """common_chat_template_direct_apply_impl(tmpl, inputs, messages_override)."""
    agp = inputs.add_generation_prompt if add_generation_prompt is None else add_generation_prompt
    if messages is None:
        messages = inputs.messages
    else:
        tmpl = replace(tmpl, caps=_NO_NORMALIZE)
    return direct_apply(tmpl, messages, inputs.tools, agp, inputs.enable_thinking, inputs.extra_context,
                        inputs.add_bos, inputs.add_eos)


def generation_prompt(tmpl: Template, inputs: GenerationParams, messages: list | None = None) -> str:
    """common_chat_template_generation_prompt_impl(): what add_generation_prompt appends to the render."""
    without = apply(tmpl, inputs, messages, False)
    with_prompt = apply(tmpl, inputs, messages, True)
    n = 0
    for a, b in zip(without, with_prompt):
        if a != b:
            break
        n += 1
    return with_prompt[n:]


def render_content(msg: ChatMsg) -> str:
    """common_chat_msg::render_content(): the content, or its text parts joined by blank lines."""
    if msg.content and msg.content_parts:
        raise RuntimeError("Cannot specify both content and content_parts")
    if msg.content:
        return msg.content
    return "\n\n".join(text for kind, text in msg.content_parts if kind == "text")


def has_tools(inputs: GenerationParams) -> bool:
    return isinstance(inputs.tools, list) and bool(inputs.tools)


def has_response_format(inputs: GenerationParams) -> bool:
    """`json_schema.is_object() && !json_schema.empty()` (GPT-OSS and Gemma4 take an empty object too: see
    there)."""
    return isinstance(inputs.json_schema, dict) and bool(inputs.json_schema)


def functions(tools: list | None) -> list[dict]:
    """foreach_function(): the tools of type function that have one."""
    return [t for t in tools or [] if isinstance(t, dict) and t.get("type") == "function" and "function" in t]


def parameters(function: dict) -> list[tuple[str, object, bool]]:
    """foreach_parameter(): (name, schema, required) of each property, in the schema's order."""
    params = function.get("parameters")
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return []
    required = params.get("required")
    required = set(required) if isinstance(required, list) else set()
    return [(name, prop, name in required) for name, prop in params["properties"].items()]


_STRING_FORMATS = ("date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6", "uuid")


def resolves_to_string(schema: object, root: object) -> bool:
    """common_schema_info::resolves_to_string() after resolve_refs(root): some branch of the schema permits a
    string (its type, a oneOf/anyOf alternative, all of an allOf, a string const or enum value, a string
    keyword, a string format, a local $ref into `root`)."""
    visited: set[str] = set()

    def resolve(ref: str) -> object:
        if not ref.startswith("#/"):
            return None  # nothing fetched: b10621 resolves no remote schema here
        target = root
        for sel in ref[2:].split("/"):
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list) and sel.isdigit() and int(sel) < len(target):
                target = target[int(sel)]
            else:
                return None
        return target

    def check(s: object) -> bool:
        if not isinstance(s, dict):
            return False
        if "$ref" in s:
            ref = s["$ref"]
            if ref in visited:  # circular: assume not a string
                return False
            visited.add(ref)
            return check(resolve(ref))
        kind = s.get("type")
        if kind == "string" or (isinstance(kind, list) and "string" in kind):
            return True
        if any(check(option) for key in ("oneOf", "anyOf") for option in s.get(key) or []):
            return True
        if "allOf" in s and all(check(c) for c in s["allOf"]):
            return True
        if isinstance(s.get("const"), str):
            return True
        if any(isinstance(v, str) for v in s.get("enum") or []):
            return True
        if "pattern" in s or "minLength" in s or "maxLength" in s:
            return True
        fmt = s.get("format")
        return isinstance(fmt, str) and (fmt in _STRING_FORMATS or fmt.startswith("uuid"))

    return check(schema)


# common_grammar_trigger_type PATTERN: where the regex (its first group) matches, the grammar starts
GRAMMAR_TRIGGER_TYPE_PATTERN = 2
