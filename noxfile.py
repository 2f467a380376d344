"""nox sessions: tests (every test, the reference build included), unit (the fast tier), reference, oracle."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
PACKAGES = ("server", "oracle", "compat", "conformance", "tests", "fixtures")
LINTED = (*PACKAGES, "noxfile.py", "conftest.py")
nox.options.default_venv_backend = "venv"


def _cache_root() -> str:
    """server/cachedir.py's cache_root(), loaded by its path: the server package imports mlx, which the Python
    that runs nox lacks."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_mlxcel_cachedir", Path(__file__).parent / "server" / "cachedir.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.cache_root())


# The sessions' virtual environments live in the cache beside the reference build and are reused from run to run:
# a CI checkout is fresh each time, and `pip install -e .[test]` into a new one took 76 s of the 30-minute budget
# (9 s into a reused one; the install still runs every time, so a changed dependency or checkout is picked up).
nox.options.envdir = f"{_cache_root()}/nox"
nox.options.reuse_venv = "yes"


# How many shares the reference's live comparisons rotate through in CI (oracle/live.py): each run compares
# one share of the recorded cases live, and every case whose recording is missing or stale; every case meets
# the live binary at least once in LIVE_SHARES landings in a row. mlxcel itself runs live on every case. 24 (was 12,
# 8 before): the 30-minute budget (the suite measured 33m40s serial at 12 on a CI-like machine, ~2 minutes of it the
# reference's live share), and a multiple of the family rotation's 3 (fixtures/families.py ROTATION), so
# consecutive landings cover every family in turn. Two pytest-xdist workers were tried instead and gained ~1 minute
# (35m13s against 36m01s, 18 minutes more CPU): on two cores both workers' servers spin their thread pools against each other (embeddings 6x slower).
LIVE_SHARES = 24
UNIT = ("tests", "-m", "not reference and not heavy", "--ignore=tests/reliability")


def _live_share(session: nox.Session) -> str:
    """MLXCEL_LIVE_SHARE as given, else in CI the share of this commit (its commit count mod LIVE_SHARES),
    else all (a developer's full run)."""
    import os
    import subprocess

    if os.environ.get("MLXCEL_LIVE_SHARE"):
        return os.environ["MLXCEL_LIVE_SHARE"]
    if os.environ.get("CI") != "true":
        return "all"
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], capture_output=True, text=True).stdout.strip()
    return f"{int(count or 0) % LIVE_SHARES}/{LIVE_SHARES}"


def _static_checks(session: nox.Session) -> None:
    """ruff (pyflakes, pycodestyle, bugbear, import order, complexity), ruff format, mypy on the engine / backend /
    API boundary, and the import layers (pyproject.toml's settings for each)."""
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    # mypy's cache lives beside the reference build, outside the checkout: ~1 s warm against ~23 s cold
    cache = session.run("python", "-c", "from server.cachedir import cache_root; print(cache_root())", silent=True)
    session.run("mypy", "--cache-dir", f"{str(cache).strip().splitlines()[-1]}/mypy")
    session.run("lint-imports")


@nox.session
def lint(session: nox.Session) -> None:
    """The static checks alone (nox -s tests runs them first)."""
    session.install("-e", ".[test]")
    _static_checks(session)


def _compile(session: nox.Session) -> None:
    """The repo's modules compiled once: where PYTHONDONTWRITEBYTECODE is set (this CI image sets it), every
    server a test starts would otherwise compile all of them again (~0.4 s of each start, ~0.9 s of a refusal's)."""
    session.run("python", "-m", "compileall", "-q", *PACKAGES, "conftest.py", env={"PYTHONDONTWRITEBYTECODE": ""})


@nox.session
def tests(session: nox.Session) -> None:
    """Every test: the unit tier, the reliability suites, then conformance against the reference (built once,
    cached outside the repo) on every case, the reference live for this run's share (see _live_share)."""
    session.install("-e", ".[test]")
    _static_checks(session)
    session.run("python", "-m", "compat.validate", "--check-issues-open")
    session.run("python", "-m", "compat.claims")
    session.run("mlxcel-oracle", "reference")  # build (or reuse) the reference before the clock of any test
    session.run("mlxcel", "webui")  # llama.cpp's web UI, built once from the same sdist (npm), cached beside it
    _compile(session)
    evidence = ".oracle/evidence"
    session.run("rm", "-rf", evidence, external=True)
    env = {"MLXCEL_EVIDENCE_DIR": evidence, "MLXCEL_LIVE_SHARE": _live_share(session)}
    session.log(
        f"MLXCEL_LIVE_SHARE={env['MLXCEL_LIVE_SHARE']}: the reference live for that share of the recorded "
        "cases, every changed or unrecorded one and the suites without recordings (docs/testing.md)"
    )
    # the slowest tests named at the end: where to trim when the run nears its 30-minute budget
    session.run("pytest", "-q", "-p", "no:cacheprovider", "--durations=25", *session.posargs, env=env)
    session.run("mlxcel-oracle", "verify", env=env)
    session.run("mlxcel-oracle", "report", env=env)


@nox.session
def upstream_tests(session: nox.Session) -> None:
    """llama.cpp's own server tests for the web UI's companions (built-in tools, MCP servers) against
    mlxcel-server, from the pinned sdist, offline (oracle/upstream_tests.py; --reference for b10621's binary)."""
    session.install("-e", ".[test]")
    session.run("mlxcel-oracle", "reference")
    session.run("python", "-m", "oracle.upstream_tests", *session.posargs)


@nox.session
def unit(session: nox.Session) -> None:
    """The fast tier (under 5 minutes): tests/ without the reference binary, the reliability suites or the heavy
    in-process engine suites (marker heavy)."""
    session.install("-e", ".[test]")
    _compile(session)
    session.run("pytest", "-q", "-p", "no:cacheprovider", *UNIT, *session.posargs)


@nox.session
def oracle_run(session: nox.Session) -> None:
    """Run the request corpus against the live reference, write evidence and the report, then verify."""
    session.install("-e", ".")
    session.run("mlxcel-oracle", "run", *session.posargs)
    session.run("mlxcel-oracle", "verify")


@nox.session
def manifest(session: nox.Session) -> None:
    """The manifest gates: schema-4 validation (issues open) and the claims against the real surfaces."""
    session.install("-e", ".")
    session.run("python", "-m", "compat.validate", "--check-issues-open")
    session.run("python", "-m", "compat.claims")


@nox.session
def extract(session: nox.Session) -> None:
    """Regenerate the manifest's facts from the reference build and its pinned sources."""
    session.install("-e", ".")
    binary = session.run("mlxcel-oracle", "reference", silent=True).strip().splitlines()[-1]
    src = (
        session.run("python", "-c", "from oracle.reference import source_tree; print(source_tree())", silent=True)
        .strip()
        .splitlines()[-1]
    )
    sdist = session.run(
        "python",
        "-c",
        "from oracle.reference import SDIST_NAME; from server.cachedir import "
        "cache_root; print(cache_root() / 'reference' / SDIST_NAME)",
        silent=True,
    ).strip()
    session.run(
        "python",
        "-m",
        "compat.extract",
        "--llama-server",
        binary,
        "--source-dir",
        src,
        "--sdist",
        sdist,
        *session.posargs,
    )


@nox.session
def reference(session: nox.Session) -> None:
    """Build (once) and print the pinned reference llama-server."""
    session.install("-e", ".")
    session.run("mlxcel-oracle", "reference")


@nox.session
def oracle(session: nox.Session) -> None:
    """Diff every committed request in fixtures/requests against the reference (posargs: --twin f32)."""
    import glob

    session.install("-e", ".")
    for request in sorted(glob.glob("fixtures/requests/*.json")):
        session.run("mlxcel-oracle", "diff", request, *session.posargs, success_codes=[0, 1])


BENCH = ("--twin", "f32", "q4_1", "--reps", "5", "--n-predict", "32", "--no-anchor", "--no-speculative")


@nox.session
def bench(session: nox.Session) -> None:
    """Speed side by side with the reference on both twins (5 repetitions; posargs replace BENCH): the raw JSON
    under reports/bench/<date>-<commit>.json, docs/cpu-speed.md's table regenerated from it. `-- --matrix [...]`
    runs the speed matrix instead (oracle/bench_matrix.py: the real-shape twins in F16, Q8_0 and Q4_K_M; the rest
    of posargs go to it) into docs/speed-matrix.md."""
    session.install("-e", ".")
    session.run("mlxcel-oracle", "reference")
    if session.posargs[:1] == ["--matrix"]:
        session.run("python", "-m", "oracle.bench_matrix", "--table", *session.posargs[1:])
        return
    session.run("python", "-m", "oracle.bench", "--table", *(session.posargs or BENCH))
    # the MLX backend (CPU kernels off) against mlx_lm.server on the same checkpoints: docs/mlx-backend-speed.md
    session.run("python", "-m", "oracle.bench_mlx_backend")


@nox.session
def soak(session: nox.Session) -> None:
    """The reliability suites (tests/reliability: fuzz, load, faults, security) for longer than CI runs them:
    MLXCEL_LOAD_SECONDS (default here 300) of load, more fuzzing examples; the figures go to
    .reports/soak/reliability-figures.json (posargs: extra pytest arguments)."""
    session.install("-e", ".[test]")
    env = {"MLXCEL_LOAD_SECONDS": "300", "MLXCEL_FUZZ_EXAMPLES": "60", "MLXCEL_REPORT_DIR": ".reports/soak"}
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/reliability", *session.posargs, env=env)
