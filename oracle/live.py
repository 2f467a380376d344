"""Which conformance cases meet the live reference binary on this run, and which replay its recording.

mlxcel always runs live: every case compares mlxcel's answer of this commit against the reference's answer.
What a replayed case skips is the reference process, whose recorded answer (fixtures/transcripts/) stands in.
The recordings are bound to the reference that made them (fixtures/transcripts/BINARY.json): its build recipe
(the pinned sdist, cmake flags, target) and the C++ compiler that built it, not the binary's bytes: two builds of
one recipe are not bit-identical (the embedded web UI is rebuilt with npm each time), so a binding to one build's
SHA-256 held on that machine only and every CI machine ran every case live (~60 minutes). Under any other reference
(another recipe or compiler, or a binary given by MLXCEL_REFERENCE_BINARY, known by its SHA-256) every case runs
live. Under the bound one, MLXCEL_LIVE_SHARE says which cases run live:

- "all" (the default: a developer's run): every case, each live answer checked against its recording (drift
  fails the case) and recorded where none is;
- "K/N": the cases whose bucket (SHA-256 of the case's key, mod N) is K, plus every case whose recording is
  missing or was made for another request (a case changed), plus every case of the suites with no recording;
  CI takes K from the commit count, so every case meets the live binary at least once in N landings in a row;
- "none": only the changed and unrecorded cases.

MLXCEL_ORACLE_OFFLINE=1 (no binary at all) replays everything, and a case with no recording then fails.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .corpus import TRANSCRIPT_DIR

SHARE_ENV = "MLXCEL_LIVE_SHARE"
OFFLINE_ENV = "MLXCEL_ORACLE_OFFLINE"
BINDING = TRANSCRIPT_DIR / "BINARY.json"


@dataclass(frozen=True)
class Share:
    k: int
    n: int  # n == 0: none; k == n == 1: all

    @classmethod
    def parse(cls, text: str | None) -> "Share":
        text = (text or "all").strip()
        if text == "all":
            return cls(0, 1)
        if text == "none":
            return cls(0, 0)
        try:
            k, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise ValueError(f"{SHARE_ENV}={text!r}: expected all, none or K/N (0 <= K < N)") from None
        if not 0 <= k < n:
            raise ValueError(f"{SHARE_ENV}={text!r}: expected all, none or K/N (0 <= K < N)")
        return cls(k, n)

    def takes(self, key: str) -> bool:
        if self.n == 0:
            return False
        return bucket(key, self.n) == self.k

    def __str__(self) -> str:
        return "all" if self.n == 1 else "none" if self.n == 0 else f"{self.k}/{self.n}"


def bucket(key: str, n: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % n


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV) == "1"


def share() -> Share:
    return Share.parse(os.environ.get(SHARE_ENV))


def binary_sha256(binary: Path) -> str:
    from fixtures.twins import sha256_file

    return sha256_file(binary)


def compiler() -> str:
    """The first line of `c++ --version` (the compiler cmake builds the reference with), or "none"."""
    import shutil
    import subprocess

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        return "none"
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    return (out.splitlines() or ["unknown"])[0].strip()


def identity(binary: Path) -> dict:
    """What a binding names: the recipe oracle/reference.py built `binary` from (its build record beside it, whose
    file hash the binary still matches) and the compiler; a binary without such a record, by its SHA-256."""
    from fixtures.twins import STAMP

    digest = binary_sha256(binary)
    try:
        record = json.loads((binary.parent / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if record.get("files", {}).get(binary.name) != digest or "recipe" not in record:
        return {"sha256": digest}
    return {"recipe": record["recipe"], "compiler": compiler()}


def bound_identity() -> dict | None:
    try:
        return json.loads(BINDING.read_text(encoding="utf-8"))["reference"]
    except (OSError, ValueError, KeyError):
        return None


def bind(binary: Path) -> dict:
    """Record that the committed transcripts are this reference's answers (after a full live run agreed)."""
    ident = identity(binary)
    BINDING.write_text(json.dumps({"reference": ident, "binary": binary.name}, indent=1) + "\n", encoding="utf-8")
    return ident


@lru_cache(maxsize=1)
def binding_holds() -> bool:
    """Whether the reference this run uses is the one the recordings were bound to (checked once per process)."""
    from .reference import build_reference

    return bound_identity() == identity(build_reference())


def live(key: str, recorded: bool) -> bool:
    """Whether the case under `key` meets the live binary: `recorded`, whether a current recording exists."""
    if offline():
        return False
    s = share()
    if s.n == 1 or not recorded:
        return True
    return s.takes(key) or not binding_holds()


def describe() -> str:
    """One line for the run's header: what a green run then proves."""
    if offline():
        return "reference: offline (every case replays its recording)"
    s = share()
    if s.n == 1:
        return "reference: live for every case"
    held = binding_holds()
    return (
        f"reference: live share {s} (plus changed and unrecorded cases); the rest replay recordings bound to "
        f"this binary"
        if held
        else "reference: live for every case (this binary is not the one the recordings are bound to)"
    )
