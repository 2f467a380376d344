"""Router mode in process: the model store as its cache source (a fake hub on loopback), POST /models
downloading in the background, DELETE /models confined to the store, presets refused as b10621 refuses them,
and the pool's LRU and load-failure states. Conformance with b10621's router is the oracle's (fixtures/requests/
*router*, conformance/test_router_sse.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from oracle import loopback
from oracle.processes import free_port
from server.router import presets
from server.router.catalog import load_catalog
from server.router.pool import Loaded, ModelPool, RouterError
from tests.fake_hub import FakeHub


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


TOKEN = "hf_" + "Ab3" * 12  # shaped as the hub issues tokens


@pytest.fixture
def tiny_checkpoint(twin_f32):
    """The F32 twin's files as a hub repository (config, tokenizer, weights)."""
    return {p.name: p.read_bytes() for p in twin_f32.mlx_dir.iterdir() if p.is_file() and p.name != "mlxcel-build.json"}


def test_post_models_downloads_into_the_store_and_delete_removes_it(tmp_path, tiny_checkpoint):
    store = tmp_path / "store"
    with FakeHub({"acme/smol": tiny_checkpoint}) as hub_server:
        env = {**os.environ, "MLXCEL_MODELS_DIR": str(store), "MLXCEL_HUB_ENDPOINT": hub_server.url}
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "server", "--port", str(port), "--hf-token", TOKEN],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: _up(base))
            assert loopback.get(base + "/models").json()["data"] == []
            r = loopback.post(base + "/models", json={"model": "acme/smol"})
            assert r.json() == {"success": True}
            again = loopback.post(base + "/models", json={"model": "acme/smol"})
            assert again.status_code == 400 and "already exists" in again.text

            def listed():
                data = loopback.get(base + "/models").json()["data"]
                return data and data[0]["status"]["value"] == "unloaded" and data

            _wait(listed, 120)
            (model,) = listed()
            assert (model["id"], model["source"], model["can_remove"]) == ("acme/smol", "cache", True)
            # --hf-token authenticated the download, listing and files, as b10621 sends it
            assert {h for _, h in hub_server.auth} == {f"Bearer {TOKEN}"} and (
                "api",
                f"Bearer {TOKEN}",
            ) in hub_server.auth
            done = loopback.post(
                base + "/completion",
                json={"model": "acme/smol", "prompt": "The capital of France is", "n_predict": 4, "temperature": 0},
                timeout=300,
            )
            assert done.status_code == 200 and done.json()["content"].startswith(" Paris")
            assert loopback.delete(base + "/models", params={"model": "acme/smol"}).json() == {"success": True}
            assert not (store / "acme" / "smol").exists()
            assert loopback.get(base + "/models").json()["data"] == []
            for bad in ("../etc", "acme/../../x"):
                r = loopback.delete(base + "/models", params={"model": bad})
                assert r.status_code == 500 and "is not found" in r.json()["error"]["message"]
            r = loopback.post(base + "/models", json={"model": "../escape"})
            assert r.status_code == 400
        finally:
            proc.terminate()
            proc.wait(60)


def _up(base: str) -> bool:
    try:
        return loopback.get(base + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_preset_key_b10621_does_not_know_stops_the_router(tmp_path):
    ini = tmp_path / "p.ini"
    ini.write_text("[m]\nmodel = /x\nbogus-key = 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "server", "--models-preset", str(ini), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "failed to initialize router models: option 'bogus-key' not recognized in preset 'm'" in proc.stderr


def test_preset_files_read_as_b10621_reads_them(tmp_path):
    ini = tmp_path / "p.ini"
    ini.write_text(
        "; comment\nversion = 1\n[*]\nc = 512\n[b]\nmodel = /m/b.gguf\nno-mmap = true # off\n"
        "LLAMA_ARG_N_PARALLEL = 2\n[a:q4_k_m]\ntemp=0.5;x\n[b]\nmodel = /m/again.gguf\n"
    )
    found, glob = presets.load_ini(str(ini))
    assert list(found) == ["a:Q4_K_M", "b"]  # sorted; a tag canonicalized; a repeated header starts over
    assert found["b"].to_ini() == "[b]\nmodel = /m/again.gguf\n\n"
    merged = presets.cascade(glob, found)
    assert merged["a:Q4_K_M"].to_argv() == ["--temperature", "0.5", "--ctx-size", "512"]
    bad = tmp_path / "bad.ini"
    bad.write_text("  indented = 1\n")
    with pytest.raises(presets.PresetError, match="failed to parse server config file"):
        presets.load_ini(str(bad))


def test_catalog_precedence_and_alias_conflicts(tmp_path):
    models = tmp_path / "models"
    (models / "dirmodel").mkdir(parents=True)
    (models / "dirmodel" / "config.json").write_text("{}")
    (models / "x.gguf").write_bytes(b"")
    (models / "mmproj-x.gguf").write_bytes(b"")
    ini = tmp_path / "p.ini"
    ini.write_text("[x]\nalias = ex\nctx-size = 64\n[y]\nmodel = /y.gguf\n")
    router = presets.from_argv(["--temp", "0", "--models-max", "2", "-m", "ignored.gguf"])
    presets.unset_reserved(router, model_args=True)
    entries = load_catalog(None, str(models), str(ini), router)
    assert {n: e.source for n, e in entries.items()} == {"dirmodel": "models_dir", "x": "preset", "y": "preset"}
    assert entries["x"].aliases == ["ex"]
    assert entries["x"].preset.to_argv() == [
        "--temperature",
        "0",
        "--alias",
        "ex",
        "--ctx-size",
        "64",
        "--model",
        str(models / "x.gguf"),
    ]
    ini.write_text("[x]\nalias = y\n[y]\nmodel = /y.gguf\n")
    with pytest.raises(presets.PresetError, match="conflicts"):
        load_catalog(None, str(models), str(ini), router)


def _pool(models_max=1, fail=()):
    from server.router.catalog import Entry

    entries = {n: Entry(n, "models_dir", presets.Preset(n)) for n in ("a", "b", "c")}
    stopped = []

    def build(entry, argv):
        if entry.name in fail:
            raise RuntimeError("cannot load")
        return Loaded(app=None, info={"meta": {"name": entry.name}}, stop=lambda: stopped.append(entry.name))

    return ModelPool(lambda: entries, build, lambda e: ["prog", "--alias", e.name], models_max=models_max), stopped


def test_a_child_naming_a_draft_reports_the_draft_stage_after_the_text_model():
    """b10621's load_model: stages text_model then spec_model where a draft model is named (has_dft), each
    stage's first and last samples in order."""
    from server.router.catalog import Entry
    from server.router.pool import load_stages

    assert load_stages(["--alias", "a", "--ctx-size", "64"]) == ["text_model"]
    for argv in (["-md", "d.gguf"], ["--model-draft", "d"], ["--spec-draft-model=d"], ["-hfd", "org/repo"]):
        assert load_stages(argv) == ["text_model", "spec_model"], argv
    entries = {"a": Entry("a", "models_dir", presets.Preset("a"))}
    pool = ModelPool(
        lambda: entries,
        lambda entry, argv: Loaded(app=None, info={}, stop=lambda: None),
        lambda e: ["prog", "--alias", e.name, "-md", "draft.gguf"],
    )
    seen = []
    pool._notify = lambda event, model, data=None: seen.append((event, data))
    pool.ensure_ready("a")
    progress = [d["progress"] for e, d in seen if e == "status_change" and "progress" in d]
    assert [(p["current"], p["value"]) for p in progress] == [
        ("text_model", 0.0),
        ("text_model", 1.0),
        ("spec_model", 0.0),
        ("spec_model", 1.0),
    ]
    assert all(p["stages"] == ["text_model", "spec_model"] for p in progress)


def test_the_pool_gives_up_the_least_recently_used_idle_model():
    pool, stopped = _pool(models_max=2)
    for name in ("a", "b"):
        pool.ensure_ready(name)
    pool.enter("a", True)  # a is busy: never the victim
    pool.ensure_ready("c")
    assert stopped == ["b"]
    assert {i.name: i.status for i in pool.snapshot()} == {"a": "loaded", "b": "unloaded", "c": "loaded"}


def test_a_failed_load_is_reported_with_its_exit_code():
    pool, _ = _pool(fail=("a",))
    with pytest.raises(RouterError, match="failed to load"):
        pool.ensure_ready("a")
    (a,) = [i for i in pool.snapshot() if i.name == "a"]
    assert a.failed() and a.exit_code == 1


def test_an_explicit_load_with_no_idle_model_to_give_up_is_refused():
    pool, _ = _pool(models_max=1)
    pool.ensure_ready("a")
    pool.enter("a", True)
    with pytest.raises(RouterError, match="model limit reached, try again later"):
        pool.load("b")
    assert json.dumps([i.status for i in pool.snapshot()]) == '["loaded", "unloaded", "unloaded"]'
