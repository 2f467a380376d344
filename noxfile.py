"""nox sessions: tests (every test, the reference build included), reference, oracle."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"


@nox.session
def tests(session: nox.Session) -> None:
    """Every test: unit tests, then conformance against the reference (built once, cached outside the repo)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "compat.validate", "--check-issues-open")
    session.run("python", "-m", "compat.claims")
    session.run("mlxcel-oracle", "reference")  # build (or reuse) the reference before the clock of any test
    evidence = ".oracle/evidence"
    session.run("rm", "-rf", evidence, external=True)
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs,
                env={"MLXCEL_EVIDENCE_DIR": evidence})
    # the same conformance suite on the recorded transcripts alone. Left out of this second pass to keep CI's
    # clock, all of it already compared live above: the seeded sampling grid, the corpus cases that start a
    # server of their own for their flags (own_server: ~200 cases, 77 servers; 848 s of the pass, 163 without
    # them), the cli-* cases, and the suites that never read the reference (grammar verdicts, JSON-schema
    # outputs, the SDK clients). The cases on the shared servers stand for the transcripts' replay.
    offline = ("not seeded and not cli- and not test_grammar_conformance and not test_json_schema_outputs"
               " and not test_openai_sdk and not test_anthropic_sdk and not test_sdk_tools"
               " and (not test_startup_case or refused)")  # startup: the refusals (fast) stand for the rest
    session.run("pytest", "-q", "-p", "no:cacheprovider", "conformance", "-k", offline,
                "-m", "not own_server",
                env={"MLXCEL_EVIDENCE_DIR": evidence + "-offline", "MLXCEL_ORACLE_OFFLINE": "1"})
    session.run("mlxcel-oracle", "verify", env={"MLXCEL_EVIDENCE_DIR": evidence})
    session.run("mlxcel-oracle", "report", env={"MLXCEL_EVIDENCE_DIR": evidence})


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
    src = session.run("python", "-c", "from oracle.reference import source_tree; print(source_tree())",
                      silent=True).strip().splitlines()[-1]
    sdist = session.run("python", "-c", "from oracle.reference import SDIST_NAME; from server.models.cache import "
                        "cache_root; print(cache_root() / 'reference' / SDIST_NAME)", silent=True).strip()
    session.run("python", "-m", "compat.extract", "--llama-server", binary, "--source-dir", src, "--sdist", sdist,
                *session.posargs)


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


@nox.session
def bench(session: nox.Session) -> None:
    """Speed side by side with the reference on the same twin, reported as mlxcel/reference ratios."""
    session.install("-e", ".")
    session.run("mlxcel-oracle", "reference")
    session.run("python", "-m", "oracle.bench", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """The reliability suites (tests/reliability: fuzz, load, faults, security) for longer than CI runs them:
    MLXCEL_LOAD_SECONDS (default here 300) of load, more fuzzing examples; the figures go to
    .reports/soak/reliability-figures.json (posargs: extra pytest arguments)."""
    session.install("-e", ".[test]")
    env = {"MLXCEL_LOAD_SECONDS": "300", "MLXCEL_FUZZ_EXAMPLES": "60", "MLXCEL_REPORT_DIR": ".reports/soak"}
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/reliability", *session.posargs, env=env)
