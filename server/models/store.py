"""`-m MODEL` resolution: an MLX checkpoint directory, or a model store name (bundled models, offline)."""

from __future__ import annotations

import os
from pathlib import Path

from .bundled import BUNDLED_ENCODERS, BUNDLED_MODELS, DEFAULT_MODEL


class ModelNotFound(ValueError):
    pass


def resolve_model(spec: str) -> Path:
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"'{spec}' is a directory but not an MLX checkpoint (no config.json)")
        return path
    if spec in BUNDLED_MODELS:
        return BUNDLED_MODELS[spec].materialize()
    if spec in BUNDLED_ENCODERS:
        return BUNDLED_ENCODERS[spec]()
    if path.suffix == ".gguf" and path.is_file():
        raise ModelNotFound(
            f"'{spec}' is a GGUF file; convert it first with `mlxcel convert {spec} OUT_DIR` and pass OUT_DIR"
        )
    names = ", ".join(sorted([*BUNDLED_MODELS, *BUNDLED_ENCODERS]))
    raise ModelNotFound(f"model '{spec}' not found: not a checkpoint directory, nor a store name ({names})")


def default_model_name() -> str:
    return DEFAULT_MODEL.name
