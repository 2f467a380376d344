"""POST /embedding, /embeddings (native shape) and /v1/embeddings (OpenAI shape), as b10621's
handle_embeddings_impl: a bare array of {index, embedding: [[...]]}, or the OpenAI list envelope."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request

from ..encoder.normalize import embd_normalize
from ..errors import (
    EMBEDDING_INPUT_EMPTY,
    EMBEDDING_INPUT_MISSING,
    EMBEDDINGS_DISABLED,
    ENCODING_FORMAT_INVALID,
    POOLING_NONE_NOT_OAI,
    ErrorKind,
    UpstreamError,
    type_error,
)
from .encoding import encode
from .jsonio import RawBody, UpstreamJSON, dumps_with_raw, float_array, json_value, read_json_object
from .prompts import input_prompts

router = APIRouter()


def _int_field(body: dict, key: str) -> int:
    """nlohmann's get<int>(): a number, truncated; anything else is its type_error (a 500)."""
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UpstreamError(type_error("number", value), ErrorKind.SERVER)
    return int(value)


async def _embeddings(request: Request, oai: bool) -> UpstreamJSON:  # noqa: C901
    state = request.app.state.mlxcel
    enc = state.settings.encoder
    if enc is None:
        raise UpstreamError(EMBEDDINGS_DISABLED, ErrorKind.NOT_SUPPORTED)
    if oai and enc.pooling == "none":
        raise UpstreamError(POOLING_NONE_NOT_OAI, ErrorKind.INVALID_REQUEST)
    body = await read_json_object(request)
    if "input" in body:
        prompt = body["input"]
    elif "content" in body:
        oai = False  # "content" is not OpenAI's field: the native shape, whatever the path
        prompt = body["content"]
    else:
        raise UpstreamError(EMBEDDING_INPUT_MISSING, ErrorKind.INVALID_REQUEST)
    use_base64 = False
    if "encoding_format" in body:
        fmt = body["encoding_format"]
        if not isinstance(fmt, str):
            raise UpstreamError(type_error("string", fmt), ErrorKind.SERVER)
        if fmt == "base64":
            use_base64 = True
        elif fmt != "float":
            raise UpstreamError(ENCODING_FORMAT_INVALID, ErrorKind.INVALID_REQUEST)
    prompts = input_prompts(state.tokenizer, prompt)
    if any(not tokens for tokens in prompts):
        raise UpstreamError(EMBEDDING_INPUT_EMPTY, ErrorKind.INVALID_REQUEST)
    mode = _int_field(body, "embd_normalize") if "embd_normalize" in body else enc.embd_normalize
    results = await encode(state, prompts)
    if enc.pooling == "none":  # one vector per token, never normalized (send_embedding)
        vectors = [list(result) for result in results]
    else:
        vectors = [[embd_normalize(result, mode)] for result in results]
    if not oai:
        listed = [{"index": i, "embedding": [float_array(v) for v in rows]} for i, rows in enumerate(vectors)]
        return UpstreamJSON(RawBody(dumps_with_raw(listed)))
    data = []
    for i, rows in enumerate(vectors):
        if use_base64:
            encoded = base64.b64encode(np.asarray(rows[0], dtype="<f4").tobytes()).decode("ascii")
            data.append({"embedding": encoded, "index": i, "object": "embedding", "encoding_format": "base64"})
        else:
            data.append({"embedding": float_array(rows[0]), "index": i, "object": "embedding"})
    n_tokens = sum(len(t) for t in prompts)
    answer = {
        "model": json_value(body, "model", state.model_name),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "data": data,
    }
    return UpstreamJSON(RawBody(dumps_with_raw(answer)))


@router.post("/embedding")
@router.post("/embeddings")
async def native_embeddings(request: Request) -> UpstreamJSON:
    return await _embeddings(request, oai=False)


@router.post("/v1/embeddings")
async def oai_embeddings(request: Request) -> UpstreamJSON:
    return await _embeddings(request, oai=True)
