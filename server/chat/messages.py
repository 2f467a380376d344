"""OpenAI chat messages as b10621 reads them (common_chat_msgs_parse_oaicompat) and hands them to a template
(common_chat_msg::to_json_oaicompat, messages_inp_normalizer and the template workarounds of common/chat.cpp)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import type_error


def dump(value) -> str:
    """nlohmann's compact dump(), as upstream's messages quote the offending JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ToolCall:
    name: str
    arguments: str
    id: str = ""


@dataclass
class ChatMsg:
    role: str
    content: str = ""
    content_parts: list[tuple[str, str]] = field(default_factory=list)  # (type, text)
    reasoning_content: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def _string(v, what: str) -> str:
    if not isinstance(v, str):
        raise ValueError(type_error("string", v))
    return v


def _at(obj: dict, key: str):
    if key not in obj:
        raise ValueError(f"[json.exception.out_of_range.403] key '{key}' not found")
    return obj[key]


def _parse_one(message) -> ChatMsg:  # noqa: C901
    if not isinstance(message, dict):
        raise ValueError(f"Expected 'message' to be an object, got {dump(message)}")
    if "role" not in message:
        raise ValueError(f"Missing 'role' in message: {dump(message)}")
    msg = ChatMsg(role=_string(message["role"], "role"))
    has_content, has_calls = "content" in message, "tool_calls" in message
    if has_content:
        content = message["content"]
        if isinstance(content, str):
            msg.content = content
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or "type" not in part:
                    raise ValueError(f"Missing content part type: {dump(part)}")
                if part["type"] not in ("text", "media_marker"):
                    raise ValueError(f"Unsupported content part type: {dump(part['type'])}")
                msg.content_parts.append((part["type"], _string(_at(part, "text"), "text")))
        elif content is not None:
            raise ValueError(
                f"Invalid 'content' type: expected string or array, got {dump(content)} "
                "(ref: https://github.com/ggml-org/llama.cpp/issues/8367)"
            )
    if has_calls:
        for call in message["tool_calls"] or []:
            if not isinstance(call, dict) or "type" not in call:
                raise ValueError(f"Missing tool call type: {dump(call)}")
            if call["type"] != "function":
                raise ValueError(f"Unsupported tool call type: {dump(call)}")
            if "function" not in call:
                raise ValueError(f"Missing tool call function: {dump(call)}")
            fn = call["function"]
            if not isinstance(fn, dict) or "name" not in fn:
                raise ValueError(f"Missing tool call name: {dump(call)}")
            args = _at(fn, "arguments")
            msg.tool_calls.append(
                ToolCall(
                    _string(fn["name"], "name"),
                    args if isinstance(args, str) else dump(args),
                    _string(call["id"], "id") if "id" in call else "",
                )
            )
    if not has_content and not has_calls:
        raise ValueError(
            "Expected 'content' or 'tool_calls' (ref: https://github.com/ggml-org/llama.cpp/issues/8367 & "
            "https://github.com/ggml-org/llama.cpp/issues/12279)"
        )
    if "reasoning_content" in message:
        msg.reasoning_content = _string(message["reasoning_content"], "reasoning_content")
    if "name" in message:
        msg.tool_name = _string(message["name"], "name")
    if "tool_call_id" in message:
        msg.tool_call_id = _string(message["tool_call_id"], "tool_call_id")
    return msg


def parse_messages(messages) -> list[ChatMsg]:
    """common_chat_msgs_parse_oaicompat(): ValueError("Failed to parse messages: ...") on bad input."""
    try:
        if not isinstance(messages, list):
            raise ValueError(f"Expected 'messages' to be an array, got {dump(messages)}")
        return [_parse_one(m) for m in messages]
    except ValueError as e:
        raise ValueError(f"Failed to parse messages: {e}") from None


def _concat_parts(parts: list[tuple[str, str]]) -> str:
    """Text parts joined by newlines, none around a media marker."""
    text, last_media = "", False
    for kind, part in parts:
        if kind == "text":
            newline = not last_media and bool(text)
            last_media = False
        elif kind == "media_marker":
            newline, last_media = False, True
        else:
            continue
        text += ("\n" if newline else "") + part
    return text


def to_template_json(msg: ChatMsg) -> dict:
    """common_chat_msg::to_json_oaicompat(concat_typed_text = false)."""
    out: dict = {"role": msg.role}
    if msg.content:
        out["content"] = msg.content
    elif msg.content_parts:
        if any(kind == "media_marker" for kind, _ in msg.content_parts):
            out["content"] = _concat_parts(msg.content_parts)
        else:
            out["content"] = [{"type": kind, "text": text} for kind, text in msg.content_parts]
    else:
        out["content"] = ""
    if msg.reasoning_content:
        out["reasoning_content"] = msg.reasoning_content
    if msg.tool_name:
        out["name"] = msg.tool_name
    if msg.tool_call_id:
        out["tool_call_id"] = msg.tool_call_id
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
                **({"id": c.id} if c.id else {}),
            }
            for c in msg.tool_calls
        ]
    return out


def normalize(messages: list[dict], caps: dict[str, bool]) -> list[dict]:
    """messages_inp_normalizer: typed content flattened for string-only templates, and the reverse."""
    only_string = caps["supports_string_content"] and not caps["supports_typed_content"]
    only_typed = caps["supports_typed_content"] and not caps["supports_string_content"]
    if not only_string and not only_typed:
        return messages
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if only_typed and isinstance(content, str):
            m["content"] = [{"type": "text", "text": content}]
        elif only_string and isinstance(content, list):
            m["content"] = _concat_parts([(p.get("type", ""), p.get("text", "")) for p in content])
        out.append(m)
    return out


def apply_workarounds(messages: list[dict], caps: dict[str, bool], source: str) -> list[dict]:  # noqa: C901
    """The template workarounds common_chat_templates_apply_jinja applies before rendering."""
    messages = [dict(m) for m in messages]
    if "<|channel|>" not in source:  # developer is system, except for GPT-OSS
        for m in messages:
            if m.get("role") == "developer":
                m["role"] = "system"
    if not caps["supports_system_role"]:
        messages = _system_into_first_user(messages)
    if caps["supports_tool_calls"]:  # some templates need a content field next to tool calls
        for m in messages:
            if "tool_calls" in m and "content" not in m:
                m["content"] = ""
    if caps["supports_object_arguments"]:
        for m in messages:
            for call in m.get("tool_calls", []):
                args = call["function"]["arguments"]
                if isinstance(args, str):
                    try:
                        call["function"]["arguments"] = json.loads(args)
                    except json.JSONDecodeError:
                        pass
    return messages


def _system_into_first_user(messages: list[dict]) -> list[dict]:
    """workaround::system_message_not_supported: a leading system message opens the next message's text
    (or is dropped when it is alone)."""
    if not messages or messages[0].get("role") != "system":
        return messages
    if len(messages) > 1:
        first, second = messages[0], dict(messages[1])
        second["content"] = _string(first.get("content"), "content") + "\n" + _string(second.get("content"), "content")
        return [second, *messages[2:]]
    return messages[1:]
