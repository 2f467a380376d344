"""Run corpus cases: get both exchanges, diff them, check the expectation, write evidence."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .corpus import Case
from .diff import DiffReport, diff_exchanges
from .evidence import make_record, write_record
from .exchange import Exchange, send
from .judge import judged_report
from .processes import erase_slots
from .transcripts import live_or_recorded


@dataclass
class CaseResult:
    case: Case
    report: DiffReport
    source: str

    def meets_expectation(self) -> tuple[bool, str]:
        return expectation_met(self.case, self.report)


def expectation_met(case, report: DiffReport) -> tuple[bool, str]:
    """A case's pinned expectation (identical, or exactly these (path, kind) divergences) against a report."""
    got = sorted({(d.path, d.kind) for d in report.divergences})
    if case.expect_identical:
        return report.identical, "expected identical; " + ("ok" if report.identical else f"differs: {got}")
    want = sorted(set(case.expect_divergences))
    return (
        not report.identical and got == want,
        f"expected the divergences {want}; the oracle saw {got if got else 'none'}",
    )


def run_case(case: Case, mlxcel_url: str, reference_url: str | None, erase: bool = False) -> CaseResult:
    """reference_url None: the recorded transcript stands in for the reference. `erase`: a shared pair's case,
    whose servers' slots are erased first, so that it starts from the same state whatever ran before it."""
    if erase:
        for url in (mlxcel_url, reference_url):
            if url:
                erase_slots(url)
    for setup in case.setup:  # the state the compared request needs, built the same way on both
        if isinstance(setup, float):  # a wait (both servers idle meanwhile)
            time.sleep(setup)
            continue
        # mlxcel first: the reference, faster to wake from idle sleep, then has its idle clock started nearest
        # the compared request (reference first, a slow mlxcel wake in between could outlast a short
        # --sleep-idle-seconds and put the reference back to sleep before it is asked)
        send(mlxcel_url, setup)
        if reference_url:
            send(reference_url, setup)
    live: Exchange | None = send(reference_url, case.request) if reference_url else None
    ref, source = live_or_recorded(case.name, case.request, live, case.normalize)
    mine = send(mlxcel_url, case.request)
    report = (
        judged_report(ref, mine, case.judge, case.twin, case.normalize)
        if case.judge
        else diff_exchanges(ref, mine, case.normalize)
    )
    write_record(make_record(case, ref, mine, report, source))
    return CaseResult(case, report, source)
