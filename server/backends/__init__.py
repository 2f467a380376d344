"""Backends: what runs a model for the engine (base.py states the interface).

`open_backend` picks the native CPU backend where mlxcel's kernels cover the model, else the MLX backend (any
mlx-lm architecture); tests use `fake.FakeBackend`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, cast

import mlx.core as mx
from mlx.utils import tree_flatten

from ..models import huge_pages, quantized_twins
from ..models.decode_step import DecodeStep
from ..models.kv_numerics import KVNumerics
from ..models.loader import LoadedModel, load_checkpoint, release_sources
from ..models.yarn import YarnFlags
from . import distributed
from .base import Backend, BackendLost, BackendRefusal, Capabilities, FeatureCapture
from .distributed import Ranks
from .memory import hand_back
from .micro_batches import MicroBatched
from .mlx_backend import MLXBackend
from .native_backend import NativeBackend

__all__ = [
    "Backend",
    "BackendLost",
    "BackendRefusal",
    "FeatureCapture",
    "Capabilities",
    "Ranks",
    "hand_back",
    "load_backend",
    "load_sharded",
    "open_backend",
    "sharded_fingerprint",
]


def open_backend(loaded: LoadedModel, n_batch: int = 2048, kv: KVNumerics | None = None) -> Backend:
    try:
        step = NativeBackend.build_step(loaded, kv)
        if kv is not None and kv.blocks:
            _check_blocks(kv, step)
        if step is None:  # the MLX backend's few-row products read float panels; a native step has its own
            quantized_twins.register_pending_panels(loaded.model)
        else:
            loaded.model.__dict__.pop(quantized_twins.PANELS_PENDING, None)
        backend = (
            MLXBackend(loaded, n_batch=n_batch, kv=kv) if step is None else NativeBackend(loaded, step, n_batch, kv)
        )
    finally:
        release_sources(loaded.model)  # the weights as loaded: the native step has taken what it needs
    hand_back()  # what loading held for a while (fused copies' sources, dequantized layers) goes back
    if mx.default_device() == mx.cpu:  # after the step's own copies are made: collapsing meanwhile slows them
        params: list[tuple[str, mx.array]] = cast(list, tree_flatten(loaded.model.parameters()))
        huge_pages.collapse_in_background([w for _, w in params] + (step.weights if step is not None else []))
    return backend


def _check_blocks(kv: KVNumerics, step: DecodeStep | None) -> None:
    """A block-quantized cache: b10621's refusals for these types, and mlxcel's where no native step reads it."""
    if step is None:
        raise BackendRefusal(
            f"-ctk {kv.k_type} -ctv {kv.v_type}: a block-quantized KV cache is read by mlxcel's native CPU steps "
            "only, which do not run this model (or not on this device): use a float cache type (f16, b10621's "
            "default)"
        )
    refused = kv.refusal(step.head_dim)
    if refused:
        raise BackendRefusal(refused)


def load_backend(
    checkpoint: Path,
    *,
    n_batch: int = 2048,
    kv: KVNumerics | None = None,
    fuse: Callable[[Any], set[str]] | None = None,
    rope: tuple = (None, None),
    yarn: YarnFlags | None = None,
    ranks: Ranks | None = None,
) -> Backend:
    """A checkpoint loaded (models/loader.py) and opened on its backend; with ranks, split over them (rank 0's
    backend then leads the others', which run distributed.follow)."""
    if ranks is not None:
        return load_sharded(checkpoint, ranks, n_batch=n_batch, kv=kv, rope=rope, yarn=yarn)
    loaded = load_checkpoint(checkpoint, fuse=fuse, rope=rope, yarn=yarn, panels=False)
    return open_backend(loaded, n_batch=n_batch, kv=kv)


def sharded_fingerprint(
    checkpoint: Path, n_batch: int, kv: KVNumerics | None, rope: tuple, yarn: YarnFlags | None, split: str
) -> str:
    """What every rank must agree on before serving (distributed.fingerprint)."""
    flags = {"n_batch": n_batch, "kv": kv, "rope": rope, "yarn": yarn, "split": split}
    return distributed.fingerprint(checkpoint, flags)


def load_sharded(
    checkpoint: Path,
    ranks: Ranks,
    *,
    n_batch: int = 2048,
    kv: KVNumerics | None = None,
    rope: tuple = (None, None),
    yarn: YarnFlags | None = None,
) -> Backend:
    """The model split over the ranks (mlx-lm's tensor-parallel shard or its pipeline, as ranks.split says; MLX's
    own passes: mlxcel's native steps run one process), as the MLX backend; on rank 0 a Leader, once every rank
    has shown the same fingerprint."""
    loaded = load_checkpoint(checkpoint, kernels=False, transpose=False, rope=rope, yarn=yarn)
    distributed.split(loaded.model, ranks)
    mx.eval(loaded.model.parameters())
    mlx_backend = MLXBackend(loaded, n_batch=n_batch, kv=kv)
    # never a decode issued ahead (a GPU's greedy path): rank 0 alone would run it, and its collectives would meet
    # none of the other ranks'
    mlx_backend.pipeline = False
    backend: Any = mlx_backend
    if ranks.split == "pipeline":  # decode rows in micro-batches, so the stages work at once
        backend = MicroBatched(mlx_backend, ranks)
    if ranks.rank != 0:
        return cast(Backend, backend)
    channel = distributed.Channel(ranks)
    distributed.handshake_leader(channel, sharded_fingerprint(checkpoint, n_batch, kv, rope, yarn, ranks.split))
    return cast(Backend, distributed.Leader(backend, channel))
