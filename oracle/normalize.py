"""Named, justified normalizations. Values may be masked; keys, types, order and presence never are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Normalization:
    path: str  # a JSON path ("$.timings.*" masks every value under timings)
    reason: str


NATIVE_COMPLETION = (
    Normalization("$.timings.*", "wall-clock durations and rates"),
    Normalization("$.id_slot", "b10621 defaults to 4 parallel slots and picks one; mlxcel has one slot so far"),
)
MASK = "<masked>"


def _matches(path: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return path.startswith(pattern[:-2] + ".") or path.startswith(pattern[:-2] + "[")
    return path == pattern


def normalize(value: Any, rules: tuple[Normalization, ...], path: str = "$") -> Any:
    """Mask the values that rules name; a masked value keeps its JSON type as a marker."""
    if any(_matches(path, r.path) for r in rules):
        return (MASK, type(value).__name__)
    if isinstance(value, dict):
        return {k: normalize(v, rules, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, rules, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
