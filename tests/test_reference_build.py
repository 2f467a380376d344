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
