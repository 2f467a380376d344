"""Gemma's GeGLU as b10621's CPU backend computes it (server/models/ggml_gelu.py): GELU read from a float16 table."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from mlx_lm.models import gemma2, llama

from server.models.ggml_gelu import GGMLGeGLU, gelu_table, ggml_geglu, install


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)))


def test_the_table_holds_gelu_of_each_float16_rounded_to_float16():
    table = np.array(gelu_table())
    for x in (0.0, 0.5, -0.5, 1.0, 2.75, -3.0, 7.5):
        bits = int(np.float16(x).view(np.uint16))
        assert table[bits] == np.float32(np.float16(_gelu(x)))


def test_geglu_rounds_the_input_through_float16_and_clamps_beyond_ten():
    x = mx.array([0.1234567, -10.5, 12.0, 3.0001], dtype=mx.float32)
    g = mx.array([2.0, 5.0, 0.5, 1.0], dtype=mx.float32)
    got = np.array(ggml_geglu(x, g))
    through_half = float(np.float16(0.1234567))
    assert got[0] == np.float32(np.float16(_gelu(through_half))) * 2.0
    assert got[1] == 0.0 and got[2] == 6.0
    # the float32 formula differs from the table's answer: what the swap is for
    assert abs(got[0] / 2.0 - _gelu(0.1234567)) > 1e-6


def test_install_swaps_gemma_mlps_only_and_keeps_their_parameters():
    common = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=2, vocab_size=64)
    gemma = gemma2.Model(
        gemma2.ModelArgs(model_type="gemma2", head_dim=16, rms_norm_eps=1e-6, num_key_value_heads=1, **common)
    )
    names = sorted(k for k, _ in gemma.parameters()["model"]["layers"][0]["mlp"].items())
    x = mx.random.normal((1, 3, 32))
    before = gemma.layers[0].mlp(x)
    assert install(gemma, "gemma2") == 2
    assert isinstance(gemma.layers[0].mlp, GGMLGeGLU)
    assert sorted(k for k, _ in gemma.parameters()["model"]["layers"][0]["mlp"].items()) == names
    after = gemma.layers[0].mlp(x)
    assert mx.allclose(before, after, atol=1e-2).item() and not mx.array_equal(before, after).item()
    plain = llama.Model(llama.ModelArgs(model_type="llama", rms_norm_eps=1e-6, num_key_value_heads=1, **common))
    assert install(plain, "llama") == 0
