"""`mlxcel-oracle report`: per shard and state, the entries with evidence and the diffs found, with the
command that reproduces each one. Markdown and JSON."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path


def build_report(entries_by_shard: dict[str, list[dict]], records: list[dict]) -> dict:
    by_entry: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        for eid in r["entries"]:
            by_entry[eid].append(r)
    shards = {}
    for shard, entries in sorted(entries_by_shard.items()):
        states = Counter(e["state"] for e in entries)
        with_evidence = [e["id"] for e in entries if by_entry.get(e["id"])]
        diffs = [
            {
                "entry": e["id"],
                "state": e["state"],
                "case": r["case"],
                "first": (r["divergences"] or [{"path": "bytes", "kind": "bytes"}])[0],
                "reproduce": r["reproduce"],
            }
            for e in entries
            for r in by_entry.get(e["id"], [])
            if not r["identical"]
        ]
        shards[shard] = {
            "states": dict(sorted(states.items())),
            "entries": len(entries),
            "with_evidence": with_evidence,
            "diffs": diffs,
        }
    return {
        "cases": len(records),
        "identical": sum(r["identical"] for r in records),
        "shards": shards,
        "judged": judged_groups(records),
    }


def judged_groups(records: list[dict]) -> dict[str, dict]:
    """Per group of judged cases (oracle/judge.py): how many agree at every decided position, and the positions."""
    groups: dict[str, dict] = {}
    for r in records:
        j = r.get("judged")
        if not j:
            continue
        g = groups.setdefault(
            j["group"],
            {
                "cases": 0,
                "agreeing": 0,
                "generated": 0,
                "compared": 0,
                "agreed": 0,
                "decided": 0,
                "disagreements_at_decided": 0,
                "twins": set(),
            },
        )
        g["cases"] += 1
        g["agreeing"] += bool(r["identical"])  # every decided position agreed, and tokens were there to judge
        g["twins"].add(r["twin"])
        for k in ("generated", "compared", "agreed", "decided", "disagreements_at_decided"):
            g[k] += j[k]
    for g in groups.values():
        g["twins"] = sorted(g["twins"])
        g["case_agreement"] = g["agreeing"] / g["cases"]
        g["decided_agreement"] = 1 - g["disagreements_at_decided"] / g["decided"] if g["decided"] else None
    return dict(sorted(groups.items()))


def to_markdown(report: dict) -> str:
    lines = [
        "# mlxcel oracle report",
        "",
        f"{report['cases']} cases compared, {report['identical']} identical.",
        "",
        "| shard | entries | states | with evidence | diffs |",
        "|---|---|---|---|---|",
    ]
    for shard, s in report["shards"].items():
        states = ", ".join(f"{k} {v}" for k, v in s["states"].items())
        lines.append(f"| {shard} | {s['entries']} | {states} | {len(s['with_evidence'])} | {len(s['diffs'])} |")
    if report.get("judged"):
        lines += [
            "",
            "## Generation judged by the decided-position rule",
            "",
            "| group | twins | cases | agree at every decided position | decided positions agreed | "
            "tokens identical before the paths part |",
            "|---|---|---|---|---|---|",
        ]
        for group, g in report["judged"].items():
            decided = f"{g['decided'] - g['disagreements_at_decided']}/{g['decided']}"
            lines.append(
                f"| {group} | {', '.join(g['twins'])} | {g['cases']} | {g['agreeing']}/{g['cases']} "
                f"({g['case_agreement']:.0%}) | {decided} | {g['agreed']}/{g['generated']} |"
            )
    lines += ["", "## Differences", ""]
    for shard, s in report["shards"].items():
        for d in s["diffs"]:
            lines.append(
                f"- `{d['entry']}` ({d['state']}, {shard}), case `{d['case']}`: {d['first']['path']} "
                f"({d['first']['kind']}). Reproduce: `{d['reproduce']}`"
            )
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "report.md", out_dir / "report.json"
    md.write_text(to_markdown(report), encoding="utf-8")
    js.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return md, js
