"""What a chat template supports (b10621's chat_template_caps), found as b10621's caps_get() (common/jinja/caps.cpp)
finds it: it renders probe conversations and watches which of their values the template reads, and how."""

from __future__ import annotations

from .template import render_usage

_TOOLS = [
    {  # caps.cpp's probe tool
        "name": "tool",
        "type": "function",
        "function": {
            "name": "tool1",
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
]


def _probe(source: str, messages: list, tools: list | None = None, extra: dict | None = None):
    """caps_try_execute(): (output or None, the rendered copy of the context, what the template read)."""
    context = {
        "messages": messages,
        "tools": tools or [],
        "bos_token": "",
        "eos_token": "",
        "add_generation_prompt": True,
        **(extra or {}),
    }
    return render_usage(source, context)


def _user(text: str = "User message") -> dict:
    return {"role": "user", "content": text}


def _tool_conversation(*arguments) -> list:
    """A user turn, the tool calls (content "", as some templates need), their result, a reply, a user turn."""
    calls = [
        {"id": f"call0000{i + 1}", "type": "function", "function": {"name": "tool1", "arguments": args}}
        for i, args in enumerate(arguments)
    ]
    return [
        _user(),
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        _user(),
    ]


def template_caps(source: str | None) -> dict[str, bool]:
    s = source or ""
    caps = {
        "supports_tools": True,
        "supports_tool_calls": True,
        "supports_system_role": True,
        "supports_parallel_tool_calls": True,
        "supports_preserve_reasoning": False,
        "supports_reasoning_effort": False,
        "supports_string_content": True,
        "supports_typed_content": False,
        "supports_object_arguments": False,
    }

    # typed content: the (string) content read as an array
    out, ctx, usage = _probe(s, [_user("STRING_MARKER")])
    content = ctx["messages"][0]["content"]
    as_array = usage.has_op(content, "selectattr") or usage.has_op(content, "array_access")
    caps["supports_typed_content"] = as_array
    if out is None or (as_array and "STRING_MARKER" not in out):
        caps["supports_string_content"] = False

    # system role: the system message's content read at all
    _, ctx, usage = _probe(s, [{"role": "system", "content": "System message"}, _user()])
    caps["supports_system_role"] = usage.is_used(ctx["messages"][0]["content"])

    # tools, with object arguments
    out, ctx, usage = _probe(s, _tool_conversation({"arg": "value"}), _TOOLS)
    if out is not None:  # a failure here proves nothing
        caps["supports_tools"] = usage.is_used(ctx["tools"][0]["function"]["name"])
        calls = ctx["messages"][1]["tool_calls"]
        if not usage.is_used(calls):
            caps["supports_tool_calls"] = False
        elif usage.is_used(calls[0]["function"]["arguments"]["arg"]):
            caps["supports_object_arguments"] = True
    if not caps["supports_object_arguments"]:  # tools, with string arguments
        out, ctx, usage = _probe(s, _tool_conversation('{"arg": "value"}'), _TOOLS)
        if out is None:
            caps["supports_tools"] = caps["supports_tool_calls"] = False
        else:
            if not usage.is_used(ctx["tools"][0]["function"]["name"]):
                caps["supports_tools"] = False
            if not usage.is_used(ctx["messages"][1]["tool_calls"]):
                caps["supports_tool_calls"] = False

    # parallel tool calls: the second call read
    args = {"arg": "value"} if caps["supports_object_arguments"] else '{"arg": "value"}'
    out, ctx, usage = _probe(s, _tool_conversation(args, args), _TOOLS)
    if out is None or not usage.is_used(ctx["messages"][1]["tool_calls"][1]["function"]):
        caps["supports_parallel_tool_calls"] = False

    # reasoning kept in the history: it shows in the output
    placeholder = "<REASONING_CONTENT_PLACEHOLDER>"
    history = [
        _user(),
        {"role": "assistant", "content": "Assistant message", "reasoning_content": placeholder},
        _user(),
        {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
        _user(),
    ]
    out, _, _ = _probe(
        s,
        history,
        extra={
            "enable_thinking": True,
            "preserve_thinking": True,
            "clear_thinking": False,
            "truncate_history_thinking": False,
            "drop_thinking": False,
        },
    )
    caps["supports_preserve_reasoning"] = out is not None and placeholder in out

    # reasoning effort: the variable read (upstream binds reasoning_strength to the same value)
    _, ctx, usage = _probe(
        s, [_user()], extra={"enable_thinking": True, "reasoning_effort": "low", "reasoning_strength": "low"}
    )
    caps["supports_reasoning_effort"] = usage.is_used(ctx["reasoning_effort"]) or usage.is_used(
        ctx["reasoning_strength"]
    )
    return dict(sorted(caps.items()))  # std::map order
