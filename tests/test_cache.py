"""build_once: idempotent, stamped, and safe when two processes build the same target at once."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

from server.cachedir import STAMP, build_once, verify_build


def _slow_build(target: str, log: str) -> None:
    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.5)
        (tmp / "out.bin").write_bytes(b"x" * 1000)

    build_once(Path(target), {"v": 1}, build)


def test_two_concurrent_builders_build_once(tmp_path):
    target, log = tmp_path / "thing", tmp_path / "log"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_slow_build, args=(str(target), str(log))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert log.read_text() == "built\n"
    assert (target / "out.bin").read_bytes() == b"x" * 1000
    assert not list(tmp_path.glob("thing.tmp-*"))


def test_second_call_reuses_and_changed_recipe_rebuilds(tmp_path):
    calls = []

    def build(tmp: Path) -> None:
        calls.append(1)
        (tmp / "f").write_text(str(len(calls)))

    target = tmp_path / "t"
    build_once(target, {"v": 1}, build)
    build_once(target, {"v": 1}, build)
    assert len(calls) == 1
    build_once(target, {"v": 2}, build)
    assert len(calls) == 2 and (target / "f").read_text() == "2"
    stamp = json.loads((target / STAMP).read_text())
    assert stamp["recipe"] == {"v": 2} and set(stamp["files"]) == {"f"}


def test_tampered_output_is_detected_by_hash(tmp_path):
    target = tmp_path / "t"
    build_once(target, {"v": 1}, lambda tmp: (tmp / "f").write_text("good"))
    assert verify_build(target) == []
    (target / "f").write_text("evil")
    assert verify_build(target) == ["f"]


def test_failed_build_leaves_no_target(tmp_path):
    target = tmp_path / "t"

    def build(tmp: Path) -> None:
        (tmp / "partial").write_text("half")
        raise RuntimeError("boom")

    try:
        build_once(target, {"v": 1}, build)
    except RuntimeError:
        pass
    assert not target.exists()
    assert not list(tmp_path.glob("t.tmp-*"))


def test_a_killed_builds_leftovers_are_cleared_by_the_next_build(tmp_path):
    from server.cachedir import build_once

    target = tmp_path / "thing"
    stale = tmp_path / "thing.tmp-abandoned"
    (stale / "big").mkdir(parents=True)  # what a SIGKILLed build leaves beside its target
    build_once(target, {"v": 1}, lambda tmp: (tmp / "out").write_text("x"))
    assert (target / "out").read_text() == "x" and not stale.exists()
