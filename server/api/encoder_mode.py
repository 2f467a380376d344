"""The chat and generation routes on a server started with --embeddings or --reranking: there is no
generating model behind them, so each answers 501 naming the flag, before reading its body.

b10621 runs such a request against the encoder and fails it ("the current context does not logits
computation. skipping", a 500); mlxcel says at once what the server is for (the --embedding manifest entry).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import GENERATION_DISABLED, ErrorKind, UpstreamError

router = APIRouter()

GENERATION_PATHS = (
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/chat/completions",
    "/infill",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/responses",
    "/v1/responses",
    "/responses/input_tokens",
    "/v1/responses/input_tokens",
    "/chat/completions/input_tokens",
    "/v1/chat/completions/input_tokens",
    "/apply-template",
    "/mlxcel/score",
    "/v1/chat/completions/control",
)


async def generation_refused(request: Request):
    enc = request.app.state.mlxcel.settings.encoder
    flag = "--reranking" if enc is not None and enc.mode == "rerank" else "--embeddings"
    raise UpstreamError(GENERATION_DISABLED.format(flag=flag), ErrorKind.NOT_SUPPORTED)


for _path in GENERATION_PATHS:
    router.add_api_route(_path, generation_refused, methods=["POST"])
