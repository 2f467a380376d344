"""Every route b10621 serves (the manifest's route entries) and mlxcel's own, as the reliability suites use them."""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = Path(__file__).resolve().parents[2] / "compat" / "llama-server" / "b10621"
MLXCEL_ONLY = [("POST", "/mlxcel/score", True)]


def _manifest_routes() -> list[tuple[str, str, bool]]:
    out = []
    for shard in sorted(MANIFEST.glob("*.json")):
        doc = json.loads(shard.read_text())
        for e in doc.get("entries", []) if isinstance(doc, dict) else []:
            if e.get("kind") == "route":
                method, path = e["id"].split(" ", 1)
                out.append((method, path, e["state"] not in ("deferred", "not_applicable")))
    return sorted(out)


ROUTES: list[tuple[str, str, bool]] = _manifest_routes() + MLXCEL_ONLY  # (method, path, served by mlxcel)


def path_of(route: str) -> str:
    """A concrete path for a route pattern (its parameters filled in)."""
    return route.replace(":id_slot", "0")
