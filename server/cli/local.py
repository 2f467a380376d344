"""A served model without the HTTP server, for the commands that talk to it in this process (`mlxcel generate`,
`mlxcel chat`), as b10621's llama-cli runs its server in process: the same command line, checks, engine and
request defaults as `mlxcel-server` builds (server/cli/startup.py build_state), answered by the same handlers.

The commands' own options (-p, -f, -sys, ...) are taken off the command line first; the rest is llama-server's."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .. import blas
from ..cpu_threads import ThreadConfig
from .args import build_parser
from .classify import refusals

log = logging.getLogger("mlxcel")

WARNINGS_ONLY = 2  # -lv 2: the commands print what the model says, not the loader's progress (-v shows it)


@dataclass(frozen=True)
class Own:
    """One of a command's own options: its exact spellings, and whether it takes a value (else a flag)."""

    dest: str
    spellings: tuple[str, ...]
    value: bool = True


class OptionError(ValueError):
    pass


def take_own(argv: list[str], options: tuple[Own, ...]) -> tuple[dict, list[str]]:
    """The command's own options taken off argv by exact spelling (`-p X`, `--prompt=X`), and the rest in its
    order for llama-server's parser. (argparse would read llama-server's `-fa on` as `-f a`, `-hf` as `-h -f`.)"""
    by = {s: o for o in options for s in o.spellings}
    got: dict = {o.dest: (None if o.value else False) for o in options}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        own = by.get(argv[i]) or (by.get(name) if eq and name.startswith("--") else None)
        if own is None:
            rest.append(argv[i])
        elif not own.value:
            got[own.dest] = True
        elif eq and own is by.get(name):
            got[own.dest] = inline
        elif i + 1 < len(argv):
            i += 1
            got[own.dest] = argv[i]
        else:
            raise OptionError(f"error: {argv[i]} expects a value")
        i += 1
    return got, rest


def command_line(argv: list[str], options: tuple[Own, ...], prog: str, usage: str) -> tuple[dict, list[str]] | int:
    """A command's own options (one with dest "help" prints `usage`) and llama-server's rest; or the exit status
    after the usage or a one-line error."""
    try:
        own, rest = take_own(argv, options)
    except OptionError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if own.get("help"):
        print(usage, end="")
        return 0
    return own, rest


@dataclass
class Local:
    """A loaded model's server state (api/state.py AppState) and the command line it came from."""

    args: argparse.Namespace
    state: object

    def stop(self) -> None:
        self.state.engine.stop(wait=30)


def load(argv: list[str], prog: str) -> Local | int:
    """The model the command line names, loaded (the engine ready) with its server state; else the exit status
    after the one-line error the server prints."""
    from .main import _apply_process_options, _model_source  # deferred: main imports this module lazily (a cycle)

    args = build_parser(prog).parse_args(argv)
    args.ui = False  # (no web UI here: nothing listens)
    if not args.model and not args.hf_repo:
        print(f"{prog}: error: -m MODEL (or -hf REPO) names the model", file=sys.stderr)
        return 2
    blas.activate()  # before anything imports mlx
    threads = ThreadConfig.from_args(args)
    refused = [*refusals(args.given), *filter(None, [threads.refusal()])]
    if refused:
        print("\n".join(refused), file=sys.stderr)
        return 1
    # deferred: the log sinks' and the HTTP layer's settings, once the command line is accepted (as serve())
    from ..api.auth import AuthConfig
    from ..api.cors import CorsConfig
    from ..api.vertex_settings import VertexSettings
    from ..logs import LogConfig, LogConfigError, LogFileError, collect_secrets, configure_logging
    from ..models import hub

    if not any(g.option in ("--verbose", "--log-verbosity", "--log-disable") for g in args.given):
        args.verbosity = WARNINGS_ONLY
    try:
        configure_logging(LogConfig.from_args(args), collect_secrets(args))
        auth, cors = AuthConfig.from_args(args), CorsConfig.from_args(args)
    except (LogConfigError, LogFileError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    _apply_process_options(args, threads)
    if not _model_source(args, hub):
        return 1
    from .startup import StartupRefusal, build_state  # deferred: mlx and the model's modules

    blas.verify()
    try:
        state = build_state(args, prog, auth, cors, VertexSettings())
    except StartupRefusal as exc:
        print(exc.text, file=sys.stderr)
        return 1
    state.engine.ready.wait()
    if state.engine.load_error:
        print(f"{prog}: error: {state.engine.load_error}", file=sys.stderr)
        state.engine.stop(wait=30)
        return 1
    return Local(args, state)


async def sse_objects(response) -> AsyncIterator[dict]:
    """The JSON objects of a streamed answer's `data:` frames (pings and [DONE] skipped)."""
    pending = b""
    async for chunk in response.body_iterator:
        pending += chunk if isinstance(chunk, bytes) else chunk.encode()
        *frames, pending = pending.split(b"\n\n")
        for frame in frames:
            for line in frame.split(b"\n"):
                if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                    yield json.loads(line[6:])


def speeds(timings: dict) -> str:
    """llama-cli's line after an answer, with the token counts."""
    return (
        f"[ Prompt: {timings.get('prompt_n', 0)} tokens, {timings.get('prompt_per_second', 0.0):.1f} t/s | "
        f"Generation: {timings.get('predicted_n', 0)} tokens, {timings.get('predicted_per_second', 0.0):.1f} t/s ]"
    )
