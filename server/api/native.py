"""POST /completion (and /completions): b10621's native completion surface, JSON or SSE."""

from __future__ import annotations

from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..engine.types import ErrorEvent, FinalEvent, GenerationRequest, ProgressEvent, Timings, TokenEvent
from ..errors import BAD_PROMPT, ErrorKind, UpstreamError, error_body, exceeds_context
from .jsonio import UpstreamJSON, dumps, read_json_object
from .schemas import NativeCompletionRequest
from .task_params import generation_settings

router = APIRouter()


def _timings(final: FinalEvent | Timings) -> dict:
    steps = max(final.n_decoded - 1, 0)  # the first token comes from the prompt's logits
    return {
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


def _is_token(p) -> bool:
    return isinstance(p, int) and not isinstance(p, bool)


def _prompt_tokens(state, prompt) -> list[int]:
    if isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(p, str) or _is_token(p) for p in prompt)):
        return state.tokenizer.tokenize_mixed(prompt, add_special=True, parse_special=True)
    if isinstance(prompt, list) and all(isinstance(p, (str, list, dict)) for p in prompt):
        raise UpstreamError("mlxcel does not accept several prompts in one request yet (an array of prompts)",
                            ErrorKind.NOT_SUPPORTED)
    raise UpstreamError(BAD_PROMPT, ErrorKind.INVALID_REQUEST)


def _final_object(state, req: NativeCompletionRequest, tokens: list[int], generated: list[int],
                  final: FinalEvent) -> dict:
    """to_json_non_oaicompat(): in stream mode content and tokens went out in the partials."""
    tok, p = state.tokenizer, req.params
    content = final.content.decode("utf-8", "replace")
    return _select(p.response_fields, {
        "index": 0,
        "content": "" if p.stream else content,
        "tokens": [] if p.stream or not p.return_tokens else generated,
        "id_slot": final.id_slot,
        "stop": True,
        "model": state.model_name,
        "tokens_predicted": final.n_decoded,
        "tokens_evaluated": final.n_prompt,
        "generation_settings": generation_settings(p),
        "prompt": tok.detokenize(tokens, special=True),
        "has_new_line": final.has_new_line,
        "truncated": final.truncated,
        "stop_type": final.stop_type,
        "stopping_word": final.stopping_word,
        "tokens_cached": final.n_tokens_cached,
        "timings": _timings(final),
    })


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


def _progress(event: ProgressEvent) -> dict:
    # a progress partial carries b10621's placeholder token (0) and no text
    return {"index": 0, "content": "", "tokens": [0], "stop": False, "id_slot": -1, "tokens_predicted": 0,
            "tokens_evaluated": event.total,
            "prompt_progress": {"total": event.total, "cache": event.cache, "processed": event.processed,
                                "time_ms": event.time_ms}}


def _partial(event: TokenEvent, n_prompt: int) -> dict:
    out = {"index": 0, "content": event.text.decode("utf-8", "replace"), "tokens": [event.token], "stop": False,
           "id_slot": -1, "tokens_predicted": event.n_decoded, "tokens_evaluated": n_prompt}
    if event.timings is not None:
        out["timings"] = _timings(event.timings)
    return out


@router.post("/completion")
@router.post("/completions")
async def completion(request: Request):
    state = request.app.state.mlxcel
    req = NativeCompletionRequest.parse(await read_json_object(request), state.engine.info.n_slots, state.tokenizer,
                                        state.settings.base_params)
    p = req.params
    tokens = _prompt_tokens(state, req.prompt)
    if not tokens:  # b10621 answers an empty prompt with an empty, unstopped result
        final = FinalEvent("none", 0, 0, 0, 0, 0, False, 0.0, 0.0)
        if p.stream:
            return _sse([_final_object(state, req, tokens, [], final)])
        return UpstreamJSON(_final_object(state, req, tokens, [], final))
    if len(tokens) >= state.engine.info.n_ctx:
        raise exceeds_context(len(tokens), state.engine.info.n_ctx)
    gen = GenerationRequest(prompt_tokens=tuple(tokens), n_predict=p.n_predict, ignore_eos=p.ignore_eos,
                            stop=tuple(p.stop), cache_prompt=p.cache_prompt, timings_per_token=p.timings_per_token,
                            n_indent=p.n_indent, t_max_predict_ms=p.t_max_predict_ms,
                            return_progress=p.stream and p.return_progress, n_keep=p.n_keep, n_discard=p.n_discard,
                            params_echo=generation_settings(p, only_metrics=True))
    handle = state.engine.submit(gen)
    if p.stream:
        return _sse_response(_stream(state, req, tokens, handle))
    generated: list[int] = []
    final: FinalEvent | None = None
    try:
        async for event in handle:
            if isinstance(event, TokenEvent):
                generated.append(event.token)
            elif isinstance(event, FinalEvent):
                final = event
            elif isinstance(event, ErrorEvent):
                raise UpstreamError(event.message, ErrorKind.SERVER)
    finally:
        handle.cancel()  # no-op once finished; frees the slot if the client went away
    assert final is not None
    return UpstreamJSON(_final_object(state, req, tokens, generated, final))


def _sse_response(frames: AsyncIterator[bytes]) -> StreamingResponse:
    # b10621's exact headers: no charset on text/event-stream, proxies told not to buffer
    return StreamingResponse(frames, headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})


def _sse(objects: list[dict]) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        for obj in objects:
            yield b"data: " + dumps(obj) + b"\n\n"

    return _sse_response(frames())


async def _stream(state, req, tokens, handle) -> AsyncIterator[bytes]:
    try:
        async for event in handle:
            if isinstance(event, TokenEvent):
                yield b"data: " + dumps(_partial(event, len(tokens))) + b"\n\n"
            elif isinstance(event, ProgressEvent):
                yield b"data: " + dumps(_progress(event)) + b"\n\n"
            elif isinstance(event, FinalEvent):
                yield b"data: " + dumps(_final_object(state, req, tokens, [], event)) + b"\n\n"
            elif isinstance(event, ErrorEvent):
                yield b"error: " + dumps(error_body(event.message, ErrorKind.SERVER)) + b"\n\n"
    finally:
        handle.cancel()  # the client disconnected (or we are done): free the slot
