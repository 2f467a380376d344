"""The speculative drafters' table in docs/speculative.md, from `mlxcel-oracle bench --speculative-only --drafters
...` JSON: per drafter, each server's plain and drafted one-stream decode (medians) and its own speedup."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(*paths: Path) -> str:
    """One table over several runs (a repetitive-text run's rows, then a free-text one's...)."""
    lines = [
        "| drafter | reference plain | reference drafted | reference speedup | mlxcel plain | mlxcel drafted "
        "| mlxcel speedup | acceptance |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for data in (json.loads(p.read_text()) for p in paths):
        lines += _rows(data)
    return "\n".join(lines)


def _rows(data: dict) -> list[str]:
    lines = []
    for kind, results in data["twins"].items():
        for name, r in results["speculative"].items():
            ref, mine = r["reference"], r["mlxcel"]
            acc = mine.get("draft_acceptance_draft", {}).get("median")
            lines.append(
                f"| {name} ({kind}, {r.get('prompts', 'free')}) | {ref['decode_tps_1_plain']['median']:.1f} "
                f"| {ref['decode_tps_1_draft']['median']:.1f} | {ref['speedup']:.2f} "
                f"| {mine['decode_tps_1_plain']['median']:.1f} | {mine['decode_tps_1_draft']['median']:.1f} "
                f"| {mine['speedup']:.2f} | {'-' if acc is None else f'{acc:.2f}'} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    print(table(*(Path(a) for a in (argv or sys.argv[1:]))))


if __name__ == "__main__":
    main()
