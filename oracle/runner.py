"""Run corpus cases: get both exchanges, diff them, check the expectation, write evidence."""

from __future__ import annotations

from dataclasses import dataclass

from .corpus import Case
from .diff import DiffReport, diff_exchanges
from .evidence import make_record, write_record
from .exchange import Exchange, send
from .transcripts import live_or_recorded


@dataclass
class CaseResult:
    case: Case
    report: DiffReport
    source: str

    def meets_expectation(self) -> tuple[bool, str]:
        c, r = self.case, self.report
        got = sorted({(d.path, d.kind) for d in r.divergences})
        if c.expect_identical:
            return r.identical, "expected identical; " + ("ok" if r.identical else f"differs: {got}")
        want = sorted(set(c.expect_divergences))
        return (not r.identical and got == want,
                f"expected the divergences {want}; the oracle saw {got if got else 'none'}")


def run_case(case: Case, mlxcel_url: str, reference_url: str | None) -> CaseResult:
    """reference_url None: the recorded transcript stands in for the reference."""
    for setup in case.setup:  # the state the compared request needs, built the same way on both
        if reference_url:
            send(reference_url, setup)
        send(mlxcel_url, setup)
    live: Exchange | None = send(reference_url, case.request) if reference_url else None
    ref, source = live_or_recorded(case.name, case.request, live, case.normalize)
    mine = send(mlxcel_url, case.request)
    report = diff_exchanges(ref, mine, case.normalize)
    write_record(make_record(case, ref, mine, report, source))
    return CaseResult(case, report, source)
