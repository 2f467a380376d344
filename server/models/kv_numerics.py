"""The KV cache's types (-ctk, -ctv) and flash attention (-fa): what b10621 rounds where, in one place.

An f16 cache (b10621's default) is stored in float16, its memory half a float32 cache's; an f32 cache in float32;
a bf16 cache in float32 buffers holding bfloat16 values (MLX arrays of bfloat16 have no host view for the native
steps). Each key and value is rounded as ggml writes it (f32 -> f16 round-to-nearest-even, f32 -> bf16
ggml_compute_fp32_to_bf16), and
attention then rounds what ggml-cpu rounds over such a cache (server/native/attention_ggml.c): the queries to
the keys' type, and with flash attention over an f16 V the running sums in f16, without it the probabilities
to V's type. b10621's defaults are f16 keys and values, and -fa auto, which resolves to on for a CPU model
(llama_context's auto-FA probe: the CPU backend runs FLASH_ATTN_EXT).

The block-quantized types (q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1) are stored as ggml stores them: each key or
value row (a head's D values) as D / 32 blocks in uint8 buffers, written with the type's from_float and read with
its to_float (server/native/kv_quant.c) after b10621's Walsh-Hadamard rotation (llama_kv_cache's attn_rot_k,
attn_rot_v) and, for a llama GGUF's keys, in its interleaved element order; the keys dotted with the rotated query
quantized to the type's vec_dot type (server/native/attention_ggml.c). Only
the native steps read such a cache (server/backends/__init__.py refuses a model without one).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

# attention_ggml.c's KV_F32, KV_F16, KV_BF16, then cpu_kernels.h's block types (KV_Q8_0...)
TYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 3, "q4_0": 4, "q4_1": 5, "iq4_nl": 6, "q5_0": 7, "q5_1": 8}
BLOCK_TYPES = ("q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
BLOCK_VALUES = 32  # values per block (ggml's QK); a row's bytes: the native mlxcel_kv_row_bytes
_DTYPES = {"f16": mx.float16, "bf16": mx.bfloat16}


def is_block(kind: str) -> bool:
    return kind in BLOCK_TYPES


@dataclass(frozen=True)
class KVNumerics:
    k_type: str = "f32"
    v_type: str = "f32"
    flash: bool = False

    @classmethod
    def from_flags(cls, k_type: str | None, v_type: str | None, flash_attn: str | None) -> KVNumerics:
        """From b10621's flag values (None: its default); -fa auto is on here, as on b10621's CPU backend."""
        return cls(k_type or "f16", v_type or "f16", (flash_attn or "auto") not in ("off", "0", "false", "disabled"))

    @property
    def exact(self) -> bool:
        """f32 keys and values without flash attention: f32 math (b10621's flash attention casts them to f16)."""
        return self.k_type == "f32" and self.v_type == "f32" and not self.flash

    def codes(self) -> tuple[int, int, int]:
        return TYPES[self.k_type], TYPES[self.v_type], int(self.flash)

    @property
    def blocks(self) -> bool:
        """Keys or values block-quantized: a cache only the native steps read."""
        return is_block(self.k_type) or is_block(self.v_type)

    def describe(self) -> str:
        return f"KV cache K {self.k_type}, V {self.v_type}, flash attention {'on' if self.flash else 'off'}"

    def refusal(self, head_dim: int) -> str | None:
        """b10621's llama_init_from_model refusal of these types for a model of this head size, or None."""
        if is_block(self.v_type) and not self.flash:
            return "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
        for side, kind in (("K", self.k_type), ("V", self.v_type)):
            if is_block(kind) and head_dim % BLOCK_VALUES:
                return (
                    f"llama_init_from_model: {side} cache type {kind} with block size {BLOCK_VALUES} does not "
                    f"divide n_embd_head_{side.lower()}={head_dim}"
                )
        return None


def stored(x: mx.array, kind: str) -> mx.array:
    """x (float32) as the cache stores it: an f16 cache in float16 (its own 16 bits, rounded to nearest even as
    ggml writes it), another in float32 holding values of its type (bf16 rounded as ggml rounds it)."""
    return x.astype(mx.float16) if kind == "f16" else round_to(x, kind)


def storage_dtype(kind: str):
    """The numpy dtype of a cache of type `kind` (what the native steps write): a block type's rows in bytes."""
    return np.uint8 if is_block(kind) else np.float16 if kind == "f16" else np.float32


def round_to(x: mx.array, kind: str) -> mx.array:
    """x (float32) rounded to the cache type `kind` as ggml writes it, kept float32 (MLX's conversions round to
    nearest even, as ggml's do)."""
    dtype = _DTYPES.get(kind)
    return x if dtype is None else x.astype(dtype).astype(mx.float32)


def apply(model, numerics: KVNumerics) -> None:
    """Set the numerics on every attention block of a model switched to mlxcel's kernels (cpu_layers)."""
    from mlx_lm.models import gemma2, gemma3_text  # deferred: (mlx-lm's models, loaded with the model)

    from .cpu_layers import KernelAttention  # deferred: cpu_layers imports this module (KVNumerics, stored)
    from .qwen35 import CacheTypedAttention  # deferred: qwen35 imports this module (KVNumerics, stored)

    # (Gemma's attention runs as mlx-lm's through MLX; its native steps take the numerics: gemma_step.py)
    kinds = (KernelAttention, gemma2.Attention, gemma3_text.Attention, CacheTypedAttention)
    for _, module in model.named_modules():
        if isinstance(module, kinds):
            module.kv_numerics = numerics
