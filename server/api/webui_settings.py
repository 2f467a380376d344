"""The web UI's settings (--ui/--no-ui, --ui-config, the built assets' index), read at start without the HTTP
layer (server/api/webui.py serves them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

# the built tree (server/cli/webui_build.py): b10621's parallel tree of gzipped assets (scripts/ui-assets.cmake)
# and, in it, {name: ETag} as embed.cpp computes each
GZIP_DIR, ASSETS = "_gzip", "assets.json"
NO_CACHE = frozenset({"sw.js", "manifest.webmanifest", "_app/version.json", "build.json"})
CACHE_IMMUTABLE, CACHE_REVALIDATE = "public, max-age=31536000, immutable", "no-cache"
NO_GZIP = b"Error: gzip is not supported by this browser"
_TYPES = {  # embed.cpp's mime_from_ext
    "html": "text/html; charset=utf-8",
    "css": "text/css",
    "js": "application/javascript",
    "json": "application/json",
    "webmanifest": "application/manifest+json",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "ico": "image/x-icon",
    "woff": "font/woff",
    "woff2": "font/woff2",
}


def mime_type(name: str) -> str:
    ext = name.rsplit(".", 1)[1] if "." in name else ""
    return _TYPES.get(ext, "application/octet-stream")


@dataclass
class WebUI:
    """--ui/--no-ui and the built assets' directory (None: not built, no asset routes, as a b10621 built
    without its UI)."""

    enabled: bool = True
    dist: Path | None = None
    settings: dict = field(default_factory=dict)  # --ui-config / --ui-config-file: GET /props's ui_settings
    etags: dict[str, str] = field(default_factory=dict)  # asset name -> ETag (the build's index)

    def __post_init__(self) -> None:
        if self.enabled and self.dist is not None:
            self.etags = json.loads((self.dist / GZIP_DIR / ASSETS).read_text())

    @property
    def paths(self) -> frozenset[str]:
        """b10621's frontend_paths: "/" and every asset, public and served while loading."""
        return frozenset({"/", *(f"/{name}" for name in self.etags)})
