"""The routes b10621 registers only to refuse: /tools answers its res_403 stub unless --tools or MCP servers enable
it (mlxcel refuses those options at startup), /cors-proxy unless --ui-mcp-proxy serves it (api/cors_proxy.py)."""

from __future__ import annotations

from fastapi import APIRouter

from ..errors import FEATURE_DISABLED_BODY
from .jsonio import UpstreamJSON

router = APIRouter()  # /tools
proxy_router = APIRouter()  # /cors-proxy, without --ui-mcp-proxy


async def feature_disabled():
    return UpstreamJSON(FEATURE_DISABLED_BODY, status_code=403)


for _path, _on in (("/tools", router), ("/cors-proxy", proxy_router)):
    _on.add_api_route(_path, feature_disabled, methods=["GET", "POST"])
