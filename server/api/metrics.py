"""GET /metrics (--metrics): b10621's Prometheus text, llamacpp: families name for name, then mlxcel's own;
the Process-Start-Time-Unix header; 501 in b10621's words when the endpoint is off."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import METRICS_DISABLED, ErrorKind, UpstreamError
from .prometheus import render_ranks, render_snapshot

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
    between = getattr(engine, "metrics_between_steps", None)  # (the encoder's worker reads its figures at once)
    snapshot = await asyncio.wrap_future(between()) if between is not None else engine.metrics_snapshot()
    text = render_snapshot(snapshot)
    if getattr(engine, "rank_seconds", None) is not None:  # (the encoder's worker has no ranks)
        text += render_ranks(await asyncio.to_thread(engine.rank_seconds))  # (waits for the pass in flight)
    response = MetricsText(text.encode())
    # spelled as b10621 spells it (Starlette lowercases the names it is given): a client reading the headers
    # into a plain dict looks it up by that spelling
    response.raw_headers.insert(0, (b"Process-Start-Time-Unix", str(engine.metrics.t_start).encode()))
    return response
