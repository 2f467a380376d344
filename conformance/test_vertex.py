"""Vertex AI (AIP_MODE=PREDICTION) against the reference: both servers started with the AIP_* variables, the
cases in fixtures/vertex/ compared as corpus cases are (their evidence records included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import reference_live
from oracle.corpus import load_corpus
from oracle.processes import COMMON_ARGS, F32_NUMERICS, mlxcel_server, reference_server, start_together
from oracle.runner import run_case
from oracle.transcripts import is_current

CASES = load_corpus(Path(__file__).resolve().parents[1] / "fixtures" / "vertex")


def _vertex(proc, health_route: str = "/healthz"):
    proc.env.update(AIP_MODE="PREDICTION", AIP_HTTP_PORT=str(proc.port), AIP_HEALTH_ROUTE=health_route)
    return proc


@pytest.fixture(scope="module")
def vertex_pair(request):
    twin = request.getfixturevalue("twin_f32")
    mine = _vertex(mlxcel_server(twin.mlx_model, [*COMMON_ARGS, *F32_NUMERICS]))
    ref = None  # one pair for the suite: it meets the live reference as a whole
    if reference_live("vertex", all(is_current(c.name, c.request) for c in CASES)):
        ref = _vertex(
            reference_server(request.getfixturevalue("reference_binary"), twin.gguf, [*COMMON_ARGS, *F32_NUMERICS])
        )
    start_together(mine, *([ref] if ref is not None else []))
    yield mine.base_url, ref.base_url if ref else None
    mine.cleanup()
    if ref:
        ref.cleanup()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_vertex_case(case, vertex_pair):
    result = run_case(case, *vertex_pair)
    ok, why = result.meets_expectation()
    assert ok, f"{case.name}: {why}"
