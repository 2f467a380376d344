"""Router mode: `mlxcel-server` started without a model serves b10621's router surface over an in-process pool."""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Callable

from ..api.state import ServerSettings
from ..api.webui_settings import WebUI
from ..logs import uvicorn_log_settings
from ..models import hub
from ..textparse import TRUTHY
from ..transport import HttpServer, TransportError, announce_listening
from .app import create_router_app
from .catalog import Entry, load_catalog, router_preset
from .pool import Loaded, ModelPool
from .presets import LOAD_ON_STARTUP, PresetError

log = logging.getLogger("mlxcel.router")

CHILD_ADDR = "127.0.0.1"


def program_path() -> str:
    """What status.args names as the program a model is served with (b10621: the server's own binary)."""
    return shutil.which("mlxcel-server") or sys.argv[0]


def serve_router(
    args,
    argv: list[str],
    prog: str,
    serve_config,
    auth,
    cors,
    load_model: Callable[[Entry, list[str]], Loaded],
    ui: WebUI | None = None,
    agent: tuple[tuple, bool, bool, object] = ((), False, False, None),
) -> int:
    """Serve the router until it stops (agent: the tools, whether /tools is on, whether the CORS proxy is, and
    the tools runtime, as the CLI resolved them). load_model(entry, model_argv) serves one model of the pool in this
    process as that command line would (the CLI's, server/cli/startup.py's router_model: the router reads no
    command line of its own)."""
    program = program_path()
    try:
        router = router_preset(argv)
    except PresetError as exc:
        print(f"{prog}: error: {exc}".rstrip(), file=sys.stderr)
        return 1

    def catalog():
        return load_catalog(hub.store_root(), args.models_dir or "", args.models_preset or "", router)

    def render(entry) -> list[str]:
        """update_args: the model's preset with the address and its name as alias, as a command line."""
        preset = entry.preset.copy()
        preset.set("LLAMA_ARG_HOST", CHILD_ADDR)
        preset.set("LLAMA_ARG_PORT", "0")  # in process: no port of its own
        preset.set("LLAMA_ARG_ALIAS", entry.name)
        return [program, *preset.to_argv()]

    try:
        pool = ModelPool(catalog, load_model, render, models_max=args.models_max, autoload=args.models_autoload)
    except (PresetError, OSError) as exc:
        log.error("failed to initialize router models: %s", str(exc).strip())
        return 1
    startup = [i.name for i in pool.snapshot() if i.entry.preset.options.get(LOAD_ON_STARTUP, "") in TRUTHY]
    if args.models_max > 0 and len(startup) > args.models_max:
        log.error(
            "failed to load models on startup: number of models to load on startup (%d) exceeds models_max (%d)",
            len(startup),
            args.models_max,
        )
        return 1
    log.info("Available models (%d)", len(pool.instances))
    for inst in pool.snapshot():
        log.info("  %s (%s)", inst.name, inst.entry.source)
    settings = ServerSettings(
        auth=auth,
        cors=cors,
        api_prefix=args.api_prefix or "",
        webui=ui or WebUI(enabled=False),
        static_path=args.path or "",
        tools=agent[0],
        tools_on=agent[1],
        mcp_proxy=agent[2],
        tools_runtime=agent[3],
    )
    app = create_router_app(pool, settings)
    try:
        server = HttpServer(app, serve_config, announce=None, uvicorn_options=uvicorn_log_settings())
    except TransportError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    log.info("starting server in router mode. models will be automatically loaded on-demand")
    announce_listening(server.address)
    for name in startup:
        pool.load(name)
    try:
        server.run()
    finally:
        pool.unload_all()
    return 0
