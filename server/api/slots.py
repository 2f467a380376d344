"""GET /slots: the live slot registry, shaped as b10621's server_slot::to_json()."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..engine.types import SlotRecord
from ..errors import NO_SLOT_AVAILABLE, SLOTS_DISABLED, ErrorKind, UpstreamError
from .jsonio import UpstreamJSON

router = APIRouter()


def slot_json(r: SlotRecord, tokenizer, debug: bool) -> dict:
    out = {"id": r.id, "n_ctx": r.n_ctx, "speculative": False, "is_processing": r.is_processing}
    if r.id_task is None:  # the slot never ran a task
        return out
    out.update(
        {
            "id_task": r.id_task,
            "n_prompt_tokens": r.n_prompt_tokens,
            "n_prompt_tokens_processed": r.n_prompt_tokens_processed,
            "n_prompt_tokens_cache": r.n_prompt_tokens_cache,
            "params": r.params,
            "next_token": [
                {
                    "has_next_token": r.has_next_token,
                    "has_new_line": r.has_new_line,
                    "n_remain": r.n_remain,
                    "n_decoded": r.n_decoded,
                }
            ],
        }
    )
    if debug:  # LLAMA_SERVER_SLOTS_DEBUG: b10621's gate on showing text
        out["prompt"] = tokenizer.detokenize(r.prompt_tokens, special=True)
        out["generated"] = bytes(r.generated).decode("utf-8", "replace")
    return out


@router.get("/slots")
async def get_slots(request: Request):
    state = request.app.state.mlxcel
    if not state.settings.endpoint_slots:
        raise UpstreamError(SLOTS_DISABLED, ErrorKind.NOT_SUPPORTED)
    records = state.engine.slots()
    if request.query_params.get("fail_on_no_slot") and all(r.is_processing for r in records):
        raise UpstreamError(NO_SLOT_AVAILABLE, ErrorKind.UNAVAILABLE)
    return UpstreamJSON([slot_json(r, state.tokenizer, state.settings.slots_debug) for r in records])
