"""The README's first command serves the bundled default model: /health and /completion answer."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from oracle import loopback
from oracle.processes import free_port
from server.models.bundled import DEFAULT_MODEL

README = Path(__file__).parent.parent / "README.md"


def test_readme_first_command_names_the_default_model():
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    assert f"mlxcel-server -m {DEFAULT_MODEL.name}" in blocks[0]


def test_server_without_model_starts_a_router_offering_the_store(tmp_path):
    """b10621 started without a model is a router; the bundled default model is in the store it offers."""
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("mlxcel-server") or "mlxcel-server", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()
            try:
                props = loopback.get(base + "/props", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert props.json()["role"] == "router"
        DEFAULT_MODEL.materialize()
        models = {m["id"]: m for m in loopback.get(base + "/models?reload=1", timeout=30).json()["data"]}
        assert models[DEFAULT_MODEL.name]["source"] == "cache"
        assert models[DEFAULT_MODEL.name]["status"]["value"] == "unloaded"
    finally:
        proc.terminate()
        proc.wait(30)


def test_default_model_serves_health_and_completion():
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("mlxcel-server") or "mlxcel-server", "-m", DEFAULT_MODEL.name, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                if loopback.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        r = loopback.post(
            base + "/completion", json={"prompt": "The capital of France is", "n_predict": 8}, timeout=120
        )
        assert r.status_code == 200
        assert 1 <= r.json()["tokens_predicted"] <= 8  # sampled at the default temperature: it may end early
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert "fast BLAS in use" in out, out
