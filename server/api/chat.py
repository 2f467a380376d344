"""POST /v1/chat/completions (and /chat/completions), /apply-template and the input_tokens pair, in b10621's
OpenAI shapes (server-task.cpp to_json_oaicompat_chat, its streaming deltas and [DONE])."""

from __future__ import annotations

import asyncio
import secrets
import string
import time

from fastapi import APIRouter, Request

from ..build import build_info, media_marker
from ..chat.diffs import MessageState, MsgDiff, Parse, delta_json, is_empty, message_json
from ..chat.messages import ChatMsg
from ..chat.params import ChatInfo, ChatSettings, chat_params, chat_request
from ..chat.peg_chat import chat_peg_parse
from ..engine.commands import ControlOutcome
from ..engine.types import FinalEvent, TokenEvent
from ..errors import ErrorKind, UpstreamError
from .jsonio import UpstreamJSON, json_value, read_json, read_json_object
from .media_input import MediaRef, media_prompt, read_all
from .native import Shape, _final_object, _trimmed_probs, complete, progress_extras
from .native import _timings as _task_timings
from .task_params import requested_verbose

router = APIRouter()

# Chat-body fields the chat layer itself consumes (they are not native fields)
CHAT_FIELDS = frozenset(
    {
        "messages",
        "model",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "top_logprobs",
        "add_generation_prompt",
        "chat_template_kwargs",
        "reasoning_effort",
        "stream_options",
        "json_schema",
    }
)


def chat_settings(state) -> ChatSettings:
    configured = getattr(state.settings, "chat", None)
    if configured is not None:
        return configured
    tok = state.tokenizer
    piece = lambda i: tok.piece(i).decode("utf-8", "replace") if i is not None else ""
    return ChatSettings(
        template=tok.chat_template or "",
        bos_token=piece(tok.bos_id),
        eos_token=piece(tok.eos_id),
        add_bos=tok.add_bos,
        add_eos=tok.add_eos,
    )


def _completion_id() -> str:
    """gen_chatcmplid(): "chatcmpl-" and 32 random alphanumerics."""
    chars = string.ascii_letters + string.digits
    return "chatcmpl-" + "".join(secrets.choice(chars) for _ in range(32))


def _usage(final: FinalEvent) -> dict:
    return {
        "completion_tokens": final.n_decoded,
        "prompt_tokens": final.n_prompt,
        "total_tokens": final.n_decoded + final.n_prompt,
        "prompt_tokens_details": {"cached_tokens": final.n_cached},
    }


def _finish_reason(final: FinalEvent, msg: ChatMsg | None = None) -> str:
    """ "length" unless a stop word or EOS ended it; a chat answer with tool calls is "tool_calls"."""
    if final.stop_type not in ("word", "eos"):
        return "length"
    return "tool_calls" if msg is not None and msg.tool_calls else "stop"


def message_parser(info: ChatInfo) -> Parse:
    """The chat parser for one request: the output after the generation prompt, read as a message."""

    def parse(text: str, partial: bool) -> ChatMsg:
        try:
            return chat_peg_parse(info.parser, text, partial, info.generation_prompt, info.fmt)
        except ValueError as e:  # b10621's std::runtime_error: the answer becomes a 500
            raise UpstreamError(str(e), ErrorKind.SERVER) from None

    return parse


def message_states(info: ChatInfo):
    """One MessageState per task, made on first use."""
    parse, states = message_parser(info), {}

    def state_of(index: int) -> MessageState:
        if index not in states:
            states[index] = MessageState(parse, is_continuation=info.is_continuation, echo=info.echo)
        return states[index]

    return state_of


def final_update(state_of, t) -> tuple[list[MsgDiff], ChatMsg]:
    """The final update (the text not yet seen, all of it when not streaming, parsed as complete): its
    diffs and the finished message."""
    st = state_of(t.index)
    full = t.final.content.decode("utf-8", "replace")
    diffs = st.update(full[len(st.generated_text) :] if full.startswith(st.generated_text) else "", False)
    return diffs, (st.chat_msg if not is_empty(st.chat_msg) else ChatMsg(role="assistant", content=full))


def chat_shape(state, verbose: bool, include_usage: bool, info: ChatInfo) -> Shape:  # noqa: C901
    """The chat response type for one request: its id and clock shared by every task and frame."""
    cid, model, fingerprint = _completion_id(), state.model_name, build_info()
    state_of = message_states(info)

    def envelope(obj: str, choices: list, **extra) -> dict:
        return {
            "choices": choices,
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
            "object": obj,
            **extra,
        }

    def chunk(t, delta: dict, finish=None) -> dict:
        c = {
            "choices": [{"finish_reason": finish, "index": t.index, "delta": delta}],
            "created": int(time.time()),
            "id": cid,
            "model": model,
            "system_fingerprint": fingerprint,
            "object": "chat.completion.chunk",
        }
        return c

    def final(state, t) -> dict:
        msg = final_update(state_of, t)[1]
        choice = {"finish_reason": _finish_reason(t.final, msg), "index": t.index, "message": message_json(msg)}
        if probs := _trimmed_probs(state, t):
            choice["logprobs"] = {"content": probs}
        res = envelope("chat.completion", [choice], usage=_usage(t.final), id=cid)
        if verbose:
            res["__verbose"] = _final_object(state, t)
        res["timings"] = _task_timings(t.final)
        return res

    def stream_partial(state, t, event: TokenEvent, entry: dict | None) -> list[dict]:
        frames = []
        if event.n_decoded == 1:  # OpenAI clients expect the role first
            frames.append(chunk(t, {"role": "assistant", "content": None}))
        for diff in state_of(t.index).update(event.text.decode("utf-8", "replace"), True):
            frames.append(chunk(t, delta_json(diff)))
        if frames:
            if entry is not None:
                frames[-1]["choices"][0]["logprobs"] = {"content": [entry]}
            if event.timings is not None:
                frames[-1]["timings"] = _task_timings(event.timings)
        return frames

    def stream_final(state, t) -> list[dict]:
        diffs, msg = final_update(state_of, t)
        frames = [chunk(t, delta_json(diff)) for diff in diffs]
        frames.append(chunk(t, {}, _finish_reason(t.final, msg)))
        if include_usage:
            frames.append(
                {
                    "choices": [],
                    "created": int(time.time()),
                    "id": cid,
                    "model": model,
                    "system_fingerprint": fingerprint,
                    "object": "chat.completion.chunk",
                    "usage": _usage(t.final),
                }
            )
        frames[-1]["timings"] = _task_timings(t.final)
        if verbose:
            frames[0]["__verbose"] = _final_object(state, t)
        return frames

    def stream_progress(state, t, event) -> list[dict]:
        # b10621 opens every progress partial with the role delta, the progress after it
        return [chunk(t, {"role": "assistant", "content": None}) | progress_extras(event)]

    return Shape(
        final=final,
        combine=combine_choices,
        stream_partial=stream_partial,
        stream_progress=stream_progress,
        stream_final=stream_final,
        done=b"data: [DONE]\n\n",
        cmpl_id=cid,
    )


def combine_choices(results: list[dict]) -> dict:
    """Several tasks in an OpenAI shape: one body carrying every task's choice."""
    first = results[0]
    for other in results[1:]:
        first["choices"].append(other["choices"][0])
    return first


async def count_input_tokens(state, chat_body: dict) -> int:
    """handle_count_tokens(): the tokens the chat body's rendered prompt prefills, its images' counted (with a
    projector loaded, as process_mtmd_prompt counts them: the files read and decoded)."""
    native, info = chat_request(chat_body, chat_settings(state))
    prompt = native["prompt"]
    projector = state.settings.projector
    if projector is None:
        return len(state.tokenizer.tokenize(prompt, add_special=True, parse_special=True))
    files = await read_all(tuple(MediaRef(url, uri) for url, uri in info.media), state.settings.media_path)
    return len(media_prompt(state.tokenizer, prompt, files, media_marker(), projector))


def _include_usage(body: dict) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


# b10621's answers to a control task, by outcome
CONTROL_ANSWERS = {
    ControlOutcome.DONE: {"success": True},
    ControlOutcome.NO_COMPLETION: {"success": False, "message": "no active completion for this id"},
    ControlOutcome.UNKNOWN_ACTION: {"success": False, "message": "unknown control action"},
    ControlOutcome.NOT_ENABLED: {"success": False, "message": "reasoning control not enabled for this completion"},
}


@router.post("/v1/chat/completions/control")
async def chat_control(request: Request):
    """b10621's post_control: {"id": a running chat completion's id, "action": "reasoning_end"} ends its
    reasoning block now (the request must have armed reasoning_control)."""
    state = request.app.state.mlxcel
    body = await read_json(request)
    fields = body if isinstance(body, dict) else {}
    cmpl_id, action = json_value(fields, "id", ""), json_value(fields, "action", "")
    if not cmpl_id:
        raise UpstreamError("missing completion id", ErrorKind.INVALID_REQUEST)
    if action != "reasoning_end":
        raise UpstreamError("unknown control action", ErrorKind.INVALID_REQUEST)
    outcome = await asyncio.wrap_future(state.engine.control(cmpl_id, action))
    return UpstreamJSON(CONTROL_ANSWERS[outcome])


@router.post("/chat/completions")
@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    return await chat_answer(request.app.state.mlxcel, await read_json_object(request))


async def chat_answer(state, body: dict):
    """The answer to a chat completion body (JSON, or an SSE stream): the route's, and `mlxcel chat`'s."""
    native, info = chat_request(body, chat_settings(state))
    files = await read_all(tuple(MediaRef(url, uri) for url, uri in info.media), state.settings.media_path)
    shape = chat_shape(
        state,
        verbose=requested_verbose(body, state.settings.base_params),
        include_usage=_include_usage(body),
        info=info,
    )
    return await complete(state, native, shape, CHAT_FIELDS, route="/v1/chat/completions", files=files)


@router.post("/apply-template")
async def apply_template(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    return UpstreamJSON({"prompt": chat_params(body, chat_settings(state))["prompt"]})


@router.post("/chat/completions/input_tokens")
@router.post("/v1/chat/completions/input_tokens")
async def chat_input_tokens(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    return UpstreamJSON({"input_tokens": await count_input_tokens(state, body), "object": "response.input_tokens"})
