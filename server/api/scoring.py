"""POST /mlxcel/score: teacher-forced log-probabilities (mlxcel's own route, for the oracle's traces).

Body: {"prompt": string or ids, "tokens": [continuation ids], "n_probs": k}. Not a b10621 route.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..engine.types import ErrorEvent, ScoreEvent, ScoreRequest
from ..errors import ErrorKind, UpstreamError
from .jsonio import UpstreamJSON, json_value, read_json_object

router = APIRouter()


@router.post("/mlxcel/score")
async def score(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    prompt = state.tokenizer.tokenize_mixed(body.get("prompt", ""), add_special=True, parse_special=True)
    tokens = body.get("tokens")
    if not prompt or not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise UpstreamError(
            "score needs a non-empty prompt and a non-empty list of token ids in tokens", ErrorKind.INVALID_REQUEST
        )
    if any(not 0 <= t < state.tokenizer.vocab_size for t in tokens):
        raise UpstreamError("a token id is outside the vocabulary", ErrorKind.INVALID_REQUEST)
    handle = state.engine.submit(ScoreRequest(tuple(prompt), tuple(tokens), json_value(body, "n_probs", 5)))
    async for event in handle:
        if isinstance(event, ErrorEvent):
            raise UpstreamError(event.message, ErrorKind.SERVER)
        if isinstance(event, ScoreEvent):
            return UpstreamJSON(
                {
                    "positions": [
                        {
                            "id": p.token,
                            "logprob": p.logprob,
                            "top_logprobs": [{"id": i, "logprob": lp} for i, lp in p.top],
                        }
                        for p in event.positions
                    ]
                }
            )
    raise UpstreamError("the engine ended without a score", ErrorKind.SERVER)
