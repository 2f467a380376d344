"""POST /tokenize and /detokenize, as b10621's handlers (server-context.cpp post_tokenize)."""

from fastapi import APIRouter, Request

from .jsonio import UpstreamJSON, read_json_object

router = APIRouter()


def _piece_json(piece: bytes):
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)  # not valid UTF-8: the byte values, so clients can reassemble text


@router.post("/tokenize")
async def tokenize(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    tokens: list = []
    if "content" in body:
        ids = state.tokenizer.tokenize_mixed(
            body["content"],
            add_special=bool(body.get("add_special", False)),
            parse_special=bool(body.get("parse_special", True)),
        )
        if body.get("with_pieces", False):
            tokens = [{"id": i, "piece": _piece_json(state.tokenizer.piece(i))} for i in ids]
        else:
            tokens = ids
    return UpstreamJSON({"tokens": tokens})


@router.post("/detokenize")
async def detokenize(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    content = state.tokenizer.detokenize(body.get("tokens", [])) if "tokens" in body else ""
    return UpstreamJSON({"content": content})
