"""POST /infill: fill-in-the-middle, as b10621's post_infill and format_prompt_infill build the prompt.

The FIM repo-level pattern (arxiv 2409.12186): [FIM_REP]myproject, the extra chunks (each after [FIM_SEP]
and its filename, or a snippet separator), [FIM_SEP]filename, then [FIM_PRE]prefix[FIM_SUF]suffix[FIM_MID]
with the prompt after the prefix. The result is answered like a /completion of those tokens.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import ErrorKind, UpstreamError, json_type_name
from .jsonio import read_json_object
from .native import complete
from .prompts import checked_mixed

router = APIRouter()

_SNIPPET = "\n\n--- snippet ---\n\n"  # upstream's separator when the model has no FIM_SEP


def _missing_fim(fim: dict[str, int]) -> str:
    return "".join(
        f"{what} token is missing. "
        for what, key in (("prefix", "pre"), ("suffix", "suf"), ("middle", "mid"))
        if key not in fim
    )


def _validate_extra(body: dict) -> list:
    extra = body.get("input_extra")
    if "input_extra" in body and not isinstance(extra, list):
        raise UpstreamError(
            '"input_extra" must be an array of {"filename": string, "text": string}', ErrorKind.INVALID_REQUEST
        )
    for chunk in extra or []:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise UpstreamError(
                'extra_context chunk must contain a "text" field with a string value', ErrorKind.INVALID_REQUEST
            )
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise UpstreamError('extra_context chunk\'s "filename" field must be a string', ErrorKind.INVALID_REQUEST)
    return extra or []


def _required(body: dict, key: str):
    if key not in body:  # data.at(key) outside the request's try: a server error upstream
        raise UpstreamError(f"[json.exception.out_of_range.403] key '{key}' not found", ErrorKind.SERVER)
    return body[key]


def _mixed(tok, value) -> list[int]:
    """tokenize_mixed() without special tokens: a string, or an array of strings and token ids."""
    return tok.tokenize_mixed(checked_mixed(value), add_special=False, parse_special=False)


def format_infill(
    tok,
    prefix,
    suffix,
    extra: list,
    prompt: list[int],
    n_batch: int,
    n_predict: int,
    n_ctx: int,
    spm_infill: bool = False,
) -> list[int]:
    """format_prompt_infill(): [FIM_PRE]prefix+prompt then [FIM_SUF]suffix, or suffix first (--spm-infill)."""
    fim = tok.fim_ids

    def text(s: str) -> list[int]:
        return tok.tokenize(s, add_special=False, parse_special=False)

    tokens_prefix = _mixed(tok, prefix)
    tokens_suffix = _mixed(tok, suffix)
    extra_tokens: list[int] = []
    if "rep" in fim:
        extra_tokens += [fim["rep"], *text("myproject\n")]
    for chunk in extra:
        filename = chunk.get("filename") if isinstance(chunk.get("filename"), str) else "tmp"
        extra_tokens += [fim["sep"], *text(filename + "\n")] if "sep" in fim else text(_SNIPPET)
        extra_tokens += text(chunk["text"])
    if "sep" in fim:
        extra_tokens += [fim["sep"], *text("filename\n")]
    # a prefix:suffix ratio of 3:1 within a batch, the rest of the context for the extra chunks
    n_prefix_take = min(len(tokens_prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(tokens_suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    pre = [fim["pre"], *tokens_prefix[len(tokens_prefix) - n_prefix_take :], *prompt]
    suf = [fim["suf"], *tokens_suffix[:n_suffix_take]]
    inp, end = (suf, pre) if spm_infill else (pre, suf)
    if tok.add_bos and tok.bos_id is not None:
        inp.insert(0, tok.bos_id)
    return [*extra_tokens[len(extra_tokens) - n_extra_take :], *inp, *end, fim["mid"]]


@router.post("/infill")
async def infill(request: Request):
    state = request.app.state.mlxcel
    tok = state.tokenizer
    missing = _missing_fim(tok.fim_ids)
    if missing:
        raise UpstreamError(f"Infill is not supported by this model: {missing}", ErrorKind.NOT_SUPPORTED)
    body = await read_json_object(request)
    extra = _validate_extra(body)
    prompt = body.get("prompt") if json_type_name(body.get("prompt")) == "string" else ""
    prompt_tokens = tok.tokenize(prompt, add_special=False, parse_special=True)
    prefix, suffix = _required(body, "input_prefix"), _required(body, "input_suffix")
    body = {**body, "input_extra": extra}
    body["prompt"] = format_infill(
        tok,
        prefix,
        suffix,
        extra,
        prompt_tokens,
        state.settings.n_batch,
        state.settings.base_params.n_predict,
        state.engine.info.n_ctx,
        state.settings.spm_infill,
    )
    return await complete(state, body, infill=True)
