"""nox sessions: tests (every test, the reference build included), reference, oracle."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"


@nox.session
def tests(session: nox.Session) -> None:
    """Every test: unit tests, then conformance against the reference (built once, cached outside the repo)."""
    session.install("-e", ".[test]")
    session.run("mlxcel-oracle", "reference")  # build (or reuse) the reference before the clock of any test
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs)


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
