"""The router's HTTP surface (b10621's server_models_routes): its own routes, and every model route handed to the
model a request names (the body's "model" on POST, ?model= on GET), loaded first when autoload allows."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from ..api import cors_proxy, disabled, static_path, tools, webui
from ..api.auth import AuthMiddleware
from ..api.cors import CorsMiddleware
from ..api.jsonio import UpstreamJSON, error_response, loads
from ..api.prefix import ApiPrefix
from ..api.state import ServerSettings
from ..build import build_info
from ..errors import NOT_FOUND_BODY, ErrorKind, UpstreamError
from ..models import hub
from .catalog import displayed_preset
from .pool import Instance, ModelPool, RouterError

# b10621's routes that the router hands to a model (server.cpp: proxy_post / proxy_get)
PROXIED_POST = (
    "/props",
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/audio/transcriptions",
    "/audio/transcriptions",
    "/v1/chat/completions",
    "/v1/chat/completions/control",
    "/v1/responses",
    "/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/infill",
    "/embedding",
    "/embeddings",
    "/v1/embeddings",
    "/rerank",
    "/reranking",
    "/v1/rerank",
    "/v1/reranking",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/chat/completions/input_tokens",
    "/v1/chat/completions/input_tokens",
    "/responses/input_tokens",
    "/v1/responses/input_tokens",
    "/lora-adapters",
    "/slots/{id_slot}",
)
PROXIED_GET = ("/metrics", "/lora-adapters", "/slots")


def _error(message: str, kind: str | ErrorKind = ErrorKind.INVALID_REQUEST) -> Response:
    kind = ErrorKind[kind] if isinstance(kind, str) else kind
    if kind is ErrorKind.NOT_FOUND:  # b10621's HTTP layer answers every 404 with its own body
        return UpstreamJSON(NOT_FOUND_BODY, status_code=404)
    return error_response(UpstreamError(message, kind))


async def _body_model(request: Request) -> tuple[bytes, str]:
    """The body, and json_value(body, "model", ""): its model when that is a string, else ""."""
    body = await request.body()
    data = loads(body)
    name = data.get("model") if isinstance(data, dict) else None
    return body, name if isinstance(name, str) else ""


def _autoload(pool: ModelPool, request: Request) -> bool:
    """is_autoload: ?autoload= (true or 1) when given, else --models-autoload."""
    value = request.query_params.get("autoload", "")
    return pool.autoload if not value else value in ("true", "1")


def _validate(pool: ModelPool, name: str, autoload: bool) -> tuple[str | None, Response | None]:
    """router_validate_model: the canonical name, or b10621's refusal."""
    if not name:
        return None, _error("model name is missing from the request")
    inst = pool.resolve(name)
    if inst is None:
        return None, _error(f"model '{name}' not found")
    if not autoload and not inst.running():
        return None, _error("model is not loaded")
    return inst.name, None


class Forward(Response):
    """The request handed to a model's own routes, in this process: the same scope, the body replayed."""

    def __init__(self, pool: ModelPool, inst: Instance, body: bytes):
        self.pool, self.inst, self.body = pool, inst, body
        self.background = None

    async def __call__(self, scope, receive, send) -> None:
        loaded = self.inst.loaded
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            return await receive()

        forwarded = {
            k: scope[k]
            for k in (
                "type",
                "asgi",
                "http_version",
                "method",
                "scheme",
                "path",
                "raw_path",
                "root_path",
                "query_string",
                "headers",
                "client",
                "server",
                "extensions",
            )
            if k in scope
        }
        try:
            await loaded.app(forwarded, replay, send)
        finally:
            self.pool.leave(self.inst)


def create_router_app(pool: ModelPool, settings) -> FastAPI:  # noqa: C901
    """settings: the router's ServerSettings (auth, CORS, prefix)."""
    app = FastAPI(title="mlxcel router", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    app.state.pool = pool
    static = bool(settings.static_path and settings.webui.enabled)  # --path: its files in place of the UI
    if static:  # (innermost: below the API key and the prefix, as in api/app.py)
        app.add_middleware(static_path.StaticPath, directory=settings.static_path)
    if settings.api_prefix:
        app.add_middleware(ApiPrefix, prefix=settings.api_prefix)
    if settings.auth.enabled:
        app.add_middleware(AuthMiddleware, config=settings.auth, frontend=settings.webui.paths)
    if settings.cors is not None:
        app.add_middleware(CorsMiddleware, config=settings.cors)
    if not static:
        webui.register(app, settings.webui)  # b10621's router serves its UI too (its model picker)

    @app.exception_handler(UpstreamError)
    async def _upstream(_: Request, exc: UpstreamError):
        return error_response(exc)

    @app.exception_handler(RouterError)
    async def _router(_: Request, exc: RouterError):
        return _error(str(exc), exc.kind)

    @app.exception_handler(StarletteHTTPException)
    async def _not_found(_: Request, exc: StarletteHTTPException):
        return UpstreamJSON(NOT_FOUND_BODY, status_code=404)

    async def forward(request: Request, name: str, body: bytes, autoload: bool, post: bool):
        canonical, refusal = _validate(pool, name, autoload)
        if refusal is not None:
            return refusal
        if autoload:
            await asyncio.to_thread(pool.ensure_ready, canonical)
        inst = pool.enter(canonical, update_last_used=post)  # b10621 counts a POST as use, not a GET
        return Forward(pool, inst, body)

    async def proxy_post(request: Request):
        body, name = await _body_model(request)
        return await forward(request, name, body, _autoload(pool, request), True)

    async def proxy_get(request: Request):
        return await forward(request, request.query_params.get("model", ""), b"", _autoload(pool, request), False)

    # b10621 registers /tools and /cors-proxy in router mode too: the CORS proxy with --ui-mcp-proxy, else its 403
    app.state.tools = list(settings.tools)
    app.state.tools_runtime = settings.tools_runtime
    app.include_router(tools.router if settings.tools_on else disabled.router)
    app.include_router(cors_proxy.router if settings.mcp_proxy else disabled.proxy_router)
    for path in PROXIED_POST:
        app.add_api_route(path, proxy_post, methods=["POST"])
    for path in PROXIED_GET:
        app.add_api_route(path, proxy_get, methods=["GET"])

    @app.get("/health")
    @app.get("/v1/health")
    async def health():
        return UpstreamJSON({"status": "ok"})

    @app.get("/props")
    async def props(request: Request):
        if request.query_params.get("model", ""):
            return await proxy_get(request)
        return UpstreamJSON(
            {
                "role": "router",
                "max_instances": pool.models_max,
                "models_autoload": pool.autoload,
                "model_alias": "llama-server",
                "model_path": "none",
                "default_generation_settings": {"params": None, "n_ctx": 0},
                "ui_settings": settings.webui.settings,
                "build_info": build_info(),
                "cors_proxy_enabled": settings.mcp_proxy,
            }
        )

    @app.get("/models")
    @app.get("/v1/models")
    async def models(request: Request):
        if request.query_params.get("reload", ""):
            await asyncio.to_thread(pool.reload)
        return UpstreamJSON({"data": [model_info(i) for i in pool.snapshot() if not i.entry.hidden], "object": "list"})

    @app.post("/models/load")
    async def load(request: Request):
        inst = pool.resolve((await _body_model(request))[1])
        if inst is None:
            return _error("model is not found", ErrorKind.NOT_FOUND)
        if inst.running():
            return _error("model is already running")
        await asyncio.to_thread(pool.load, inst.name)
        return UpstreamJSON({"success": True})

    @app.post("/models/unload")
    async def unload(request: Request):
        inst = pool.resolve((await _body_model(request))[1])
        if inst is None:
            return _error("model is not found")
        if not inst.running():
            return _error("model is not running")
        await asyncio.to_thread(pool.unload, inst.name)
        return UpstreamJSON({"success": True})

    @app.get("/models/sse")
    async def sse(request: Request):
        queue = pool.sse.subscribe()

        async def events():
            try:
                while not pool.stopping:
                    try:
                        event = await asyncio.wait_for(queue.get(), timeout=1.0)
                    except asyncio.TimeoutError:
                        if await request.is_disconnected():
                            return
                        continue
                    yield ("data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode()
            finally:
                pool.sse.unsubscribe(queue)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/models")
    async def download(request: Request):
        name = (await _body_model(request))[1]
        if not name:
            return _error("model must be a non-empty string")
        try:
            hub.check_repo(name)
            if hub.offline():
                raise hub.HubError(f"cannot download '{name}': offline mode (--offline) is on")
        except hub.HubError as exc:
            return _error(str(exc))
        pool.download(name, lambda repo, progress: hub.download(repo, on_progress=progress))
        return UpstreamJSON({"success": True})

    @app.delete("/models")
    async def remove(request: Request):
        name = request.query_params.get("model", "")
        if not name:
            return _error("model must be a non-empty string")
        await asyncio.to_thread(pool.remove, name, hub.remove_snapshot)
        return UpstreamJSON({"success": True})

    return app


def model_info(inst: Instance) -> dict[str, Any]:
    """One model of GET /models (get_router_models)."""
    status: dict[str, Any] = {"value": inst.current_status(), "args": list(inst.args)}
    preset = displayed_preset(inst.entry)
    if preset is not None:
        status["preset"] = preset
    if inst.failed():
        status["exit_code"] = inst.exit_code
        status["failed"] = True
    info: dict[str, Any] = {
        "id": inst.name,
        "aliases": list(inst.entry.aliases),
        "tags": list(inst.entry.tags),
        "object": "model",
        "owned_by": "llamacpp",
        "created": int(time.time()),
        "status": status,
        "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
        "source": inst.entry.source,
        "can_remove": inst.entry.source == "cache",
    }
    loaded = inst.loaded
    if inst.running() and loaded is not None:
        for k, v in loaded.info.items():
            info.setdefault(k, v)
    return info


def empty_router_app() -> FastAPI:
    """The router's routes over no models (what the manifest's claims gate inspects)."""
    return create_router_app(ModelPool(dict, None, lambda e: []), ServerSettings())
