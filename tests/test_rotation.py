"""oracle/rotation.py: CI runs a third of the slow suites a landing, every test once in three landings; the
manifest's gate lets an entry of a rotated-out test wait for its landing, never a record that differs."""

from __future__ import annotations

from fixtures.families import ROTATION
from oracle import rotation
from oracle.evidence import verify

SUITE = "conformance/test_startup.py"
IDS = [f"{SUITE}::test_startup_case[c{i}]" for i in range(7)] + [
    "tests/test_sampler.py::test_a",  # (not a rotating suite: always runs)
    f"{SUITE}::test_other",
]


def test_every_test_runs_once_in_rotation_landings_and_the_others_always():
    runs = {nodeid: 0 for nodeid in IDS}
    for turn in range(ROTATION):
        keep, rotated = rotation.select(IDS, turn)
        for nodeid, k in zip(IDS, keep, strict=True):
            runs[nodeid] += k
        assert keep[IDS.index("tests/test_sampler.py::test_a")]
        assert f"{SUITE}::test_startup_case" in rotated and "tests/test_sampler.py::test_a" not in rotated
    assert all(n == (ROTATION if "sampler" in nodeid else 1) for nodeid, n in runs.items()), runs


def test_a_developers_run_keeps_everything(monkeypatch):
    monkeypatch.setenv("MLXCEL_LIVE_SHARE", "all")
    assert rotation.landing() is None
    assert rotation.select(IDS, None) == ([True] * len(IDS), [])
    monkeypatch.setenv("MLXCEL_LIVE_SHARE", "7/24")
    assert rotation.landing() == 7 % ROTATION
    monkeypatch.setenv("MLXCEL_ALL_TWINS", "1")
    assert rotation.landing() is None


def test_the_gate_lets_a_rotated_entry_wait_but_never_a_difference(tmp_path):
    entry = {"id": "--x", "state": "supported", "test": f"{SUITE}::test_startup_case"}
    other = {"id": "--y", "state": "supported", "test": "conformance/test_corpus.py::test_corpus_case"}
    rotation.write_rotated([f"{SUITE}::test_startup_case"], tmp_path)
    rotated = rotation.read_rotated(tmp_path)
    assert verify([entry], [], rotated) == []
    assert [f.entry for f in verify([entry, other], [], rotated)] == ["--y"]  # (not rotated: still needs evidence)
    assert [f.entry for f in verify([entry], [], set())] == ["--x"]  # (a full run: it needs its evidence)
    differs = {"case": "c0", "entries": ["--x"], "identical": False, "divergences": [], "reproduce": "r"}
    assert [f.entry for f in verify([entry], [differs], rotated)] == ["--x"]


def test_a_run_inside_the_run_adds_to_the_list_never_replaces_it(tmp_path):
    rotation.write_rotated(["a.py::f", "b.py::g"], tmp_path)
    rotation.write_rotated(["c.py::h"], tmp_path)
    assert rotation.read_rotated(tmp_path) == {"a.py::f", "b.py::g", "c.py::h"}


def test_a_by_design_entry_whose_pinning_case_waits_is_not_called_supported(tmp_path):
    """A by_design entry's difference is pinned by one case; other cases (a corpus case) may agree. With the pinning
    case rotated out, the agreeing records alone do not fail the entry; in a full run they do."""
    entry = {"id": "--z", "state": "by_design", "test": f"{SUITE}::test_startup_case"}
    same = {"case": "c1", "entries": ["--z"], "identical": True, "divergences": [], "reproduce": "r"}
    rotation.write_rotated([f"{SUITE}::test_startup_case"], tmp_path)
    assert verify([entry], [same], rotation.read_rotated(tmp_path)) == []
    elsewhere = {**entry, "test": f"{SUITE}::test_another_function"}  # (the pointer's suite lost tests: may wait)
    assert verify([elsewhere], [same], rotation.read_rotated(tmp_path)) == []
    corpus = {**entry, "test": "conformance/test_corpus.py::test_corpus_case"}  # (a suite that does not rotate)
    assert [f.entry for f in verify([corpus], [same], rotation.read_rotated(tmp_path))] == ["--z"]
    assert [f.message for f in verify([entry], [same], set())] == ["the oracle saw no difference: it is supported"]
