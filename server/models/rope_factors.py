"""A GGUF's `rope_freqs` tensor: per-pair divisors of the rope angle (Llama 3.1 and later).

The converter computes them from the HF llama3 rope scaling (conversion/llama.py generate_extra_tensors) and
the GGUF keeps only the factors, not the scaling's parameters, so the imported checkpoint carries the factors
themselves (config "mlxcel" -> "rope_freq_factors") and its ropes use them as ggml-cpu does (ggml_rope_cache_init:
theta starts at the position and is multiplied by base^(-2/dims) pair after pair, each pair's angle is
freq_scale * theta / factor). An MLX checkpoint with the llama3 rope scaling gets the factors the converter would
write for it, so that it computes as b10621 computes the GGUF made from it (and runs on the native steps).
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models.rope_utils import Llama3RoPE

from .yarn import rotate_half

CONFIG_KEY = "rope_freq_factors"


def llama3_rope_factors(config: dict) -> np.ndarray:
    """conversion/llama.py generate_extra_tensors, in float32 as torch computes the frequencies."""
    rope = config["rope_scaling"]
    base = config.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor, low = rope.get("factor", 8.0), rope.get("low_freq_factor", 1.0)
    high, old = rope.get("high_freq_factor", 4.0), rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def _llama3_scaled(config: dict) -> bool:
    rope = config.get("rope_scaling") or {}
    return (rope.get("rope_type") or rope.get("type")) == "llama3"


class FactorRoPE(nn.RoPE):
    """nn.RoPE (rotate-half) with ggml's per-pair frequency factors."""

    def __init__(self, dims: int, base: float, scale: float, factors: list[float]):
        super().__init__(dims, traditional=False, base=base, scale=scale)
        self.__dict__["factors"] = np.asarray(factors, dtype=np.float32)  # numbers, not parameters

    def angles(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin (positions x dims / 2) in float32, in ggml-cpu's order of operations."""
        half = self.dims // 2
        theta_scale = np.float32(np.power(np.float32(self.base), np.float32(-2.0) / np.float32(self.dims)))
        theta = positions.astype(np.float32)
        columns = []
        for i in range(half):
            columns.append(np.float32(self.scale) * (theta / self.factors[i]))
            theta = (theta * theta_scale).astype(np.float32)
        angle = np.stack(columns, axis=-1).astype(np.float32)
        return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        batch, length = x.shape[0], x.shape[-2]
        offsets = offset.tolist() if isinstance(offset, mx.array) else int(offset)
        if isinstance(offsets, int):
            offsets = [offsets] * batch
        return rotate_half(x, self.dims, [self.angles(np.arange(o, o + length)) for o in offsets])


def install(model: nn.Module, config: dict) -> int:
    """Every plain rope of a checkpoint whose config carries frequency factors becomes a FactorRoPE, and so does
    every mlx-lm Llama3RoPE of an MLX checkpoint with the llama3 rope scaling (the converter's factors for it).
    Returns how many; a checkpoint with factors and no plain rope to take them is refused (ValueError), not run
    unscaled."""
    factors = (config.get("mlxcel") or {}).get(CONFIG_KEY)
    takes: tuple[type, ...] = (nn.RoPE,)
    if not factors and _llama3_scaled(config):
        factors, takes = llama3_rope_factors(config).tolist(), (Llama3RoPE,)
    if not factors:
        return 0
    replaced = 0
    for _, module in model.named_modules():
        for name, child in list(module.children().items()):
            if type(child) in takes and not child.traditional:
                if child.dims != 2 * len(factors):
                    raise ValueError(f"rope_freqs holds {len(factors)} factors for a rope of {child.dims} dimensions")
                base = getattr(child, "base", None) or float(config.get("rope_theta", 10000.0))
                setattr(module, name, FactorRoPE(child.dims, base, getattr(child, "scale", 1.0), factors))
                replaced += 1
    if not replaced:
        raise ValueError("rope_freqs: the model has no plain rope to take the frequency factors")
    return replaced
