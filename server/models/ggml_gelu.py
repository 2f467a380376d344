"""GELU as b10621's CPU backend computes it, for the GeGLU of Gemma's feed-forward layers.

ggml-cpu builds with GGML_GELU_FP16 (ggml-cpu/vec.h): ggml_vec_geglu_f32 rounds the gate's input to float16,
reads GELU from a 65536-entry table of float16 results (ggml-cpu.c: fp16(gelu_tanh(f)) for every float16 f), and
multiplies by the up projection in float32; inputs <= -10 give 0 and inputs >= 10 pass through. mlx-lm computes the
tanh GELU in float32, about 1e-3 apart per element: enough to move the logits by more than the traces' 1e-4.
The same table, built here once, makes the two agree element for element.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

GELU_COEF_A = np.float32(0.044715)
SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)
# mlx-lm model types whose MLP is gelu_approx(gate) * up: their MLP class is swapped for GGMLGeGLU's
GEGLU_MODEL_TYPES = ("gemma2", "gemma3_text", "gemma3")


@lru_cache(maxsize=1)
def gelu_table() -> mx.array:
    """ggml_table_gelu_f16 as float32: entry i is fp16(gelu_f32(the float16 whose bits are i))."""
    f = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        inner = SQRT_2_OVER_PI * f * (np.float32(1.0) + GELU_COEF_A * f * f)
        g = np.float32(0.5) * f * (np.float32(1.0) + np.tanh(inner, dtype=np.float32))
    return mx.array(g.astype(np.float16).astype(np.float32))


def ggml_geglu(x: mx.array, g: mx.array) -> mx.array:
    """ggml_vec_geglu_f32: table GELU of x (through float16) times g, in float32."""
    bits = x.astype(mx.float16).view(mx.uint16).astype(mx.uint32)
    gelu = mx.take(gelu_table(), bits)
    gelu = mx.where(x <= -10.0, mx.zeros_like(x), mx.where(x >= 10.0, x, gelu))
    return gelu.astype(x.dtype) * g


class GGMLGeGLU(nn.Module):
    """Stands in for mlx-lm's Gemma MLP class (same parameters: gate_proj, up_proj, down_proj)."""

    gate_proj: Any
    up_proj: Any
    down_proj: Any

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(ggml_geglu(self.gate_proj(x), self.up_proj(x)))


def install(model: nn.Module, model_type: str) -> int:
    """Swap every layer's MLP of a GeGLU family for GGMLGeGLU; returns how many were swapped."""
    if model_type not in GEGLU_MODEL_TYPES:
        return 0
    swapped = 0
    for layer in getattr(model, "layers", []):
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and type(mlp).__name__ == "MLP":
            mlp.__class__ = type("GGMLGeGLU", (GGMLGeGLU, type(mlp)), {})
            swapped += 1
    return swapped
