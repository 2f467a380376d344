"""The b10621 options mlxcel parses today. Spellings, env bindings and defaults as in common/arg.cpp."""

from __future__ import annotations

import argparse
import os


def _env_default(var: str, default, cast=str):
    raw = os.environ.get(var)
    return default if raw is None else cast(raw)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="mlxcel: an MLX-backed llama-server (b10621)")
    p.add_argument("-m", "--model", default=_env_default("LLAMA_ARG_MODEL", None),
                   help="model: an MLX checkpoint directory or a model store name (env: LLAMA_ARG_MODEL)")
    p.add_argument("-a", "--alias", default=_env_default("LLAMA_ARG_ALIAS", None),
                   help="model name reported in responses (env: LLAMA_ARG_ALIAS)")
    p.add_argument("--host", default=_env_default("LLAMA_ARG_HOST", "127.0.0.1"),
                   help="address to listen on (default: 127.0.0.1) (env: LLAMA_ARG_HOST)")
    p.add_argument("--port", type=int, default=_env_default("LLAMA_ARG_PORT", 8080, int),
                   help="port to listen on (default: 8080) (env: LLAMA_ARG_PORT)")
    p.add_argument("-c", "--ctx-size", type=int, default=_env_default("LLAMA_ARG_CTX_SIZE", 0, int),
                   help="size of the prompt context (default: 0, 0 = loaded from model) (env: LLAMA_ARG_CTX_SIZE)")
    return p
