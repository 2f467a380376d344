"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat path, as b10621's
server_chat_convert_anthropic_to_oai() translates a request and to_json_anthropic() shapes the answer
(message events in SSE "event:" frames when streaming)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request

from ..chat.params import chat_request
from ..errors import ErrorKind, UpstreamError
from .chat import _completion_id, chat_settings, content_reader, count_input_tokens
from .jsonio import UpstreamJSON, read_json_object
from .native import Shape, complete

router = APIRouter()

ANTHROPIC_FIELDS = frozenset({"messages", "model", "tools", "tool_choice", "chat_template_kwargs",
                              "thinking_budget_tokens", "__metadata_user_id"})


def _value(obj, key: str, default):
    v = obj.get(key) if isinstance(obj, dict) else None
    return default if v is None else v


def _billing_header(text: str) -> str:
    """normalize_anthropic_billing_header: the per-request cch stamp would defeat prefix caching."""
    prefix = "x-anthropic-billing-header:"
    if not text.startswith(prefix):
        return text
    at = text.find("cch=", len(prefix))
    if at == -1:
        return text
    start = at + 4
    if start + 5 < len(text) and text[start + 5] == ";":
        return text[:start] + "fffff" + text[start + 5:]
    return text


def _image(source: dict) -> dict | None:
    kind = _value(source, "type", "")
    if kind == "base64":
        url = f"data:{_value(source, 'media_type', 'image/jpeg')};base64,{_value(source, 'data', '')}"
    elif kind == "url":
        url = _value(source, "url", "")
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict) -> dict:
    call_id = _value(block, "tool_use_id", "")
    content = block.get("content")
    if isinstance(content, str):
        return {"role": "tool", "tool_call_id": call_id, "content": content}
    if isinstance(content, list):
        text, parts, images = "", [], False
        for c in content:
            kind = _value(c, "type", "")
            if kind == "text":
                text += _value(c, "text", "")
                parts.append({"type": "text", "text": _value(c, "text", "")})
            elif kind == "image":
                images = True
                if (part := _image(_value(c, "source", {}))) is not None:
                    parts.append(part)
        return {"role": "tool", "tool_call_id": call_id, "content": parts if images else text}
    return {"role": "tool", "tool_call_id": call_id, "content": ""}


def _message(msg) -> list[dict]:
    role = _value(msg, "role", "")
    if not isinstance(msg, dict) or "content" not in msg:
        return [] if role == "assistant" else [msg]
    content = msg["content"]
    if not isinstance(content, list):
        return [msg]
    calls, converted, results, reasoning = [], [], [], ""
    for block in content:
        kind = _value(block, "type", "")
        if kind == "text":
            converted.append(block)
        elif kind == "thinking":
            reasoning += _value(block, "thinking", "")
        elif kind == "image":
            if (part := _image(_value(block, "source", {}))) is not None:
                converted.append(part)
        elif kind == "tool_use":
            calls.append({"id": _value(block, "id", ""), "type": "function",
                          "function": {"name": _value(block, "name", ""),
                                       "arguments": json.dumps(_value(block, "input", {}), separators=(",", ":"),
                                                               ensure_ascii=False)}})
        elif kind == "tool_result":
            results.append(_tool_result(block))
    out = []
    if converted or calls or reasoning:
        new = {"role": role}
        if converted:
            new["content"] = converted
        else:
            new["content"] = ""
        if calls:
            new["tool_calls"] = calls
        if reasoning:
            new["reasoning_content"] = reasoning
        out.append(new)
    return out + results


def to_chat_body(body: dict) -> dict:
    """server_chat_convert_anthropic_to_oai(): only the fields it maps survive."""
    messages = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, str):
            text = _billing_header(system)
        elif isinstance(system, list):
            text = "".join(_billing_header(_value(b, "text", "")) for b in system if _value(b, "type", "") == "text")
        else:
            text = ""
        messages.append({"role": "system", "content": text})
    if "messages" not in body:
        raise UpstreamError("'messages' is required", ErrorKind.SERVER)  # a runtime_error upstream: 500
    if isinstance(body["messages"], list):
        for msg in body["messages"]:
            messages.extend(_message(msg))
    out: dict = {"messages": messages}
    if isinstance(body.get("tools"), list):
        out["tools"] = [{"type": "function", "function": {
            "name": _value(t, "name", ""), "description": _value(t, "description", ""),
            "parameters": t["input_schema"] if isinstance(t, dict) and "input_schema" in t else {}}}
            for t in body["tools"]]
    if isinstance(body.get("tool_choice"), dict):
        kind = _value(body["tool_choice"], "type", "")
        if kind == "auto":
            out["tool_choice"] = "auto"
        elif kind in ("any", "tool"):
            out["tool_choice"] = "required"
    if "stop_sequences" in body:
        out["stop"] = body["stop_sequences"]
    out["max_tokens"] = body["max_tokens"] if "max_tokens" in body else 4096
    for key in ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs"):
        if key in body:
            out[key] = body[key]
    if "thinking" in body:
        thinking = _value(body, "thinking", {})
        if _value(thinking, "type", "") == "enabled":
            out["thinking_budget_tokens"] = _value(thinking, "budget_tokens", 10000)
    if "metadata" in body:
        user = _value(_value(body, "metadata", {}), "user_id", "")
        if user:
            out["__metadata_user_id"] = user
    return out


def _stop_reason(final) -> str:
    return "end_turn" if final.stop_type in ("word", "eos") else "max_tokens"


def _sse(frames: list[dict]) -> bytes:
    """format_anthropic_sse: "event:" then "data:" for each event."""
    out = b""
    for f in frames:
        data = json.dumps(f["data"], separators=(",", ":"), ensure_ascii=False).encode()
        out += b"event: " + f["event"].encode() + b"\ndata: " + data + b"\n\n"
    return out


def messages_shape(state, content_of) -> Shape:
    cid, model = _completion_id(), state.model_name
    text_started: dict[int, bool] = {}
    raw: dict[int, str] = {}
    sent: dict[int, str] = {}

    def usage(final) -> dict:
        return {"cache_read_input_tokens": final.n_cached, "input_tokens": final.n_prompt - final.n_cached,
                "output_tokens": final.n_decoded}

    def final(state, t) -> dict:
        content = content_of(t.final.content.decode("utf-8", "replace"), False)
        word = t.final.stopping_word
        return {"id": cid, "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": content}] if content else [], "model": model,
                "stop_reason": _stop_reason(t.final), "stop_sequence": word or None, "usage": usage(t.final)}

    def stream_partial(state, t, event, entry) -> list[dict]:
        events = []
        if event.n_decoded == 1:
            events.append({"event": "message_start", "data": {"type": "message_start", "message": {
                "id": cid, "type": "message", "role": "assistant", "content": [], "model": model,
                "stop_reason": None, "stop_sequence": None,
                "usage": {"cache_read_input_tokens": event.n_cached, "input_tokens": len(t.tokens) - event.n_cached,
                          "output_tokens": 0}}}})
        raw[t.index] = raw.get(t.index, "") + event.text.decode("utf-8", "replace")
        content, already = content_of(raw[t.index], True), sent.get(t.index, "")
        text = content[len(already):] if len(content) > len(already) and content.startswith(already) else ""
        if text:
            sent[t.index] = content
            if not text_started.get(t.index):
                text_started[t.index] = True
                events.append({"event": "content_block_start", "data": {
                    "type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}})
            events.append({"event": "content_block_delta", "data": {
                "type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}})
        return events

    def stream_final(state, t) -> list[dict]:
        events = []
        if content_of(t.final.content.decode("utf-8", "replace"), False):
            events.append({"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}})
        word = t.final.stopping_word
        events.append({"event": "message_delta", "data": {
            "type": "message_delta", "delta": {"stop_reason": _stop_reason(t.final), "stop_sequence": word or None},
            "usage": {"output_tokens": t.final.n_decoded}}})
        events.append({"event": "message_stop", "data": {"type": "message_stop"}})
        return events

    return Shape(final=final, combine=lambda results: results[0], stream_partial=stream_partial,
                 stream_progress=lambda state, t, event: [], stream_final=stream_final, sse=_sse)


@router.post("/v1/messages")
async def messages(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    native, info = chat_request(to_chat_body(body), chat_settings(state))
    return await complete(state, native, messages_shape(state, content_reader(info)), ANTHROPIC_FIELDS,
                          route="/v1/messages")


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    return UpstreamJSON({"input_tokens": count_input_tokens(state, to_chat_body(body))})

