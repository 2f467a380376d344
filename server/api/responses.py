"""POST /v1/responses (and /responses) with its input_tokens pair: OpenAI's Responses API over the chat path,
as b10621's server_chat_convert_responses_to_chatcmpl() translates a request and to_json_oaicompat_resp()
shapes the answer (response.* events in "event:" frames when streaming). b10621 keeps no responses, so
previous_response_id is refused with its sentence."""

from __future__ import annotations

import secrets
import string
import time

from fastapi import APIRouter, Request

from ..chat.params import ChatInfo, chat_request
from ..errors import ErrorKind, UpstreamError
from .anthropic import _sse
from .chat import chat_settings, count_input_tokens, final_update, message_states
from .jsonio import UpstreamJSON, read_json_object
from .media_input import MediaRef, read_all
from .native import Shape, complete, progress_extras
from .native import _timings as _task_timings

router = APIRouter()

RESPONSES_FIELDS = frozenset(
    {
        "messages",
        "model",
        "tools",
        "tool_choice",
        "reasoning_effort",
        "store",
        "parallel_tool_calls",
        "text",
        "truncation",
        "metadata",
        "user",
    }
)


def _bad(message: str) -> UpstreamError:
    return UpstreamError(message, ErrorKind.INVALID_REQUEST)


def _random() -> str:
    """random_string(): 32 characters from digits and both cases."""
    chars = string.digits + string.ascii_uppercase + string.ascii_lowercase
    return "".join(secrets.choice(chars) for _ in range(32))


def _is(item: dict, key: str, kind: type) -> bool:
    return isinstance(item, dict) and isinstance(item.get(key), kind)


def _input_message(item: dict) -> dict:
    parts = []
    for part in item["content"]:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if kind == "input_text":
            if "text" not in part:
                raise _bad("'Input text' requires 'text'")
            parts.append({"text": part["text"], "type": "text"})
        elif kind == "input_image":
            if "image_url" not in part:
                raise _bad("'image_url' is required")
            parts.append({"image_url": {"url": part["image_url"]}, "type": "image_url"})
        elif kind == "input_file":
            raise _bad("'input_file' is not supported by llamacpp at this moment")
        else:
            raise _bad("'type' must be one of 'input_text', 'input_image', or 'input_file'")
    out = {k: v for k, v in item.items() if k not in ("type", "status")}
    out["content"] = parts
    return out


def _output_parts(item: dict) -> list[dict]:
    content = item.get("content")
    if isinstance(content, str):
        return [{"text": content, "type": "text"}]
    parts = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if kind in ("output_text", "input_text"):
            if not _is(part, "text", str):
                raise _bad("'Output text' requires 'text'")
            parts.append({"text": part["text"], "type": "text"})
        elif kind == "refusal":
            if not _is(part, "refusal", str):
                raise _bad("'Refusal' requires 'refusal'")
            parts.append({"refusal": part["refusal"], "type": "refusal"})
        else:
            raise _bad("'type' must be one of 'output_text' or 'refusal'")
    return parts


def to_chat_body(body: dict) -> dict:  # noqa: C901
    """server_chat_convert_responses_to_chatcmpl()."""
    if "input" not in body:
        raise _bad("'input' is required")
    if isinstance(body.get("previous_response_id"), str) and body["previous_response_id"]:
        raise _bad("llama.cpp does not support 'previous_response_id'.")
    out = {k: v for k, v in body.items() if k != "input"}
    messages: list[dict] = []
    if "instructions" in body:
        instructions = body["instructions"]
        messages.append({"role": "system", "content": instructions if isinstance(instructions, str) else ""})
        out.pop("instructions")
    value = body["input"]
    if isinstance(value, str):
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                raise _bad("Cannot determine type of 'item'")
            merge = bool(messages) and messages[-1].get("role") == "assistant"
            if _is(item, "content", str):
                item = {**item, "content": [{"text": item["content"], "type": "input_text"}]}
            if _is(item, "content", list) and item.get("role") in ("user", "system", "developer"):
                messages.append(_input_message(item))
            elif item.get("role") == "assistant" and item.get("type") == "message":
                parts = _output_parts(item)
                if merge:
                    prev = messages[-1]
                    if not isinstance(prev.get("content"), list):
                        prev["content"] = []
                    prev["content"].extend(parts)
                else:
                    messages.append(
                        {**{k: v for k, v in item.items() if k not in ("status", "type")}, "content": parts}
                    )
            elif (
                all(_is(item, k, str) for k in ("arguments", "call_id", "name", "type"))
                and item["type"] == "function_call"
            ):
                call = {
                    "function": {"arguments": item["arguments"], "name": item["name"]},
                    "id": item["call_id"],
                    "type": "function",
                }
                if merge:
                    messages[-1].setdefault("tool_calls", []).append(call)
                else:
                    messages.append({"role": "assistant", "tool_calls": [call]})
            elif (
                _is(item, "call_id", str)
                and (_is(item, "output", str) or _is(item, "output", list))
                and item.get("type") == "function_call_output"
            ):
                output = item["output"]
                if isinstance(output, list):
                    for o in output:
                        if not isinstance(o, dict) or o.get("type") != "input_text":
                            raise _bad("Output of tool call should be 'Input text'")
                    output = [{**o, "type": "text"} for o in output]
                messages.append({"content": output, "role": "tool", "tool_call_id": item["call_id"]})
            elif _is(item, "summary", list) and item.get("type") == "reasoning":
                if not _is(item, "content", list):
                    raise _bad("item['content'] is not an array")
                if not item["content"]:
                    raise _bad("item['content'] is empty")
                if not _is(item["content"][0], "text", str):
                    raise _bad("item['content']['text'] is not a string")
                text = item["content"][0]["text"]
                if merge:
                    messages[-1]["reasoning_content"] = text
                else:
                    messages.append({"role": "assistant", "content": [], "reasoning_content": text})
            else:
                raise _bad("Cannot determine type of 'item'")
    else:
        raise _bad("'input' must be a string or array of objects")
    out["messages"] = messages
    if "tools" in body:
        if not isinstance(body["tools"], list):
            raise _bad("'tools' must be an array of objects")
        tools = []
        for tool in body["tools"]:
            if not isinstance(tool, dict) or tool.get("type") != "function":
                continue  # no Chat Completions equivalent
            fn = {k: v for k, v in tool.items() if k != "type"}
            fn.setdefault("strict", True)
            tools.append({"type": "function", "function": fn})
        out.pop("tools")
        if tools:
            out["tools"] = tools
    if "max_output_tokens" in body:
        out.pop("max_output_tokens")
        out["max_tokens"] = body["max_output_tokens"]
    if "reasoning" in body:
        if isinstance(body["reasoning"], dict) and "effort" in body["reasoning"]:
            out["reasoning_effort"] = body["reasoning"]["effort"]
        out.pop("reasoning")
    return out


def _usage(final) -> dict:
    return {
        "input_tokens": final.n_prompt,
        "output_tokens": final.n_decoded,
        "total_tokens": final.n_decoded + final.n_prompt,
        "input_tokens_details": {"cached_tokens": final.n_cached},
    }


def _event(kind: str, **data) -> dict:
    return {"event": kind, "data": {"type": kind, **data}}


def _function_call(tc, status: str) -> dict:
    return {
        "id": "fc_" + tc.id,
        "type": "function_call",
        "status": status,
        "arguments": tc.arguments,
        "call_id": "call_" + tc.id,
        "name": tc.name,
    }


def _output_text(text: str) -> dict:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


class _Progress:
    """What a stream has opened so far (b10621's task_result_state flags and the current function call)."""

    def __init__(self) -> None:
        self.created = self.thinking = self.text = False
        self.fc_id = ""


def responses_shape(state, info: ChatInfo) -> Shape:  # noqa: C901
    resp_id, reasoning_id, msg_id, model = "resp_" + _random(), "rs_" + _random(), "msg_" + _random(), state.model_name
    state_of = message_states(info)
    progress: dict[int, _Progress] = {}

    def final(state, t) -> dict:
        msg = final_update(state_of, t)[1]
        output = []
        if msg.reasoning_content:
            output.append(
                {
                    "id": "rs_" + _random(),
                    "summary": [],
                    "type": "reasoning",
                    "content": [{"text": msg.reasoning_content, "type": "reasoning_text"}],
                    "encrypted_content": "",
                    "status": "completed",
                }
            )
        if msg.content:
            output.append(
                {
                    "content": [_output_text(msg.content)],
                    "id": "msg_" + _random(),
                    "role": msg.role,
                    "status": "completed",
                    "type": "message",
                }
            )
        output += [_function_call(tc, "completed") for tc in msg.tool_calls]
        now = int(time.time())
        return {
            "completed_at": now,
            "created_at": now,
            "id": resp_id,
            "model": model,
            "object": "response",
            "output": output,
            "status": "completed",
            "usage": _usage(t.final),
        }

    def in_progress() -> dict:
        return _event("response.in_progress", response={"id": resp_id, "object": "response", "status": "in_progress"})

    def stream_partial(state, t, event, entry) -> list[dict]:
        events = []
        p = progress.setdefault(t.index, _Progress())
        if not p.created:
            p.created = True
            events.append(
                _event("response.created", response={"id": resp_id, "object": "response", "status": "in_progress"})
            )
            events.append(in_progress())
        for d in state_of(t.index).update(event.text.decode("utf-8", "replace"), True):
            if d.reasoning_content_delta:
                if not p.thinking:
                    p.thinking = True
                    events.append(
                        _event(
                            "response.output_item.added",
                            item={
                                "id": reasoning_id,
                                "summary": [],
                                "type": "reasoning",
                                "content": [],
                                "encrypted_content": "",
                                "status": "in_progress",
                            },
                        )
                    )
                events.append(
                    _event("response.reasoning_text.delta", delta=d.reasoning_content_delta, item_id=reasoning_id)
                )
            if d.content_delta:
                if not p.text:
                    p.text = True
                    events.append(
                        _event(
                            "response.output_item.added",
                            item={
                                "content": [],
                                "id": msg_id,
                                "role": "assistant",
                                "status": "in_progress",
                                "type": "message",
                            },
                        )
                    )
                    events.append(
                        _event("response.content_part.added", item_id=msg_id, part={"type": "output_text", "text": ""})
                    )
                events.append(_event("response.output_text.delta", item_id=msg_id, delta=d.content_delta))
            tc = d.tool_call_delta
            if tc.name:
                events.append(
                    _event(
                        "response.output_item.added",
                        item={
                            "id": "fc_" + tc.id,
                            "arguments": "",
                            "call_id": "call_" + tc.id,
                            "name": tc.name,
                            "type": "function_call",
                            "status": "in_progress",
                        },
                    )
                )
                p.fc_id = tc.id
            if tc.arguments:
                events.append(
                    _event("response.function_call_arguments.delta", delta=tc.arguments, item_id="fc_" + p.fc_id)
                )
        if events and event.timings is not None:
            events[-1]["data"]["timings"] = _task_timings(event.timings)
        return events

    def stream_progress(state, t, event) -> list[dict]:
        p = progress.setdefault(t.index, _Progress())
        events = [in_progress()]
        if not p.created:  # the first progress chunk opens the response
            p.created = True
            events.insert(
                0, _event("response.created", response={"id": resp_id, "object": "response", "status": "in_progress"})
            )
        events[-1]["data"].update(progress_extras(event))
        return events

    def stream_final(state, t) -> list[dict]:
        msg = final_update(state_of, t)[1]
        events, output = [], []
        if msg.reasoning_content:
            item = {
                "id": reasoning_id,
                "summary": [],
                "type": "reasoning",
                "content": [{"text": msg.reasoning_content, "type": "reasoning_text"}],
                "encrypted_content": "",
            }
            events.append(_event("response.output_item.done", item=item))
            output.append(item)
        if msg.content:
            part = _output_text(msg.content)
            item = {"type": "message", "status": "completed", "id": msg_id, "content": [part], "role": "assistant"}
            events += [
                _event("response.output_text.done", item_id=msg_id, text=msg.content),
                _event("response.content_part.done", item_id=msg_id, part=part),
                _event("response.output_item.done", item=item),
            ]
            output.append(item)
        for tc in msg.tool_calls:
            item = _function_call(tc, "completed")
            events.append(_event("response.output_item.done", item=item))
            output.append(item)
        events.append(
            _event(
                "response.completed",
                response={
                    "id": resp_id,
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": "completed",
                    "model": model,
                    "output": output,
                    "usage": _usage(t.final),
                },
            )
        )
        events[-1]["data"]["timings"] = _task_timings(t.final)
        return events

    return Shape(
        final=final,
        combine=lambda results: results[0],
        stream_partial=stream_partial,
        stream_progress=stream_progress,
        stream_final=stream_final,
        sse=_sse,
    )


@router.post("/responses")
@router.post("/v1/responses")
async def responses(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    native, info = chat_request(to_chat_body(body), chat_settings(state))
    files = await read_all(tuple(MediaRef(url, uri) for url, uri in info.media), state.settings.media_path)
    return await complete(
        state, native, responses_shape(state, info), RESPONSES_FIELDS, route="/v1/responses", files=files
    )


@router.post("/responses/input_tokens")
@router.post("/v1/responses/input_tokens")
async def responses_input_tokens(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    count = await count_input_tokens(state, to_chat_body(body))
    return UpstreamJSON({"input_tokens": count, "object": "response.input_tokens"})
