"""What the drafter suites (test_ngram_drafters, test_eagle3_drafter, test_mtp_drafter) share: one request on every
server of a case, the draft counts b10621's timings report, and the live record of a case's verdict."""

from __future__ import annotations

from oracle import loopback
from oracle.evidence import live_record


def answers(urls, body: dict) -> list[dict]:
    """POST /completion to each server, in order; none may answer an error."""
    out = [loopback.post(u + "/completion", json=body, timeout=600).json() for u in urls]
    assert all("error" not in a for a in out), out
    return out


def counts(answer: dict) -> tuple[int, int]:
    """timings.draft_n and draft_n_accepted (absent: no draft was made)."""
    t = answer["timings"]
    return t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def record(case: str, entries: list[str], twin: str, reproduce: str, seen: list[tuple[bool, tuple, tuple]]) -> bool:
    """Whether every request's text matched and its draft counts were the reference's; written as a live record."""
    identical = all(same and want == got for same, want, got in seen)
    live_record(
        case,
        entries,
        twin,
        "/completion",
        identical,
        [] if identical else [{"path": "$.timings.draft_n", "kind": "value", "reference": str(seen)}],
        reproduce,
    )
    return identical
