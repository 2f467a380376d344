"""--rope-scaling yarn and the --yarn-* knobs (server/models/yarn.py): llama_context's resolution, ggml's
correction dims, the ropes they replace, and the native and MLX paths computing the same angles. Against
b10621's logits: fixtures/requests/*yarn* (six cases, greedy tokens and top-3 candidates identical)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from server import cpu_kernels
from server.backends import open_backend
from server.backends.mlx_backend import MLXBackend
from server.models.loader import load_checkpoint
from server.models.tokenizer import ModelTokenizer
from server.models.yarn import YarnFlags, YarnRoPE, corr_dims, install, resolve


def test_resolution_follows_llama_context():
    # YaRN scaling: ext_factor 1, attn_factor recomputed from the factor and cancelled by ggml's own term
    ext, attn, fast, slow, orig = resolve(YarnFlags(scaling_yarn=True), 0.25, 8192)
    assert (ext, fast, slow, orig) == (1.0, 32.0, 1.0, 8192)
    assert attn == pytest.approx((0.1 * math.log(4) + 1) / (1 + 0.1 * math.log(4)), rel=1e-6)
    # --yarn-attn-factor acts only where ext_factor resolves to 0 (upstream's quirk)
    assert resolve(YarnFlags(attn_factor=1.5), 1.0, 8192)[:2] == (0.0, 1.5)
    assert resolve(YarnFlags(scaling_yarn=True, attn_factor=3.0), 0.5, 8192)[1] == pytest.approx(1.0, rel=1e-6)
    # an explicit ext_factor acts without YaRN scaling; the knobs replace the model's values
    assert resolve(YarnFlags(ext_factor=0.5, beta_fast=16, beta_slow=2, orig_ctx=512), 0.5, 8192)[0::2] == (
        0.5,
        16,
        512,
    )


def test_corr_dims_are_ggmls():
    # ggml_rope_yarn_corr_dims for 64 dims, 8192 positions, base 100000, betas 32 / 1
    low, high = corr_dims(64, 8192, 100000.0, 32.0, 1.0)

    def dim(n_rot):
        return 64 * math.log(8192 / (n_rot * 2 * math.pi)) / (2 * math.log(100000.0))

    assert (low, high) == (max(0, math.floor(dim(32))), min(63, math.ceil(dim(1))))


@pytest.fixture(scope="module")
def prompt(twin_f32):
    return ModelTokenizer(twin_f32.mlx_dir).tokenize("The quick brown fox jumps over the lazy dog. " * 6, True, True)


def _logits(twin, prompt, **kw):
    runner = open_backend(load_checkpoint(twin.mlx_dir, **kw))
    cache = runner.new_cache()
    return runner, np.array(runner.prefill(cache, prompt)), np.array(runner.decode(cache, 42))


def test_knobs_that_resolve_plain_replace_nothing_and_change_nothing(twin_f32, prompt):
    _, plain, plain_step = _logits(twin_f32, prompt)
    runner, got, step = _logits(twin_f32, prompt, yarn=YarnFlags(beta_fast=16, beta_slow=2, orig_ctx=512))
    assert type(runner.loaded.model.layers[0].self_attn.rope).__name__ == "RoPE"
    assert np.array_equal(got, plain) and np.array_equal(step, plain_step)


def test_yarn_replaces_every_rope_and_runs_natively(twin_f32, prompt):
    runner, scaled, _ = _logits(twin_f32, prompt, rope=(None, 0.25), yarn=YarnFlags(scaling_yarn=True))
    ropes = {type(layer.self_attn.rope) for layer in runner.loaded.model.layers}
    assert ropes == {YarnRoPE} and type(runner).__name__ == "NativeBackend"
    _, plain, _ = _logits(twin_f32, prompt, rope=(None, 0.25))
    assert np.abs(scaled - plain).max() > 0.1  # the mix and the magnitude moved the logits


def test_the_mlx_path_and_the_native_steps_agree(twin_f32, prompt):
    flags = YarnFlags(scaling_yarn=True, beta_fast=16)
    _, native, native_step = _logits(twin_f32, prompt, rope=(None, 0.5), yarn=flags)
    _, through_mlx, mlx_step = _logits(twin_f32, prompt, rope=(None, 0.5), yarn=flags, kernels=False)
    assert np.abs(native - through_mlx).max() < 1e-3 and np.abs(native_step - mlx_step).max() < 1e-3
    assert native.argmax() == through_mlx.argmax()


def test_numpy_angles_match_the_kernels(twin_f32):
    if not cpu_kernels.available():
        pytest.skip("no native kernels here")
    rope = YarnRoPE(64, 100000.0, 0.25, (1.0, 1.0, 10.0, 20.0))
    import mlx.core as mx

    x = mx.array(np.random.default_rng(0).standard_normal((1, 2, 5, 64)).astype(np.float32))
    native = np.array(rope(x, offset=7))
    cos, sin = rope._angles(np.arange(7, 12))
    xs = np.array(x)
    manual = np.concatenate([xs[..., :32] * cos - xs[..., 32:] * sin, xs[..., :32] * sin + xs[..., 32:] * cos], -1)
    assert np.abs(native - manual).max() < 1e-5


def test_a_rope_that_cannot_take_yarn_is_refused_not_ignored():
    from mlx import nn

    class ScaledRoPE(nn.Module):  # a family computing its own frequencies
        def __init__(self):
            super().__init__()
            self.scale = 1.0

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = ScaledRoPE()

    assert install(Attention(), YarnFlags(scaling_yarn=True), 4096) == -1
    assert install(Attention(), YarnFlags(beta_fast=8), 4096) == 0  # resolves plain: nothing to take


async def test_with_yarn_a_full_context_shifts_turning_keys_as_b10621_does(twin_f32):
    # b10621's K-shift runs rope_yarn at the shift (mscale included): the sequence goes on past the context end;
    # the oracle case post-completion.context-shift-yarn-f32 compares its tokens with the reference's
    from server.engine.engine import Engine, EngineConfig
    from server.engine.types import ErrorEvent, FinalEvent, GenerationRequest, TokenEvent

    tok = ModelTokenizer(twin_f32.mlx_dir)
    engine = Engine(
        twin_f32.mlx_dir,
        EngineConfig(n_ctx=64, ctx_shift=True, rope=(None, 0.5), yarn=YarnFlags(scaling_yarn=True)),
        eog_ids=tok.eog_ids,
        piece=tok.piece,
    )
    engine.start()
    engine.ready.wait(180)
    try:
        assert engine.backend.capabilities.turn_keys
        events = [
            ev
            async for ev in engine.submit(
                GenerationRequest(tuple(tok.tokenize("Hello there", True, True)), n_predict=100, ignore_eos=True)
            )
        ]
    finally:
        engine.stop(5)
    assert not any(isinstance(ev, ErrorEvent) for ev in events)
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.stop_type == "limit" and final.truncated  # shifted, as upstream
    assert sum(isinstance(ev, TokenEvent) for ev in events) == final.n_decoded == 100  # past the 64-token context


def test_a_yarn_turn_is_ggmls_rope_at_the_shift_mscale_included(twin_f32):
    """Turning keys by `shift` multiplies each rotated pair by rope_yarn's cos/sin at that position (mscale
    applied again, as b10621's build_rope_shift does), the dims past the rope's untouched."""
    import mlx.core as mx

    model = load_checkpoint(twin_f32.mlx_dir, rope=(None, 0.25), yarn=YarnFlags(scaling_yarn=True)).model
    rope = model.layers[0].self_attn.rope
    assert isinstance(rope, YarnRoPE) and rope.yarn[0] != 0  # ext_factor on
    runner = MLXBackend.__new__(MLXBackend)
    runner.model = model
    keys = mx.array(np.random.default_rng(0).standard_normal((1, 3, 5, 64)).astype(np.float32))
    turned = np.array(runner._turn(keys, -17))
    cos, sin = rope._angles(np.array([-17]))
    k = np.array(keys)
    half = rope.dims // 2
    expect = np.concatenate(
        [
            k[..., :half] * cos[0] - k[..., half : rope.dims] * sin[0],
            k[..., :half] * sin[0] + k[..., half : rope.dims] * cos[0],
            k[..., rope.dims :],
        ],
        axis=-1,
    )
    # MLX's vectorized f32 cos/sin differ from numpy's by up to ~2e-6 on some CPUs (AVX-512 ones), times keys ~2
    np.testing.assert_allclose(turned, expect, rtol=2e-6, atol=1e-5)
    norms = np.linalg.norm(turned[..., : rope.dims], axis=-1) / np.linalg.norm(k[..., : rope.dims], axis=-1)
    mscale = rope.yarn[1] * (1 + 0.1 * np.log(1 / 0.25))  # attn_factor times YaRN's magnitude correction
    np.testing.assert_allclose(norms, mscale, rtol=1e-5)
