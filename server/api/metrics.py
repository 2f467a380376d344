"""GET /metrics (--metrics): b10621's Prometheus text, llamacpp: families name for name, then mlxcel's own;
the Process-Start-Time-Unix header; 501 in b10621's words when the endpoint is off."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import METRICS_DISABLED, ErrorKind, UpstreamError

router = APIRouter()
CONTENT_TYPE = "text/plain; version=0.0.4"


class MetricsText(Response):
    def init_headers(self, headers=None) -> None:  # upstream's content-type, without a charset
        super().init_headers(headers)
        self.headers["content-type"] = CONTENT_TYPE


@router.get("/metrics")
async def get_metrics(request: Request):
    state = request.app.state.mlxcel
    if not state.settings.endpoint_metrics:
        raise UpstreamError(METRICS_DISABLED, ErrorKind.NOT_SUPPORTED)
    engine = state.engine
    text = engine.metrics_text()
    return MetricsText(text.encode(), headers={"Process-Start-Time-Unix": str(engine.metrics.t_start)})
