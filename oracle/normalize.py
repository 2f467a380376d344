"""Named, justified normalizations. Values may be masked; keys, types, order and presence never are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Normalization:
    name: str
    paths: tuple[str, ...]  # JSON paths; "$.timings.*" masks every value under timings
    reason: str


REGISTRY: dict[str, Normalization] = {n.name: n for n in (
    Normalization("timings", ("$.timings.*",), "wall-clock durations and rates"),
    Normalization("id_slot", ("$.id_slot",),
                  "b10621 runs 4 parallel slots by default and picks one; mlxcel has one slot so far"),
    Normalization("progress_time", ("$.prompt_progress.time_ms",), "a clock"),
    Normalization("created", ("$.created",), "a clock"),
    Normalization("completion_id", ("$.id",), "random per response"),
    Normalization("system_fingerprint", ("$.system_fingerprint",), "the build's identity string"),
    Normalization("model_path", ("$.model_path",), "the GGUF path versus the MLX checkpoint path"),
    Normalization("build_info", ("$.build_info",), "the build's identity string (b<build>-<commit> upstream)"),
)}
MASK = "<masked>"


def _matches(path: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return path.startswith(pattern[:-2] + ".") or path.startswith(pattern[:-2] + "[")
    return path == pattern


def normalize(value: Any, names: tuple[str, ...], fired: set[str] | None = None, path: str = "$") -> Any:
    """Mask the values the named rules cover; a masked value keeps its JSON type as a marker.

    `fired` collects the names of the rules that masked something.
    """
    for name in names:
        if any(_matches(path, p) for p in REGISTRY[name].paths):
            if fired is not None:
                fired.add(name)
            return [MASK, type(value).__name__]
    if isinstance(value, dict):
        return {k: normalize(v, names, fired, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, names, fired, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
