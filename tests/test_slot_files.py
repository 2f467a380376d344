"""POST /slots/:id_slot's files: b10621's filename rule, confinement, atomic writes, identity binding, and a
save / restart / restore round trip that continues exactly as the slot would have."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from oracle import loopback
from oracle.processes import mlxcel_server
from server.engine import slot_files
from server.engine.slot_files import Identity, SlotFileError, confined, valid_filename

NAMES = json.loads((Path(__file__).resolve().parents[1] / "fixtures/security/slot-filenames.json").read_text())
IDENTITY = Identity("m" * 64, "t" * 64)


@pytest.mark.parametrize("name", NAMES["refused"])
def test_refused_names(name):
    assert not valid_filename(name)


@pytest.mark.parametrize("name", NAMES["accepted"])
def test_accepted_names(name):
    assert valid_filename(name)


def test_symlinks_are_never_followed(tmp_path):
    root = tmp_path / "slots"
    root.mkdir()
    for link, target in NAMES["symlinks"].items():
        os.symlink(target, root / link)
        with pytest.raises(SlotFileError):
            confined(str(root), link)
    assert confined(str(root), "slot0.bin") == root.resolve() / "slot0.bin"


def test_round_trip_and_identity_binding(tmp_path):
    path = tmp_path / "a.bin"
    n = slot_files.write(path, [1, 2, 3, 50_000], IDENTITY)
    assert path.stat().st_size == n
    assert slot_files.read(path, IDENTITY) == ([1, 2, 3, 50_000], n)
    with pytest.raises(SlotFileError):
        slot_files.read(path, Identity("x" * 64, IDENTITY.tokenizer))  # another model's file
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(SlotFileError):
        slot_files.read(path, IDENTITY)


def test_a_failed_write_leaves_no_file_and_the_old_one_intact(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    slot_files.write(path, [7, 8], IDENTITY)
    before = path.read_bytes()

    def disk_full(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        slot_files.write(path, [1] * 1000, IDENTITY)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]  # no temporary file left behind


# ---- a live server ---------------------------------------------------------------------------------------

MODEL = "smollm2-135m-instruct-f32"
PROMPT = "The history of the city of Paris began with a small settlement on an island in the river Seine, " * 8


def _serve(directory: Path):
    proc = mlxcel_server(MODEL, ["-np", "2", "--slot-save-path", str(directory)])
    proc.start()
    return proc


def _complete(url: str, prompt, n: int = 8, slot: int = 0) -> dict:
    r = loopback.post(
        url + "/completion",
        json={"prompt": prompt, "n_predict": n, "temperature": 0, "id_slot": slot, "return_tokens": True},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_every_bad_name_is_refused_and_leaves_no_file(tmp_path):
    root = tmp_path / "slots"
    root.mkdir()
    for link, target in NAMES["symlinks"].items():
        os.symlink(target, root / link)
    proc = _serve(root)
    try:
        _complete(proc.base_url, "Hello")
        for name in [*NAMES["refused"], *NAMES["symlinks"]]:
            for action in ("save", "restore"):
                body = json.dumps({"filename": name})  # ASCII escapes: a lone surrogate travels as \udc80
                r = loopback.post(f"{proc.base_url}/slots/0?action={action}", content=body, timeout=60)
                assert r.status_code == 400 and r.json()["error"]["message"] == "Invalid filename", (name, r.text)
    finally:
        proc.cleanup()
    assert sorted(p.name for p in root.iterdir()) == sorted(NAMES["symlinks"])  # nothing written
    assert not (tmp_path / "outside.bin").exists() and not Path("/tmp/outside-abs.bin").exists()


def test_save_restart_restore_continues_the_same(tmp_path):
    root = tmp_path / "slots"
    root.mkdir()
    proc = _serve(root)
    try:
        first = _complete(proc.base_url, PROMPT)
        held = first["tokens_evaluated"] + first["tokens_predicted"] - 1  # the last token is drawn, not fed
        r = loopback.post(f"{proc.base_url}/slots/0?action=save", json={"filename": "paris.slot"}, timeout=60)
        assert r.status_code == 200 and r.json()["n_saved"] == held
        assert (root / "paris.slot").is_file()
    finally:
        proc.cleanup()
    proc = _serve(root)  # a new process: nothing of the first is in memory
    try:
        r = loopback.post(f"{proc.base_url}/slots/1?action=restore", json={"filename": "paris.slot"}, timeout=300)
        assert r.status_code == 200 and r.json()["n_restored"] == held
        slots = loopback.get(proc.base_url + "/slots", timeout=30).json()
        assert slots[1]["id"] == 1
        follow = [*_tokenize(proc.base_url, PROMPT), *first["tokens"]]
        resumed = _complete(proc.base_url, follow, slot=1)
        assert resumed["timings"]["cache_n"] > 0  # the restored tokens served the prompt
    finally:
        proc.cleanup()
    cold = _serve(tmp_path)  # a server that never saw the slot: the continuation it computes from scratch
    try:
        expected = _complete(cold.base_url, follow, slot=0)
        assert expected["timings"]["cache_n"] == 0
    finally:
        cold.cleanup()
    assert resumed["content"] == expected["content"] and resumed["tokens"] == expected["tokens"]


def _tokenize(url: str, text: str) -> list[int]:
    return loopback.post(url + "/tokenize", json={"content": text, "add_special": True}, timeout=60).json()["tokens"]
