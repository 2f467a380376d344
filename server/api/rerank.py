"""POST /rerank, /reranking, /v1/rerank and /v1/reranking, as b10621's post_rerank: a body with "documents"
answers Jina's envelope ({model, object, usage, results: [{index, relevance_score}]}), one with only "texts"
TEI's bare array ([{index, score}], with "text" under return_text); results by descending score, top_n kept.

Each pair is format_prompt_rerank's: BOS (the vocabulary's [CLS]), the query, EOS, the document, EOS, with no
special-token parsing in either text; its score is the rank head's first output.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..errors import (
    RERANK_DISABLED,
    RERANK_DOCUMENTS_INVALID,
    RERANK_QUERY_MISSING,
    RERANK_QUERY_NOT_STRING,
    ErrorKind,
    UpstreamError,
)
from ..jsonfloat import dump_float
from .encoding import encode
from .jsonio import RawBody, RawJSON, UpstreamJSON, dumps_with_raw, json_value, read_json_object

router = APIRouter()


def _string_list(body: dict, key: str, default: list) -> list:
    """json_value(body, key, std::vector<std::string>): the array when every element is a string."""
    value = body.get(key)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return default


def pair_tokens(tokenizer, query: str, document: str) -> list[int]:
    q = tokenizer.tokenize(query, add_special=False, parse_special=False)
    d = tokenizer.tokenize(document, add_special=False, parse_special=False)
    return [tokenizer.bos_id, *q, tokenizer.eos_id, *d, tokenizer.eos_id]


@router.post("/rerank")
@router.post("/reranking")
@router.post("/v1/rerank")
@router.post("/v1/reranking")
async def rerank(request: Request) -> UpstreamJSON:
    state = request.app.state.mlxcel
    enc = state.settings.encoder
    if enc is None or enc.pooling != "rank":
        raise UpstreamError(RERANK_DISABLED, ErrorKind.NOT_SUPPORTED)
    body = await read_json_object(request)
    tei = "texts" in body
    if "query" not in body:
        raise UpstreamError(RERANK_QUERY_MISSING, ErrorKind.INVALID_REQUEST)
    query = body["query"]
    if not isinstance(query, str):
        raise UpstreamError(RERANK_QUERY_NOT_STRING, ErrorKind.INVALID_REQUEST)
    documents = _string_list(body, "documents", _string_list(body, "texts", []))
    if not documents:
        raise UpstreamError(RERANK_DOCUMENTS_INVALID, ErrorKind.INVALID_REQUEST)
    top_n = json_value(body, "top_n", len(documents))
    prompts = [pair_tokens(state.tokenizer, query, d) for d in documents]
    scores = await encode(state, prompts)
    label = "score" if tei else "relevance_score"
    return_text = tei and json_value(body, "return_text", False) is True
    results = []
    for i, score in enumerate(scores):
        item: dict[str, Any] = {"index": i, label: float(score[0])}
        if return_text:
            item["text"] = documents[i]
        results.append(item)
    results.sort(key=lambda r: r[label], reverse=True)
    results = results[: max(0, min(int(top_n), len(results)))]
    for item in results:  # each score printed as b10621's JSON library prints it
        item[label] = RawJSON(dump_float(item[label]))
    if tei:
        return UpstreamJSON(RawBody(dumps_with_raw(results)))
    n_tokens = sum(len(p) for p in prompts)
    answer = {
        "model": json_value(body, "model", state.model_name),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    }
    return UpstreamJSON(RawBody(dumps_with_raw(answer)))
