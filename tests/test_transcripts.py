"""Recorded reference transcripts name the cache root by a mark (oracle/transcripts.py): a recording made on one
machine replays on another whose fixtures live elsewhere, and a path outside the cache root is kept as recorded
(a reply naming another file still differs)."""

from __future__ import annotations

from oracle.exchange import Exchange, OracleRequest
from oracle.transcripts import CACHE_MARK, load, record, transcript_path


def test_the_cache_root_is_recorded_as_a_mark_and_read_back_as_this_machines(tmp_path, monkeypatch):
    request = OracleRequest("GET", "/lora-adapters")
    here, there = tmp_path / "here", tmp_path / "there"
    body = f'[{{"path":"{here}/fixtures/lora.gguf"}},{{"path":"/elsewhere/lora.gguf"}}]'.encode()
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(here))
    record("case", request, Exchange(200, {"content-type": "application/json"}, body), tmp_path)
    text = transcript_path("case", tmp_path).read_text()
    assert str(here) not in text and f"{CACHE_MARK}/fixtures/lora.gguf" in text
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(there))
    replayed = load("case", request, tmp_path).body.decode()
    assert replayed == f'[{{"path":"{there}/fixtures/lora.gguf"}},{{"path":"/elsewhere/lora.gguf"}}]'


def test_a_startup_recording_names_the_cache_root_by_the_mark(tmp_path, monkeypatch):
    """A startup case's recorded reference (its log, its probe: /props' model_alias is a path under the cache root)
    is read back with the machine's own root: a cold run's root is not the one it was recorded under."""
    from oracle import startup
    from oracle.startup import Observation, record_reference, recorded_reference

    monkeypatch.setattr(startup, "STARTUP_TRANSCRIPTS", tmp_path / "startup")
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "one"))
    case = startup.load_startup_case(next(startup.STARTUP_DIR.glob("override-kv-ctx.json")))
    alias = str(tmp_path / "one" / "sources" / "m.gguf")
    record_reference(case, Observation(outcome="exits", exit_status=1, said=f"loading model '{alias}'"))
    text = (tmp_path / "startup" / "override-kv-ctx.json").read_text()
    assert CACHE_MARK in text and str(tmp_path / "one") not in text
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "two"))
    assert recorded_reference(case).said == f"loading model '{tmp_path / 'two' / 'sources' / 'm.gguf'}'"
