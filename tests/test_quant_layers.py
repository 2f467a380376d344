"""Quantized weights kept quantized on the CPU (server/models/quant_layers.py, server/native/cpu_kernels.c
virtual twins, server/native/ggml_blocks.c): products equal to the float weight's, exact dequantization, and no
float copy of the model."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from server.backends import open_backend
from server.models.loader import load_checkpoint
from server.models.quant_layers import (
    GGMLEmbedding,
    GGMLLinear,
    KernelQuantEmbedding,
    KernelQuantLinear,
    keep_quantized,
    register_blocks,
    rows_of,
)

BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}  # ggml-common.h
# where each type keeps its float16 super-block scales (d, and dmin where it has one), in bytes into a block
SCALE_OFFSETS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def _random_blocks(qtype: str, rows: int, k: int, seed: int) -> np.ndarray:
    """Random K-quant rows: random quants and sub-block scales, small float16 super-block scales."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, k // 256, BLOCK_BYTES[qtype]), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype]:
        half = (rng.standard_normal((rows, k // 256)) * 0.01).astype(np.float16)
        raw[:, :, offset : offset + 2] = half.view(np.uint8).reshape(rows, k // 256, 2)
    return raw.reshape(rows, -1)


def _gguf_dequantized(raw: np.ndarray, qtype: str) -> np.ndarray:
    import gguf

    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype]).reshape(raw.shape[0], -1)


def _kept_affine(bits: int, group: int, embedding: bool = False) -> tuple[nn.Module, np.ndarray]:
    w = mx.random.normal((96, 512), key=mx.random.key(bits * group)) * 0.05
    layer = (
        nn.QuantizedEmbedding(96, 512, group_size=group, bits=bits)
        if embedding
        else nn.QuantizedLinear(512, 96, bias=False, group_size=group, bits=bits)
    )
    layer.weight, layer.scales, layer.biases = mx.quantize(w, group_size=group, bits=bits)
    holder = nn.Module()
    holder.layer = layer
    assert keep_quantized(holder) == 1
    kept = holder.layer
    dense = np.array(mx.dequantize(kept.weight, kept.scales, kept.biases, group_size=group, bits=bits))
    return kept, dense


@pytest.mark.parametrize("bits,group", [(4, 32), (8, 32), (4, 64), (8, 64)])
@pytest.mark.parametrize("rows", [1, 5, 40])  # the few-row kernel, and a panel-dequantized GEMM
def test_a_kept_affine_layer_multiplies_as_its_float_weight(bits, group, rows):
    layer, dense = _kept_affine(bits, group)
    assert type(layer) is KernelQuantLinear
    x = np.random.default_rng(rows).standard_normal((rows, 512)).astype(np.float32)
    got = np.array(layer(mx.array(x)))
    assert np.abs(got - x @ dense.T).max() < 1e-4 * np.abs(x @ dense.T).max()
    assert np.array_equal(rows_of(layer, np.arange(96)), dense)  # its rows as dequantized: exactly


def test_a_kept_embedding_reads_rows_exactly_and_serves_as_the_tied_head():
    layer, dense = _kept_affine(4, 64, embedding=True)
    assert type(layer) is KernelQuantEmbedding
    ids = mx.array([[3, 95, 0]])
    assert np.array_equal(np.array(layer(ids)), dense[[3, 95, 0]][None])
    x = np.random.default_rng(0).standard_normal((2, 512)).astype(np.float32)
    assert np.abs(np.array(layer.as_linear(mx.array(x))) - x @ dense.T).max() < 1e-4 * 10


@pytest.mark.parametrize("qtype", sorted(BLOCK_BYTES))
@pytest.mark.parametrize("rows", [1, 40])
def test_k_quant_blocks_dequantize_as_gguf_py_and_multiply_as_their_floats(qtype, rows):
    raw = _random_blocks(qtype, 48, 512, seed=len(qtype) + rows)
    dense = _gguf_dequantized(raw, qtype)
    layer = GGMLLinear(qtype, 512, 48, raw.shape[1])
    layer.ggml = mx.array(raw)
    assert register_blocks(layer)
    assert np.array_equal(rows_of(layer, np.arange(48)), dense)  # bit for bit: the same float32 products
    x = np.random.default_rng(rows).standard_normal((rows, 512)).astype(np.float32)
    want = x @ dense.T
    assert np.abs(np.array(layer(mx.array(x))) - want).max() < 1e-4 * np.abs(want).max()


def test_a_k_quant_embedding_serves_rows_and_the_head():
    raw = _random_blocks("Q6_K", 64, 256, seed=7)
    dense = _gguf_dequantized(raw, "Q6_K")
    emb = GGMLEmbedding("Q6_K", 256, 64, raw.shape[1])
    emb.ggml = mx.array(raw)
    assert register_blocks(emb)
    assert np.array_equal(np.array(emb(mx.array([5, 63]))), dense[[5, 63]])
    x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
    assert np.abs(np.array(emb.as_linear(mx.array(x))) - x @ dense.T).max() < 1e-4 * np.abs(x @ dense.T).max()


def _held_bytes(loaded) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(loaded.model.parameters()))


@pytest.mark.heavy
def test_the_bundled_q4_1_model_holds_no_float_copy(twin_q4_1):
    """The 4-bit checkpoint on the CPU: every linear layer and the embedding stay quantized (no float32 weight),
    the model's arrays take the checkpoint's bytes, and the native steps run on them."""
    loaded = load_checkpoint(twin_q4_1.mlx_dir)
    from mlx.utils import tree_flatten

    params = tree_flatten(loaded.model.parameters())
    floats = [k for k, v in params if v.dtype == mx.float32 and not k.endswith((".scales", ".biases"))]
    kept = [m for _, m in loaded.model.named_modules() if isinstance(m, (KernelQuantLinear, KernelQuantEmbedding))]
    assert kept and all(k.endswith("norm.weight") for k in floats), floats  # the norms alone are float
    size = sum(f.stat().st_size for f in twin_q4_1.mlx_dir.glob("*.safetensors"))
    assert _held_bytes(loaded) <= 1.25 * size
    assert type(open_backend(loaded)).__name__ == "NativeBackend"


@pytest.mark.heavy
@pytest.mark.parametrize("bits", [4, 8])
def test_an_mlx_community_checkpoint_is_served_quantized(bits):
    """mlx-community's layout (bfloat16, groups of 64): held at its own size, on the native steps, giving the
    tokens its dequantized float weights give."""
    from mlx.utils import tree_map

    from fixtures.families import mlx_community_twin

    path = mlx_community_twin("mistral", bits)
    loaded = load_checkpoint(path)
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    assert _held_bytes(loaded) <= 1.25 * size, (_held_bytes(loaded), size)
    runner = open_backend(loaded)
    assert type(runner).__name__ == "NativeBackend"
    # MLX's own quantized_matmul over the same values in float32 (scales, biases and norms widened as the kernels
    # read them; in bfloat16 MLX would round every product's inputs)
    plain_model = load_checkpoint(path, kernels=False, dequantize=False)
    plain_model.model.update(
        tree_map(lambda a: a.astype(mx.float32) if a.dtype == mx.bfloat16 else a, plain_model.model.parameters())
    )
    plain = open_backend(plain_model)
    tokens = [1, 415, 2936, 9060, 285, 1142, 754, 28723] * 3
    for backend in (runner, plain):
        cache = backend.new_cache()
        backend.__dict__["_last"] = [backend.prefill(cache, tokens)]
        for _ in range(4):
            token = int(mx.argmax(backend.__dict__["_last"][-1]).item())
            backend.__dict__["_last"].append(backend.decode(cache, token))
    for a, b in zip(runner.__dict__["_last"], plain.__dict__["_last"], strict=True):
        assert mx.argmax(a).item() == mx.argmax(b).item()
        assert mx.abs(a - b).max().item() < 1e-3 * mx.abs(b).max().item()


def test_a_checkpoint_keeping_blocks_the_kernels_do_not_read_is_refused_in_one_line():
    """A cache written by another converter version (Q4_1 kept as blocks, which this one holds as affine groups):
    refused naming the type and the layer, not a KeyError."""
    from server.models.quant_layers import install_blocks

    model = nn.Sequential(nn.Linear(64, 8, bias=False))
    with pytest.raises(ValueError, match=r"keeps Q4_1 blocks for 'layers\.0', which mlxcel's kernels do not read"):
        install_blocks(model, {"layers.0": "Q4_1"}, {"layers.0.ggml": mx.zeros((8, 40), mx.uint8)})
