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
    # a one-row step is a GEMV (server/native/sgemm_row.c), over W or its transpose: the last bits may differ
    assert mx.abs(step_a - step_b).max().item() < 1e-4
    assert mx.array_equal(mx.argmax(step_a, -1), mx.argmax(step_b, -1)).item()
