"""Lossless mapping of GGUF block quantizations onto MLX affine quantization.

GGUF stores a row as consecutive blocks (32 elements, or super-blocks of 256 for the K-quants). MLX affine
quantization stores, per group of 32, `w = scale * q + bias` with `q` packed as one little-endian bit stream per
row. The types in AFFINE_CONVERTERS are affine maps of small integers per 32 elements, so the mapping is exact:
scales and biases are kept in float32 (float16 would also be exact for the values, but MLX would then compute
in float16). FLOAT32_HELD lists the types whose scales change every 16 elements: the importer holds them as
float32, which is exact too.
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
    """Pack unsigned integers (rows, cols) of `bits` width into uint32 words as MLX does: one little-endian bit
    stream per row, element k at bits k .. k + bits - 1 (for 4 and 8 bits: element k at bits * (k % per word))."""
    rows, cols = q.shape
    planes = (q.astype(np.uint8)[..., None] >> np.arange(bits, dtype=np.uint8)) & 1  # (rows, cols, bits)
    return np.packbits(planes.reshape(rows, cols * bits), axis=1, bitorder="little").view(np.uint32)


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


def _low_high(qs: np.ndarray, qh_bits: np.ndarray) -> np.ndarray:
    """5-bit values: the nibbles of qs (low halves first) with one high bit each from qh_bits."""
    return _nibbles(qs) | (qh_bits << 4)


def q5_0_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = d * (q - 16)."""
    b = _blocks(raw, 22)
    d = _half(b, 0)
    qh = b[..., 2:6].copy().view(np.uint32)
    bits = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    rows = raw.shape[0]
    return AffineQuantized(_pack(_low_high(b[..., 6:22], bits).reshape(rows, -1), 5), d, -16.0 * d, 5)


def q5_0_to_affine8(raw: np.ndarray) -> AffineQuantized:
    """Q5_0 widened to 8 bits, for the server's own cache: q + 112 with scale d and bias -128 d. Then q - 128 is
    ggml's q - 16 and the bias term the integer kernels add (bias + 128 scale) is exactly zero, so
    server/native/int8_dot.c's 8-bit path multiplies ggml's own integers (MLX's 5-bit layers have no integer path:
    Gemma-3-1B's Q4_K_M is two fifths Q5_0, llama-quantize's type where a row of 1152 takes no K-quant). Exact:
    (q + 112) d and 128 d need at most 19 significant bits, and their difference is (q - 16) d."""
    b = _blocks(raw, 22)
    d = _half(b, 0)
    qh = b[..., 2:6].copy().view(np.uint32)
    bits = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    rows = raw.shape[0]
    q = _low_high(b[..., 6:22], bits).astype(np.int16) + 112
    return AffineQuantized(_pack(q.reshape(rows, -1), 8), d, -128.0 * d, 8)


def q5_1_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = d * q + m."""
    b = _blocks(raw, 24)
    d, m = _half(b, 0), _half(b, 2)
    qh = b[..., 4:8].copy().view(np.uint32)
    bits = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    rows = raw.shape[0]
    return AffineQuantized(_pack(_low_high(b[..., 8:24], bits).reshape(rows, -1), 5), d, m, 5)


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_K / Q5_K super-block's eight (scale, minimum) pairs: d * sc and dmin * m, in float32 as ggml forms
    them (both products exact: an f16 by a 6-bit integer)."""
    rows, nb = b.shape[:2]
    d, dmin = _half(b, 0), _half(b, 2)
    import gguf  # deferred: gguf-py's import (~75 ms) only where a GGUF's Q4_K blocks are converted

    sc, mn = gguf.quants.Q4_K.get_scale_min(b[..., 4:16].reshape(rows * nb, 12))
    sc, mn = sc.reshape(rows, nb, 8).astype(np.float32), mn.reshape(rows, nb, 8).astype(np.float32)
    return (d[..., None] * sc).reshape(rows, -1), (dmin[..., None] * mn).reshape(rows, -1)


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K low bits: per 64 elements, 32 bytes whose low nibbles are the first 32 and high the next."""
    chunks = qs.reshape(*qs.shape[:-1], -1, 32)
    return np.stack([chunks & 0x0F, chunks >> 4], axis=-2).reshape(*qs.shape[:-1], -1)


def q4_k_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q4_K: super-blocks of 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and minimums, 128 bytes of nibbles;
    each group of 32 is x = (d * sc) * q - (dmin * m): affine groups of 32 exactly."""
    b = _blocks(raw, 144)
    scales, mins = _k_scales(b)
    q = _k_nibbles(b[..., 16:144])
    rows = raw.shape[0]
    return AffineQuantized(_pack(q.reshape(rows, -1), 4), scales, -mins, 4)


def q5_k_to_affine(raw: np.ndarray) -> AffineQuantized:
    """Q5_K: as Q4_K, plus 32 bytes holding one high bit per element (bit j of byte l for element 32 j + l)."""
    b = _blocks(raw, 176)
    scales, mins = _k_scales(b)
    low = _k_nibbles(b[..., 48:176])
    qh = b[..., 16:48]
    high = ((qh[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1).reshape(*qh.shape[:-1], -1)
    rows = raw.shape[0]
    return AffineQuantized(_pack((low | (high << 4)).reshape(rows, -1), 5), scales, -mins, 5)


IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int16)


def iq4_nl_to_affine(raw: np.ndarray) -> AffineQuantized:
    """IQ4_NL: f16 d, 16 bytes of nibbles indexing a fixed table of int8 levels; x = d * level. The levels are
    no affine map of the nibbles, but level + 128 is a byte: 8-bit affine with bias -128 d, exact."""
    b = _blocks(raw, 18)
    d = _half(b, 0)
    q = IQ4_NL_VALUES[_nibbles(b[..., 2:18])] + 128
    rows = raw.shape[0]
    return AffineQuantized(_pack(q.reshape(rows, -1), 8), d, -128.0 * d, 8)


# GGML type name -> converter onto MLX's affine layout, exact.
AFFINE_CONVERTERS = {
    "Q4_0": q4_0_to_affine,
    "Q4_1": q4_1_to_affine,
    "Q5_0": q5_0_to_affine,
    "Q5_1": q5_1_to_affine,
    "Q8_0": q8_0_to_affine,
    "Q4_K": q4_k_to_affine,
    "Q5_K": q5_k_to_affine,
    "IQ4_NL": iq4_nl_to_affine,
}
# the 8-bit affine groups the server's import held Q5_0 as before its blocks were kept (CONVERTER_VERSION 7; the
# kept blocks' products are checked against them, tests/test_int8_dot.py)
WIDENED_CONVERTERS = {"Q5_0": q5_0_to_affine8}
# Types no affine group of 32 holds (scales per 16 elements): held as float32, which holds every value exactly
# (d * sc * q needs at most 24 significant bits), at float32's size.
FLOAT32_HELD = ("Q2_K", "Q3_K", "Q6_K")
# the K-quants and legacy types the server's own import keeps as the file's blocks (server/native/ggml_blocks.c
# dequantizes them exactly on the CPU, int8_dot.c multiplies them in integers; another device converts them at
# load: affine where AFFINE_CONVERTERS has them, else float32)
KEPT_BLOCKS = {"Q5_0": 6, "Q5_1": 7, "Q8_0": 8}  # name -> GGML_TYPE_*: the legacy blocks
KEPT_BLOCKS |= {"Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
# Q4_0 and Q4_1 stay affine groups of 32 (6 bits a weight for 4.5 and 5): kept as blocks and read by int8_dot.c's
# dot_legacy (tried 2026-12-06), a decode step over them ran 1.15-1.4x slower than over the affine layers
# (dot_affine4 takes two chunks a load; 16 layers of 2048 x 8192, streamed: Q4_0 15.2 ms against 11.0, Q4_1 16.3
# against 11.2), where Q8_0's blocks ran as fast (16.2 against 16.6) at 8.5 bits a weight for 10
KEPT_KEY = "ggml_blocks"  # config["mlxcel"][KEPT_KEY]: {module path: type name}
PASSTHROUGH_TYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}


def permute_rows(a: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's RoPE row permutation of attn_q / attn_k (a pure row permutation)."""
    rows = a.shape[0]
    head_dim = rows // n_head
    rest = a.shape[1:]
    return a.reshape(n_head, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)
