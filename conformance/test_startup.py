"""The startup differential (fixtures/startup/): each b10621 command line on both binaries, compared.

Every case pins what the oracle sees (identical, or exactly these divergences) and, where mlxcel refuses,
the diagnostic it prints; each writes an evidence record for the manifest entries it names.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import reference_live
from oracle.startup import is_recorded, load_startup_cases, observe_ahead, run_startup_case

CASES = load_startup_cases()


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made with the openssl command line (never committed)."""
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            str(d / "server.key"),
            "-out",
            str(d / "server.crt"),
            "-subj",
            "/CN=127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return d


def _extra(case, request) -> dict[str, str]:
    return {"certs": str(request.getfixturevalue("certs"))} if any("{certs}" in a for a in case.args) else {}


def _next_case(request):
    """The startup case pytest runs after this one (of those selected), if any."""
    items = request.session.items
    at = items.index(request.node)
    following = items[at + 1] if at + 1 < len(items) else None
    if following is None or getattr(following, "originalname", None) != "test_startup_case":
        return None
    return following.callspec.params["case"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_startup_case(case, request):
    live = reference_live(f"startup {case.name}", is_recorded(case))
    binary = request.getfixturevalue("reference_binary") if live else None
    extra = _extra(case, request)
    following = _next_case(request)
    if following is not None:  # its mlxcel side starts now, on the other core (oracle.startup.observe_ahead)
        observe_ahead(following, _extra(following, request))
    result = run_startup_case(case, binary, extra)
    ok, why = result.meets_expectation()
    assert ok, (
        f"{case.name}: {why}\nreference: {result.reference.outcome} {result.reference.exit_status}: "
        f"{result.reference.said[-600:]}\nmlxcel: {result.mlxcel.outcome} {result.mlxcel.exit_status}: "
        f"{result.mlxcel.said[-600:]}\nReproduce: {case.reproduce()}"
    )
    if case.mlxcel_says is not None:  # the refusal (or notice) mlxcel prints, pinned word for word
        assert result.mlxcel.pinned(case.mlxcel_says) in result.mlxcel.lines(), result.mlxcel.said[-1500:]
    elif result.mlxcel.outcome == "exits" and result.mlxcel.exit_status:
        pytest.fail(f"{case.name}: mlxcel refused and the case pins no diagnostic: {result.mlxcel.said[-600:]}")
