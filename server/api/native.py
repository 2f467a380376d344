"""POST /completion (and /completions): b10621's native completion surface, non-streaming for now."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..engine.types import ErrorEvent, FinalEvent, GenerationRequest, TokenEvent
from ..errors import BAD_PROMPT, ErrorKind, UpstreamError
from .jsonio import UpstreamJSON, read_json_object
from .schemas import NativeCompletionRequest

router = APIRouter()


def _timings(final: FinalEvent) -> dict:
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


@router.post("/completion")
@router.post("/completions")
async def completion(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    req = NativeCompletionRequest.parse(await read_json_object(request))
    if req.stream:
        raise UpstreamError("mlxcel does not stream /completion yet (stream: true)", ErrorKind.NOT_SUPPORTED)
    tokens = _prompt_tokens(state, req.prompt)
    gen = GenerationRequest(prompt_tokens=tuple(tokens), n_predict=req.n_predict, ignore_eos=req.ignore_eos)
    generated: list[int] = []
    final: FinalEvent | None = None
    if not tokens:  # b10621 answers an empty prompt with an empty, unstopped result
        final = FinalEvent("none", 0, 0, 0, 0, 0, False, 0.0, 0.0)
        return _response(state, req, tokens, generated, final)
    handle = state.engine.submit(gen)
    try:
        async for event in handle:
            if isinstance(event, TokenEvent):
                generated.append(event.token)
            elif isinstance(event, FinalEvent):
                final = event
            elif isinstance(event, ErrorEvent):
                raise UpstreamError(event.message, ErrorKind.SERVER)
    finally:
        handle.cancel()  # no-op once finished; stops the engine if the client went away
    assert final is not None
    return _response(state, req, tokens, generated, final)


def _response(state, req: NativeCompletionRequest, tokens: list[int], generated: list[int], final: FinalEvent) -> UpstreamJSON:
    tok = state.tokenizer
    content = tok.detokenize(generated, special=False)
    return UpstreamJSON(
        {
            "index": 0,
            "content": content,
            "tokens": generated if req.return_tokens else [],
            "id_slot": final.id_slot,
            "stop": True,
            "model": state.model_name,
            "tokens_predicted": final.n_decoded,
            "tokens_evaluated": final.n_prompt,
            # generation_settings: absent until the sampler chain exists (issue: sampling)
            "prompt": tok.detokenize(tokens, special=True),
            "has_new_line": "\n" in content,
            "truncated": final.truncated,
            "stop_type": final.stop_type,
            "stopping_word": "",
            "tokens_cached": final.n_tokens_cached,
            "timings": _timings(final),
        }
    )
