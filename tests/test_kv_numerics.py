"""-ctk/-ctv f32|f16|bf16 and -fa (server/models/kv_numerics.py, server/native/attention_ggml.c): the cache's
values rounded as ggml writes them, and attention rounding what ggml-cpu's one_chunk flash attention and its
plain mul_mat path round, checked against a NumPy transcription of ggml's loops."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from server import cpu_kernels
from server.cli.args import build_parser
from server.cli.classify import refusals
from server.cli.startup import kv_numerics
from server.models.kv_numerics import KVNumerics, round_to

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason="mlxcel's CPU kernels are not loaded")

SCALE = 0.125


def _f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _one_chunk(q, k, v):
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk for one row over f16 K and V."""
    qh, acc, m, s = _f16(q), np.zeros(q.shape[-1], np.float32), -np.inf, np.float32(0)
    for kj, vj in zip(k, v, strict=False):
        score = np.float32(np.dot(qh.astype(np.float64), kj.astype(np.float64))) * np.float32(SCALE)
        ms = vs = np.float32(1)
        if score > m:
            ms, m = np.float32(np.exp(np.float32(m - score))), score
            acc = _f16(acc * ms)
        else:
            vs = np.float32(np.exp(np.float32(score - m)))
        acc = _f16((acc.astype(np.float64) + vj.astype(np.float64) * vs).astype(np.float32))
        s = s * ms + vs
    return acc * (np.float32(1) / s)


def _plain(q, k, v):
    """mul_mat(K, f16(Q)), soft_max, mul_mat(V, f16(P)): the non-flash path over f16 K and V."""
    scores = (k.astype(np.float64) @ _f16(q).astype(np.float64)).astype(np.float32) * np.float32(SCALE)
    e = np.exp(scores - scores.max()).astype(np.float32)
    p = _f16(e * np.float32(1.0 / e.astype(np.float64).sum()))
    return (p.astype(np.float64) @ v.astype(np.float64)).astype(np.float32)


def _inputs(keys=37, heads=3):
    rng = np.random.default_rng(7)
    q = (rng.standard_normal((1, heads, 1, 64)) * 3).astype(np.float32)
    k = _f16(rng.standard_normal((1, 1, keys, 64)))
    v = _f16(rng.standard_normal((1, 1, keys, 64)))
    return q, k, v


@pytest.mark.parametrize("flash,emulate", [(True, _one_chunk), (False, _plain)])
def test_attention_over_an_f16_cache_rounds_where_ggml_rounds(flash, emulate):
    q, k, v = _inputs()
    out = np.array(
        cpu_kernels.attention(mx.array(q), mx.array(k), mx.array(v), SCALE, None, KVNumerics("f16", "f16", flash))
    )
    exact = np.array(cpu_kernels.attention(mx.array(q), mx.array(k), mx.array(v), SCALE))
    for h in range(q.shape[1]):
        want = emulate(q[0, h, 0], k[0, 0], v[0, 0])
        assert np.abs(out[0, h, 0] - want).max() < 1e-6  # f32 summation order only
        assert np.abs(exact[0, h, 0] - want).max() > 1e-5  # (the f32 attention is measurably not that)


def test_flash_attention_over_an_f32_cache_reads_it_cast_to_f16_as_b10621():
    q, k, v = _inputs()
    k, v = k + np.float32(1e-4), v - np.float32(1e-4)  # f32 values between f16 ones
    out = np.array(
        cpu_kernels.attention(mx.array(q), mx.array(k), mx.array(v), SCALE, None, KVNumerics("f32", "f32", True))
    )
    for h in range(q.shape[1]):
        assert np.abs(out[0, h, 0] - _one_chunk(q[0, h, 0], _f16(k[0, 0]), _f16(v[0, 0]))).max() < 1e-6


def test_cache_values_round_to_nearest_even_as_ggml_writes_them():
    halfway = np.float32(1 + 2**-11)  # between two f16 values: to the even one
    x = mx.array(np.array([halfway, -halfway, 1e-8, 65519.0, np.float32(1 + 2**-8)], np.float32))
    assert np.array(round_to(x, "f16")).tolist() == [1.0, -1.0, _f16(1e-8).item(), 65504.0, 1.00390625]
    assert np.array(round_to(x, "bf16")).tolist()[4] == 1.0  # 1 + 2^-8 is bf16's halfway: to even
    assert np.array(round_to(x, "f32")).tolist() == np.array(x).tolist()


def parse_args(argv: list[str]):
    return build_parser("mlxcel-server").parse_args(argv)


def test_flags_map_to_the_cache_types_with_b10621s_defaults():
    assert kv_numerics(parse_args([])) == KVNumerics("f16", "f16", True)  # -fa auto: on, as on b10621's CPU
    assert kv_numerics(parse_args(["-fa", "off", "-ctk", "f32", "-ctv", "f32"])) == KVNumerics("f32", "f32", False)
    assert kv_numerics(parse_args(["-ctk", "bf16", "-fa", "on"])) == KVNumerics("bf16", "f16", True)
    assert kv_numerics(parse_args(["-ctkd", "f32"]), draft=True) == KVNumerics("f32", "f16", True)
    assert refusals(parse_args(["-ctk", "f32", "-ctv", "bf16"]).given) == []
    assert refusals(parse_args(["-ctk", "q4_1", "-ctv", "q8_0"]).given) == []  # every type b10621 takes
    assert kv_numerics(parse_args(["-ctk", "iq4_nl", "-ctv", "q5_1"])) == KVNumerics("iq4_nl", "q5_1", True)


def test_b10621s_refusals_of_block_types_are_kept_word_for_word():
    """llama_init_from_model's: a quantized V cache needs flash attention, a block must divide the head."""
    assert KVNumerics("q8_0", "q8_0", True).refusal(64) is None
    assert KVNumerics("q8_0", "f16", False).refusal(64) is None  # (a quantized K without it is fine)
    assert KVNumerics("f16", "q5_0", False).refusal(64) == (
        "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
    )
    assert KVNumerics("q4_0", "f16", True).refusal(80) == (
        "llama_init_from_model: K cache type q4_0 with block size 32 does not divide n_embd_head_k=80"
    )


@pytest.mark.heavy  # loads the F32 twin
@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx"])
def test_an_f16_cache_is_stored_in_16_bits_and_computes_what_its_f32_holder_did(native, twin_f32):
    """b10621's default cache type takes half a float32 cache's memory here too: the native steps and MLX's
    layers store keys and values in float16, and both paths still compute the same logits from it."""
    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(twin_f32.mlx_dir), kv=KVNumerics("f16", "f16", True))
    if not native:
        runner.native_decode = runner.native_prefill = False
    cache = runner.new_cache()
    logits = [runner.prefill(cache, [504, 3458, 282, 4649, 314])]
    logits += [runner.decode(cache, t) for t in (7042, 30)]
    assert {(c.keys.dtype, c.values.dtype) for c in cache} == {(mx.float16, mx.float16)}
    snap, nbytes = runner.snapshot(cache, 7)
    assert sum(k.nbytes + v.nbytes for k, v in snap.kv()) < nbytes  # the arrays are no bigger than b10621's state
    f32 = open_backend(load_checkpoint(twin_f32.mlx_dir), kv=KVNumerics("f32", "f32", True))  # read cast to f16
    if not native:
        f32.native_decode = f32.native_prefill = False
    cache32 = f32.new_cache()
    same = [f32.prefill(cache32, [504, 3458, 282, 4649, 314])] + [f32.decode(cache32, t) for t in (7042, 30)]
    assert cache32[0].keys.dtype == mx.float32
    assert all(mx.array_equal(a, b).item() for a, b in zip(logits, same, strict=False))


@pytest.mark.heavy  # loads the F32 twin
def test_a_block_cache_keeps_the_exactness_properties(twin_f32):
    """Over q8_0 keys and q4_1 values (bytes, D / 32 blocks a row): a row's logits are the same alone or batched,
    a restored prefix continues as the cold run does, and what MLX's own passes would need is refused in one
    line (their caches are floats). The rows themselves against b10621's: conformance/test_kv_blocks.py."""
    from server.backends import BackendRefusal, open_backend
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(twin_f32.mlx_dir), kv=KVNumerics("q8_0", "q4_1", True))
    prompt = [504, 3458, 282, 4649, 314]
    cold = runner.new_cache()
    logits = [runner.prefill(cold, prompt)] + [runner.decode(cold, t) for t in (7042, 30)]
    assert {(c.keys.dtype, c.values.dtype) for c in cold} == {(mx.uint8, mx.uint8)}
    assert (cold[0].keys.shape[-1], cold[0].values.shape[-1]) == (68, 40)  # 64 values: 2 blocks of 34, of 20
    snap, _ = runner.snapshot(cold, 6)
    warm = runner.restore(snap, 6)
    assert mx.array_equal(runner.decode(warm, 30), logits[-1]).item()
    other = runner.new_cache()
    runner.prefill(other, [504, 3458, 282])
    runner.decode(other, 11)
    one = runner.decode(other, 12)
    again = runner.new_cache()
    runner.prefill(again, [504, 3458, 282])
    runner.decode(again, 11)
    batch = runner.batch_merge([warm, again])
    rows = runner.decode_rows(batch, [42, 12])
    assert mx.array_equal(rows[1], one.reshape(-1)).item()
    assert "K (q8_0):" in runner.kv_report(256, 1, 1) and "V (q4_1):" in runner.kv_report(256, 1, 1)

    class Unfused:
        fused = False

    with pytest.raises(BackendRefusal, match="use --lora-fuse, or a float cache type"):
        runner.attach_adapters(Unfused())
