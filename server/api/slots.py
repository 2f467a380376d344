"""GET /slots: the live slot registry, shaped as b10621's server_slot::to_json(); POST /slots/:id_slot with
?action=save|restore|erase (--slot-save-path), b10621's handle_slots_* with mlxcel's slot files."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from ..engine import slot_files
from ..engine.types import SlotAction, SlotActionError, SlotRecord
from ..errors import (
    INVALID_FILENAME,
    INVALID_SLOT_ACTION,
    INVALID_SLOT_ID,
    NO_SLOT_AVAILABLE,
    SLOT_ACTIONS_DISABLED,
    SLOTS_DISABLED,
    ErrorKind,
    UpstreamError,
    type_error,
)
from ..textparse import stoi
from .jsonio import UpstreamJSON, read_json

router = APIRouter()


def slot_json(r: SlotRecord, tokenizer, debug: bool, speculative: bool = False) -> dict:
    out: dict[str, object] = {
        "id": r.id,
        "n_ctx": r.n_ctx,
        "speculative": speculative,
        "is_processing": r.is_processing,
    }
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
    return UpstreamJSON(
        [
            slot_json(r, state.tokenizer, state.settings.slots_debug, getattr(state.engine, "drafting", False))
            for r in records
        ]
    )


async def _filename(request: Request) -> str:
    body = await read_json(request)
    if not isinstance(body, dict) or "filename" not in body:  # request_data.at("filename")
        raise UpstreamError("[json.exception.out_of_range.403] key 'filename' not found", ErrorKind.SERVER)
    name = body["filename"]
    if not isinstance(name, str):
        raise UpstreamError(type_error("string", name), ErrorKind.SERVER)
    if not slot_files.valid_filename(name):
        raise UpstreamError(INVALID_FILENAME, ErrorKind.INVALID_REQUEST)
    return name


@router.post("/slots/{id_slot}")
async def post_slots(request: Request, id_slot: str):
    state = request.app.state.mlxcel
    directory = state.settings.slot_save_path
    if not directory:
        raise UpstreamError(SLOT_ACTIONS_DISABLED, ErrorKind.NOT_SUPPORTED)
    try:
        slot = stoi(id_slot)  # std::stoi
    except ValueError:
        raise UpstreamError(INVALID_SLOT_ID, ErrorKind.INVALID_REQUEST) from None
    action = request.query_params.get("action", "")
    if action not in ("save", "restore", "erase"):
        raise UpstreamError(INVALID_SLOT_ACTION, ErrorKind.INVALID_REQUEST)
    path, filename = None, ""
    if action != "erase":
        filename = await _filename(request)
        try:
            path = slot_files.confined(directory, filename)
        except slot_files.SlotFileError:  # a symlink out of the directory: as invalid as a bad name
            raise UpstreamError(INVALID_FILENAME, ErrorKind.INVALID_REQUEST) from None
    future = state.engine.slot_action(SlotAction(action, slot, path, state.slot_identity))
    try:
        result = await asyncio.wrap_future(future)
    except SlotActionError as exc:
        raise UpstreamError(exc.message, ErrorKind[exc.kind]) from None
    if action == "erase":
        return UpstreamJSON({"id_slot": slot, "n_erased": result["n_erased"]})
    if action == "save":
        return UpstreamJSON(
            {
                "id_slot": slot,
                "filename": filename,
                "n_saved": result["n_tokens"],
                "n_written": result["n_bytes"],
                "timings": {"save_ms": result["t_ms"]},
            }
        )
    return UpstreamJSON(
        {
            "id_slot": slot,
            "filename": filename,
            "n_restored": result["n_tokens"],
            "n_read": result["n_bytes"],
            "timings": {"restore_ms": result["t_ms"]},
        }
    )
