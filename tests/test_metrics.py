"""GET /metrics: b10621's Prometheus families, read with prometheus-client's own text parser (what a scrape
config written for llama-server reads), the buckets reset per scrape, and a live server's scrape."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from oracle import loopback
from oracle.processes import mlxcel_server
from server.api.prometheus import render
from server.engine.metrics import ServerMetrics

# b10621's families (server-task.cpp, server_task_result_metrics::to_metrics) and their types
LLAMACPP_FAMILIES = {
    "prompt_tokens_total": "counter",
    "prompt_tokens_cached_total": "counter",
    "prompt_seconds_total": "counter",
    "tokens_predicted_total": "counter",
    "tokens_predicted_seconds_total": "counter",
    "n_decode_total": "counter",
    "n_tokens_max": "counter",
    "spec_decode_num_draft_tokens_total": "counter",
    "spec_decode_num_accepted_tokens_total": "counter",
    "spec_decode_num_drafts_total": "counter",
    "prompt_tokens_seconds": "gauge",
    "predicted_tokens_seconds": "gauge",
    "requests_processing": "gauge",
    "requests_deferred": "gauge",
    "n_busy_slots_per_decode": "gauge",
}


def _families(text: str) -> dict[str, tuple[str, float]]:
    """name (without a _total suffix, which the parser adds to or strips from counters) -> (type, value)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name.removesuffix("_total")] = (family.type, sample.value)
    return out


def _scrape(m: ServerMetrics, n_processing: int, n_deferred: int) -> str:
    """What GET /metrics serves: the figures taken (the buckets start over), rendered."""
    return render(m.take(), n_processing, n_deferred)


def test_every_llamacpp_family_parses_with_its_type():
    m = ServerMetrics()
    m.add_prompt(7, 200_000)
    m.on_prediction(8, 300_000)
    m.post_decode(1, [7])
    got = _families(_scrape(m, n_processing=1, n_deferred=2))
    for name, kind in LLAMACPP_FAMILIES.items():
        assert got[f"llamacpp:{name.removesuffix('_total')}"][0] == kind, name
    assert got["llamacpp:prompt_tokens"][1] == 7 and got["llamacpp:tokens_predicted"][1] == 8
    assert got["llamacpp:prompt_tokens_seconds"][1] == pytest.approx(35.0)
    assert got["llamacpp:predicted_tokens_seconds"][1] == pytest.approx(7 / 0.3, rel=1e-5)  # steps, not tokens
    assert got["llamacpp:requests_processing"][1] == 1 and got["llamacpp:requests_deferred"][1] == 2


def test_the_gauges_are_averaged_between_scrapes_and_the_counters_are_not():
    m = ServerMetrics()
    m.add_prompt(10, 1_000_000)
    _scrape(m, 0, 0)
    again = _families(_scrape(m, 0, 0))
    assert again["llamacpp:prompt_tokens_seconds"][1] == 0.0  # the window since the last scrape was empty
    assert again["llamacpp:prompt_tokens"][1] == 10


def test_values_are_printed_as_ostream_prints_a_double():
    m = ServerMetrics()
    m.add_prompt(1_234_567, 1)
    text = _scrape(m, 0, 0)
    assert "llamacpp:prompt_tokens_total 1.23457e+06\n" in text


@pytest.fixture(scope="module")
def metrics_server():
    proc = mlxcel_server("smollm2-135m-instruct-q4_1", ["--metrics", "-np", "2"])
    proc.start()
    yield proc
    proc.cleanup()


def test_a_live_scrape_after_requests(metrics_server):
    url = metrics_server.base_url
    for prompt in ("Hello there", "Count to three:"):
        r = loopback.post(url + "/completion", json={"prompt": prompt, "n_predict": 4, "temperature": 0}, timeout=120)
        assert r.status_code == 200
    r = loopback.get(url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; version=0.0.4"
    assert int(r.headers["Process-Start-Time-Unix"]) > 0
    got = _families(r.text)
    assert {k.removeprefix("llamacpp:") for k in got if k.startswith("llamacpp:")} == {
        n.removesuffix("_total") for n in LLAMACPP_FAMILIES
    }
    assert got["llamacpp:tokens_predicted"][1] == 8
    assert got["llamacpp:n_decode"][1] == 8  # one prompt decode and three generation steps each
    assert got["mlxcel:prompt_cache_entries"][0] == "gauge"


def test_disabled_metrics_answer_501():
    proc = mlxcel_server("smollm2-135m-instruct-q4_1", [])
    proc.start()
    try:
        r = loopback.get(proc.base_url + "/metrics", timeout=30)
        assert r.status_code == 501
        assert r.json()["error"]["message"] == (
            "This server does not support metrics endpoint. Start it with `--metrics`"
        )
    finally:
        proc.cleanup()
