"""GET and POST /lora-adapters: the loaded adapters and the server's scales (b10621's GET_LORA / SET_LORA tasks)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from ..errors import LORA_FUSED, LORA_NOT_ARRAY, ErrorKind, UpstreamError
from .jsonio import UpstreamJSON, read_json
from .task_params import parse_lora_request

router = APIRouter()


@router.get("/lora-adapters")
async def get_lora_adapters(request: Request):
    return UpstreamJSON(
        [
            {"id": a.id, "path": a.path, "scale": a.scale, "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
            for a in request.app.state.mlxcel.engine.lora_adapters()
        ]
    )


@router.post("/lora-adapters")
async def post_lora_adapters(request: Request):
    body = await read_json(request)
    if not isinstance(body, list):
        raise UpstreamError(LORA_NOT_ARRAY, ErrorKind.INVALID_REQUEST)
    if request.app.state.mlxcel.engine.lora_fused:
        raise UpstreamError(LORA_FUSED, ErrorKind.INVALID_REQUEST)
    # listed ids take their scales, the others drop to 0.0, unknown ids are ignored: applied between two engine
    # steps, so a generation already admitted keeps its scales
    applied = await asyncio.wrap_future(request.app.state.mlxcel.engine.set_lora(parse_lora_request(body)))
    return UpstreamJSON({"success": applied})
