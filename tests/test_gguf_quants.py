"""GGUF block quantizations map onto MLX affine quantization bit-exactly."""

from __future__ import annotations

import gguf
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.models.gguf_quants import AFFINE_CONVERTERS, WIDENED_CONVERTERS, permute_rows

BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34, "Q4_K": 144, "Q5_K": 176, "IQ4_NL": 18}
TWO_HALVES = {"Q4_1", "Q5_1", "Q4_K", "Q5_K"}  # d and m (dmin) lead the block


def _random_blocks(qtype: str, rows: int, blocks: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    # finite, varied f16 scales (and mins): random exponents across the f16 range, random signs
    n_halves = 2 if qtype in TWO_HALVES else 1
    halves = rng.standard_normal((rows, blocks, n_halves)) * 10.0 ** rng.integers(-4, 3, (rows, blocks, n_halves))
    raw[..., : 2 * n_halves] = halves.astype(np.float16).view(np.uint8).reshape(rows, blocks, 2 * n_halves)
    return raw.reshape(rows, blocks * BLOCK_BYTES[qtype])


# the server's own cache's widened forms too ("Q5_0 widened": 8 bits for the integer kernels)
CONVERTERS = {**AFFINE_CONVERTERS, **{f"{k} widened": v for k, v in WIDENED_CONVERTERS.items()}}


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(sorted(CONVERTERS)),
    rows=st.integers(1, 6),
    blocks=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_affine_dequantization_equals_gguf_dequantization_exactly(name, rows, blocks, seed):
    qtype = name.split()[0]
    raw = _random_blocks(qtype, rows, blocks, seed)
    q = CONVERTERS[name](raw)
    assert q.scales.dtype == np.float32 and q.biases.dtype == np.float32
    got = np.array(
        mx.dequantize(mx.array(q.weight), mx.array(q.scales), mx.array(q.biases), group_size=32, bits=q.bits)
    )
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
    np.testing.assert_array_equal(got, want)


def test_permute_rows_inverts_llama_cpp_rope_permutation():
    n_head, head_dim, cols = 3, 8, 5
    hf = np.arange(n_head * head_dim * cols).reshape(n_head * head_dim, cols)
    # llama.cpp's convert_hf_to_gguf permute()
    gguf_layout = hf.reshape(n_head, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(hf.shape)
    np.testing.assert_array_equal(permute_rows(gguf_layout, n_head), hf)
    assert not np.array_equal(gguf_layout, hf)


@pytest.mark.parametrize("qtype", sorted(AFFINE_CONVERTERS))
def test_packing_puts_element_k_at_bits_times_k(qtype):
    raw = _random_blocks(qtype, 1, 1, seed=7)
    q = AFFINE_CONVERTERS[qtype](raw)
    per_word = 32 // q.bits
    ints = np.rint(
        (gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])[0] - q.biases[0, 0]) / q.scales[0, 0]
    ).astype(np.uint32)
    word0 = int(q.weight[0, 0])
    for k in range(per_word):
        assert (word0 >> (q.bits * k)) & ((1 << q.bits) - 1) == ints[k]
