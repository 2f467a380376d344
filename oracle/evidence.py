"""Evidence per manifest entry, and the gate that backs `supported` and `by_design` with it.

Each comparing conformance case writes one record (entry ids, request, exchange hashes, normalizations
that fired, the diff). `verify` fails a supported entry whose evidence shows a difference or that has no
evidence, and a by_design entry whose evidence shows no difference.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .corpus import REPO_ROOT

EVIDENCE_ENV = "MLXCEL_EVIDENCE_DIR"


def evidence_dir() -> Path:
    return Path(os.environ.get(EVIDENCE_ENV) or REPO_ROOT / ".oracle" / "evidence")


def write_record(record: dict, directory: Path | None = None) -> Path:
    d = directory or evidence_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{record['case']}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def make_record(case, ref, mine, report, source: str) -> dict:
    return {
        "case": case.name,
        "entries": list(case.entries),
        "twin": case.twin,
        "request": {"method": case.request.method, "path": case.request.path, "sha256": case.request.sha256()},
        "reference_sha256": ref.sha256(),
        "mlxcel_sha256": mine.sha256(),
        "reference_source": source,
        **report.to_dict(),
        "reproduce": case.reproduce(),
    }


def live_record(
    case: str, entries: list[str], twin: str, request: str, identical: bool, divergences: list[dict], reproduce: str
) -> Path:
    """A record a conformance test writes for an exchange it compared itself, live (POST `request`)."""
    return write_record(
        {
            "case": case,
            "entries": entries,
            "twin": twin,
            "request": {"method": "POST", "path": request, "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": identical,
            "bytes_identical": identical,
            "normalizations_fired": [],
            "divergences": divergences,
            "reproduce": reproduce,
        }
    )


def divergence_record(
    case: str, entries: list[str], twin: str, request: str, divergences: list[dict], reproduce: str
) -> Path:
    """A record a conformance test writes for a divergence it pins (a by_design entry's evidence): the exchange
    was compared in the test itself, live."""
    return live_record(case, entries, twin, request, False, divergences, reproduce)


def load_records(directory: Path | None = None) -> list[dict]:
    d = directory or evidence_dir()
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


@dataclass(frozen=True)
class GateFailure:
    entry: str
    state: str
    message: str

    def __str__(self) -> str:
        return f"{self.entry} ({self.state}): {self.message}"


def _module(test: str | None) -> str:
    return (test or "").split("::", 1)[0]


def verify(  # noqa: C901
    entries: list[dict], records: list[dict], rotated: frozenset[str] | set[str] = frozenset()
) -> list[GateFailure]:
    """Each supported entry backed by identical evidence, each by_design one by a difference. `rotated`: the test
    functions this landing ran only some of (oracle/rotation.py): an entry whose test is one of them may have no
    record this landing (its cases meet the gate in another), and a by_design one whose test's suite lost tests only
    identical records (the case that pins its difference may be one that waits); a differing record of a supported
    entry fails it all the same."""
    waiting_modules = {_module(f) for f in rotated}  # (a by_design entry's pinning case: its pointer's suite)
    by_entry: dict[str, list[dict]] = {}
    for r in records:
        for eid in r["entries"]:
            by_entry.setdefault(eid, []).append(r)
    failures = []
    for e in entries:
        evid = by_entry.get(e["id"], [])
        if not evid and e.get("test") in rotated:
            continue
        if e["state"] == "supported":
            if not evid:
                failures.append(GateFailure(e["id"], "supported", "no oracle evidence backs this entry"))
            for r in evid:
                if not r["identical"]:
                    first = (r["divergences"] or [{"path": "bytes", "kind": "bytes"}])[0]
                    failures.append(
                        GateFailure(
                            e["id"],
                            "supported",
                            f"case {r['case']} differs at {first['path']} ({first['kind']}); "
                            f"reproduce: {r['reproduce']}",
                        )
                    )
        elif e["state"] == "by_design":
            if not evid:
                failures.append(GateFailure(e["id"], "by_design", "no oracle evidence pins the divergence"))
            elif all(r["identical"] for r in evid) and _module(e.get("test")) not in waiting_modules:
                failures.append(GateFailure(e["id"], "by_design", "the oracle saw no difference: it is supported"))
    return failures
