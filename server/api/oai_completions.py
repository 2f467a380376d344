"""POST /v1/completions: the native completion in OpenAI's text_completion shape (server-task.cpp
to_json_oaicompat for the final result and the partials, then [DONE])."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from ..build import build_info
from .chat import _completion_id, _finish_reason, _usage, combine_choices
from .jsonio import read_json_object
from .native import NATIVE, Shape, _final_object, _trimmed_probs, complete, progress_extras
from .native import _timings as _task_timings
from .task_params import requested_verbose

router = APIRouter()

OAI_FIELDS = frozenset({"model", "echo", "suffix", "user", "best_of"})


def completion_shape(state, verbose: bool) -> Shape:
    cid, model, fingerprint = _completion_id(), state.model_name, build_info()

    def body(t, text: str, logprobs, finish) -> dict:
        return {
            "choices": [{"text": text, "index": t.index, "logprobs": logprobs, "finish_reason": finish}],
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
            "object": "text_completion",
        }

    def final(state, t) -> dict:
        p = t.params
        text = "" if p.stream else t.final.content.decode("utf-8", "replace")
        probs = None if p.stream else _trimmed_probs(state, t)
        res = body(t, text, {"content": probs} if probs else None, _finish_reason(t.final))
        res["usage"] = _usage(t.final)
        res["id"] = cid
        if verbose:
            res["__verbose"] = _final_object(state, t)
        res["timings"] = _task_timings(t.final)
        return res

    def stream_partial(state, t, event, entry) -> list[dict]:
        res = body(t, event.text.decode("utf-8", "replace"), {"content": [entry]} if entry else None, None)
        res["id"] = cid
        if verbose:
            res["__verbose"] = NATIVE.stream_partial(state, t, event, entry)[0]
        if event.timings is not None:
            res["timings"] = _task_timings(event.timings)
        return [res]

    def stream_progress(state, t, event) -> list[dict]:
        res = body(t, "", None, None)
        res["id"] = cid
        if verbose:
            res["__verbose"] = NATIVE.stream_progress(state, t, event)[0]
        return [res | progress_extras(event)]

    return Shape(
        final=final,
        combine=combine_choices,
        stream_partial=stream_partial,
        stream_progress=stream_progress,
        stream_final=lambda state, t: [final(state, t)],
        done=b"data: [DONE]\n\n",
        cmpl_id=cid,
    )


@router.post("/v1/completions")
async def completions_oai(request: Request):
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    shape = completion_shape(state, verbose=requested_verbose(body, state.settings.base_params))
    return await complete(state, body, shape, OAI_FIELDS, route="/v1/completions")
