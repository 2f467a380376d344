"""llama.cpp's own server tests (the pinned sdist's tools/server/tests/unit) against mlxcel-server, or against the
reference to compare: `python -m oracle.upstream_tests [--reference] [FILES...]` (nox -s upstream_tests).

The suites that need no downloaded model run as they are: their ServerPreset.load_all() (which fetches presets'
models) is skipped and their `wget` import satisfied by a stub, both from a plugin directory made here; nothing
in the sdist is changed. Default files: the built-in tools and the MCP servers (issue 30's web UI companions).
Measured 2026-12-05: mlxcel-server 38 passed, 3 skipped (container engines absent), as b10621's binary."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_FILES = ("unit/test_tools_builtin.py", "unit/test_mcp_servers.py")

_PLUGIN = """
import sys
sys.path.insert(0, {tests!r})
import utils  # the suite's own helpers
utils.ServerPreset.load_all = staticmethod(lambda: None)  # (offline: no preset model is fetched)
"""


def run(files: list[str], reference: bool) -> int:
    from .reference import build_reference, source_tree

    tests = Path(source_tree()) / "tools" / "server" / "tests"
    binary = str(build_reference()) if reference else shutil.which("mlxcel-server")
    if binary is None:
        print("upstream_tests: mlxcel-server is not on PATH (pip install -e .)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="upstream-tests-") as plugins:
        Path(plugins, "wget.py").write_text("def download(*a, **k):\n    raise RuntimeError('offline')\n")
        Path(plugins, "mlxcel_offline.py").write_text(_PLUGIN.format(tests=str(tests)))
        env = {
            **os.environ,
            "LLAMA_SERVER_BIN_PATH": binary,
            "PYTHONPATH": os.pathsep.join(filter(None, [plugins, os.environ.get("PYTHONPATH")])),
        }
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "mlxcel_offline", "-q", *files]
        return subprocess.run(argv, cwd=tests, env=env).returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", action="store_true", help="run the suites against b10621's llama-server")
    p.add_argument("files", nargs="*", default=list(DEFAULT_FILES), help="test files under tools/server/tests")
    args = p.parse_args()
    sys.exit(run(args.files, args.reference))


if __name__ == "__main__":
    main()
