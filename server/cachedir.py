"""The cache directory outside the repo, and an atomic, lock-guarded way to build things into it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

CACHE_ENV = "MLXCEL_CACHE_DIR"


def cache_root() -> Path:
    """$MLXCEL_CACHE_DIR, else $XDG_CACHE_HOME/mlxcel, else ~/.cache/mlxcel."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV])
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "mlxcel"
    root.mkdir(parents=True, exist_ok=True)
    return root


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


STAMP = "mlxcel-build.json"


def build_once(target: Path, recipe: dict, build: Callable[[Path], None]) -> Path:
    """Build `target` (a directory) once: under a lock, into a temp dir, then renamed into place.

    `recipe` identifies the inputs (source hashes, converter version); a target whose stamp records a
    different recipe, or whose outputs no longer match their recorded hashes, is rebuilt.
    """
    with file_lock(target.with_name(target.name + ".lock")):
        if stamp_matches(target, recipe):
            return target
        for stale in target.parent.glob(target.name + ".tmp-*"):  # a build killed before its cleanup ran
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            build(tmp)
            files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
            (tmp / STAMP).write_text(json.dumps({"recipe": recipe, "files": files}, indent=2) + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return target


def stamp_matches(target: Path, recipe: dict) -> bool:
    """Whether `target` was built from `recipe` (and still holds its files)."""
    stamp = target / STAMP
    if not stamp.is_file():
        return False
    try:
        data = json.loads(stamp.read_text())
    except ValueError:
        return False
    if data.get("recipe") != recipe:
        return False
    files = data.get("files", {})
    # sizes are cheap to check on every use; full hashes are verified when the stamp is written
    return all((target / n).is_file() for n in files)


def verify_build(target: Path) -> list[str]:
    """Names of files in a built target whose SHA-256 no longer matches its stamp."""
    data = json.loads((target / STAMP).read_text())
    return [n for n, h in data["files"].items() if sha256_file(target / n) != h]


class NoCompiler(OSError):
    """No C compiler to build a shared object with."""


def shared_object(
    name: str,
    directory: str,
    sources: tuple[str, ...],
    headers: tuple[str, ...],
    flags: tuple[str, ...],
    libs: tuple[str, ...] = (),
) -> str:
    """A shared object compiled from C sources once into the cache, its name keyed by the flags' and files' hash
    (`name`-<hash>.so under native/); NoCompiler without cc, CalledProcessError when the compile fails."""
    import subprocess  # deferred: only a build runs it

    digest = hashlib.sha256(" ".join(flags).encode())
    for file in sources + headers:
        with open(os.path.join(directory, file), "rb") as f:
            digest.update(f.read())
    out = cache_root() / "native" / f"{name}-{digest.hexdigest()[:16]}.so"
    if out.is_file():
        return str(out)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise NoCompiler("no C compiler (cc) to build it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        target = os.path.join(tmp, out.name)
        command = [compiler, *flags, "-o", target, *(os.path.join(directory, s) for s in sources), *libs]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
        os.replace(target, out)
    return str(out)
