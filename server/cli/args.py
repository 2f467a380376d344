"""The b10621 options mlxcel parses today. Spellings, env bindings and defaults as in common/arg.cpp."""

from __future__ import annotations

import argparse
import os

from .surface import DUMP_FLAG


def _env_default(var: str, default, cast=str):
    raw = os.environ.get(var)
    return default if raw is None else cast(raw)


def _add(p: argparse.ArgumentParser, *spellings: str, env: str | None = None, **kw) -> None:
    """Add an option; `env` names its LLAMA_ARG_* binding (read here, recorded for --dump-flag-surface)."""
    declared = kw.get("default")
    if env is not None:
        kw["default"] = _env_default(env, declared, kw.get("type", str))
        kw["help"] = f"{kw.get('help', '')} (env: {env})".strip()
    action = p.add_argument(*spellings, **kw)
    action.env = env
    action.declared_default = declared  # what --dump-flag-surface reports, whatever the environment says


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="mlxcel: an MLX-backed llama-server (b10621)")
    _add(p, "-m", "--model", env="LLAMA_ARG_MODEL", default=None,
         help="model: an MLX checkpoint directory or a model store name")
    _add(p, "-a", "--alias", env="LLAMA_ARG_ALIAS", default=None, help="model name reported in responses")
    _add(p, "--host", env="LLAMA_ARG_HOST", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    _add(p, "--port", env="LLAMA_ARG_PORT", type=int, default=8080, help="port to listen on (default: 8080)")
    _add(p, "-c", "--ctx-size", env="LLAMA_ARG_CTX_SIZE", type=int, default=0,
         help="size of the prompt context (default: 0, 0 = loaded from model)")
    p.add_argument(DUMP_FLAG, action="store_true", help=argparse.SUPPRESS)
    return p
