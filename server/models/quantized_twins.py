"""Quantized twins of dequantized weights, for the few-row products of a decode step on the CPU.

A quantized checkpoint runs dequantized on the CPU (prompts are float GEMMs). Its quantized weights are kept
as twins and registered with mlxcel's kernels against the float weight each equals
(server/native/cpu_kernels.c): a decode step's product over that weight then reads a fifth of the bytes.
The registration lives as long as the model (unregistered before the float weights can be freed).
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .. import blas
from . import huge_pages
from .cpu_layers import FusedLinear

GROUP = 32  # the kernel reads MLX's affine scheme in groups of 32, at 4 or 8 bits


@dataclass
class Twin:
    q: mx.array  # out x in values, packed in uint32
    scales: mx.array
    biases: mx.array
    bits: int


def collect(model: nn.Module) -> dict[str, Twin]:
    """The quantized layers the kernel can read, by module path (before they are dequantized)."""
    twins = {}
    for path, layer in model.named_modules():
        if (
            type(layer) in (nn.QuantizedLinear, nn.QuantizedEmbedding)
            and layer.group_size == GROUP
            and layer.bits in (4, 8)
            and getattr(layer, "mode", "affine") == "affine"
        ):
            twins[path] = Twin(
                layer.weight, layer.scales.astype(mx.float32), layer.biases.astype(mx.float32), layer.bits
            )
    return twins


def _joined(twins: list[Twin | None]) -> Twin | None:
    """Twins of layers fused side by side (their outputs concatenated): their rows concatenated."""
    if any(t is None for t in twins) or len({t.bits for t in twins}) != 1:
        return None
    return Twin(*(mx.concatenate([getattr(t, f) for t in twins]) for f in ("q", "scales", "biases")), twins[0].bits)


def pointer(a: mx.array) -> int:
    """The address of an evaluated, contiguous array's memory (for mlxcel's kernels)."""
    view = np.array(a, copy=False)
    assert view.flags["C_CONTIGUOUS"]
    return view.ctypes.data


def register(model: nn.Module, twins: dict[str, Twin], tied_embeddings: bool) -> int:
    """Register every float weight of the model's final layout that has a twin; returns how many."""
    from .loader import TransposedLinear  # deferred: loader imports this module

    native = blas.STATE.native
    if native is None or not twins:
        return 0
    pairs = []  # (float weight, trans, K, N, twin)
    for path, module in model.named_modules():
        if isinstance(module, TransposedLinear):
            twin = twins.get(path)
            if twin is not None:
                pairs.append((module.weight_t, 0, *module.weight_t.shape, twin))
        elif isinstance(module, FusedLinear):
            parent = path.rsplit(".", 1)[0]
            twin = _joined([twins.get(f"{parent}.{name}") for name in module.sources])
            if twin is not None:
                pairs.append((module.weight_t, 0, *module.weight_t.shape, twin))
        elif isinstance(module, nn.Embedding) and tied_embeddings and path in twins:
            n, k = module.weight.shape  # x @ E.T: E passed transposed
            pairs.append((module.weight, 1, k, n, twins[path]))
    mx.eval([(w, t.q, t.scales, t.biases) for w, *_, t in pairs])
    registered, keep = [], []
    for weight, trans, k, n, twin in pairs:
        ptr = pointer(weight)
        status = native.mlxcel_quant_register(
            ctypes.c_void_p(ptr),
            trans,
            k,
            n,
            ctypes.c_void_p(pointer(twin.q)),
            ctypes.c_void_p(pointer(twin.scales)),
            ctypes.c_void_p(pointer(twin.biases)),
            twin.bits,
            GROUP,
        )
        if status == 0:
            registered.append(ptr)
            keep.append((weight, twin))
    # unregistered when the model goes, before its weights' memory can be reused; the twins live until then
    weakref.finalize(model, _unregister, native, registered, keep)
    huge_pages.collapse_in_background([a for _, t in keep for a in (t.q, t.scales, t.biases)])
    return len(registered)


PANELS_PENDING = "_mlxcel_panels_pending"  # load_checkpoint(panels=False): open_backend decides


def register_pending_panels(model: nn.Module) -> int:
    """The panels load_checkpoint left to open_backend, for a model no native step runs."""
    return register_panels(model) if model.__dict__.pop(PANELS_PENDING, False) else 0


def register_panels(model: nn.Module) -> int:
    """Float twins in column panels (cpu_kernels.c) for the model's transposed layers that have no quantized
    twin: a few-row product then reads its weight front to back with the output tile in registers (8 rows in
    ~1.5x the time of one). Bitwise the same products; the weights' memory once more, collapsed into huge
    pages after loading (huge_pages.Arena). Returns how many."""
    from .loader import TransposedLinear  # deferred: loader imports this module

    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_pack_register"):
        return 0
    native.mlxcel_pack_floats.restype = ctypes.c_long
    # (a tied head keeps its dot-product kernel, whose sums run as the reference's do: cpu_kernels.c)
    weights = [m.weight_t for _, m in model.named_modules() if isinstance(m, (TransposedLinear, FusedLinear))]
    weights = [w for w in weights if w.dtype == mx.float32 and not native.mlxcel_has_twin(ctypes.c_void_p(pointer(w)))]
    sizes = [int(native.mlxcel_pack_floats(*w.shape)) for w in weights]
    if not weights:
        return 0
    arena = huge_pages.Arena(4 * sum(sizes))
    registered, address = [], arena.address
    for weight, floats in zip(weights, sizes, strict=False):
        ptr = pointer(weight)
        if native.mlxcel_pack_register(ctypes.c_void_p(ptr), *weight.shape, ctypes.c_void_p(address)) == 0:
            registered.append(ptr)
        address += 4 * floats
    arena.collapse()
    # (kept on the model: a step that sums in ggml's order drops them, server/models/decode_step.py)
    model._mlxcel_panels = weakref.finalize(model, _unregister, native, registered, [arena, weights])
    return len(registered)


def drop_panels(model: nn.Module) -> None:
    """Unregister the model's float panels and free their memory (its products no longer read them)."""
    finalizer = getattr(model, "_mlxcel_panels", None)
    if finalizer is not None:
        finalizer()


def _unregister(native, pointers: list[int], _keep: list) -> None:
    for ptr in pointers:
        native.mlxcel_quant_unregister(ctypes.c_void_p(ptr))
