"""quant_layers.GGMLSwitchLinear: a stack of experts' matrices kept as a GGUF's blocks, each expert its own virtual
twin, multiplied as a kept layer of the same blocks is (int8_dot.c over activations quantized to 8 bits, as ggml's
mul_mat_id), a row's outputs the same alone or batched; and, where the kernels do not run, the stack as mlx-lm's
SwitchLinear layers hold it."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

from server import blas
from server.models import quant_layers

from .test_int8_dot import K, N, int8_layer, random_blocks

pytestmark = pytest.mark.skipif(  # (conftest activated the BLAS and the kernels before mlx was imported)
    not (blas.STATE.native is not None and blas.STATE.native.mlxcel_has_avx2()), reason="mlxcel's kernels with AVX2"
)

EXPERTS = 4
TYPES = ["Q4_K", "Q6_K", "Q8_0", "Q5_0"]


def _stack(qtype: str, rng) -> tuple[quant_layers.GGMLSwitchLinear, np.ndarray]:
    blocks = np.stack([random_blocks(qtype, rng) for _ in range(EXPERTS)])
    stack = quant_layers.GGMLSwitchLinear(qtype, K, N, EXPERTS, blocks.shape[2], bias=False)
    stack.ggml = mx.array(blocks)
    holder = nn.Module()
    holder.experts = stack
    assert quant_layers.keep_quantized(holder, int8=True) == 1
    return stack, blocks


@pytest.mark.parametrize("qtype", TYPES)
def test_each_expert_multiplies_as_a_kept_layer_of_its_blocks(qtype):
    """x through the experts `indices` names, as mlx-lm's SwitchGLU calls a stack (x (B, L, 1, 1, in) against
    indices (B, L, k)): bitwise what a kept layer of that expert's blocks gives the same row."""
    rng = np.random.default_rng(5)
    stack, blocks = _stack(qtype, rng)
    x = rng.standard_normal((2, 3, 1, 1, K)).astype(np.float32)
    indices = np.array([[[0, 2], [3, 1], [2, 2]], [[1, 0], [0, 3], [3, 2]]], np.uint32)
    y = np.array(stack(mx.array(x), mx.array(indices)))
    assert y.shape == (2, 3, 2, 1, N)
    layers = [int8_layer(qtype, blocks[e]) for e in range(EXPERTS)]
    for b in range(2):
        for t in range(3):
            for j in range(2):
                alone = np.array(layers[int(indices[b, t, j])](mx.array(x[b, t, 0])))
                assert np.array_equal(y[b, t, j, 0], alone[0])


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])
def test_a_rows_experts_outputs_are_the_same_alone_or_batched(qtype):
    """40 rows' down projections (x (rows, k, 1, ff) against indices (rows, k), sorted or not): each row's outputs
    bitwise what it gets alone, whatever else the batch sends to its experts (a cache hit equals a cold run)."""
    rng = np.random.default_rng(9)
    stack, _ = _stack(qtype, rng)
    rows, k = 40, 2
    x = rng.standard_normal((rows, k, 1, K)).astype(np.float32)
    indices = rng.integers(0, EXPERTS, (rows, k)).astype(np.uint32)
    batched = np.array(stack(mx.array(x), mx.array(indices)))
    alone = np.stack([np.array(stack(mx.array(x[r : r + 1]), mx.array(indices[r : r + 1])))[0] for r in range(rows)])
    assert np.array_equal(batched, alone)
    flat = mx.array(x.reshape(rows * k, 1, K))
    order = np.argsort(indices.reshape(-1), kind="stable")
    in_order = np.array(stack(flat[mx.array(order)], mx.array(indices.reshape(-1)[order]), sorted_indices=True))
    assert np.array_equal(in_order, batched.reshape(rows * k, 1, N)[order])


def test_an_expert_index_out_of_the_stack_is_refused():
    stack, _ = _stack("Q8_0", np.random.default_rng(1))
    with pytest.raises(IndexError, match="expert index"):
        stack(mx.zeros((1, 1, 1, K)), mx.array([[EXPERTS]], dtype=mx.uint32))


@pytest.mark.parametrize("qtype, kind", [("Q4_K", QuantizedSwitchLinear), ("Q6_K", SwitchLinear)])
def test_unkept_a_stack_is_mlx_lms_switch_layer_over_the_same_values(qtype, kind):
    """Where the kernels do not run: Q4_K as 4-bit affine groups (gather_qmm), Q6_K (scales per 16) as float32;
    both the blocks' exact values."""
    rng = np.random.default_rng(3)
    blocks = np.stack([random_blocks(qtype, rng) for _ in range(EXPERTS)])
    holder = nn.Module()
    holder.experts = quant_layers.GGMLSwitchLinear(qtype, K, N, EXPERTS, blocks.shape[2], bias=False)
    holder.experts.ggml = mx.array(blocks)
    values = holder.experts.dequantized()
    assert quant_layers.unkeep_blocks(holder) == 1
    assert type(holder.experts) is kind
    x = rng.standard_normal((3, 1, 1, K)).astype(np.float32)
    indices = np.array([[1], [3], [0]], np.uint32)
    y = np.array(holder.experts(mx.array(x), mx.array(indices)))
    want = np.einsum("rk,rnk->rn", x[:, 0, 0].astype(np.float64), values[indices[:, 0]].astype(np.float64))
    assert y.shape == (3, 1, 1, N)
    assert np.allclose(y[:, 0, 0], want, rtol=0, atol=1e-3)


@pytest.mark.reference
def test_a_ggufs_quantized_experts_stay_blocks_and_step_natively(reference_binary):
    """The Qwen3-MoE twin's Q4_K_M (llama-quantize's: Q4_K and Q6_K experts, Q6_K held as float32 before) through the server's import: its experts stay
    the file's blocks and the native steps run the mixture over them. With products in float over the blocks the
    native prefill is MLX's within float rounding (a wrong expert, weight or order moves logits by units); over
    8-bit activations (as ggml multiplies) the same greedy token, and a cache hit gives the cold run's logits
    bitwise. (MLX's router rounds its softmax otherwise, which 8-bit activations carry to ~0.5 in logits.)"""
    from fixtures.families import quantized_gguf
    from server.backends import open_backend
    from server.models.gguf_quants import KEPT_KEY
    from server.models.loader import load_checkpoint
    from server.models.store import converted_gguf

    out = converted_gguf(quantized_gguf("qwen3-moe", "Q4_K_M"))  # (the server's own conversion, cached as served)
    kept = json.loads((out / "config.json").read_text())["mlxcel"][KEPT_KEY]
    assert {kept[p] for p in kept if ".switch_mlp." in p} == {"Q4_K", "Q6_K"}  # (Q6_K: some layers' down)
    prompt = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 4
    for int8 in (False, True):
        checkpoint = load_checkpoint(out, int8=int8)
        stacks = [m for _, m in checkpoint.model.named_modules() if isinstance(m, quant_layers.GGMLSwitchLinear)]
        assert len(stacks) == 3 * checkpoint.config["num_hidden_layers"]
        runner = open_backend(checkpoint)
        assert type(runner).__name__ == "NativeBackend"
        logits = []
        for native in (False, True):
            runner.native_prefill = native
            logits.append(np.array(runner.prefill(runner.new_cache(), prompt)))
        runner.native_prefill = True
        assert logits[0].argmax() == logits[1].argmax()
        if not int8:  # (float products of more than 16 rows go to the BLAS: a cache hit is the int8 path's property)
            assert 0 < np.abs(logits[0] - logits[1]).max() < 1e-4
            continue
        cache = runner.new_cache()
        runner.prefill(cache, prompt[:24])
        assert np.array_equal(np.array(runner.prefill(cache, prompt[24:])), logits[1])
