"""POST /tokenize and /detokenize, as b10621's handlers (server-context.cpp post_tokenize)."""

from fastapi import APIRouter, Request

from ..errors import ErrorKind, UpstreamError, type_error
from .jsonio import UpstreamJSON, json_value, read_json_object
from .prompts import checked_mixed

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
        content = body["content"]
        ids = state.tokenizer.tokenize_mixed(
            checked_mixed(content),
            add_special=json_value(body, "add_special", False),
            parse_special=json_value(body, "parse_special", True),
        )
        if json_value(body, "with_pieces", False):
            tokens = [{"id": i, "piece": _piece_json(state.tokenizer.piece(i))} for i in ids]
        else:
            tokens = ids
    return UpstreamJSON({"tokens": tokens})


@router.post("/detokenize")
async def detokenize(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    body = await read_json_object(request)
    content = ""
    if "tokens" in body:
        tokens = body["tokens"]
        if not isinstance(tokens, list):
            raise UpstreamError(type_error("array", tokens), ErrorKind.SERVER)
        for t in tokens:
            if not isinstance(t, int) or isinstance(t, bool):
                raise UpstreamError(type_error("number", t), ErrorKind.SERVER)
            if not 0 <= t < state.tokenizer.vocab_size:  # b10621's vocabulary lookup throws std::out_of_range
                raise UpstreamError(
                    f"vector::_M_range_check: __n (which is {t}) >= this->size() "
                    f"(which is {state.tokenizer.vocab_size})",
                    ErrorKind.SERVER,
                )
        content = state.tokenizer.detokenize(tokens)
    return UpstreamJSON({"content": content})
