"""The routes b10621 registers only to refuse: /tools and /cors-proxy answer its res_403 stub unless
--tools / --ui-mcp-proxy enable them (mlxcel refuses those options at startup)."""

from __future__ import annotations

from fastapi import APIRouter

from ..errors import FEATURE_DISABLED_BODY
from .jsonio import UpstreamJSON

router = APIRouter()


@router.get("/tools")
@router.post("/tools")
@router.get("/cors-proxy")
@router.post("/cors-proxy")
async def feature_disabled():
    return UpstreamJSON(FEATURE_DISABLED_BODY, status_code=403)
