"""POST /completion (and /completions): b10621's native completion surface, JSON or SSE."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..build import media_marker
from ..chat.diffs import DiffError, MessageState
from ..chat.formats import CHAT_FORMATS
from ..chat.messages import ChatMsg
from ..chat.peg_chat import chat_peg_parse
from ..engine.engine import Handle
from ..engine.types import (
    ErrorEvent,
    FinalEvent,
    GenerationRequest,
    ProgressEvent,
    SamplingParams,
    Timings,
    TokenEvent,
)
from ..errors import (
    LORA_FUSED,
    SAMPLERS_FAILED,
    ErrorKind,
    UpstreamError,
    exceeds_context,
    json_type_name,
    type_error,
)
from ..grammar.spec import GrammarSpec
from ..peg import load as load_arena
from . import prompt_log
from .budget import reasoning_budget_spec
from .dry import processed_breakers
from .grammars import grammar_spec
from .jsonio import UpstreamJSON, dumps, read_json_object
from .media_input import media_prompt
from .message_spans import user_starts
from .probs import token_entry
from .prompts import input_prompts
from .schemas import NativeCompletionRequest
from .stream_sessions import attach, sse_response
from .task_params import LLAMA_DEFAULT_SEED, TaskParams, f32, generation_settings

router = APIRouter()


def _timings(final: FinalEvent | Timings) -> dict:
    steps = max(final.n_decoded - 1, 0)  # the first token comes from the prompt's logits
    out = {
        "cache_n": final.n_cached,
        "prompt_n": final.n_prompt_processed,
        "prompt_ms": final.t_prompt_ms,
        "prompt_per_token_ms": final.t_prompt_ms / final.n_prompt_processed if final.n_prompt_processed else 0.0,
        "prompt_per_second": 1e3 / final.t_prompt_ms * final.n_prompt_processed if final.t_prompt_ms > 0 else 0.0,
        "predicted_n": final.n_decoded,
        "predicted_ms": final.t_gen_ms,
        "predicted_per_token_ms": final.t_gen_ms / steps if steps else 0.0,
        "predicted_per_second": 1e3 / final.t_gen_ms * steps if final.t_gen_ms > 0 else 0.0,
    }
    if final.n_draft > 0:  # server_slot_stats::to_json: only once a draft was made
        out |= {"draft_n": final.n_draft, "draft_n_accepted": final.n_draft_accepted}
    return out


@dataclass
class _Task:
    """One completion of one prompt: b10621's server_task, as the HTTP side follows it."""

    index: int
    tokens: list[int]
    params: TaskParams
    handle: Handle | None = None  # None: an empty prompt, answered without the engine
    generated: list[int] = field(default_factory=list)
    probs: list[dict] = field(default_factory=list)  # completion_probabilities, one entry per token
    final: FinalEvent | None = None

    @property
    def ended(self) -> FinalEvent:
        """The final event, once the task has one."""
        if self.final is None:
            raise RuntimeError(f"task {self.index} has not ended")
        return self.final


def _final_object(state, t: _Task) -> dict:
    """to_json_non_oaicompat(): in stream mode content and tokens went out in the partials."""
    tok, p, final = state.tokenizer, t.params, t.ended
    content = final.content.decode("utf-8", "replace")
    return _select(
        p.response_fields,
        {
            "index": t.index,
            "content": "" if p.stream else content,
            "tokens": [] if p.stream or not p.return_tokens else t.generated,
            "id_slot": final.id_slot,
            "stop": True,
            "model": state.model_name,
            "tokens_predicted": final.n_decoded,
            "tokens_evaluated": final.n_prompt,
            "generation_settings": generation_settings(p),
            "prompt": tok.detokenize(t.tokens, special=True),
            "has_new_line": final.has_new_line,
            "truncated": final.truncated,
            "stop_type": final.stop_type,
            "stopping_word": final.stopping_word,
            "tokens_cached": final.n_tokens_cached,
            "timings": _timings(final),
            **({"completion_probabilities": probs} if not p.stream and (probs := _trimmed_probs(state, t)) else {}),
        },
    )


def _trimmed_probs(state, t: _Task) -> list[dict]:
    """A stop word's tokens are not reported (as many as the word tokenizes to)."""
    if t.ended.stop_type != "word":
        return t.probs
    n = len(state.tokenizer.tokenize(t.ended.stopping_word, add_special=False, parse_special=False))
    return t.probs[: len(t.probs) - min(n, len(t.probs))]


def _select(paths: list[str], obj: dict) -> dict:
    """response_fields (json_get_nested_values): each existing "a/b" path, keyed by the path itself."""
    if not paths:
        return obj
    out = {}
    for path in paths:
        current, found = obj, True
        for key in path.split("/"):
            if found and isinstance(current, dict) and key in current:
                current = current[key]
            else:
                found = False
        if found:
            out[path] = current
    return out


def progress_json(event: ProgressEvent) -> dict:
    """result_prompt_progress::to_json()."""
    return {"total": event.total, "cache": event.cache, "processed": event.processed, "time_ms": event.time_ms}


def progress_extras(event: ProgressEvent) -> dict:
    """What every shape adds to a progress partial, in b10621's order: the slot's timings (timings_per_token),
    then prompt_progress."""
    return {
        **({"timings": _timings(event.timings)} if event.timings is not None else {}),
        "prompt_progress": progress_json(event),
    }


def _progress(event: ProgressEvent, index: int) -> dict:
    # a progress partial carries b10621's placeholder token (0) and no text
    return {
        "index": index,
        "content": "",
        "tokens": [0],
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": 0,
        "tokens_evaluated": event.total,
        **progress_extras(event),
    }


def _prob_entry(state, t: _Task, event: TokenEvent) -> dict:
    p = t.params
    special = state.settings.special
    sent = state.tokenizer.piece(event.token, special=special or event.token in p.preserved_tokens)
    if event.probs is None:
        raise RuntimeError("a token event without its probabilities")  # (asked for only where n_probs > 0)
    return token_entry(state.tokenizer, event.token, sent, event.probs, p.post_sampling_probs, special)


def _partial(event: TokenEvent, n_prompt: int, index: int, probs: dict | None = None) -> dict:
    out = {
        "index": index,
        "content": event.text.decode("utf-8", "replace"),
        "tokens": [event.token],
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": event.n_decoded,
        "tokens_evaluated": n_prompt,
    }
    if event.timings is not None:
        out["timings"] = _timings(event.timings)
    if probs is not None and probs["top_probs" if "prob" in probs else "top_logprobs"]:
        out["completion_probabilities"] = [probs]
    return out


@dataclass(frozen=True)
class Shape:
    """How one response type renders the same tasks (b10621's task_response_type): the native shape here,
    the OpenAI and Anthropic ones in their route modules. Streaming hooks return the frames to send."""

    final: Callable  # (state, task) -> the task's finished result (non-streaming)
    combine: Callable  # (results) -> the body
    stream_partial: Callable  # (state, task, token event, probability entry | None) -> frames
    stream_progress: Callable  # (state, task, progress event) -> frames
    stream_final: Callable  # (state, task) -> frames
    done: bytes = b""  # what closes a finished stream
    cmpl_id: str = ""  # the answer's id, shared by its tasks (b10621's oaicompat_cmpl_id)
    sse: Callable | None = None  # frames -> bytes; None: "data: <json>" per frame


def _native_partial(state, t: _Task, event: TokenEvent, entry: dict | None) -> list[dict]:
    return [_partial(event, len(t.tokens), t.index, entry)]


NATIVE = Shape(
    final=lambda state, t: _final_object(state, t),
    combine=lambda results: results[0] if len(results) == 1 else results,  # one result an object, several an array
    stream_partial=_native_partial,
    stream_progress=lambda state, t, event: [_progress(event, t.index)],
    stream_final=lambda state, t: [_final_object(state, t)],
)


def _with_chat_parser(shape: Shape, p: TaskParams) -> Shape:
    """A native body that carries a chat_parser: b10621 parses every result with it (task_result_state)
    although no native shape shows the message; a final parse that fails is its 500."""
    arena, fmt = load_arena(p.chat_parser), CHAT_FORMATS[p.chat_format]

    def parse(text: str, partial: bool) -> ChatMsg:
        return chat_peg_parse(arena, text, partial, p.generation_prompt, fmt)

    states: dict[int, MessageState] = {}

    def update(t: _Task, text: str, partial: bool) -> None:
        st = states.setdefault(t.index, MessageState(parse, p.is_continuation, p.echo))
        try:
            st.update(text, partial)
        except (ValueError, DiffError) as e:
            raise UpstreamError(str(e), ErrorKind.SERVER) from None

    def final(state, t: _Task):
        update(t, t.ended.content.decode("utf-8", "replace"), False)
        return shape.final(state, t)

    def stream_partial(state, t: _Task, event: TokenEvent, entry):
        update(t, event.text.decode("utf-8", "replace"), True)
        return shape.stream_partial(state, t, event, entry)

    def stream_final(state, t: _Task):
        update(t, "", False)
        return shape.stream_final(state, t)

    return dataclasses.replace(shape, final=final, stream_partial=stream_partial, stream_final=stream_final)


def _requested_slot(body: dict, n_slots: int) -> int | None:
    """json_value(data, "id_slot", -1), then get_slot_by_id(): wraps around; a negative one means any slot."""
    v = body.get("id_slot")
    if json_type_name(v) not in ("number", "boolean"):
        return None
    slot = int(v) if v is not None else -1
    return slot % n_slots if slot >= 0 else None


def sampling_params(p: TaskParams, tok=None) -> SamplingParams:
    """The chain's settings, checked as common_sampler_init() checks them."""
    rp = p.repeat_penalty
    if not math.isfinite(rp) or rp <= 0 or not math.isfinite(f32(1 / rp) if rp else math.inf):
        raise UpstreamError(
            SAMPLERS_FAILED + "penalty_repeat must be finite and greater than 0", ErrorKind.INVALID_REQUEST
        )
    for name, v in (("penalty_freq", p.frequency_penalty), ("penalty_present", p.presence_penalty)):
        if not math.isfinite(v):
            raise UpstreamError(SAMPLERS_FAILED + f"{name} must be finite", ErrorKind.INVALID_REQUEST)
    dry = "dry" in p.samplers and p.dry_multiplier != 0 and p.dry_base >= 1 and p.dry_penalty_last_n != 0
    return SamplingParams(
        seed=p.seed,
        temperature=p.temperature,
        dynatemp_range=p.dynatemp_range,
        dynatemp_exponent=p.dynatemp_exponent,
        top_k=p.top_k,
        top_p=p.top_p,
        min_p=p.min_p,
        top_n_sigma=p.top_n_sigma,
        xtc_probability=p.xtc_probability,
        xtc_threshold=p.xtc_threshold,
        typical_p=p.typical_p,
        repeat_last_n=p.repeat_last_n,
        repeat_penalty=p.repeat_penalty,
        frequency_penalty=p.frequency_penalty,
        presence_penalty=p.presence_penalty,
        mirostat=p.mirostat,
        mirostat_tau=p.mirostat_tau,
        mirostat_eta=p.mirostat_eta,
        min_keep=p.min_keep,
        adaptive_target=p.adaptive_target,
        adaptive_decay=p.adaptive_decay,
        dry_multiplier=p.dry_multiplier,
        dry_base=p.dry_base,
        dry_allowed_length=p.dry_allowed_length,
        dry_penalty_last_n=p.dry_penalty_last_n,
        dry_breakers=processed_breakers(tok, p.dry_sequence_breakers) if dry and tok is not None else (),
        samplers=tuple(p.samplers),
        logit_bias=tuple(p.logit_bias),
    )


def _generation_request(
    p: TaskParams,
    tokens: list[int],
    base: TaskParams,
    tok=None,
    grammar: GrammarSpec | None = None,
    cmpl_id: str = "",
    completion_task: bool = True,
) -> GenerationRequest:
    # the per-request limit takes priority over the server's (--predict), which an explicit -1 falls back to
    n_predict = p.n_predict if p.n_predict != -1 else base.n_predict
    return GenerationRequest(
        prompt_tokens=tuple(tokens),
        media=getattr(tokens, "media", ()),
        n_predict=n_predict,
        ignore_eos=p.ignore_eos,
        stop=tuple(p.stop),
        cache_prompt=p.cache_prompt,
        n_cache_reuse=p.n_cache_reuse,
        timings_per_token=p.timings_per_token,
        n_indent=p.n_indent,
        t_max_predict_ms=p.t_max_predict_ms,
        return_progress=p.stream and p.return_progress,
        n_keep=p.n_keep,
        n_discard=p.n_discard,
        preserved_tokens=frozenset(p.preserved_tokens),
        sampling=sampling_params(p, tok),
        grammar=grammar,
        reasoning_budget=reasoning_budget_spec(p, tok) if tok else None,
        reasoning_control=p.reasoning_control,
        cmpl_id=cmpl_id,
        lora=tuple(p.lora.items()) or None,
        n_probs=max(p.n_probs, 0),
        post_sampling_probs=p.post_sampling_probs,
        params_echo=generation_settings(p, only_metrics=True),
        completion_task=completion_task,
    )


def _child_params(p: TaskParams, j: int) -> TaskParams:
    """The j-th completion of a prompt: b10621 gives each child its own seed unless the seed is random."""
    return p if j == 0 or p.seed == LLAMA_DEFAULT_SEED else dataclasses.replace(p, seed=(p.seed + j) % 2**32)


def _check_prompts(state, prompts: list[list[int]]) -> None:
    n_ctx = state.engine.info.n_ctx
    for tokens in prompts:  # every prompt is checked before any runs
        if len(tokens) >= n_ctx:
            raise exceeds_context(len(tokens), n_ctx)


async def _grammar(state, p: TaskParams, prompts: list[list[int]]) -> GrammarSpec | None:
    """The request's grammar, compiled off the event loop; checked where b10621's sampler init checks it,
    after the prompt and the chain's own settings (an empty prompt never builds a sampler)."""
    if not p.grammar or not any(prompts):
        return None
    sampling_params(p)
    return await asyncio.to_thread(grammar_spec, p, state.grammar_vocab)


def _check_lora(state, p: TaskParams) -> None:
    """--lora-fuse: a request may not ask for scales other than the fused ones."""
    conflicts = getattr(state.engine, "lora_conflicts", None)  # (an encoder's server has no adapters)
    if p.lora and conflicts is not None and conflicts(p.lora):
        raise UpstreamError(LORA_FUSED, ErrorKind.INVALID_REQUEST)


def _start_tasks(
    state,
    p: TaskParams,
    prompts: list[list[int]],
    id_slot: int | None,
    grammar: GrammarSpec | None = None,
    cmpl_id: str = "",
    infill: bool = False,
    delimiters=None,
) -> list[_Task]:
    _check_prompts(state, prompts)
    _check_lora(state, p)
    tasks: list[_Task] = []
    for i, tokens in enumerate(prompts):
        group = [_Task(i * p.n_cmpl + j, tokens, _child_params(p, j)) for j in range(p.n_cmpl)]
        if not tokens:  # b10621 answers an empty prompt with an empty, unstopped result
            for t in group:
                t.final = FinalEvent("none", 0, 0, 0, 0, 0, False, 0.0, 0.0)
        else:
            base = state.settings.base_params
            requests = [
                _generation_request(t.params, tokens, base, state.tokenizer, grammar, cmpl_id, not infill)
                for t in group
            ]
            requests[0] = dataclasses.replace(requests[0], id_slot=id_slot)  # children cannot choose their slot
            starts, last = user_starts(state.tokenizer, delimiters, tokens, getattr(tokens, "media", ()))
            if starts:
                requests = [dataclasses.replace(r, user_starts=starts, last_user=last) for r in requests]
            handles = state.engine.submit_group(requests)
            for t, h in zip(group, handles, strict=False):
                t.handle = h
        tasks.extend(group)
    return tasks


def _cancel(tasks: list[_Task]) -> None:
    for t in tasks:
        if t.handle is not None:
            t.handle.cancel()  # no-op once finished; frees the slot if the client went away


async def _collect(state, t: _Task) -> None:
    if t.handle is None:
        return
    async for event in t.handle:
        if isinstance(event, TokenEvent):
            t.generated.append(event.token)
            if event.probs is not None:
                t.probs.append(_prob_entry(state, t, event))
        elif isinstance(event, FinalEvent):
            t.final = event
        elif isinstance(event, ErrorEvent):
            raise _error_of(event)


@router.post("/completion")
@router.post("/completions")
async def completion(request: Request):
    return await complete(request.app.state.mlxcel, await read_json_object(request))


def _prompts(state, prompt, files: list[bytes] | None, oai: bool) -> list[list[int]]:
    """The request's prompts. With a projector loaded, an OpenAI-shaped route's one prompt goes through mtmd's
    tokenizer with the body's images (process_mtmd_prompt: a string only), and /completion's
    {"prompt_string", "multimodal_data"} objects take theirs."""
    projector = state.settings.projector
    if projector is None:
        return input_prompts(state.tokenizer, prompt)

    def with_media(text, data: list[bytes]) -> list[int]:
        if not isinstance(text, str):
            raise UpstreamError(type_error("string", text), ErrorKind.INVALID_REQUEST)
        return media_prompt(state.tokenizer, text, data, media_marker(), projector)

    if oai:
        return [with_media(prompt, files or [])]
    return input_prompts(state.tokenizer, prompt, with_media)


async def complete(
    state,
    body: dict,
    shape: Shape = NATIVE,
    acted_on: frozenset[str] | None = None,
    route: str = "/completion",
    infill: bool = False,
    files: list[bytes] | None = None,
):
    """handle_completions_impl(): the answer to a completion body (JSON, or an SSE stream) in `shape`; `files`:
    the chat body's images, which the prompt's media markers stand for."""
    n_slots = state.engine.info.n_slots
    req = NativeCompletionRequest.parse(body, n_slots, state.tokenizer, state.settings.base_params, acted_on, route)
    if state.settings.prompts_log_dir:  # --log-prompts-dir: the prompt as given, before it is tokenized
        prompt_log.write(state.settings.prompts_log_dir, req.prompt)
    prompts = _prompts(state, req.prompt, files, oai=route != "/completion" and not infill)
    id_slot = _requested_slot(body, n_slots)
    _check_prompts(state, prompts)
    grammar = await _grammar(state, req.params, prompts)
    if req.params.chat_parser and shape is NATIVE:
        shape = _with_chat_parser(shape, req.params)
    delimiters = body.get("message_delimiters")
    tasks = _start_tasks(state, req.params, prompts, id_slot, grammar, shape.cmpl_id, infill, delimiters)
    if req.params.stream:
        return await _start_stream(state, req.params, tasks, shape)
    try:
        await asyncio.gather(*(_collect(state, t) for t in tasks))
    finally:
        _cancel(tasks)
    return UpstreamJSON(shape.combine([shape.final(state, t) for t in tasks]))


class _Merged:
    """The events of several tasks as one queue, in the order they happen."""

    def __init__(self, tasks: list[_Task]):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.pumps = [asyncio.create_task(self._pump(t)) for t in tasks]

    async def _pump(self, t: _Task) -> None:
        if t.handle is None:
            await self.queue.put((t, t.final))
            return
        async for event in t.handle:
            await self.queue.put((t, event))

    async def next(self, timeout: float | None = None) -> tuple[_Task, object]:
        return await asyncio.wait_for(self.queue.get(), timeout)

    def close(self) -> None:
        for pump in self.pumps:
            pump.cancel()


def _error_of(event: ErrorEvent) -> UpstreamError:
    return UpstreamError(event.message, ErrorKind[event.kind.upper()])


async def _start_stream(state, p: TaskParams, tasks: list[_Task], shape: Shape = NATIVE) -> StreamingResponse:
    """As b10621: the first result decides the answer; an error there is a plain JSON error, not a stream."""
    merged = _Merged(tasks)
    try:
        first = await merged.next()
        if isinstance(first[1], ErrorEvent):
            raise _error_of(first[1])
    except BaseException:
        merged.close()
        _cancel(tasks)
        raise
    stream = _stream(state, tasks, merged, first, p.sse_ping_interval, shape)
    # X-Conversation-Id: the stream runs into a resumable session that outlives this connection
    return attach(stream, sse_response) or sse_response(stream)


def _frames(frames: list[dict]) -> bytes:
    return b"".join(b"data: " + dumps(f) + b"\n\n" for f in frames)


def _event_frames(state, t: _Task, event, shape: Shape) -> bytes:
    """The SSE bytes one engine event becomes in `shape` (nothing for an error: the caller ends the stream)."""
    sse = shape.sse or _frames
    if isinstance(event, TokenEvent):
        t.generated.append(event.token)
        entry = _prob_entry(state, t, event) if event.probs is not None else None
        return sse(shape.stream_partial(state, t, event, entry)) or b""
    if isinstance(event, ProgressEvent):
        return sse(shape.stream_progress(state, t, event)) or b""
    if isinstance(event, FinalEvent):
        t.final = event
        return sse(shape.stream_final(state, t))
    return b""


async def _stream(
    state, tasks: list[_Task], merged: _Merged, first, ping_s: int, shape: Shape = NATIVE
) -> AsyncIterator[bytes]:
    """Every task's frames in the order they happen, each with its task's index; an SSE comment ping
    (":") whenever nothing has come for ping_s seconds; the stream ends at the last final or an error."""
    open_tasks, item = len(tasks), first
    try:
        while True:
            t, event = item
            try:
                frames = _event_frames(state, t, event, shape)
            except UpstreamError as e:  # a chat parse that fails mid-stream ends it with the error
                event, frames = ErrorEvent(e.message, e.kind.name.lower()), b""
            if frames:
                yield frames
            if isinstance(event, FinalEvent):
                open_tasks -= 1
            elif isinstance(event, ErrorEvent):
                error = _error_of(event).body()["error"]
                # Anthropic streams name the event; the others send {"error": ...} as data
                yield shape.sse([{"event": "error", "data": error}]) if shape.sse else _frames([{"error": error}])
                return
            if not open_tasks:
                if shape.done:
                    yield shape.done
                return
            while True:
                try:
                    item = await merged.next(ping_s if ping_s > 0 else None)
                    break
                except asyncio.TimeoutError:
                    yield b":\n\n"  # keeps clients that time out on silence connected
    finally:
        merged.close()
        _cancel(tasks)  # the client disconnected (or we are done): free the slots
