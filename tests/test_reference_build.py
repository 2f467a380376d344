"""The reference builder's failure modes end in one clear sentence; success is cached and reused."""

from __future__ import annotations

import pytest

from oracle import reference


def test_missing_cmake_is_one_sentence(monkeypatch):
    monkeypatch.delenv(reference.BINARY_ENV, raising=False)
    monkeypatch.setattr(reference.shutil, "which", lambda name: None)
    with pytest.raises(reference.ReferenceBuildError, match=r"^cmake is not installed: install cmake"):
        reference.build_reference()


def test_missing_compiler_is_one_sentence(monkeypatch):
    monkeypatch.delenv(reference.BINARY_ENV, raising=False)
    monkeypatch.setattr(reference.shutil, "which", lambda name: "/usr/bin/cmake" if name == "cmake" else None)
    with pytest.raises(reference.ReferenceBuildError, match=r"^no C\+\+ compiler found"):
        reference.build_reference()


def test_sdist_hash_mismatch_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "cache"))

    def fake_run(cmd, **kw):
        (tmp_path / reference.SDIST_NAME).write_bytes(b"not the sdist")

        class P:
            returncode, stdout, stderr = 0, "", ""

        return P()

    monkeypatch.setattr(reference.subprocess, "run", fake_run)
    with pytest.raises(reference.ReferenceBuildError, match="expected the pinned"):
        reference.fetch_sdist(tmp_path)


@pytest.mark.reference
def test_second_call_reuses_the_cached_binary(reference_binary):
    again = reference.build_reference()
    assert again == reference_binary and again.stat().st_mtime == reference_binary.stat().st_mtime


def test_build_progress_is_printed_per_tenth_and_the_output_kept(tmp_path):
    """A cold build takes ~10 minutes: the log shows where it is, not nothing until the end."""
    import io

    script = "; ".join(f"echo '[{p:3d}%] Building CXX object o{p}.o'" for p in range(0, 101, 5))
    log = io.StringIO()
    code, output = reference._run_with_progress("compile", ["sh", "-c", script + "; exit 3"], log)
    assert code == 3 and output.count("Building CXX object") == 21
    shown = [ln for ln in log.getvalue().splitlines() if "%]" in ln]
    assert [ln.split("[")[1].split("%")[0].strip() for ln in shown] == [str(p) for p in range(0, 101, 10)]
    assert log.getvalue().splitlines()[-1].startswith("reference build: compile done in")


def test_an_interrupted_build_step_takes_its_processes_with_it(tmp_path):
    import io
    import os

    marker = tmp_path / "child.pid"

    class Interrupting(io.StringIO):
        def write(self, text):  # at the first progress line the user presses Ctrl-C
            super().write(text)
            if "compile " in text:
                raise KeyboardInterrupt

    cmd = ["sh", "-c", f"echo $$ > {marker}; echo '[ 10%] x'; sleep 30"]
    with pytest.raises(KeyboardInterrupt):
        reference._run_with_progress("compile", cmd, Interrupting())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left compiling
        os.kill(int(marker.read_text()), 0)


def test_the_build_folder_is_in_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "cache"))
    assert reference.build_dir().is_relative_to(tmp_path / "cache")


def test_llama_quantize_comes_from_the_server_build_where_it_is_missing(monkeypatch, tmp_path):
    """A cold cache's llama-server build compiles llama-quantize in the same build (one libllama, not two: ~7
    minutes of a cold CI run), each binary under its own recipe; a cached quantizer is not rebuilt."""
    import io

    monkeypatch.setenv("MLXCEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(reference.BINARY_ENV, raising=False)
    monkeypatch.setattr(reference, "source_tree", lambda: tmp_path / "src")
    compiled: list[list[str]] = []

    def fake_step(stage, cmd, log):
        if stage == "compile":
            compiled.append(cmd[cmd.index("--target") + 1 : cmd.index("-j")])
            bdir = reference.build_dir(cmd[cmd.index("--target") + 1]) / "bin"
            bdir.mkdir(parents=True, exist_ok=True)
            for t in compiled[-1]:
                (bdir / t).write_text(f"binary {t}")
        return 0, ""

    monkeypatch.setattr(reference, "_run_with_progress", fake_step)
    server = reference.build_reference(log=io.StringIO())
    assert compiled == [["llama-server", "llama-quantize"]]
    quantize = reference.quantize_binary(log=io.StringIO())
    assert compiled == [["llama-server", "llama-quantize"]]  # (taken from the cache, not built again)
    assert quantize.read_text() == "binary llama-quantize" and server.read_text() == "binary llama-server"
    assert reference.stamp_matches(server.parent, reference._recipe("llama-server"))
    assert reference.stamp_matches(quantize.parent, reference._recipe("llama-quantize"))
    import shutil

    shutil.rmtree(server.parent)  # a server rebuilt beside a cached quantizer compiles the server alone
    reference.build_reference(log=io.StringIO())
    assert compiled[-1] == ["llama-server"]
