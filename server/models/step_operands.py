"""What the native steps read of a model's layers: a linear layer's weight operand and its shape (decode_step.py,
gemma_step.py)."""

from __future__ import annotations

import os

import mlx.core as mx
from mlx import nn

from .cpu_layers import FusedLinear
from .loader import TransposedLinear
from .quant_layers import (
    FusedGGMLLinear,
    FusedQuantLinear,
    GGMLEmbedding,
    GGMLLinear,
    KernelQuantEmbedding,
    KernelQuantLinear,
)

# the linear layers whose products a native step runs
PRODUCTS = (FusedLinear, TransposedLinear, KernelQuantLinear, FusedQuantLinear, GGMLLinear, FusedGGMLLinear)


def operand(layer) -> mx.array | None:
    """What the step passes for a linear layer's weight: a float one in x out, or a kept quantized layer's packed
    values (whose address is its virtual twin's key: quant_layers), or None for a layer the step does not run."""
    if type(layer) in (FusedLinear, TransposedLinear):
        return layer.weight_t
    if type(layer) in (GGMLLinear, FusedGGMLLinear, GGMLEmbedding):
        return layer.ggml
    kinds = (KernelQuantLinear, FusedQuantLinear, nn.Embedding, KernelQuantEmbedding)
    return layer.weight if type(layer) in kinds else None


def in_out(layer) -> tuple[int, int]:
    """A linear layer's (in, out), or an embedding's (dims, vocab)."""
    if type(layer) in (FusedLinear, TransposedLinear):
        return int(layer.weight_t.shape[0]), int(layer.weight_t.shape[1])
    if type(layer) in (KernelQuantLinear, FusedQuantLinear, KernelQuantEmbedding):
        return int(layer.weight.shape[1] * 32 // layer.bits), int(layer.weight.shape[0])
    if isinstance(layer, GGMLLinear):
        return layer.shape
    return int(layer.weight.shape[1]), int(layer.weight.shape[0])


GGML_ORDER_ENV = "MLXCEL_GGML_ORDER"  # "0": a float32 model's products summed in mlxcel's order, not ggml-cpu's


def ggml_order_on(native) -> bool:
    """Whether the steps may sum products in ggml-cpu's order: AVX2 here, and not switched off."""
    return os.environ.get(GGML_ORDER_ENV, "1") != "0" and bool(native.mlxcel_has_avx2())
