"""Which manifest entries the oracle has seen only refuse: every corpus and startup case naming the entry has
b10621 answer 4xx/5xx (or exit non-zero) and mlxcel answer the same. A refusal both servers give shows that
mlxcel refuses as b10621 does, not that it does what the entry is for."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

CORPUS_POINTER = "conformance/test_corpus.py::test_corpus_case"
STARTUP_POINTER = "conformance/test_startup.py::test_startup_case"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


@lru_cache(maxsize=4)  # the recordings do not change within a run; the gate's tests validate many manifests
def case_outcomes(root: Path) -> dict[str, list[tuple[str, bool]]]:
    """entry id -> [(case, refused by both)] over the recorded corpus and startup cases."""
    out: dict[str, list[tuple[str, bool]]] = {}
    fixtures = root / "fixtures"
    for path in sorted((fixtures / "requests").glob("*.json")):
        case, rec = _load(path), _load(fixtures / "transcripts" / path.name)
        if rec is None:
            continue
        identical = case.get("expect", {"identical": True}).get("identical", True)
        refused = identical and rec["reference"]["status"] >= 400
        for e in case["entries"]:
            out.setdefault(e, []).append((path.stem, refused))
    for path in sorted((fixtures / "startup").glob("*.json")):
        case, rec = _load(path), _load(fixtures / "transcripts" / "startup" / path.name)
        if rec is None:
            continue
        identical = case.get("expect", {"identical": True}).get("identical", True)
        ref = rec["reference"]
        refused = identical and ref["outcome"] == "exits" and bool(ref["exit_status"])
        for e in case["entries"]:
            out.setdefault(e, []).append((f"startup {path.stem}", refused))
    return out


def refusal_only(entry: dict, outcomes: dict[str, list[tuple[str, bool]]]) -> list[str] | None:
    """The cases of a supported entry whose oracle evidence (its corpus or startup cases) is nothing but refusals
    both servers give, or None."""
    if entry.get("state") != "supported" or entry.get("test") not in (CORPUS_POINTER, STARTUP_POINTER):
        return None
    cases = outcomes.get(entry["id"], [])
    return [name for name, _ in cases] if cases and all(refused for _, refused in cases) else None
