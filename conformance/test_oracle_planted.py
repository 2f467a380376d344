"""A planted divergence (one perturbed field on a throwaway mlxcel) is caught by the byte, structural and
evidence layers, and the report names the entry and the command that reproduces it."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from compat.claims import load_entries
from conftest import oracle_offline
from oracle import loopback
from oracle.corpus import CORPUS_DIR, load_case
from oracle.evidence import load_records, verify
from oracle.report import build_report, to_markdown
from oracle.runner import run_case


def _perturbing_proxy(upstream: str):
    """Forwards to mlxcel, but answers /health with {"status":"OK"}: one field, one byte class."""

    async def forward(request: Request) -> Response:
        r = loopback.request(
            request.method,
            upstream + request.url.path,
            content=await request.body(),
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        body = r.content.replace(b'"ok"', b'"OK"') if request.url.path == "/health" else r.content
        return Response(body, status_code=r.status_code, media_type=r.headers.get("content-type"))

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture
def planted(mlxcel_q4_1):
    server, thread, url = _perturbing_proxy(mlxcel_q4_1.base_url)
    yield url
    server.should_exit = True
    thread.join(10)


def test_planted_divergence_is_caught_by_every_layer(planted, request, tmp_path, monkeypatch):
    monkeypatch.setenv("MLXCEL_EVIDENCE_DIR", str(tmp_path / "evidence"))
    case = load_case(CORPUS_DIR / "get-health.ready.json")
    reference_url = None if oracle_offline() else request.getfixturevalue("reference_q4_1").base_url
    result = run_case(case, planted, reference_url)

    assert not result.report.bytes_identical  # byte layer
    assert [(d.path, d.kind, d.reference, d.mlxcel) for d in result.report.divergences] == [
        ("$.status", "value", "ok", "OK")
    ]  # structural layer
    assert not result.meets_expectation()[0]

    entries = load_entries()
    failures = [f for f in verify(entries, load_records()) if f.entry == "GET /health"]  # evidence layer
    assert len(failures) == 1 and "case get-health.ready differs at $.status (value)" in failures[0].message
    assert "mlxcel-oracle diff fixtures/requests/get-health.ready.json --twin q4_1" in failures[0].message

    shards = {}
    for e in entries:
        shards.setdefault("routes" if e["id"] in ("GET /health", "GET /v1/health") else "other", []).append(e)
    markdown = to_markdown(build_report(shards, load_records()))
    assert "`GET /health` (supported, routes), case `get-health.ready`: $.status (value)" in markdown
    assert "Reproduce: `mlxcel-oracle diff fixtures/requests/get-health.ready.json --twin q4_1`" in markdown


def test_unperturbed_server_passes_the_same_case(mlxcel_q4_1, request, tmp_path, monkeypatch):
    monkeypatch.setenv("MLXCEL_EVIDENCE_DIR", str(tmp_path / "evidence"))
    case = load_case(CORPUS_DIR / "get-health.ready.json")
    reference_url = None if oracle_offline() else request.getfixturevalue("reference_q4_1").base_url
    assert run_case(case, mlxcel_q4_1.base_url, reference_url).meets_expectation()[0]
    assert [f.entry for f in verify(load_entries(), load_records()) if f.entry == "GET /health"] == []
