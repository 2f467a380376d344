"""The model store: `<owner>/<name>` snapshots fetched from a hub (a fake one on loopback here), resumed and
checked file by file, listed and removed by `mlxcel download / list / rm`, refused offline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from server.models import hub
from tests.fake_hub import FakeHub

FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": os.urandom(300_000),
         "tokenizer.json": b"{}" * 1000}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXCEL_MODELS_DIR", str(tmp_path / "store"))
    hub.set_store_root(None)
    hub.set_offline(False)
    return tmp_path / "store"


@pytest.fixture
def fake_hub(monkeypatch):
    with FakeHub({"acme/tiny": dict(FILES)}) as h:
        monkeypatch.setenv("MLXCEL_HUB_ENDPOINT", h.url)
        yield h


def test_a_download_writes_a_checked_snapshot_into_the_store(store, fake_hub):
    target = hub.download("acme/tiny")
    assert target == store / "acme" / "tiny"
    assert {p.name: p.read_bytes() for p in target.iterdir()} == FILES
    assert hub.list_snapshots() == ["acme/tiny"]


def test_a_broken_download_resumes_from_where_it_stopped(store, fake_hub):
    fake_hub.cut_after["model.safetensors"] = 100_000
    with pytest.raises(hub.HubError, match="broke off"):
        hub.download("acme/tiny")
    part = store / "acme" / "tiny" / "model.safetensors.part"
    assert part.stat().st_size == 100_000
    assert hub.list_snapshots() == []  # config.json comes last: no half snapshot counts as a model
    hub.download("acme/tiny")
    assert ("model.safetensors", "bytes=100000-") in fake_hub.ranges
    assert (store / "acme" / "tiny" / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert not part.exists()


def test_a_file_whose_checksum_does_not_match_is_not_kept(store, fake_hub):
    fake_hub.wrong_sha.add("model.safetensors")
    with pytest.raises(hub.HubError, match="SHA-256 does not match"):
        hub.download("acme/tiny")
    assert not list((store / "acme" / "tiny").glob("model.safetensors*"))


def test_offline_refuses_every_download(store, fake_hub):
    hub.set_offline(True)
    try:
        with pytest.raises(hub.HubError, match="offline"):
            hub.download("acme/tiny")
    finally:
        hub.set_offline(False)
    assert fake_hub.ranges == []


def test_remove_stays_inside_the_store(store, fake_hub, tmp_path):
    hub.download("acme/tiny")
    for bad in ("../x", "acme/../../etc", "/etc/passwd", "acme"):
        with pytest.raises(hub.HubError):
            hub.remove_snapshot(bad)
    assert hub.remove_snapshot("acme/tiny")
    assert not (store / "acme").exists()
    assert not hub.remove_snapshot("acme/tiny")


def test_the_mlxcel_commands_download_list_and_remove(store, fake_hub):
    env = {**os.environ, "MLXCEL_MODELS_DIR": str(store), "MLXCEL_HUB_ENDPOINT": fake_hub.url}

    def run(*argv):
        return subprocess.run([sys.executable, "-m", "server.cli.store", *argv], capture_output=True, text=True,
                              env=env, timeout=120)

    got = run("download", "acme/tiny")
    assert got.returncode == 0, got.stderr
    assert "100.0%" in got.stderr  # the progress bar
    assert run("list").stdout.splitlines() == ["acme/tiny"]
    missing = run("download", "acme/none")
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert run("--offline", "download", "acme/tiny").returncode == 1
    assert run("rm", "acme/tiny").returncode == 0
    assert run("list").stdout == ""
