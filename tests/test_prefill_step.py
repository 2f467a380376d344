"""The native prompt chunk (server/models/prefill_step.py, server/native/prefill_step.c) against MLX's."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import RotatingKVCache

from server.backends import open_backend
from server.models.loader import load_checkpoint


@pytest.fixture(scope="module")
def runner(twin_f32):
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir), n_batch=256)
    assert type(runner).__name__ == "NativeBackend"  # the F32 twin on the CPU with the kernels takes the native chunk
    return runner


def _prefill(runner, native: bool, tokens: list[int]) -> tuple[list, mx.array]:
    runner.native_prefill = native
    try:
        cache = runner.new_cache()
        logits = runner.prefill(cache, tokens)
        mx.eval(logits)
        return cache, logits
    finally:
        runner.native_prefill = True


@pytest.mark.parametrize("n", [1, 5, 17, 300, 700])
def test_native_chunks_give_mlxs_logits_keys_and_cache_layout(runner, n):
    """One chunk or several (n_batch 256): the last position's logits within float rounding of MLX's (the
    norms are ggml's, each residual added by its product), the same greedy token, every layer's keys and
    values where MLX writes them, in a buffer grown as mlx-lm grows it."""
    tokens = [int(t) for t in np.random.default_rng(n).integers(0, 49152, n)]
    (native_cache, mine), (mlx_cache, theirs) = _prefill(runner, True, tokens), _prefill(runner, False, tokens)
    assert mine.shape == theirs.shape == (1, 49152)
    assert mx.abs(mine - theirs).max().item() < 1e-4 * mx.abs(theirs).max().item()
    assert mx.argmax(mine).item() == mx.argmax(theirs).item()
    for a, b in zip(native_cache, mlx_cache, strict=False):
        assert a.offset == b.offset == n and a.keys.shape == b.keys.shape
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            assert mx.abs(x[..., :n, :] - y[..., :n, :]).max().item() < 1e-3


def test_decoding_after_a_native_prompt_matches_decoding_after_mlxs(runner):
    tokens = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 5
    (native_cache, _), (mlx_cache, _) = _prefill(runner, True, tokens), _prefill(runner, False, tokens)
    mine, theirs = runner.decode(native_cache, 504), runner.decode(mlx_cache, 504)
    assert mx.abs(mine - theirs).max().item() < 1e-4 * mx.abs(theirs).max().item()
    assert native_cache[0].offset == 41


def test_only_the_prompts_last_chunk_computes_logits(runner):
    step = runner._prefill_step
    cache = runner.new_cache()
    logits = step(cache, [504, 3458, 282], want_logits=False)
    assert logits is None and cache[0].offset == 3
    logits = step(cache, [4649, 314], want_logits=True)
    assert logits.shape == (1, 49152) and cache[0].offset == 5
    whole, _ = _prefill(runner, True, [504, 3458, 282, 4649, 314])
    for a, b in zip(cache, whole, strict=False):  # chunks cut at other places: rows through the BLAS, same keys
        assert mx.abs(a.keys[..., :5, :] - b.keys[..., :5, :]).max().item() < 1e-4


def test_caches_the_chunk_does_not_take_are_left_to_mlx(runner):
    step = runner.step  # the native step says which caches it takes; the backend runs the others through MLX
    rotating = [RotatingKVCache(max_size=64) for _ in range(len(runner.new_cache()))]
    assert not step.takes_sequence(rotating, 2, None)
    cache = runner.new_cache()
    runner.prefill(cache, [504, 3458])
    assert step.takes_sequence(cache, 1, None)
    cache[3].offset += 1  # layers out of step with each other
    assert not step.takes_sequence(cache, 1, None)


def test_models_without_the_native_step_prefill_through_mlx(twin_f32):
    plain = load_checkpoint(twin_f32.mlx_dir, kernels=False)
    assert type(open_backend(plain)).__name__ == "MLXBackend"
