"""--log-prompts-dir: each completion's prompt written to a file, as b10621's handle_completions_impl writes it
(server-context.cpp): <dir>/<milliseconds since start, 12 digits>.txt holding the prompt as given (a string as it
is, token ids or mixed prompts as JSON indented by 2); a file that cannot be created is logged, the request goes
on. The directory is made at startup (`make_dir`, b10621's argument handler)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("mlxcel")

_START = time.monotonic()  # (ggml_time_init: the process's start, near enough)


def make_dir(directory: str) -> None:
    """Created if missing; b10621's warning where it cannot be (the server starts anyway)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        print(f"warning: failed to create prompts-log-dir '{directory}': {exc.strerror}", flush=True)


def write(directory: str, prompt: object) -> None:
    """The prompt's file, named by the milliseconds since start (a file of the same millisecond is replaced)."""
    path = Path(directory) / f"{int((time.monotonic() - _START) * 1000):012d}.txt"
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, indent=2, ensure_ascii=False)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError:
        log.error("failed to create %s", path)
