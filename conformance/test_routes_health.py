"""GET /health and /v1/health: byte-identical answers from b10621 and mlxcel once ready."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.reference


@pytest.mark.parametrize("path", ["/health", "/v1/health"])
def test_health_matches_reference_bytes(reference_q4_1, mlxcel_q4_1, path):
    ref = httpx.get(reference_q4_1.base_url + path, timeout=30)
    mine = httpx.get(mlxcel_q4_1.base_url + path, timeout=30)
    assert (mine.status_code, mine.content) == (ref.status_code, ref.content) == (200, b'{"status":"ok"}')
    assert mine.headers["content-type"] == ref.headers["content-type"]
