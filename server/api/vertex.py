"""Vertex AI's custom-container protocol, as b10621's register_gcp_compat: with AIP_MODE=PREDICTION the server
listens on AIP_HTTP_PORT, mounts the health route again at AIP_HEALTH_ROUTE, and answers AIP_PREDICT_ROUTE
(default /predict) by dispatching each of up to 128 instances to the route its @requestFormat names (a
registered path, or its camelCase alias: "/v1/chat/completions" -> "chatCompletions"), in order, with the
request's own headers, each answer (or error) in its place in {"predictions": [...]}."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request

from ..errors import ErrorKind, error_body
from .health import health
from .jsonio import UpstreamJSON, dumps, loads
from .vertex_settings import VertexSettings

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("mlxcel.api")
MAX_INSTANCES = 128


def request_format(path: str) -> str:
    """b10621's path_to_gcp_format: "/v1/chat/completions" -> "chatCompletions", up to a path parameter."""
    s = path[3:] if path.startswith("/v1") and len(path) > 3 else path
    s = s.removeprefix("/")
    out, cap = [], False
    for ch in s:
        if ch in ":{":
            break
        if ch in "/-_":
            cap = True
        else:
            out.append(ch.upper() if cap else ch)
            cap = False
    return "".join(out)


def _error(message: str, kind: ErrorKind) -> dict:
    return error_body(message, kind)


class RouteConflict(ValueError):
    pass


def register(app: FastAPI, vertex: VertexSettings, routes: set[tuple[str, str]]) -> None:  # noqa: C901
    """Mount the health alias and the predict route; `routes` are the (method, path) pairs served."""
    if any(path == vertex.predict_route for _, path in routes):
        raise RouteConflict(f"AIP_PREDICT_ROUTE={vertex.predict_route} conflicts with an existing llama-server route")
    methods: dict[str, str] = {}  # b10621 keys its handlers by path, and registers a path's GET first
    for method, path in sorted(routes):
        if method == "GET" or (method in ("POST", "DELETE") and path not in methods):
            methods[path] = method
    aliases: dict[str, str] = {}
    for path in sorted(methods, key=lambda p: (not p.startswith("/v1/"), p)):  # /v1/completions over /completions
        aliases.setdefault(request_format(path), path)
    if vertex.health_route:
        app.add_api_route(vertex.health_route, health, methods=["GET"])

    async def predict(request: Request) -> UpstreamJSON:
        try:
            data = loads(await request.body())
        except Exception as exc:  # noqa: BLE001 - the parser's own message, as b10621 sends nlohmann's
            return UpstreamJSON(_error(str(exc), ErrorKind.INVALID_REQUEST), status_code=400)
        if not isinstance(data, dict):
            return UpstreamJSON(
                _error("request body must be a JSON object", ErrorKind.INVALID_REQUEST), status_code=400
            )
        instances = data.get("instances")
        if not isinstance(instances, list):
            return UpstreamJSON(
                _error("request body must include an array field named instances", ErrorKind.INVALID_REQUEST),
                status_code=400,
            )
        if len(instances) > MAX_INSTANCES:
            return UpstreamJSON(
                _error(f"instances array exceeds maximum size of {MAX_INSTANCES}", ErrorKind.INVALID_REQUEST),
                status_code=400,
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("content-length", "host")}
        prefix = request.app.state.mlxcel.settings.api_prefix
        import httpx  # deferred: only a Vertex AI start answers /predict (~0.1 s of every start-up)

        transport = httpx.ASGITransport(app=request.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://predict", timeout=None) as client:
            answers = await asyncio.gather(
                *(_one(client, instance, aliases, methods, headers, prefix) for instance in instances)
            )
        return UpstreamJSON({"predictions": list(answers)})

    app.add_api_route(vertex.predict_route, predict, methods=["POST"])


async def _one(
    client: httpx.AsyncClient,
    instance,
    aliases: dict[str, str],
    methods: dict[str, str],
    headers: dict[str, str],
    prefix: str,
):
    if not isinstance(instance, dict):
        return _error("each instance must be a JSON object", ErrorKind.INVALID_REQUEST)
    fmt = instance.get("@requestFormat")
    if not isinstance(fmt, str):
        return _error("each instance must include a string @requestFormat", ErrorKind.INVALID_REQUEST)
    payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
    if "stream" in payload:
        log.warning("ignoring client-provided stream field in instance, streaming is not supported in predict route")
        payload["stream"] = False
    path = aliases.get(fmt) or (fmt if fmt in methods else None)
    if path is None:
        return _error(f"no handler registered for @requestFormat: {fmt}", ErrorKind.INVALID_REQUEST)
    try:
        r = await client.request(
            methods[path],
            prefix + path,
            content=dumps(payload),
            headers={**headers, "content-type": "application/json"},
        )
    except Exception as exc:  # noqa: BLE001 - one instance's failure stays in its place
        return _error(str(exc), ErrorKind.SERVER)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return _error("predict route does not support streaming responses", ErrorKind.INVALID_REQUEST)
    if not r.content:
        return None
    try:
        return loads(r.content)
    except Exception:  # noqa: BLE001 - a body that is not JSON goes in as a string
        return r.text
