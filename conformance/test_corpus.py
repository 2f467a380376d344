"""Every corpus case (fixtures/requests/), against the live reference or its recorded transcript.

Each case pins what the oracle sees today (identical, or exactly these divergences) and writes the
evidence record that `mlxcel-oracle verify` reads for the manifest entries it backs.
"""

from __future__ import annotations

import pytest

from conftest import reference_live
from oracle.corpus import SHARED, load_corpus, server_states
from oracle.runner import run_case
from oracle.transcripts import is_current

# the shared pairs' cases first, then one fresh pair per server state (twin, flags, fresh), in run order
STATES = server_states(load_corpus())
CASES = [c for _, cases in STATES for c in cases]
STATE_OF = {c.name: key for key, cases in STATES for c in cases}

# a server state meets the live reference as a whole (one pair, its reference started or not); a case whose
# recording is missing or stale brings its whole state live
STATE_RECORDED = {key: all(is_current(c.name, c.request) for c in cases) for key, cases in STATES if key != SHARED}


# own_server: the case needs a server pair of its own (its flags)
PARAMS = [pytest.param(c, id=c.name, marks=pytest.mark.own_server if STATE_OF[c.name] != SHARED else ()) for c in CASES]


def _following(request) -> tuple | None:
    """The server state of the corpus case pytest runs next, when it needs a pair of its own: launched ahead."""
    items = request.session.items
    at = items.index(request.node)
    nxt = items[at + 1] if at + 1 < len(items) else None
    if nxt is None or getattr(nxt, "originalname", None) != "test_corpus_case":
        return None
    case = nxt.callspec.params["case"]
    state = STATE_OF[case.name]
    if state == SHARED:
        return None
    return (case.twin, case.args, reference_live(state, STATE_RECORDED[state]), state, case.store)


@pytest.mark.parametrize("case", PARAMS)
def test_corpus_case(case, request):
    state = STATE_OF[case.name]
    if state != SHARED:  # flags of its own, or fresh: the pair of its server state
        live = reference_live(state, STATE_RECORDED[state])
        mlxcel_url, reference_url = request.getfixturevalue("corpus_servers")(
            case.twin, case.args, live, state, case.store, _following(request)
        )
    else:
        mlxcel_url = request.getfixturevalue(f"mlxcel_{case.twin}").base_url
        live = reference_live(case.name, is_current(case.name, case.request))
        reference_url = request.getfixturevalue(f"reference_{case.twin}").base_url if live else None
    result = run_case(case, mlxcel_url, reference_url, erase=state == SHARED)
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
