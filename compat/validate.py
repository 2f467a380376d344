"""The manifest gate: every schema-4 rule, each failure naming the file, the entry and the rule.

python -m compat.validate [--manifest-dir DIR] [--check-issues-open]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .refusals import case_outcomes, refusal_only
from .schema import (
    CLAIM_KEYS,
    FACT_KEYS,
    HONEST_ALTERNATIVES,
    ISSUES_FILE,
    MANIFEST_DIR,
    NEEDS_ISSUE,
    PIN_FILE,
    RATIONALE_KEYS,
    RATIONALE_KINDS,
    SCHEMA_VERSION,
    SHARDS,
    STATES,
    UNCLASSIFIED_FILE,
    dumps,
    entry_keys,
    load_json,
    shard_document,
    shard_files,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Violation:
    file: str
    entry: str | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.entry}" if self.entry else self.file
        return f"{where}: [{self.rule}] {self.message}"


def resolve_test_pointer(pointer: str, root: Path = REPO_ROOT) -> str | None:
    """None when `path::function` names a real test function; else why it does not."""
    if "::" not in pointer:
        return "a test pointer is 'path/to/test_file.py::test_function'"
    rel, _, name = pointer.partition("::")
    path = root / rel
    if not path.is_file():
        return f"test file {rel} does not exist"
    if name.split("[")[0] not in _functions(path) or not name.startswith("test"):
        return f"{rel} defines no test function {name}"
    return None


_FUNCTIONS: dict[tuple[Path, int, int], frozenset[str]] = {}


def _functions(path: Path) -> frozenset[str]:
    """The functions a Python file defines, parsed once while the file is unchanged (a manifest points at the
    same few dozen test files from ~400 entries, and the validator's own tests validate it ~50 times)."""
    st = path.stat()
    key = (path.resolve(), st.st_mtime_ns, st.st_size)
    if key not in _FUNCTIONS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _FUNCTIONS[key] = frozenset(
            n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
    return _FUNCTIONS[key]


# words that call work pending ("not served yet", "no ... yet", "pending", "until issue N"); a clause with them names
# its issue ("#N", "issue N") or speaks for the entry's own issue
_PENDING = re.compile(r"\b(?:not|no)\b[^.;:]{0,60}?\byet\b|\bpending\b|\buntil (?:issue )?#?\d+", re.I)
_ISSUE_REF = re.compile(r"(?:#|\bissues? )(\d+)", re.I)
_CLAUSE = re.compile(r"(?<=[.;])\s+")


def stale_pending(e: dict, issues: dict) -> list[str]:
    """The clauses of an entry's notes, divergence and rationale that call a closed issue's work pending."""
    rationale = e.get("rationale") if isinstance(e.get("rationale"), dict) else {}
    texts = [e.get("notes"), *(e.get("divergence") or []), rationale.get("reason"), rationale.get("revisit_if")]
    stale = []
    for text in filter(lambda t: isinstance(t, str), texts):
        for clause in _CLAUSE.split(text):
            if not _PENDING.search(clause):
                continue
            refs = [int(n) for n in _ISSUE_REF.findall(clause)] or [e.get("issue")]
            if any(issues.get(str(n), {}).get("state") == "closed" for n in refs):
                stale.append(clause.strip())
    return stale


def _check_entry(fname: str, e: dict, owners: set[int], root: Path) -> list[Violation]:  # noqa: C901
    eid = e.get("id", "<no id>")
    v: list[Violation] = []

    def bad(rule: str, msg: str) -> None:
        v.append(Violation(fname, eid, rule, msg))

    kind = e.get("kind")
    if kind not in FACT_KEYS:
        bad("kind", f"unknown entry kind {kind!r} (expected one of {', '.join(FACT_KEYS)})")
        return v
    if tuple(e) != entry_keys(kind):
        missing = [k for k in entry_keys(kind) if k not in e]
        extra = [k for k in e if k not in entry_keys(kind)]
        detail = "; ".join(filter(None, [missing and f"missing {missing}", extra and f"unexpected {extra}"]))
        bad("key-set", f"keys must be exactly {list(entry_keys(kind))} in that order ({detail or 'wrong order'})")
        return v
    state = e["state"]
    if state not in STATES:
        bad("state", f"state {state!r} is not one of {', '.join(STATES)}")
        return v
    div = e["divergence"]
    if not isinstance(div, list) or not all(isinstance(d, str) and d.strip() for d in div):
        bad("divergence-shape", "divergence must be a list of non-empty strings")
        div = []
    if state == "supported" and div:
        bad(
            "supported-divergence",
            "a supported entry may not record a divergence; use one of "
            f"{', '.join(HONEST_ALTERNATIVES)} and name the owning issue",
        )
    if state == "supported" and not e["test"]:
        bad("supported-evidence", "a supported entry needs a test pointer into conformance/ (oracle evidence)")
    if state == "supported" and e["test"] and not str(e["test"]).startswith("conformance/"):
        bad("supported-evidence", "a supported entry's test must be an oracle comparison under conformance/")
    rationale = e["rationale"]
    if state != "by_design" and rationale is not None:
        bad("rationale-null", f"rationale must be null on a {state} entry")
    if state == "by_design":
        if not isinstance(rationale, dict) or set(rationale) != set(RATIONALE_KEYS):
            bad("rationale-shape", f"a by_design rationale is an object with exactly {list(RATIONALE_KEYS)}")
        else:
            if rationale["kind"] not in RATIONALE_KINDS:
                bad("rationale-kind", f"rationale.kind must be one of {', '.join(RATIONALE_KINDS)}")
            if not (isinstance(rationale["reason"], str) and rationale["reason"].strip()):
                bad("rationale-reason", "rationale.reason must be a non-empty string")
            revisit = rationale["revisit_if"]
            if rationale["kind"] == "policy" and not (isinstance(revisit, str) and revisit.strip()):
                bad("rationale-revisit", "a policy rationale needs a non-empty revisit_if")
            if rationale["kind"] == "architectural" and revisit is not None:
                bad("rationale-revisit", "an architectural rationale must have revisit_if null")
        if not div:
            bad("by-design-divergence", "a by_design entry needs a non-empty divergence (with none it is supported)")
        if not (isinstance(e["notes"], str) and e["notes"].strip()):
            bad("by-design-notes", "a by_design entry needs non-empty notes")
        if not e["test"]:
            bad("by-design-test", "a by_design entry needs a resolving test pointer that pins the behaviour")
    issue = e["issue"]
    if state in NEEDS_ISSUE and not isinstance(issue, int):
        bad("issue-required", f"a {state} entry needs its owning issue number")
    if isinstance(issue, int) and issue not in owners:
        bad("shard-owner", f"issue {issue} is not in this shard's owner set {sorted(owners)} (pin.json)")
    if e["test"] is not None:
        why = resolve_test_pointer(str(e["test"]), root)
        if why:
            bad("test-pointer", why)
    claim = e["mlxcel"]
    if claim is not None:
        if not isinstance(claim, dict):
            bad("claim-shape", "the mlxcel claim block is an object or null")
        else:
            unknown = sorted(set(claim) - set(CLAIM_KEYS))
            if unknown:
                bad("claim-keys", f"unknown mlxcel claim keys {unknown} (allowed: {', '.join(CLAIM_KEYS)})")
            if claim.get("env_test"):
                why = resolve_test_pointer(claim["env_test"], root)
                if why:
                    bad("test-pointer", f"env_test: {why}")
    return v


def validate(  # noqa: C901
    manifest_dir: Path = MANIFEST_DIR, check_issues_open: bool = False, root: Path = REPO_ROOT
) -> list[Violation]:
    out: list[Violation] = []
    pin = load_json(manifest_dir / PIN_FILE)
    if pin.get("schema_version") != SCHEMA_VERSION:
        out.append(Violation(PIN_FILE, None, "schema-version", f"schema_version must be {SCHEMA_VERSION}"))
    owners_by_shard = {k: set(v.get("owners", [])) for k, v in pin.get("shards", {}).items()}
    if set(owners_by_shard) != set(SHARDS):
        out.append(Violation(PIN_FILE, None, "shard-map", f"pin.json shards must be exactly {', '.join(SHARDS)}"))
    issues = {}
    if check_issues_open:
        issues = load_json(manifest_dir / ISSUES_FILE).get("issues", {})
    all_entries: list[dict] = []
    seen: dict[str, str] = {}
    outcomes = case_outcomes(root)
    for path in shard_files(manifest_dir):
        fname = path.name
        if fname == UNCLASSIFIED_FILE:
            out.append(
                Violation(
                    fname,
                    None,
                    "unclassified",
                    "entries new upstream must be classified into a shard before the gate passes",
                )
            )
            continue
        doc = load_json(path)
        area = path.stem
        if area not in SHARDS:
            out.append(Violation(fname, None, "shard-map", f"{fname} is not one of the {len(SHARDS)} shards"))
            continue
        if doc.get("schema_version") != SCHEMA_VERSION or doc.get("area") != area:
            out.append(
                Violation(
                    fname, None, "schema-version", f"a shard carries schema_version {SCHEMA_VERSION} and area '{area}'"
                )
            )
        entries = doc.get("entries", [])
        for e in entries:
            eid = e.get("id", "<no id>")
            if eid in seen:
                out.append(Violation(fname, eid, "duplicate-id", f"also in {seen[eid]}"))
            seen[eid] = fname
            out.extend(_check_entry(fname, e, owners_by_shard.get(area, set()), root))
            refusals = refusal_only(e, outcomes)
            if refusals and not (e.get("mlxcel") or {}).get("refusal_is_the_behaviour"):
                out.append(
                    Violation(
                        fname,
                        eid,
                        "refusal-only",
                        f"supported, yet its only oracle evidence is refusals both servers give "
                        f"({', '.join(refusals)}): a refusal is not support; reclassify it, or claim "
                        f"refusal_is_the_behaviour where refusing is all b10621 does",
                    )
                )
            if check_issues_open and e.get("state") == "deferred" and isinstance(e.get("issue"), int):
                state = issues.get(str(e["issue"]), {}).get("state")
                if state != "open":
                    out.append(
                        Violation(
                            fname,
                            eid,
                            "issue-open",
                            f"deferred to issue {e['issue']}, which is {state or 'unknown'} in "
                            f"{ISSUES_FILE}: implement it or reclassify the entry",
                        )
                    )
            if check_issues_open:
                for clause in stale_pending(e, issues):
                    out.append(
                        Violation(
                            fname,
                            eid,
                            "stale-pending",
                            f"calls a closed issue's work pending ({clause!r}): say what mlxcel does now",
                        )
                    )
        if all(isinstance(e, dict) and e.get("kind") in FACT_KEYS and "id" in e for e in entries):
            if path.read_text(encoding="utf-8") != dumps(shard_document(area, entries)):
                out.append(
                    Violation(
                        fname,
                        None,
                        "canonical",
                        "not canonically serialized (key order, sorted entries, 2-space indent, "
                        "trailing newline): run python -m compat.fmt",
                    )
                )
        all_entries.extend(entries)
    out.extend(_check_counts(pin.get("counts", {}), all_entries))
    return out


def _check_counts(counts: dict, entries: list[dict]) -> list[Violation]:
    options = [e for e in entries if e.get("kind") == "option"]
    envs = {e.get("env") for e in options if e.get("env")}
    actual = {
        "help_entries": len(options),
        "long_option_spellings": len({s for e in options for s in e.get("long_spellings", [])}),
        "environment_variables": len(envs),
        "llama_environment_variables": sum(str(v).startswith("LLAMA_") for v in envs),
        "routes": sum(e.get("kind") == "route" for e in entries),
        "native_request_fields": sum(e.get("kind") == "native_request_field" for e in entries),
    }
    return [
        Violation(PIN_FILE, None, "counts", f"counts.{k} is {counts.get(k)} but the shards hold {n}")
        for k, n in actual.items()
        if counts.get(k) != n
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m compat.validate")
    p.add_argument("--manifest-dir", type=Path, default=MANIFEST_DIR)
    p.add_argument(
        "--check-issues-open",
        action="store_true",
        help=f"fail a deferred entry whose issue is not open in {ISSUES_FILE}",
    )
    args = p.parse_args(argv)
    violations = validate(args.manifest_dir, args.check_issues_open)
    for v in violations:
        print(v, file=sys.stderr)
    if violations:
        print(f"manifest: {len(violations)} violation(s)", file=sys.stderr)
        return 1
    print("manifest: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
