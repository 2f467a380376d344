"""What a first start says while it fetches and converts a model (seconds of work, once): a line as each step
starts, progress during it, a line when it is done. Lines go through the log (stderr, in the server's format)."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger("mlxcel.models")
TICK_SECONDS = 1.0  # how often a running fetch reports the bytes it has so far
STEPS = 4  # a conversion reports each quarter of its tensors


def bytes_under(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # a part file renamed away between the walk and the stat
                pass
    return total


def watch_fetch(proc: subprocess.Popen, into: Path, what: str) -> int:
    """Wait for a fetching process, saying every TICK_SECONDS how much it has written under `into`; returns
    its exit status."""
    started = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=TICK_SECONDS)
        except subprocess.TimeoutExpired:
            log.info("fetching %s: %.1f MB so far (%.0f s)", what, bytes_under(into) / 1e6, time.monotonic() - started)


def conversion_progress(what: str) -> Callable[[str, int, int], None]:
    """convert_gguf's progress callback: while the header is read, its bytes every TICK_SECONDS; then the
    tensors converted, at each quarter and every TICK_SECONDS."""
    said = {"step": 0, "at": time.monotonic()}

    def progress(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage == "header":
            if done >= total:
                log.info(
                    "converting %s: read its header (%.1f MB: the vocabulary and the tensor list)", what, total / 1e6
                )
            elif now - said["at"] >= TICK_SECONDS:
                log.info(
                    "converting %s: read %.1f of the header's %.1f MB (its vocabulary)", what, done / 1e6, total / 1e6
                )
            else:
                return
            said["at"] = now
            return
        step = done * STEPS // max(total, 1)
        if step > said["step"] or now - said["at"] >= TICK_SECONDS:
            said["step"], said["at"] = max(step, said["step"]), now
            log.info("converting %s: %d/%d tensors", what, done, total)

    return progress
