"""The native decode step (server/models/decode_step.py, server/native/decode_step.c) against MLX's."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from server.backends import open_backend
from server.models.decode_step import DecodeStep
from server.models.loader import load_checkpoint

pytestmark = pytest.mark.heavy  # in-process engine runs on the real twins: nox -s tests, not unit

TOKENS = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 8


@pytest.fixture(scope="module")
def runner(twin_f32):
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    assert type(runner).__name__ == "NativeBackend"  # the F32 twin on the CPU with the kernels takes the native step
    return runner


def _decode(runner, native: bool, cache: list, tokens: list[int]) -> list[mx.array]:
    runner.native_decode = native
    try:
        out = [runner.decode(cache, t) for t in tokens]
        mx.eval(out)
        return out
    finally:
        runner.native_decode = True


def test_native_steps_give_mlxs_logits_and_keys(runner):
    """Across the cache's 256-position growth: logits within float rounding of MLX's step (the RMS norm is
    ggml's, summed in double), the same greedy tokens, the same keys and values written at the same places."""
    prompt = (TOKENS * 4)[:250]
    steps = [504, 3458, 282, 4649, 314, 7042, 30, 198, 504, 3458]  # positions 250..259: past 256
    caches = []
    for native in (False, True):
        cache = runner.new_cache()
        runner.prefill(cache, prompt)
        caches.append((cache, _decode(runner, native, cache, steps)))
    (mlx_cache, mlx_logits), (native_cache, native_logits) = caches
    for a, b in zip(mlx_logits, native_logits, strict=False):
        assert 0 < mx.abs(a - b).max().item() < 1e-4
        assert mx.argmax(a).item() == mx.argmax(b).item()
    for a, b in zip(mlx_cache, native_cache, strict=False):
        assert a.offset == b.offset == 260 and b.keys.shape[2] == 512
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            assert mx.abs(x[..., :260, :] - y[..., :260, :]).max().item() < 1e-4
            assert mx.array_equal(x[..., :250, :], y[..., :250, :]).item()  # the prompt's, untouched


def test_a_snapshot_keeps_its_positions_while_its_cache_decodes_on(runner):
    """A step writes in place at the cache's next position, which no snapshot view covers."""
    cache = runner.new_cache()
    runner.prefill(cache, TOKENS[:40])
    snap, _ = runner.snapshot(cache, 40)
    before = [(np.array(k).copy(), np.array(v).copy()) for k, v in snap.kv()]
    _decode(runner, True, cache, TOKENS[:5])
    for (k, v), (k0, v0) in zip(snap.kv(), before, strict=False):
        assert k.shape[2] == 40 and np.array_equal(np.array(k), k0) and np.array_equal(np.array(v), v0)
    # a restored copy decodes into its own new buffer: the original cache's next positions stay its own
    restored = runner.restore(snap, 40)
    _decode(runner, True, restored, [198])
    assert not np.array_equal(np.array(restored[0].keys[..., 40, :]), np.array(cache[0].keys[..., 40, :]))


def test_batched_native_steps_match_single_ones_bitwise(runner):
    """Rows of different lengths, left-padded: each row's logits bitwise as when it decodes alone, over
    several steps (the batch's positions advance with it)."""
    prompts = [TOKENS[:5], TOKENS[3:20], TOKENS[:11], TOKENS[7:9]]
    steps = [[504, 3458, 282, 30], [198, 198, 504, 7042], [30, 314, 4649, 282]]
    alone = []
    for i, prompt in enumerate(prompts):
        cache = runner.new_cache()
        runner.prefill(cache, prompt)
        alone.append(_decode(runner, True, cache, [s[i] for s in steps]))
    caches = []
    for prompt in prompts:
        cache = runner.new_cache()
        runner.prefill(cache, prompt)
        caches.append(cache)
    batch = runner.batch_merge(caches)
    for n, tokens in enumerate(steps):
        together = runner.decode_rows(batch, tokens)
        for i in range(len(prompts)):
            assert mx.array_equal(alone[i][n][0], together[i]).item(), (n, i)
    assert batch[0]._idx == 17 + 3 and batch[0].offset.tolist() == [len(p) + 3 for p in prompts]


def test_the_quantized_twin_steps_natively_on_its_4_bit_weights(twin_q4_1):
    from server import blas

    native = blas.STATE.native
    loaded = load_checkpoint(twin_q4_1.mlx_dir)
    runner = open_backend(loaded)
    assert type(runner).__name__ == "NativeBackend"
    cache = runner.new_cache()
    runner.prefill(cache, TOKENS[:20])
    before = native.mlxcel_quant_calls()
    mine = _decode(runner, True, cache, [504])[0]
    assert native.mlxcel_quant_calls() - before == 4 * len(loaded.model.model.layers) + 1  # and the head
    cache = runner.new_cache()
    runner.prefill(cache, TOKENS[:20])
    theirs = _decode(runner, False, cache, [504])[0]
    assert mx.abs(mine - theirs).max().item() < 1e-4


def test_models_the_step_does_not_cover_decode_through_mlx(twin_f32):
    plain = load_checkpoint(twin_f32.mlx_dir, kernels=False)  # mlx-lm's own blocks
    assert DecodeStep.build(plain.model) is None
    assert type(open_backend(plain)).__name__ == "MLXBackend"


def test_a_float_checkpoint_registers_panel_twins_for_its_life():
    """q/k/v, o, gate/up and down of every block (and an untied head) get column panels (a quantized
    checkpoint's weights have their quantized twins instead); they are forgotten with the model."""
    import gc

    from fixtures.families import family_twin
    from server import blas

    native = blas.STATE.native
    gc.collect()
    before = native.mlxcel_packed_registered()
    loaded = load_checkpoint(family_twin("llama3").mlx_dir, panels=True)  # (small: the panels touch new memory)
    head = 0 if loaded.config.get("tie_word_embeddings") else 1  # an untied head has its own panels
    assert native.mlxcel_packed_registered() - before == 4 * len(loaded.model.model.layers) + head
    del loaded
    gc.collect()
    assert native.mlxcel_packed_registered() == before


def test_a_decode_step_never_calls_the_blas(runner):
    """One sequence's prompt of up to 16 tokens and every decode step run on mlxcel's few-row kernels: which
    OpenBLAS is loaded (the pip one or a system one, server/blas.py) cannot change a decode's speed or logits."""
    from server import blas

    cache = runner.new_cache()
    before = blas.blas_calls()
    runner.prefill(cache, TOKENS[:13])
    mx.eval(_decode(runner, True, cache, TOKENS[:8]))
    assert blas.blas_calls() == before
    runner.prefill(runner.new_cache(), TOKENS[:40])  # 40 rows: the BLAS's, or in ggml's order mlxcel's own
    assert (blas.blas_calls() == before) == bool(getattr(getattr(runner, "_step", None), "ggml_order", False))
    mx.eval(mx.ones((64, 64)) @ mx.ones((64, 64)))  # (the counter does count)
    assert blas.blas_calls() > before


# (each CI landing takes a third of the module's tests: oracle/rotation.py)
@pytest.mark.parametrize("family", ["llama3", "phi3", "qwen2.5", "qwen3", "qwen3-moe", "smollm3"])
def test_llama_shaped_families_step_natively_as_mlx_computes(family):
    """Llama 3's rope_freqs, Qwen2's q|k|v biases, Qwen3's q and k norms, Phi-3's fused weights (its q scaled
    before attention) and SmolLM3's rope-less fourth layer: the family twin opens on the native steps, whose prefill and decode give MLX's greedy
    tokens with logits within float rounding of MLX's (the numbers b10621's own are held to in
    conformance/test_families.py)."""
    _native_against_mlx(family, TOKENS[:30], [504, 3458, 282, 4649, 314], 1e-4)


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma_families_step_natively_past_the_window_as_mlx_computes(family):
    """Gemma 2's capped scores and logits, Gemma 3's q and k norms and its sliding layers' own rope base, both
    families' post norms, GeGLU and sliding window (32 positions): the twin opens on the native steps, whose
    prefill and decode, past the window, give MLX's greedy tokens with logits within the twins' rounding of MLX's.
    (MLX sums in another order, and a last-bit difference in a gate can move ggml's float16 GELU table a step: the
    loud Gemma twins carry that to ~5e-3 in logits of std ~8; b10621's own are held to 1e-4 in logprobs in
    conformance/test_families.py.) A wrong window, rope base or norm moves them by whole units."""
    _native_against_mlx(family, TOKENS[:40], [504, 3458, 282, 4649, 314] * 2, 2e-2)  # past the 32-position window


def _native_against_mlx(family: str, prompt: list[int], steps: list[int], bound: float) -> None:
    """The family twin on the native steps: its prefill and decode against MLX's, logits within bound (and not
    bitwise: the native path did run), the same greedy tokens."""
    from fixtures.families import family_twin

    runner = open_backend(load_checkpoint(family_twin(family).mlx_dir))
    assert type(runner).__name__ == "NativeBackend"
    logits = []
    for native in (False, True):
        runner.native_prefill = native
        try:
            cache = runner.new_cache()
            first = runner.prefill(cache, prompt)
            logits.append([first, *_decode(runner, native, cache, steps)])
        finally:
            runner.native_prefill = True
    for a, b in zip(*logits, strict=True):
        assert 0 < mx.abs(a - b).max().item() < bound
        assert mx.argmax(a).item() == mx.argmax(b).item()
