"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat path, as b10621's
server_chat_convert_anthropic_to_oai() translates a request and to_json_anthropic() shapes the answer
(message events in SSE "event:" frames when streaming)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request

from ..chat.diffs import NO_INDEX
from ..chat.params import ChatInfo, chat_request
from ..errors import ErrorKind, UpstreamError
from .chat import _completion_id, chat_settings, count_input_tokens, final_update, message_states
from .jsonio import UpstreamJSON, dumps, read_json_object
from .media_input import MediaRef, read_all
from .native import Shape, complete

router = APIRouter()

ANTHROPIC_FIELDS = frozenset(
    {
        "messages",
        "model",
        "tools",
        "tool_choice",
        "chat_template_kwargs",
        "thinking_budget_tokens",
        "__metadata_user_id",
    }
)


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
        return text[:start] + "fffff" + text[start + 5 :]
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


def _message(msg) -> list[dict]:  # noqa: C901
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
            calls.append(
                {
                    "id": _value(block, "id", ""),
                    "type": "function",
                    "function": {
                        "name": _value(block, "name", ""),
                        "arguments": json.dumps(_value(block, "input", {}), separators=(",", ":"), ensure_ascii=False),
                    },
                }
            )
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


def to_chat_body(body: dict) -> dict:  # noqa: C901
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
        out["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": _value(t, "name", ""),
                    "description": _value(t, "description", ""),
                    "parameters": t["input_schema"] if isinstance(t, dict) and "input_schema" in t else {},
                },
            }
            for t in body["tools"]
        ]
    if isinstance(body.get("tool_choice"), dict):
        kind = _value(body["tool_choice"], "type", "")
        if kind == "auto":
            out["tool_choice"] = "auto"
        elif kind in ("any", "tool"):
            out["tool_choice"] = "required"
    if "stop_sequences" in body:
        out["stop"] = body["stop_sequences"]
    out["max_tokens"] = body.get("max_tokens", 4096)
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


def _stop_reason(final, msg) -> str:
    if final.stop_type not in ("word", "eos"):
        return "max_tokens"
    return "tool_use" if msg.tool_calls else "end_turn"


def _sse(frames: list[dict]) -> bytes:
    """format_anthropic_sse: "event:" then "data:" for each event."""
    out = b""
    for f in frames:
        data = dumps(f["data"])
        out += b"event: " + f["event"].encode() + b"\ndata: " + data + b"\n\n"
    return out


def _event(kind: str, **data) -> dict:
    return {"event": kind, "data": {"type": kind, **data}}


def _block_start(index: int, block: dict) -> dict:
    return _event("content_block_start", index=index, content_block=block)


def _block_delta(index: int, delta: dict) -> dict:
    return _event("content_block_delta", index=index, delta=delta)


def _tool_input(arguments: str) -> dict:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value


class _Blocks:
    """Which content blocks a stream has opened: thinking first, then text, then one per tool call."""

    def __init__(self) -> None:
        self.thinking = False
        self.text = False


def _diff_events(diffs, has_reasoning: bool, blocks: _Blocks, text_index: int, tool_index) -> list[dict]:
    events = []
    for d in diffs:
        if d.reasoning_content_delta:
            if not blocks.thinking:
                events.append(_block_start(0, {"type": "thinking", "thinking": ""}))
                blocks.thinking = True
            events.append(_block_delta(0, {"type": "thinking_delta", "thinking": d.reasoning_content_delta}))
        if d.content_delta:
            if not blocks.text:
                events.append(_block_start(text_index, {"type": "text", "text": ""}))
                blocks.text = True
            events.append(_block_delta(text_index, {"type": "text_delta", "text": d.content_delta}))
        if d.tool_call_index != NO_INDEX:
            index, start = tool_index(d)
            if start is not None:
                events.append(_block_start(index, start))
            if d.tool_call_delta.arguments:
                events.append(
                    _block_delta(index, {"type": "input_json_delta", "partial_json": d.tool_call_delta.arguments})
                )
    return events


def messages_shape(state, info: ChatInfo) -> Shape:  # noqa: C901
    """to_json_anthropic() and its streaming pair; the block bookkeeping follows b10621's, quirks included
    (the final events re-open blocks for what the final update adds)."""
    cid, model = _completion_id(), state.model_name
    state_of = message_states(info)
    blocks: dict[int, _Blocks] = {}

    def usage(final) -> dict:
        return {
            "cache_read_input_tokens": final.n_cached,
            "input_tokens": final.n_prompt - final.n_cached,
            "output_tokens": final.n_decoded,
        }

    def final(state, t) -> dict:
        msg = final_update(state_of, t)[1]
        content: list[dict] = []
        if msg.reasoning_content:
            content.append({"type": "thinking", "thinking": msg.reasoning_content, "signature": ""})
        if msg.content:
            content.append({"type": "text", "text": msg.content})
        for tc in msg.tool_calls:
            content.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": _tool_input(tc.arguments)})
        word = t.final.stopping_word
        return {
            "id": cid,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": model,
            "stop_reason": _stop_reason(t.final, msg),
            "stop_sequence": word or None,
            "usage": usage(t.final),
        }

    def stream_partial(state, t, event, entry) -> list[dict]:
        events = []
        if event.n_decoded == 1:
            events.append(
                _event(
                    "message_start",
                    message={
                        "id": cid,
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": model,
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {
                            "cache_read_input_tokens": event.n_cached,
                            "input_tokens": len(t.tokens) - event.n_cached,
                            "output_tokens": 0,
                        },
                    },
                )
            )
        st = state_of(t.index)
        diffs = st.update(event.text.decode("utf-8", "replace"), True)
        has_reasoning = bool(st.chat_msg.reasoning_content)
        b = blocks.setdefault(t.index, _Blocks())

        def tool_index(d):
            index = (1 if has_reasoning else 0) + (1 if b.text else 0) + d.tool_call_index
            tc = d.tool_call_delta
            return index, ({"type": "tool_use", "id": tc.id, "name": tc.name} if tc.name else None)

        return events + _diff_events(diffs, has_reasoning, b, 1 if has_reasoning else 0, tool_index)

    def stream_final(state, t) -> list[dict]:
        diffs, msg = final_update(state_of, t)
        has_thinking, has_text = bool(msg.reasoning_content), bool(msg.content)
        started: set[int] = set()

        def tool_index(d):
            index = (1 if has_thinking else 0) + (1 if has_text else 0) + d.tool_call_index
            if d.tool_call_index in started:
                return index, None
            started.add(d.tool_call_index)
            tc = msg.tool_calls[d.tool_call_index]
            return index, {"type": "tool_use", "id": tc.id, "name": tc.name}

        events = _diff_events(diffs, has_thinking, _Blocks(), 1 if has_thinking else 0, tool_index)
        if has_thinking:
            events.append(_block_delta(0, {"type": "signature_delta", "signature": ""}))
            events.append(_event("content_block_stop", index=0))
        if has_text:
            events.append(_event("content_block_stop", index=1 if has_thinking else 0))
        for i in range(len(msg.tool_calls)):
            events.append(_event("content_block_stop", index=(1 if has_thinking else 0) + (1 if has_text else 0) + i))
        word = t.final.stopping_word
        events.append(
            _event(
                "message_delta",
                delta={"stop_reason": _stop_reason(t.final, msg), "stop_sequence": word or None},
                usage={"output_tokens": t.final.n_decoded},
            )
        )
        events.append(_event("message_stop"))
        return events

    return Shape(
        final=final,
        combine=lambda results: results[0],
        stream_partial=stream_partial,
        stream_progress=lambda state, t, event: [],
        stream_final=stream_final,
        sse=_sse,
    )


@router.post("/v1/messages")
async def messages(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    native, info = chat_request(to_chat_body(body), chat_settings(state))
    files = await read_all(tuple(MediaRef(url, uri) for url, uri in info.media), state.settings.media_path)
    return await complete(
        state, native, messages_shape(state, info), ANTHROPIC_FIELDS, route="/v1/messages", files=files
    )


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    return UpstreamJSON({"input_tokens": await count_input_tokens(state, to_chat_body(body))})
