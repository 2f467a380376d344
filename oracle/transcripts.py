"""Recorded reference transcripts: the conformance suite runs on them when the binary is absent; a live
run compares the binary against them and fails on drift (or re-records with MLXCEL_ORACLE_RECORD=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fixtures.twins import cache_root

from .corpus import TRANSCRIPT_DIR
from .diff import diff_exchanges
from .exchange import Exchange, OracleRequest

RECORD_ENV = "MLXCEL_ORACLE_RECORD"
# the cache root in a recording (a fixture's path in a reply: a LoRA's, a router's model): each machine reads its own
CACHE_MARK = "{MLXCEL_CACHE}"
OFFLINE_ENV = "MLXCEL_ORACLE_OFFLINE"


class TranscriptDrift(AssertionError):
    pass


class TranscriptMissing(LookupError):
    pass


def transcript_path(name: str, directory: Path = TRANSCRIPT_DIR) -> Path:
    return directory / f"{name}.json"


def _root() -> str:
    """This machine's cache root as it appears inside a recording's JSON text."""
    return json.dumps(str(cache_root()))[1:-1]


def marked(text: str) -> str:
    """A recording's JSON text with this machine's cache root named by the mark (oracle/startup.py's too)."""
    return text.replace(_root(), CACHE_MARK)


def unmarked(text: str) -> str:
    """A recording's JSON text with the mark read back as this machine's cache root."""
    return text.replace(CACHE_MARK, _root())


def record(name: str, request: OracleRequest, exchange: Exchange, directory: Path = TRANSCRIPT_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"case": name, "request_sha256": request.sha256(), "reference": exchange.to_record()}
    text = marked(json.dumps(doc, indent=1, ensure_ascii=False))
    transcript_path(name, directory).write_text(text + "\n", encoding="utf-8")


def is_current(name: str, request: OracleRequest, directory: Path = TRANSCRIPT_DIR) -> bool:
    """A recording exists for this very request (a changed case needs the live reference to re-record)."""
    path = transcript_path(name, directory)
    try:
        return path.is_file() and json.loads(path.read_text(encoding="utf-8"))["request_sha256"] == request.sha256()
    except (OSError, ValueError, KeyError):
        return False


def load(name: str, request: OracleRequest, directory: Path = TRANSCRIPT_DIR) -> Exchange:
    path = transcript_path(name, directory)
    if not path.is_file():
        raise TranscriptMissing(f"no recorded transcript for {name}: run `mlxcel-oracle record` with the binary")
    doc = json.loads(unmarked(path.read_text(encoding="utf-8")))
    if doc["request_sha256"] != request.sha256():
        raise TranscriptDrift(f"{name}: the request changed since it was recorded: re-record it")
    return Exchange.from_record(doc["reference"])


def live_or_recorded(
    name: str,
    request: OracleRequest,
    live: Exchange | None,
    normalize: tuple[str, ...],
    directory: Path = TRANSCRIPT_DIR,
) -> tuple[Exchange, str]:
    """The reference's exchange for a case, and where it came from ("live" or "recorded")."""
    if live is None:
        return load(name, request, directory), "recorded"
    if os.environ.get(RECORD_ENV) == "1" or not transcript_path(name, directory).is_file():
        record(name, request, live, directory)
        return live, "live"
    drift = diff_exchanges(load(name, request, directory), live, normalize)
    if not drift.identical:
        details = "; ".join(d.describe_drift() for d in drift.divergences[:3]) or "bytes differ"
        raise TranscriptDrift(
            f"{name}: the reference binary no longer matches its recording ({details}); "
            f"re-record with {RECORD_ENV}=1 after checking why"
        )
    return live, "live"
