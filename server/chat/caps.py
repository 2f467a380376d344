"""What a chat template supports (b10621's chat_template_caps), found by rendering probe conversations.

b10621 (common/jinja/caps.cpp) watches how the template uses each value; mlxcel renders a probe per
capability and looks for its marker in the output, which agrees on the templates it has been compared on.
"""

from __future__ import annotations

from .template import TemplateError, render

_USER = {"role": "user", "content": "USER_MARKER"}


def _call(name: str, arguments, call_id: str = "call00001") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


_TOOL = {  # b10621's probe tool, its function renamed to a marker
    "name": "tool",
    "type": "function",
    "function": {
        "name": "tool_marker_fn",
        "description": "Tool description",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
                       "required": ["arg"]},
    },
}


def _try_render(source: str, messages: list, tools: list | None = None) -> str | None:
    """A probe rendered in b10621's probe context: empty BOS/EOS, generation prompt on, a tool list always."""
    try:
        return render(source, messages, add_generation_prompt=True, tools=tools or [], bos_token="", eos_token="")
    except TemplateError:
        return None


def _renders(source: str, messages: list, marker: str | tuple[str, ...], tools: list | None = None) -> bool:
    out = _try_render(source, messages, tools)
    markers = (marker,) if isinstance(marker, str) else marker
    return out is not None and all(m in out for m in markers)


def _tool_conversation(*calls: dict) -> list:
    """b10621's tool probes: the calls (content "", as some templates need), their result, a reply, a user turn."""
    return [_USER, {"role": "assistant", "content": "", "tool_calls": list(calls)},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"}, _USER]


def _tool_caps(source: str) -> dict[str, bool]:
    """The tool capabilities the way b10621's caps_get() settles them: assumed until a probe shows otherwise."""
    caps = {"supports_tools": True, "supports_tool_calls": True, "supports_object_arguments": False,
            "supports_parallel_tool_calls": True}
    out = _try_render(source, _tool_conversation(_call("call_marker_a", {"arg": "obj_marker"})), tools=[_TOOL])
    if out is not None:  # a failure here proves nothing
        caps["supports_tools"] = "tool_marker_fn" in out
        if "call_marker_a" not in out:
            caps["supports_tool_calls"] = False
        else:
            caps["supports_object_arguments"] = "obj_marker" in out
    if not caps["supports_object_arguments"]:
        out = _try_render(source, _tool_conversation(_call("call_marker_a", '{"arg": "value"}')), tools=[_TOOL])
        if out is None:
            caps["supports_tools"] = caps["supports_tool_calls"] = False
        else:
            caps["supports_tools"] &= "tool_marker_fn" in out
            caps["supports_tool_calls"] &= "call_marker_a" in out
    args = {"arg": "value"} if caps["supports_object_arguments"] else '{"arg": "value"}'
    calls = (_call("call_marker_a", args), _call("call_marker_b", args, "call00002"))
    caps["supports_parallel_tool_calls"] = _renders(source, _tool_conversation(*calls), "call_marker_b",
                                                    tools=[_TOOL])
    return caps


def template_caps(source: str | None) -> dict[str, bool]:
    s = source or ""
    reasoning = {"role": "assistant", "content": "done", "reasoning_content": "REASONING_MARKER"}
    caps = {
        "supports_preserve_reasoning": _renders(s, [_USER, reasoning, _USER], "REASONING_MARKER"),
        "supports_reasoning_effort": "reasoning_effort" in s,
        "supports_string_content": _renders(s, [_USER], "USER_MARKER"),
        "supports_system_role": _renders(
            s, [{"role": "system", "content": "SYSTEM_MARKER"}, _USER], "SYSTEM_MARKER"
        ),
        "supports_typed_content": _renders(
            s, [{"role": "user", "content": [{"type": "text", "text": "TYPED_MARKER"}]}], "TYPED_MARKER"
        ),
        **_tool_caps(s),
    }
    return dict(sorted(caps.items()))  # std::map order
