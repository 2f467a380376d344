"""mlxcel's identity as b10621's build_info and media marker report it."""

from __future__ import annotations

import os
import secrets
import string
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version

UPSTREAM_BUILD = 10621


@lru_cache(maxsize=1)
def build_info() -> str:
    """b<build>-<commit> upstream; mlxcel names the release it follows and its own version."""
    try:
        mine = version("mlxcel")
    except PackageNotFoundError:
        mine = "unknown"
    return f"b{UPSTREAM_BUILD}-mlxcel-{mine}"


@lru_cache(maxsize=1)
def media_marker() -> str:
    """get_media_marker(): random per process unless LLAMA_MEDIA_MARKER pins it."""
    pinned = os.environ.get("LLAMA_MEDIA_MARKER")
    if pinned:
        return pinned
    alphabet = string.digits + string.ascii_letters
    return "<__media_" + "".join(secrets.choice(alphabet) for _ in range(32)) + "__>"
