"""Loading a checkpoint for the CPU: the fast layouts change no number."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from server.models.loader import TransposedLinear, load_checkpoint

TOKENS = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 8


def _logits(model) -> tuple[mx.array, mx.array]:
    cache = make_prompt_cache(model)
    prefill = model(mx.array([TOKENS]), cache=cache)
    step = model(mx.array([[504]]), cache=cache)
    mx.eval(prefill, step)
    return prefill, step


def test_transposed_linears_give_the_same_logits(twin_q4_1):
    plain = load_checkpoint(twin_q4_1.mlx_dir, dequantize=True, transpose=False)
    fast = load_checkpoint(twin_q4_1.mlx_dir, dequantize=True, transpose=True)
    layers = [m for _, m in fast.model.named_modules() if isinstance(m, TransposedLinear)]
    assert len(layers) == 7 * len(fast.model.layers)  # q, k, v, o, gate, up, down in every block
    (prefill_a, step_a), (prefill_b, step_b) = _logits(plain.model), _logits(fast.model)
    assert mx.array_equal(prefill_a, prefill_b).item()  # GEMMs: bitwise
    # a one-row step runs on mlxcel's few-row kernel (server/native/cpu_kernels.c), which sums over W and over
    # its transpose in different orders: the last bits may differ
    assert mx.abs(step_a - step_b).max().item() < 1e-4
    assert mx.array_equal(mx.argmax(step_a, -1), mx.argmax(step_b, -1)).item()


def test_the_kernel_blocks_give_mlx_lms_logits(twin_q4_1):
    """Attention and SwiGLU on mlxcel's CPU kernels (server/models/cpu_layers.py): a prompt, a step, and a
    prompt continued after a cached prefix (queries at an offset), against mlx-lm's own blocks."""
    from server import cpu_kernels
    from server.models.cpu_layers import KernelAttention, KernelMLP

    assert cpu_kernels.available()
    plain = load_checkpoint(twin_q4_1.mlx_dir, kernels=False)
    fast = load_checkpoint(twin_q4_1.mlx_dir, kernels=True)
    assert all(type(b.self_attn) is KernelAttention and type(b.mlp) is KernelMLP for b in fast.model.layers)
    assert not any(type(b.self_attn) is KernelAttention for b in plain.model.layers)
    (prefill_a, step_a), (prefill_b, step_b) = _logits(plain.model), _logits(fast.model)
    for a, b in ((prefill_a, prefill_b), (step_a, step_b)):
        assert 0 < mx.abs(a - b).max().item() < 2e-4  # a different exp: close, not bitwise
        assert mx.array_equal(mx.argmax(a, -1), mx.argmax(b, -1)).item()
    # the same prompt in two chunks: the second chunk's queries sit at an offset into the cache
    cache = make_prompt_cache(fast.model)
    fast.model(mx.array([TOKENS[:24]]), cache=cache)
    rest = fast.model(mx.array([TOKENS[24:]]), cache=cache)
    assert mx.abs(rest - prefill_a[:, 24:]).max().item() < 2e-4
