"""`-m MODEL` resolution: an MLX checkpoint directory, a GGUF file (converted once, losslessly, into the cache),
a model store name (the bundled models, or an `<owner>/<name>` snapshot), all offline."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from ..cachedir import build_once, cache_root
from .bundled import BUNDLED_ENCODERS, BUNDLED_MODELS, CONVERTER_VERSION, DEFAULT_MODEL
from .hub import list_snapshots, snapshot_dir, store_root
from .progress import conversion_progress

log = logging.getLogger("mlxcel.models")


class ModelNotFound(ValueError):
    pass


def resolve_model(spec: str, overrides: tuple = ()) -> Path:
    """The checkpoint -m names; overrides (--override-kv) apply to a GGUF's metadata only (ModelNotFound with
    what to do for anything else)."""
    path = Path(os.path.expanduser(spec))
    if overrides and not (path.is_file() and path.suffix == ".gguf"):
        raise ModelNotFound(
            f"--override-kv overrides a GGUF's metadata; '{spec}' is an MLX checkpoint, configured by its "
            "config.json: edit that, or pass the GGUF"
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"'{spec}' is a directory but not an MLX checkpoint (no config.json)")
        return path
    if spec in BUNDLED_MODELS:
        return BUNDLED_MODELS[spec].materialize()
    if spec in BUNDLED_ENCODERS:
        return BUNDLED_ENCODERS[spec]()
    if path.is_file() and path.suffix == ".gguf":
        return converted_gguf(path, overrides)
    if spec in list_snapshots():
        return snapshot_dir(spec)
    names = ", ".join(sorted([*BUNDLED_MODELS, *BUNDLED_ENCODERS, *list_snapshots()]))
    raise ModelNotFound(
        f"model '{spec}' not found: not a checkpoint directory, a GGUF file, nor a store name ({names})"
    )


def converted_gguf(path: Path, overrides: tuple = ()) -> Path:
    """The MLX checkpoint a GGUF file equals (Q4_0/Q4_1 as 4-bit affine, Q8_0 as 8-bit, group 32; K-quants as the
    file's blocks; float types kept), converted on first use into the cache and reused while the file is unchanged (same path, size and
    modification time). A tensor type with no lossless MLX counterpart is refused with the converter's words."""
    # deferred: the converter's modules (mlx, gguf, tokenizers) only for a GGUF -m; `mlxcel list` and
    # --cache-list read this module without them
    from .gguf_import import convert_gguf

    real = path.resolve()
    st = real.stat()
    for o in overrides:  # (b10621 logs them as its loader takes them)
        log.info("%s", o.shown())
    recipe = {"gguf": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "converter": CONVERTER_VERSION}
    # the file's blocks kept (quant_layers.GGMLLinear); 2: stacks of experts' matrices too (GGMLSwitchLinear): only
    # the server's own conversions change, so only they are redone (CONVERTER_VERSION would redo every cache)
    recipe["blocks"] = 2
    if overrides:  # (--override-kv: a conversion of its own)
        recipe["overrides"] = [[o.key, o.kind, o.value] for o in overrides]
    named = str(real) + (json.dumps(recipe["overrides"]) if overrides else "")
    key = hashlib.sha256(named.encode()).hexdigest()[:16]
    target = cache_root() / "converted" / f"{real.stem}-{key}"
    target.parent.mkdir(parents=True, exist_ok=True)

    def convert(tmp: Path) -> None:
        started = time.monotonic()
        log.info("converting %s into an MLX checkpoint (once: kept in %s while the file is unchanged)", real, target)
        convert_gguf(real, tmp, dtype="auto", progress=conversion_progress(real.name), blocks=True, overrides=overrides)
        log.info("converted %s in %.1f s: ready", real.name, time.monotonic() - started)

    return build_once(target, recipe, convert)


def default_model_name() -> str:
    return DEFAULT_MODEL.name


def _holds_checkpoint(path: Path) -> bool:
    try:
        return (path / "config.json").is_file() or any(p.suffix == ".safetensors" for p in path.iterdir())
    except OSError:
        return False


def cached_models(root: Path | None = None) -> list[str]:
    """The model store's entries that actually hold a checkpoint, each spelled as -m accepts it: a store
    name for the bundled models, the checkpoint directory's path for anything else found there. Half-built
    targets (the build's temporary directories) and lock files are not models."""
    if root is None:
        root = store_root()
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.is_dir() or entry.is_symlink() or ".tmp-" in entry.name or not _holds_checkpoint(entry):
            continue
        found.append(entry.name if entry.name in BUNDLED_MODELS else str(entry))
    return found + list_snapshots(root)  # downloaded <owner>/<name> snapshots, by the name -m accepts
