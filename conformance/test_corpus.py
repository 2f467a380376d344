"""Every corpus case (fixtures/requests/), against the live reference or its recorded transcript.

Each case pins what the oracle sees today (identical, or exactly these divergences) and writes the
evidence record that `mlxcel-oracle verify` reads for the manifest entries it backs.
"""

from __future__ import annotations

import pytest

from conftest import oracle_offline
from oracle.corpus import load_corpus
from oracle.runner import run_case

# cases with flags of their own last, grouped by (twin, flags) in name order: one extra server pair at a time
CASES = sorted(load_corpus(), key=lambda c: (bool(c.args), c.twin if c.args else "", c.args, c.name))


# own_server: the case needs a server pair of its own (its flags); CI's offline pass leaves these out
PARAMS = [pytest.param(c, id=c.name, marks=pytest.mark.own_server if c.args else ()) for c in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_corpus_case(case, request):
    if case.args:  # flags of its own: a fresh server pair per (twin, flags), its cases in name order
        mlxcel_url, reference_url = request.getfixturevalue("corpus_servers")(case.twin, case.args)
    else:
        mlxcel_url = request.getfixturevalue(f"mlxcel_{case.twin}").base_url
        reference_url = None if oracle_offline() else request.getfixturevalue(f"reference_{case.twin}").base_url
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
