"""The b10621 options mlxcel parses today. Spellings, env bindings and defaults as in common/arg.cpp."""

from __future__ import annotations

import argparse
import os

from .surface import DUMP_FLAG


def _env_default(var: str, default, cast=str):
    raw = os.environ.get(var)
    return default if raw is None else cast(raw)


def _env_flag(raw: str) -> bool:
    """A value-less flag's environment binding fires only for these values (common/arg.cpp)."""
    return raw.strip().lower() in ("on", "enabled", "true", "1")


def _env_bool(raw: str) -> bool:
    """common/arg.cpp's boolean environment values."""
    value = raw.strip().lower()
    if value in ("1", "true", "on", "enabled", "yes"):
        return True
    if value in ("0", "false", "off", "disabled", "no"):
        return False
    raise ValueError(f"invalid boolean value '{raw}'")


class _NegatableFlag(argparse.Action):
    """A flag with positive and negative spellings (-cb/--cont-batching, -nocb/--no-cont-batching)."""

    def __init__(self, option_strings, dest, type=None, **kw):  # noqa: A002 - argparse's keyword
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not (option_string.startswith("-no") or option_string.startswith("--no-")))


def _add(p: argparse.ArgumentParser, *spellings: str, env: str | None = None, **kw) -> None:
    """Add an option; `env` names its LLAMA_ARG_* binding (read here, recorded for --dump-flag-surface)."""
    declared = kw.get("default")
    if env is not None:
        kw["default"] = _env_default(env, declared, kw.get("type") or str)
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
    _add(p, "-np", "--parallel", env="LLAMA_ARG_N_PARALLEL", type=int, default=-1,
         help="number of server slots (default: -1, -1 = auto)")
    _add(p, "-b", "--batch-size", env="LLAMA_ARG_BATCH", type=int, default=2048,
         help="logical maximum batch size (default: 2048)")
    _add(p, "-cb", "--cont-batching", "-nocb", "--no-cont-batching", env="LLAMA_ARG_CONT_BATCHING",
         action=_NegatableFlag, default=True, type=_env_bool,
         help="whether to enable continuous batching (a.k.a dynamic batching) (default: enabled)")
    _add(p, "-ub", "--ubatch-size", env="LLAMA_ARG_UBATCH", type=int, default=512,
         help="physical maximum batch size (default: 512)")
    _add(p, "--cache-prompt", "--no-cache-prompt", env="LLAMA_ARG_CACHE_PROMPT", action=_NegatableFlag,
         default=True, type=_env_bool, help="whether to enable prompt caching (default: enabled)")
    _add(p, "-cram", "--cache-ram", env="LLAMA_ARG_CACHE_RAM", type=int, default=8192,
         help="set the maximum cache size in MiB (default: 8192, -1 - no limit, 0 - disable)")
    _add(p, "--context-shift", "--no-context-shift", env="LLAMA_ARG_CONTEXT_SHIFT", action=_NegatableFlag,
         default=False, type=_env_bool,
         help="whether to use context shift on infinite text generation (default: disabled)")
    _add(p, "--keep", type=int, default=0,
         help="number of tokens to keep from the initial prompt (default: 0, -1 = all)")
    _add(p, "--sse-ping-interval", env="LLAMA_ARG_SSE_PING_INTERVAL", type=int, default=30,
         help="server SSE ping interval in seconds (-1 = disabled, default: 30)")
    _add(p, "-n", "--predict", "--n-predict", env="LLAMA_ARG_N_PREDICT", type=int, default=-1,
         help="number of tokens to predict (default: -1, -1 = infinity)")
    _add(p, "-r", "--reverse-prompt", action="append", default=None,
         help="halt generation at PROMPT (repeatable); the server's default stop strings")
    _add(p, "-sp", "--special", action="store_true", default=False,
         help="special tokens output enabled (default: false)")
    _add(p, "--slots", "--no-slots", env="LLAMA_ARG_ENDPOINT_SLOTS", action=_NegatableFlag, default=True,
         type=_env_bool, help="expose slots monitoring endpoint (default: enabled)")
    _add(p, "--props", env="LLAMA_ARG_ENDPOINT_PROPS", action=_NegatableFlag, default=False, type=_env_flag,
         help="enable changing global properties via POST /props (default: disabled)")
    p.add_argument(DUMP_FLAG, action="store_true", help=argparse.SUPPRESS)
    return p
