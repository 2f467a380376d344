"""The startup differential's own logic: observations diffed, placeholders pinned, printed output described."""

from __future__ import annotations

import json

from oracle.exchange import Exchange
from oracle.startup import Observation, StartupCase, StartupResult, _output_properties, diff_observations


def _served(body: bytes = b'{"content":"x"}') -> Observation:
    return Observation("serves", None, Exchange(200, {"content-type": "application/json"}, body))


def test_a_refusal_against_a_server_is_two_divergences():
    report = diff_observations(_served(), Observation("exits", 1), ())
    assert sorted((d.path, d.kind) for d in report.divergences) == [
        ("$startup.exit_status", "value"),
        ("$startup.outcome", "value"),
    ]


def test_the_probe_is_compared_under_its_own_prefix_and_normalizations():
    ref = _served(json.dumps({"content": "a", "timings": {"prompt_ms": 1.0}}).encode())
    mine = _served(json.dumps({"content": "b", "timings": {"prompt_ms": 2.0}}).encode())
    paths = {d.path for d in diff_observations(ref, mine, ("clocks",)).divergences}
    assert paths == {"$probe.content"}
    assert diff_observations(ref, ref, ()).identical


def test_files_and_output_properties_are_compared():
    ref = Observation("serves", files={"{tmp}/log": {"exists": True, "mode": "0o644"}})
    mine = Observation("serves", files={"{tmp}/log": {"exists": True, "mode": "0o600"}})
    assert [d.path for d in diff_observations(ref, mine, ()).divergences] == ["$startup.files.{tmp}/log.mode"]


def test_printed_output_is_described_not_compared_verbatim():
    b10621 = "0.00.039.303 I cmn common_param: x\n0.00.040.000 W srv  y\n"
    props = _output_properties(b10621, ("line-shape", "ansi", "output-empty"))
    assert props == {"timestamps": True, "level_tags": True, "ansi": False, "empty": False}
    bare = _output_properties("cmn common_param: x\n", ("line-shape",))
    assert bare == {"timestamps": False, "level_tags": False}
    assert _output_properties("\x1b[32mI\x1b[0m x", ("ansi",)) == {"ansi": True}
    assert _output_properties("version: 1 (build 2, commit c)", ("match:^version: \\S+",)) == {
        "match:^version: \\S+": True
    }


def test_a_pinned_line_keeps_placeholders_for_machine_paths():
    obs = Observation("exits", 1, values={"repo": "/work/main", "tmp": "/tmp/x1", "port": "8080"})
    line = "error: --path /work/main/fixtures: no"
    assert obs.unpinned(line) == "error: --path {repo}/fixtures: no"
    assert obs.pinned(obs.unpinned(line)) == line


def test_the_expectation_must_match_exactly():
    case = StartupCase(
        "c", ("--x",), ("--x",), expect_identical=False, expect_divergences=(("$startup.outcome", "value"),)
    )
    both = diff_observations(_served(), Observation("exits", 1), ())
    ok, why = StartupResult(case, _served(), Observation("exits", 1), both, "live").meets_expectation()
    assert not ok and "exit_status" in why  # one more divergence than pinned fails
    same = diff_observations(_served(), _served(), ())
    assert not StartupResult(case, _served(), _served(), same, "live").meets_expectation()[0]
