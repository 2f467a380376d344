"""The model store: `<owner>/<name>` snapshots fetched from a hub (a fake one on loopback here), resumed and
checked file by file, listed and removed by `mlxcel download / list / rm`, refused offline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from server.models import hub
from tests.fake_hub import FakeHub

FILES = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": os.urandom(300_000),
    "tokenizer.json": b"{}" * 1000,
}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXCEL_MODELS_DIR", str(tmp_path / "store"))
    hub.set_store_root(None)
    hub.set_offline(False)
    hub.set_token(None)
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
        return subprocess.run(
            [sys.executable, "-m", "server.cli.store", *argv], capture_output=True, text=True, env=env, timeout=120
        )

    got = run("download", "acme/tiny")
    assert got.returncode == 0, got.stderr
    assert "100.0%" in got.stderr  # the progress bar
    assert run("list").stdout.splitlines()[3:] == [f"{'acme/tiny':32s} downloaded"]  # after the bundled three
    missing = run("download", "acme/none")
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert run("--offline", "download", "acme/tiny").returncode == 1
    assert run("rm", "acme/tiny").returncode == 0
    assert len(run("list").stdout.splitlines()) == 3


TOKEN = "hf_" + "Ab3" * 12  # shaped as the hub issues tokens (b10621's is_valid_hf_token)


def _store_cli(store, fake_hub, *argv, **extra):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(MLXCEL_MODELS_DIR=str(store), MLXCEL_HUB_ENDPOINT=fake_hub.url, **extra)
    return subprocess.run(
        [sys.executable, "-m", "server.cli.store", *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_hf_token_authenticates_every_request_as_a_bearer(store, fake_hub):
    got = _store_cli(store, fake_hub, "--hf-token", TOKEN, "download", "acme/tiny", HF_TOKEN="hf_" + "z" * 34)
    assert got.returncode == 0, got.stderr
    assert fake_hub.auth and all(h == f"Bearer {TOKEN}" for _, h in fake_hub.auth)  # the flag wins over HF_TOKEN
    assert {what for what, _ in fake_hub.auth} == {"api", *FILES}


def test_the_token_defaults_to_hf_token_and_none_sends_nothing(store, fake_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.set_token(None)
    hub.download("acme/tiny")
    assert {h for _, h in fake_hub.auth} == {f"Bearer {TOKEN}"}
    fake_hub.auth.clear()
    hub.remove_snapshot("acme/tiny")
    monkeypatch.delenv("HF_TOKEN")
    hub.download("acme/tiny")
    assert {h for _, h in fake_hub.auth} == {None}


def test_a_token_not_shaped_as_the_hubs_is_kept_off_its_api_as_b10621_does(store, fake_hub, caplog):
    hub.set_token("not-a-hub-token")
    hub.download("acme/tiny")
    assert dict(fake_hub.auth)["api"] is None
    assert {h for what, h in fake_hub.auth if what != "api"} == {"Bearer not-a-hub-token"}
    assert "invalid token, authentication disabled" in caplog.text


def test_an_unreachable_hub_is_one_line(store, monkeypatch):
    env = {**os.environ, "MLXCEL_MODELS_DIR": str(store), "MLXCEL_HUB_ENDPOINT": "http://127.0.0.1:9"}
    got = subprocess.run(
        [sys.executable, "-m", "server.cli.store", "download", "acme/tiny"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert got.returncode == 1
    assert got.stderr.startswith("mlxcel: error: cannot reach the hub at http://127.0.0.1:9: ")
    assert "Connection refused" in got.stderr and got.stderr.count("\n") == 1  # one line, no traceback
    monkeypatch.setenv("MLXCEL_HUB_ENDPOINT", "http://no-such-host.invalid")  # no name resolution (no network)
    with pytest.raises(hub.HubError, match=r"^cannot reach the hub at http://no-such-host\.invalid: \S"):
        hub.download("acme/tiny")


def _mlxcel(*argv, **env):
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'mlxcel'; from server.cli.main import mlxcel_main; mlxcel_main()",
            *argv,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_mlxcel_help_lists_the_commands():
    got = _mlxcel("--help")
    assert got.returncode == 0 and got.stderr == ""
    commands = [line.split()[0] for line in got.stdout.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert commands == [
        "serve",
        "generate",
        "chat",
        "estimate",
        "bench",
        "inspect",
        "convert",
        "download",
        "list",
        "rm",
        "webui",
    ]
    wrong = _mlxcel("frobnicate")
    assert wrong.returncode == 2 and wrong.stderr == got.stdout


def test_mlxcel_list_shows_the_bundled_models_built_or_not(store):
    import json

    from server.cachedir import STAMP
    from server.models.bundled import BUNDLED_ENCODERS, BUNDLED_MODELS, DEFAULT_MODEL

    for model in BUNDLED_MODELS.values():  # the default as the first start leaves it; the other by an older converter
        built = store / model.name
        built.mkdir(parents=True)
        (built / "config.json").write_text("{}")
        recipe = model.recipe if model is DEFAULT_MODEL else {**model.recipe, "converter": 0}
        (built / STAMP).write_text(json.dumps({"recipe": recipe, "files": {"config.json": ""}}))
    got = _mlxcel("--models-dir", str(store), "list")
    assert got.returncode == 0, got.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in got.stdout.splitlines()}
    assert list(rows) == [*BUNDLED_MODELS, *BUNDLED_ENCODERS]
    assert rows[DEFAULT_MODEL.name] == "bundled, the default; ready"
    assert (
        rows["smollm2-135m-instruct-f32"] == rows["all-minilm-l6-v2"] == "bundled; fetched and converted on first use"
    )
