"""The FastAPI application: middleware for upstream's loading state and error envelope, then routes."""

from __future__ import annotations

import logging
from types import ModuleType

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.base import BaseHTTPMiddleware

from ..errors import LOADING_MODEL, NOT_FOUND_BODY, ErrorKind, UpstreamError
from . import (
    anthropic,
    audio,
    chat,
    cors_proxy,
    disabled,
    embeddings,
    encoder_mode,
    health,
    infill,
    lora,
    metrics,
    models,
    native,
    oai_completions,
    props,
    rerank,
    responses,
    scoring,
    slots,
    static_path,
    stream_sessions,
    tokenize,
    tools,
    vertex,
    webui,
)
from .auth import AuthMiddleware
from .cors import CorsMiddleware
from .jsonio import UpstreamJSON, error_response
from .prefix import ApiPrefix
from .state import AppState, ServerSettings
from .wake import WakeOnRequest

log = logging.getLogger("mlxcel.api")


class LoadingGate(BaseHTTPMiddleware):
    """b10621's middleware_server_state: every route answers 503 "Loading model" until ready (but "/")."""

    async def dispatch(self, request: Request, call_next):
        state: AppState = request.app.state.mlxcel
        if request.scope["path"] in state.settings.webui.paths:  # upstream lets its UI load and show "loading"
            return await call_next(request)
        if not state.engine.ready.is_set() or state.engine.load_error:
            return error_response(UpstreamError(LOADING_MODEL, ErrorKind.UNAVAILABLE))
        return await call_next(request)


def create_app(state: AppState | None) -> FastAPI:  # noqa: C901
    # no slash redirects: b10621 answers /health/ with its 404, not a 307 to /health
    app = FastAPI(title="mlxcel", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    app.state.mlxcel = state
    settings = state.settings if state is not None else ServerSettings()
    # b10621's pre-routing order, outermost first: CORS (preflights answered), loading gate, API key, then
    # routes, mounted under --api-prefix only (Starlette: the last middleware added runs first)
    app.add_middleware(WakeOnRequest)  # innermost: after the API key, below the prefix
    if settings.static_path and settings.webui.enabled:  # --path: its files before any route (no built UI)
        app.add_middleware(static_path.StaticPath, directory=settings.static_path)
    if settings.api_prefix:
        app.add_middleware(ApiPrefix, prefix=settings.api_prefix)
    if settings.auth.enabled:
        app.add_middleware(AuthMiddleware, config=settings.auth, frontend=settings.webui.paths)
    app.add_middleware(LoadingGate)
    if settings.cors is not None:
        app.add_middleware(CorsMiddleware, config=settings.cors)
    app.add_middleware(stream_sessions.ConversationHeader)  # outermost: every task of the request sees it

    @app.exception_handler(UpstreamError)
    async def _upstream(_: Request, exc: UpstreamError):
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _not_found(_: Request, exc: StarletteHTTPException):
        # unknown paths and unknown methods alike: b10621 (cpp-httplib) answers 404 File Not Found
        return UpstreamJSON(NOT_FOUND_BODY, status_code=404)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        # b10621's ex_wrapper: any exception a handler lets out is a 500 in the error envelope, never a bare page
        log.exception("unexpected error while serving a request")
        return error_response(UpstreamError(f"{type(exc).__name__}: {exc}"[:500], ErrorKind.SERVER))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        return error_response(UpstreamError(str(exc), ErrorKind.INVALID_REQUEST))

    modules: tuple[ModuleType, ...]
    if settings.encoder is not None:  # --embeddings / --reranking: an encoder, nothing that generates
        modules = (health, models, tokenize, props, metrics, embeddings, rerank, encoder_mode, audio)
    else:
        modules = (
            health,
            models,
            tokenize,
            native,
            chat,
            oai_completions,
            anthropic,
            responses,
            infill,
            props,
            slots,
            scoring,
            metrics,
            embeddings,
            rerank,
            stream_sessions,
            lora,
            audio,
        )
    for module in modules:
        app.include_router(module.router)
    app.include_router(cors_proxy.router if settings.mcp_proxy else disabled.proxy_router)
    app.state.tools = list(settings.tools)
    app.state.tools_runtime = settings.tools_runtime
    app.include_router(tools.router if settings.tools_on else disabled.router)
    if not (settings.static_path and settings.webui.enabled):
        webui.register(app, settings.webui)
    if settings.vertex is not None and settings.vertex.enabled:  # AIP_MODE=PREDICTION (Vertex AI)
        vertex.register(app, settings.vertex, registered_routes(app))
    return app


def registered_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, through included routers."""
    out: set[tuple[str, str]] = set()

    def walk(routes) -> None:
        for r in routes:
            if hasattr(r, "original_router"):  # FastAPI >= 0.120 keeps included routers as a unit
                walk(r.original_router.routes)
            elif hasattr(r, "methods") and r.methods:
                out.update((m, r.path) for m in r.methods)

    walk(app.routes)
    return out
