"""The reliability suites' figures (issue 10): each suite adds its counts here; the run prints them at the end
and writes them to reliability-figures.json (in MLXCEL_REPORT_DIR, default .reports/)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

FIGURES: dict[str, dict] = defaultdict(dict)


def add(suite: str, **counts) -> None:
    """Add counts (numbers add up, anything else is replaced) to a suite's figures."""
    mine = FIGURES[suite]
    for key, value in counts.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(mine.get(key), (int, float)):
            mine[key] += value
        else:
            mine[key] = value


def report_path() -> Path:
    return Path(os.environ.get("MLXCEL_REPORT_DIR", ".reports")) / "reliability-figures.json"


def write() -> Path | None:
    if not FIGURES:
        return None
    path = report_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(FIGURES, indent=1, sort_keys=True) + "\n")
    return path


def lines() -> list[str]:
    out = []
    for suite in sorted(FIGURES):
        counts = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in FIGURES[suite].items())
        out.append(f"{suite}: {counts}")
    return out
