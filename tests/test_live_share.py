"""oracle/live.py: which cases meet the live reference on a run, and which replay their bound recordings."""

from __future__ import annotations

import pytest

from oracle import live
from oracle.corpus import load_corpus
from oracle.exchange import OracleRequest
from oracle.transcripts import is_current, record


def test_shares_partition_the_corpus_so_every_case_is_live_within_n_runs():
    names = [c.name for c in load_corpus()]
    n = 4
    takers = {name: [k for k in range(n) if live.Share(k, n).takes(name)] for name in names}
    assert all(len(ks) == 1 for ks in takers.values())  # exactly one share of every N runs compares it live
    sizes = [sum(ks == [k] for ks in takers.values()) for k in range(n)]
    assert min(sizes) > len(names) / n * 0.7  # no share is left nearly empty (the hash spreads them)


@pytest.mark.parametrize("text, shown", [("all", "all"), ("none", "none"), ("2/4", "2/4"), (None, "all")])
def test_share_spellings(text, shown):
    assert str(live.Share.parse(text)) == shown


@pytest.mark.parametrize("text", ["4/4", "-1/3", "1/0", "half", "1/2/3"])
def test_a_bad_share_is_one_clear_error(text):
    with pytest.raises(ValueError, match="expected all, none or K/N"):
        live.Share.parse(text)


def test_who_runs_live(monkeypatch):
    monkeypatch.delenv(live.OFFLINE_ENV, raising=False)
    key = next(c.name for c in load_corpus() if live.bucket(c.name, 4) == 1)
    monkeypatch.setattr(live, "binding_holds", lambda: True)
    monkeypatch.setenv(live.SHARE_ENV, "all")
    assert live.live(key, recorded=True)
    monkeypatch.setenv(live.SHARE_ENV, "1/4")
    assert live.live(key, recorded=True)
    monkeypatch.setenv(live.SHARE_ENV, "2/4")
    assert not live.live(key, recorded=True)  # another share's: its recording stands in
    assert live.live(key, recorded=False)  # a changed or unrecorded case always meets the binary
    monkeypatch.setenv(live.SHARE_ENV, "none")
    assert not live.live(key, recorded=True) and live.live(key, recorded=False)
    monkeypatch.setattr(live, "binding_holds", lambda: False)  # recordings of another binary stand for nothing
    monkeypatch.setenv(live.SHARE_ENV, "2/4")
    assert live.live(key, recorded=True)
    monkeypatch.setenv(live.OFFLINE_ENV, "1")
    assert not live.live(key, recorded=False)


def _built(binary, content: bytes, recipe: dict) -> None:
    """A build as oracle/reference.py leaves it: the binary and its record (recipe, file hash) beside it."""
    import json

    from fixtures.twins import STAMP, sha256_file

    binary.write_bytes(content)
    record = {"recipe": recipe, "files": {binary.name: sha256_file(binary)}}
    (binary.parent / STAMP).write_text(json.dumps(record), encoding="utf-8")


def test_the_binding_follows_the_recipe_not_the_bytes_of_one_build(monkeypatch, tmp_path):
    binary = tmp_path / "llama-server"
    monkeypatch.setattr(live, "BINDING", tmp_path / "BINARY.json")
    monkeypatch.setattr("oracle.reference.build_reference", lambda: binary)
    monkeypatch.setattr(live, "compiler", lambda: "c++ (Debian 12.2.0-14+deb12u1) 12.2.0")
    recipe = {"sdist_sha256": "ab" * 32, "cmake_flags": ["-DGGML_NATIVE=OFF"], "target": "llama-server"}
    _built(binary, b"one build", recipe)
    live.binding_holds.cache_clear()
    live.bind(binary)
    assert live.binding_holds()
    _built(binary, b"the same recipe built again, its web UI bundled anew", recipe)
    live.binding_holds.cache_clear()
    assert live.binding_holds()  # the rebuild on a CI machine replays the recordings
    _built(binary, b"another build", {**recipe, "cmake_flags": ["-DGGML_NATIVE=ON"]})
    live.binding_holds.cache_clear()
    assert not live.binding_holds()  # another recipe: every case live
    _built(binary, b"one build", recipe)
    monkeypatch.setattr(live, "compiler", lambda: "clang version 19.1.7")
    live.binding_holds.cache_clear()
    assert not live.binding_holds()  # another compiler
    live.binding_holds.cache_clear()


def test_a_binary_without_its_build_record_is_bound_by_its_bytes(monkeypatch, tmp_path):
    binary = tmp_path / "llama-server"  # MLXCEL_REFERENCE_BINARY's: nothing says how it was built
    binary.write_bytes(b"one build")
    monkeypatch.setattr(live, "BINDING", tmp_path / "BINARY.json")
    monkeypatch.setattr("oracle.reference.build_reference", lambda: binary)
    live.binding_holds.cache_clear()
    assert live.bind(binary) == {"sha256": live.binary_sha256(binary)}
    assert live.binding_holds()
    (tmp_path / "mlxcel-build.json").write_text('{"recipe": {}, "files": {"llama-server": "0"}}')
    live.binding_holds.cache_clear()
    assert live.identity(binary) == {"sha256": live.binary_sha256(binary)}  # a stale record names nothing
    assert live.binding_holds()
    binary.write_bytes(b"another build")
    live.binding_holds.cache_clear()
    assert not live.binding_holds()
    live.binding_holds.cache_clear()


def test_a_recording_is_current_only_for_its_own_request(tmp_path):
    from oracle.exchange import Exchange

    request = OracleRequest.from_dict({"method": "POST", "path": "/completion", "body": {"prompt": "a"}})
    changed = OracleRequest.from_dict({"method": "POST", "path": "/completion", "body": {"prompt": "b"}})
    assert not is_current("case", request, tmp_path)
    record("case", request, Exchange(status=200, headers={}, body=b"{}"), tmp_path)
    assert is_current("case", request, tmp_path) and not is_current("case", changed, tmp_path)


def test_drift_names_the_recorded_and_the_live_reference_answers(tmp_path, monkeypatch):
    from oracle.exchange import Exchange
    from oracle.transcripts import RECORD_ENV, TranscriptDrift, live_or_recorded

    monkeypatch.delenv(RECORD_ENV, raising=False)
    request = OracleRequest.from_dict({"method": "POST", "path": "/slots/0?action=erase"})
    json_type = {"content-type": "application/json"}
    record("case", request, Exchange(status=200, headers=json_type, body=b'{"id_slot":0,"n_erased":15}'), tmp_path)
    live_answer = Exchange(status=200, headers=json_type, body=b'{"id_slot":0,"n_erased":0}')
    with pytest.raises(TranscriptDrift) as err:
        live_or_recorded("case", request, live_answer, (), tmp_path)
    assert "recorded 15 vs live reference 0" in str(err.value) and "mlxcel" not in str(err.value)
    with pytest.raises(TranscriptDrift, match="missing in live reference"):
        live_or_recorded("case", request, Exchange(status=200, headers=json_type, body=b'{"id_slot":0}'), (), tmp_path)
