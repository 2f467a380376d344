"""Lossless mapping of GGUF block quantizations onto MLX affine quantization.

GGUF stores a row as consecutive blocks of 32 elements. MLX affine quantization stores, per group of
32, `w = scale * q + bias` with `q` packed eight nibbles (or four bytes) per uint32, element k at bit
`bits * (k % (32 // bits))`. Every supported GGUF block type is an affine map of small integers, so the
mapping is exact: scales and biases are kept in float32 (float16 would also be exact for the values, but
MLX would then compute in float16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP_SIZE = 32


@dataclass(frozen=True)
class AffineQuantized:
    """One matrix in MLX's affine layout: packed uint32 weights plus float32 scales and biases."""

    weight: np.ndarray  # uint32, (rows, cols * bits / 32)
    scales: np.ndarray  # float32, (rows, cols / 32)
    biases: np.ndarray  # float32, (rows, cols / 32)
    bits: int


def _blocks(raw: np.ndarray, block_bytes: int) -> np.ndarray:
    rows = raw.shape[0]
    return np.ascontiguousarray(raw).reshape(rows, -1, block_bytes)


def _half(blocks: np.ndarray, offset: int) -> np.ndarray:
    return blocks[..., offset : offset + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned integers (rows, cols) of `bits` width into uint32 words, element k at bits*(k%per)."""
    per_word = 32 // bits
    rows, cols = q.shape
    q = q.astype(np.uint32).reshape(rows, cols // per_word, per_word)
    shifts = (np.arange(per_word, dtype=np.uint32) * bits)[None, None, :]
    return np.bitwise_or.reduce(q << shifts, axis=2).astype(np.uint32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    # elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high nibbles
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def q4_0_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q4_0: f16 d, 16 bytes of nibbles; x = d * (q - 8)."""
    b = _blocks(raw, 18)
    d = _half(b, 0)
    q = _nibbles(b[..., 2:18])
    rows = raw.shape[0]
    return AffineQuantized(_pack(q.reshape(rows, -1), 4), d, -8.0 * d, 4)


def q4_1_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d * q + m."""
    b = _blocks(raw, 20)
    d, m = _half(b, 0), _half(b, 2)
    q = _nibbles(b[..., 4:20])
    rows = raw.shape[0]
    return AffineQuantized(_pack(q.reshape(rows, -1), 4), d, m, 4)


def q8_0_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q8_0: f16 d, 32 int8; stored as q + 128 with bias -128 d (exact in float32)."""
    b = _blocks(raw, 34)
    d = _half(b, 0)
    q = b[..., 2:34].copy().view(np.int8).astype(np.int16) + 128
    rows = raw.shape[0]
    return AffineQuantized(_pack(q.reshape(rows, -1), 8), d, -128.0 * d, 8)


# GGML type name -> converter; any other quantized type is refused by the importer.
AFFINE_CONVERTERS = {
    "Q4_0": q4_0_to_affine,
    "Q4_1": q4_1_to_affine,
    "Q8_0": q8_0_to_affine,
}
PASSTHROUGH_TYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}


def permute_rows(a: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's RoPE row permutation of attn_q / attn_k (a pure row permutation)."""
    rows = a.shape[0]
    head_dim = rows // n_head
    rest = a.shape[1:]
    return a.reshape(n_head, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)
