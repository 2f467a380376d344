"""GET /health and /v1/health: 200 {"status":"ok"} when ready (loading is answered by the middleware)."""

from fastapi import APIRouter

from .jsonio import UpstreamJSON

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
async def health() -> UpstreamJSON:
    return UpstreamJSON({"status": "ok"})
