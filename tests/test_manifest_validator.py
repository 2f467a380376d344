"""The manifest gate passes on main, and every rule rejects a throwaway copy mutated to break it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from compat.schema import MANIFEST_DIR, dumps, shard_document
from compat.validate import validate


def test_main_manifest_passes_every_gate():
    assert [str(v) for v in validate(check_issues_open=True)] == []


DEFERRED_ISSUE = 14  # an owner of the multimodal-and-audio shard


@pytest.fixture
def copy(tmp_path) -> Path:
    """A throwaway copy of the manifest in which the two transcription routes are deferred to an open issue
    (the state an unfinished issue leaves entries in: the mutations below start from it)."""
    dst = tmp_path / "manifest"
    shutil.copytree(MANIFEST_DIR, dst)
    issues = json.loads((dst / "issues.json").read_text())
    issues["issues"][str(DEFERRED_ISSUE)]["state"] = "open"
    (dst / "issues.json").write_text(json.dumps(issues, indent=2, ensure_ascii=False) + "\n")
    for route in ("POST /v1/audio/transcriptions", "POST /audio/transcriptions"):
        _edit(
            dst,
            "multimodal-and-audio",
            route,
            _set(
                state="deferred",
                issue=DEFERRED_ISSUE,
                test=None,
                notes="not served yet",
                rationale=None,
                divergence=["not served: mlxcel answers 404"],
            ),
        )
    return dst


def _edit(manifest: Path, shard: str, entry_id: str, fn: Callable[[dict], None], canonical: bool = True) -> None:
    path = manifest / f"{shard}.json"
    doc = json.loads(path.read_text())
    entry = next(e for e in doc["entries"] if e["id"] == entry_id)
    fn(entry)
    text = dumps(shard_document(shard, doc["entries"])) if canonical else json.dumps(doc, indent=2) + "\n"
    path.write_text(text)


def _rules(manifest: Path, check_issues_open: bool = False) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in validate(manifest, check_issues_open=check_issues_open):
        out.setdefault(v.rule, []).append(str(v))
    return out


BY_DESIGN_OK = {
    "state": "by_design",
    "issue": 7,
    "test": "conformance/test_corpus.py::test_corpus_case",
    "notes": "why",
    "divergence": ["differs observably"],
    "rationale": {"kind": "policy", "reason": "a reason", "revisit_if": "a condition"},
}


def _set(**kw) -> Callable[[dict], None]:
    return lambda e: e.update(kw)


MUTATIONS: list[tuple[str, str, str, Callable[[dict], None]]] = [
    ("kind", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(kind="endpoint")),
    (
        "key-set",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        lambda e: e.update(divergance=e.pop("divergence")),
    ),
    ("state", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(state="partial")),
    ("divergence-shape", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(divergence="differs")),
    ("supported-divergence", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(state="supported")),
    (
        "supported-evidence",
        "multimodal-and-audio",
        "POST /audio/transcriptions",
        _set(state="supported", divergence=[]),
    ),
    (
        "rationale-null",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(rationale={"kind": "policy", "reason": "r", "revisit_if": "x"}),
    ),
    (
        "rationale-shape",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "rationale": {"kind": "policy"}}),
    ),
    (
        "rationale-kind",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "rationale": {"kind": "taste", "reason": "r", "revisit_if": None}}),
    ),
    (
        "rationale-reason",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "rationale": {"kind": "policy", "reason": " ", "revisit_if": "x"}}),
    ),
    (
        "rationale-revisit",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "rationale": {"kind": "policy", "reason": "r", "revisit_if": None}}),
    ),
    (
        "rationale-revisit",
        "multimodal-and-audio",
        "POST /audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "rationale": {"kind": "architectural", "reason": "r", "revisit_if": "x"}}),
    ),
    (
        "by-design-divergence",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "divergence": []}),
    ),
    (
        "by-design-notes",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(**{**BY_DESIGN_OK, "notes": None}),
    ),
    ("by-design-test", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(**{**BY_DESIGN_OK, "test": None})),
    ("issue-required", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(issue=None)),
    ("shard-owner", "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(issue=9)),
    (
        "test-pointer",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(test="conformance/test_tokenize.py::test_no_such_thing"),
    ),
    ("test-pointer", "multimodal-and-audio", "POST /audio/transcriptions", _set(test="conformance/missing.py::test_x")),
    (
        "claim-shape",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(mlxcel=["POST /v1/audio/transcriptions"]),
    ),
    (
        "claim-keys",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(mlxcel={"route": "POST /v1/audio/transcriptions", "divergence": ["x"]}),
    ),
    # every case of the route is the 501 both servers give a text model
    (
        "refusal-only",
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(state="supported", divergence=[], test="conformance/test_corpus.py::test_corpus_case"),
    ),
]


@pytest.mark.parametrize("rule,shard,entry_id,mutate", MUTATIONS, ids=[f"{m[0]}-{i}" for i, m in enumerate(MUTATIONS)])
def test_entry_rule_rejects_its_mutation(copy, rule, shard, entry_id, mutate):
    assert validate(copy) == []
    _edit(copy, shard, entry_id, mutate)
    rules = _rules(copy)
    assert rule in rules, rules
    assert any(entry_id in msg and f"[{rule}]" in msg and f"{shard}.json" in msg for msg in rules[rule])


def test_supported_divergence_message_names_the_honest_alternatives(copy):
    _edit(copy, "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(state="supported"))
    msg = _rules(copy)["supported-divergence"][0]
    for alt in ("aliased", "not_applicable", "deferred", "by_design"):
        assert alt in msg


def test_well_formed_by_design_entry_passes(copy):
    _edit(copy, "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(**{**BY_DESIGN_OK, "issue": 14}))
    assert _rules(copy) == {}


def test_key_order_rule(copy):
    _edit(
        copy,
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        lambda e: e.update(state=e.pop("state")),
        canonical=False,
    )
    assert "key-set" in _rules(copy)


def test_canonical_rule(copy):
    path = copy / "routes.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4) + "\n")
    assert "canonical" in _rules(copy)


def test_counts_rule(copy):
    pin = json.loads((copy / "pin.json").read_text())
    pin["counts"]["help_entries"] = 250
    (copy / "pin.json").write_text(json.dumps(pin, indent=2) + "\n")
    assert "counts" in _rules(copy)


def test_removing_an_entry_breaks_counts(copy):
    path = copy / "authentication.json"
    doc = json.loads(path.read_text())
    doc["entries"] = doc["entries"][1:]
    path.write_text(dumps(shard_document("authentication", doc["entries"])))
    assert "counts" in _rules(copy)


def test_schema_version_rule(copy):
    path = copy / "routes.json"
    doc = json.loads(path.read_text())
    doc["schema_version"] = 3
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    assert "schema-version" in _rules(copy)


def test_shard_map_rule(copy):
    pin = json.loads((copy / "pin.json").read_text())
    del pin["shards"]["speculative"]
    (copy / "pin.json").write_text(json.dumps(pin, indent=2) + "\n")
    assert "shard-map" in _rules(copy)


def test_unknown_shard_file_rule(copy):
    (copy / "misc.json").write_text(dumps(shard_document("misc", [])))
    assert "shard-map" in _rules(copy)


def test_unclassified_rule(copy):
    (copy / "_unclassified.json").write_text(dumps(shard_document("_unclassified", [])))
    assert "unclassified" in _rules(copy)


def test_duplicate_id_rule(copy):
    src = json.loads((copy / "authentication.json").read_text())["entries"][0]
    path = copy / "transport-tls-cors.json"
    doc = json.loads(path.read_text())
    doc["entries"].append({**src, "issue": 8})
    path.write_text(dumps(shard_document("transport-tls-cors", doc["entries"])))
    assert "duplicate-id" in _rules(copy)


def test_deferred_entry_of_a_closed_issue_fails_only_with_check_issues_open(copy):
    issues = json.loads((copy / "issues.json").read_text())
    issues["issues"]["14"]["state"] = "closed"
    (copy / "issues.json").write_text(json.dumps(issues, indent=2) + "\n")
    assert "issue-open" not in _rules(copy)
    assert "issue-open" in _rules(copy, check_issues_open=True)


def test_by_design_entries_do_not_feed_the_open_issue_check(copy):
    issues = json.loads((copy / "issues.json").read_text())
    issues["issues"]["14"]["state"] = "closed"
    (copy / "issues.json").write_text(json.dumps(issues, indent=2) + "\n")
    _edit(copy, "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(**{**BY_DESIGN_OK, "issue": 14}))
    msgs = _rules(copy, check_issues_open=True).get("issue-open", [])
    assert msgs and not any("POST /v1/audio/transcriptions:" in m for m in msgs)


@pytest.mark.parametrize(
    "notes,divergence",
    [
        ("images are not served yet (#14)", []),
        ("served", ["the counters stay 0 (no speculative decoding yet, issue 14)"]),
        ("waits: pending", []),  # no issue named: the entry's own (14)
        ("refused until issue 14 lands", []),
    ],
)
def test_notes_calling_a_closed_issues_work_pending_fail(copy, notes, divergence):
    _edit(
        copy,
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(notes=notes, divergence=divergence or ["not served: mlxcel answers 404"]),
    )
    assert "stale-pending" not in _rules(copy, check_issues_open=True)  # issue 14 is open in the copy
    issues = json.loads((copy / "issues.json").read_text())
    issues["issues"]["14"]["state"] = "closed"
    (copy / "issues.json").write_text(json.dumps(issues, indent=2) + "\n")
    assert "stale-pending" in _rules(copy, check_issues_open=True)
    msgs = _rules(copy, check_issues_open=True)["stale-pending"]
    assert any("POST /v1/audio/transcriptions:" in m for m in msgs), msgs


def test_present_tense_notes_of_a_closed_issue_pass(copy):
    issues = json.loads((copy / "issues.json").read_text())
    issues["issues"]["14"]["state"] = "closed"
    still_open = 99
    issues["issues"][str(still_open)] = {**issues["issues"]["14"], "state": "open"}
    (copy / "issues.json").write_text(json.dumps(issues, indent=2) + "\n")
    # "not yet" about an issue still open is honest; only the closed issue's own work must be present tense.
    _edit(
        copy,
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(
            **{
                **BY_DESIGN_OK,
                "issue": 14,
                "notes": f"not served: answers 404; a slot not yet started is idle (#{still_open})",
            }
        ),
    )
    msgs = _rules(copy, check_issues_open=True).get("stale-pending", [])
    assert not any("POST /v1/audio/transcriptions:" in m for m in msgs), msgs


def test_refusal_only_evidence_passes_with_the_explicit_claim(copy):
    """Where refusing is all b10621 does (a removed flag, --no-slots's 501), the claim says so explicitly."""
    _edit(
        copy,
        "multimodal-and-audio",
        "POST /v1/audio/transcriptions",
        _set(
            state="supported",
            divergence=[],
            test="conformance/test_corpus.py::test_corpus_case",
            mlxcel={"route": "POST /v1/audio/transcriptions", "refusal_is_the_behaviour": True},
        ),
    )
    assert "refusal-only" not in _rules(copy)


def test_a_supported_entry_with_one_served_case_is_not_refusal_only():
    from compat.refusals import refusal_only

    entry = {"id": "X", "state": "supported", "test": "conformance/test_corpus.py::test_corpus_case"}
    assert refusal_only(entry, {"X": [("a", True), ("b", True)]}) == ["a", "b"]
    assert refusal_only(entry, {"X": [("a", True), ("b", False)]}) is None
    assert refusal_only(entry, {}) is None  # no case: the evidence gate's business (mlxcel-oracle verify)
    assert refusal_only({**entry, "test": "conformance/test_openai_sdk.py::test_x"}, {"X": [("a", True)]}) is None


def test_validator_cli_exit_codes(copy):
    import subprocess
    import sys

    ok = subprocess.run(
        [sys.executable, "-m", "compat.validate", "--manifest-dir", str(copy), "--check-issues-open"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "manifest: ok" in ok.stdout
    _edit(copy, "multimodal-and-audio", "POST /v1/audio/transcriptions", _set(state="supported"))
    bad = subprocess.run(
        [sys.executable, "-m", "compat.validate", "--manifest-dir", str(copy)], capture_output=True, text=True
    )
    assert (
        bad.returncode == 1
        and "multimodal-and-audio.json: POST /v1/audio/transcriptions: [supported-divergence]" in bad.stderr
    )


def test_every_rule_has_negative_coverage():
    import re

    source = (Path(__file__).parent.parent / "compat" / "validate.py").read_text()
    rules = set(re.findall(r'bad\("([a-z-]+)"', source)) | set(
        re.findall(r'Violation\([^,]+, [^,]+, "([a-z-]+)"', source)
    )
    covered = {m[0] for m in MUTATIONS} | set(re.findall(r'"([a-z-]+)" in _rules\(copy', Path(__file__).read_text()))
    assert len(rules) >= 15
    assert rules <= covered, sorted(rules - covered)
