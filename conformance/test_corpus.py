"""Every corpus case (fixtures/requests/), against the live reference or its recorded transcript.

Each case pins what the oracle sees today (identical, or exactly these divergences) and writes the
evidence record that `mlxcel-oracle verify` reads for the manifest entries it backs.
"""

from __future__ import annotations

import json

import pytest

from conftest import reference_live
from oracle.corpus import load_corpus
from oracle.runner import run_case
from oracle.transcripts import is_current

# cases with flags of their own last, grouped by (twin, flags) in name order: one extra server pair at a time
CASES = sorted(load_corpus(), key=lambda c: (bool(c.args), c.twin if c.args else "", c.args, c.name))


def group_key(case) -> str:
    """A server state: the cases with the same twin and flags share one fresh pair, in name order."""
    return f"{case.twin} {json.dumps(case.args)}"


# a group meets the live reference as a whole (one pair, its reference started or not); a case whose
# recording is missing or stale brings its whole group live
GROUP_RECORDED = {}
for _c in CASES:
    if _c.args:
        GROUP_RECORDED[group_key(_c)] = GROUP_RECORDED.get(group_key(_c), True) and is_current(_c.name, _c.request)


# own_server: the case needs a server pair of its own (its flags)
PARAMS = [pytest.param(c, id=c.name, marks=pytest.mark.own_server if c.args else ()) for c in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_corpus_case(case, request):
    if case.args:  # flags of its own: a fresh server pair per (twin, flags), its cases in name order
        key = group_key(case)
        live = reference_live(key, GROUP_RECORDED[key])
        mlxcel_url, reference_url = request.getfixturevalue("corpus_servers")(case.twin, case.args, live)
    else:
        mlxcel_url = request.getfixturevalue(f"mlxcel_{case.twin}").base_url
        live = reference_live(case.name, is_current(case.name, case.request))
        reference_url = request.getfixturevalue(f"reference_{case.twin}").base_url if live else None
    result = run_case(case, mlxcel_url, reference_url)
    ok, why = result.meets_expectation()
    assert ok, f"{case.name}: {why}. Reproduce: {case.reproduce()}"


def test_corpus_covers_every_route_mlxcel_serves_and_bad_input():
    from compat.claims import app_routes

    exercised = {e for c in CASES for e in c.entries}
    exercised |= {"GET /models/sse"}  # an endless event stream: compared by conformance/test_router_sse.py
    b10621_routes = {r for r in app_routes() if not r.startswith("POST /mlxcel/")}
    assert b10621_routes <= exercised, sorted(b10621_routes - exercised)
    assert sum(c.request.raw_body is not None for c in CASES) >= 2  # malformed JSON
    assert sum("bad-" in c.name for c in CASES) >= 5  # wrong types, out-of-domain values
