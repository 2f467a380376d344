"""--hf-token against b10621: both routers, pointed at a fake hub on loopback (HF_ENDPOINT), asked to fetch a
model (POST /models). What each sends the hub is the evidence behind the entry (mlxcel-oracle verify): the token
goes as b10621's `Authorization: Bearer` header on both; what is fetched differs (b10621 a GGUF through its
refs and manifest API, mlxcel an MLX snapshot through the model API), the entry's by_design divergence."""

from __future__ import annotations

import time

import pytest

from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import mlxcel_server, reference_server, start_together
from tests.fake_hub import FakeHub

pytestmark = pytest.mark.reference

TOKEN = "hf_" + "a" * 34  # shaped as the hub issues them (b10621's is_valid_hf_token)


def test_hf_token_goes_to_the_hub_as_a_bearer_on_both(reference_binary):
    with FakeHub({}) as hub_ref, FakeHub({}) as hub_mine:
        ref = reference_server(reference_binary, None, ["--hf-token", TOKEN])
        mine = mlxcel_server(None, ["--hf-token", TOKEN])
        ref.env["HF_ENDPOINT"], mine.env["HF_ENDPOINT"] = hub_ref.url, hub_mine.url
        try:
            start_together(ref, mine)
            for sp in (ref, mine):
                r = loopback.post(sp.base_url + "/models", json={"model": "acme/tiny"}, timeout=60)
                assert r.status_code == 200, (sp.name, r.text)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (hub_ref.requests and hub_mine.requests):
                time.sleep(0.2)
        finally:
            ref.cleanup()
            mine.cleanup()
        got, want = list(hub_mine.requests), list(hub_ref.requests)
    paths_differ = [p for p, _ in got] != [p for p, _ in want]
    write_record(
        {
            "case": "hf-token-router-download",
            "entries": ["--hf-token"],
            "twin": "router",
            "request": {"method": "POST", "path": "/models (hub on loopback)", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": got == want,
            "bytes_identical": False,
            "normalizations_fired": [],
            "divergences": [{"path": "$hub.requests[*].path", "kind": "value"}] if paths_differ else [],
            "reproduce": "pytest conformance/test_hf_token.py",
        }
    )
    assert want and got, (want, got)
    # the first request of each carries the token as a bearer (b10621's spawned child then sends none)
    assert want[0][1] == got[0][1] == f"Bearer {TOKEN}"
    assert all(auth == f"Bearer {TOKEN}" for _, auth in got)
