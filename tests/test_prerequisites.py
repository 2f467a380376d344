"""conftest.require: a missing prerequisite skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from conftest import require


def test_a_present_prerequisite_lets_the_test_run(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert require(True, "present") is None


def test_a_missing_prerequisite_skips_locally(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="the b10621 sources are not unpacked"):
        require(False, "the b10621 sources are not unpacked")


def test_a_missing_prerequisite_fails_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing prerequisite in CI: needs the live reference"):
        require(False, "needs the live reference binary (MLXCEL_ORACLE_OFFLINE=1)")


def test_the_offline_embeddings_suite_fails_in_ci(pytester_env):
    """conformance/test_embeddings.py has no recordings: offline it skips, and CI never runs it offline."""
    result = pytester_env(CI="true", MLXCEL_ORACLE_OFFLINE="1")  # (locally it skips: the tests above)
    assert result.returncode == 1 and "missing prerequisite in CI" in result.stdout, result.stdout[-2000:]


@pytest.fixture
def pytester_env():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def run(**env):
        # (no live share: the rotation, oracle/rotation.py, would leave the one test out; no evidence directory: a
        # run inside a run writes none into the outer run's)
        drop = ("CI", "MLXCEL_ORACLE_OFFLINE", "MLXCEL_LIVE_SHARE", "MLXCEL_EVIDENCE_DIR")
        base = {k: v for k, v in os.environ.items() if k not in drop}
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-x",
                "conformance/test_embeddings.py::test_token_vectors_agree_with_pooling_none",
            ],
            cwd=root,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    return run
