"""What a chat template supports (b10621's chat_template_caps), found by rendering probe conversations.

b10621 (common/jinja/caps.cpp) watches how the template uses each value; mlxcel renders a probe per
capability and looks for its marker in the output, which agrees on the templates it has been compared on.
"""

from __future__ import annotations

from .template import TemplateError, render

_USER = {"role": "user", "content": "USER_MARKER"}


def _call(name: str, arguments) -> dict:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


_TOOL = {
    "type": "function",
    "function": {
        "name": "tool_marker_fn",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _renders(source: str, messages: list, marker: str | tuple[str, ...], **kw) -> bool:
    try:
        out = render(source, messages, **kw)
    except TemplateError:
        return False
    markers = (marker,) if isinstance(marker, str) else marker
    return all(m in out for m in markers)


def template_caps(source: str | None) -> dict[str, bool]:
    s = source or ""
    calls = [_call("call_marker_a", '{"arg_marker": 1}'), _call("call_marker_b", '{"arg_marker": 2}')]
    assistant = {"role": "assistant", "content": None, "tool_calls": calls[:1]}
    parallel = {"role": "assistant", "content": None, "tool_calls": calls}
    objects = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_marker_a", {"obj_marker": 1})],
    }
    reasoning = {"role": "assistant", "content": "done", "reasoning_content": "REASONING_MARKER"}
    caps = {
        "supports_object_arguments": _renders(s, [_USER, objects, _USER], "obj_marker"),
        "supports_parallel_tool_calls": _renders(
            s, [_USER, parallel, _USER], ("call_marker_a", "call_marker_b")
        ),
        "supports_preserve_reasoning": _renders(s, [_USER, reasoning, _USER], "REASONING_MARKER"),
        "supports_reasoning_effort": "reasoning_effort" in s,
        "supports_string_content": _renders(s, [_USER], "USER_MARKER"),
        "supports_system_role": _renders(
            s, [{"role": "system", "content": "SYSTEM_MARKER"}, _USER], "SYSTEM_MARKER"
        ),
        "supports_tool_calls": _renders(s, [_USER, assistant, _USER], "call_marker_a"),
        "supports_tools": _renders(s, [_USER], "tool_marker_fn", tools=[_TOOL]),
        "supports_typed_content": _renders(
            s, [{"role": "user", "content": [{"type": "text", "text": "TYPED_MARKER"}]}], "TYPED_MARKER"
        ),
    }
    return dict(sorted(caps.items()))  # std::map order
