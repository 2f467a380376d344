"""mlxcel's CPU attention and SwiGLU kernels (server/native/cpu_kernels.c) against MLX's own ops."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server import cpu_kernels

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason="no mlxcel CPU kernels here")


def _masked_reference(q, k, v, scale, first=None):
    """Queries as the last positions of the keys, each row's keys from first[b] on: an explicit mask."""
    n_q, n_keys = q.shape[2], k.shape[2]
    key, query = mx.arange(n_keys)[None, :], mx.arange(n_q)[:, None] + n_keys - n_q
    visible = (key <= query)[None, None]
    if first is not None:
        visible = visible & (key >= mx.array(first)[:, None, None, None])
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=visible)


def _arrays(rng, *shapes):
    return [mx.array(rng.standard_normal(shape).astype(np.float32) * 2) for shape in shapes]


@settings(max_examples=40, deadline=None)
@given(
    heads=st.sampled_from([(1, 1), (4, 2), (9, 3), (6, 6)]),
    n_q=st.integers(1, 150),
    extra=st.integers(0, 90),
    dim=st.sampled_from([8, 13, 64]),
    seed=st.integers(0, 2**16),
)
def test_attention_matches_mlx(heads, n_q, extra, dim, seed):
    (n_heads, n_kv), n_keys = heads, n_q + extra
    q, k, v = _arrays(
        np.random.default_rng(seed), (1, n_heads, n_q, dim), (1, n_kv, n_keys, dim), (1, n_kv, n_keys, dim)
    )
    got, want = cpu_kernels.attention(q, k, v, dim**-0.5), _masked_reference(q, k, v, dim**-0.5)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() < 2e-5


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 9), n_q=st.sampled_from([1, 1, 3]), n_keys=st.integers(3, 300), seed=st.integers(0, 2**16))
def test_batched_attention_skips_each_rows_left_padding(batch, n_q, n_keys, seed):
    rng = np.random.default_rng(seed)
    first = [int(f) for f in rng.integers(0, n_keys - n_q + 1, batch)]
    q, k, v = _arrays(rng, (batch, 9, n_q, 64), (batch, 3, n_keys, 64), (batch, 3, n_keys, 64))
    got = cpu_kernels.attention(q, k, v, 0.125, first)
    assert mx.abs(got - _masked_reference(q, k, v, 0.125, first)).max().item() < 2e-5
    # a row's result does not depend on the rows beside it, nor on its padding: bitwise
    row = rng.integers(batch)
    alone = cpu_kernels.attention(
        q[row : row + 1, :, :, :], k[row : row + 1, :, first[row] :, :], v[row : row + 1, :, first[row] :, :], 0.125
    )
    assert mx.array_equal(alone[0], got[row]).item()


@settings(max_examples=25, deadline=None)
@given(
    heads=st.sampled_from([(1, 1), (9, 3), (4, 2)]),
    n_q=st.integers(2, 90),
    extra=st.integers(0, 60),
    dim=st.sampled_from([13, 64]),
    seed=st.integers(0, 2**16),
)
def test_each_prompt_row_is_bitwise_what_a_decode_step_gives_it(heads, n_q, extra, dim, seed):
    """A prompt's rows (rows_task) are summed as a one-query step sums its row: every row bitwise what it
    gets alone over its visible keys, and a later part of the prompt (a resumed chunk) bitwise the same."""
    (n_heads, n_kv), n_keys = heads, n_q + extra
    q, k, v = _arrays(
        np.random.default_rng(seed), (1, n_heads, n_q, dim), (1, n_kv, n_keys, dim), (1, n_kv, n_keys, dim)
    )
    whole = cpu_kernels.attention(q, k, v, 0.125)
    for i in range(n_q):
        pos = extra + i
        alone = cpu_kernels.attention(q[:, :, i : i + 1], k[:, :, : pos + 1], v[:, :, : pos + 1], 0.125)
        assert mx.array_equal(alone, whole[:, :, i : i + 1]).item(), i
    cut = n_q // 2
    assert mx.array_equal(cpu_kernels.attention(q[:, :, cut:], k, v, 0.125), whole[:, :, cut:]).item()


def test_attention_reads_keys_in_place_from_a_larger_buffer():
    """The KV cache hands over a slice of its preallocated buffer (a head stride larger than its rows)."""
    rng = np.random.default_rng(1)
    buffer = mx.array(rng.standard_normal((1, 3, 256, 64)).astype(np.float32))
    k, v = buffer[:, :, :40, :], buffer[:, :, 100:140, :]
    q = mx.array(rng.standard_normal((1, 9, 5, 64)).astype(np.float32))
    got = cpu_kernels.attention(q, k, v, 0.125)
    assert mx.abs(got - _masked_reference(q, k, v, 0.125)).max().item() < 2e-5


@given(n=st.integers(1, 70000), seed=st.integers(0, 2**16))
@settings(max_examples=25, deadline=None)
def test_swiglu_matches_mlx(n, seed):
    rng = np.random.default_rng(seed)
    g = mx.array((rng.standard_normal(n) * 8).astype(np.float32))
    u = mx.array(rng.standard_normal(n).astype(np.float32))
    got, want = cpu_kernels.swiglu(g, u), g * mx.sigmoid(g) * u
    assert mx.allclose(got, want, rtol=2e-6, atol=1e-6).item()
    # one fused gate/up product, rows of [gate | up]
    rows = mx.concatenate([g.reshape(1, -1), u.reshape(1, -1)], axis=-1).reshape(1, 1, 2 * n)
    assert mx.array_equal(cpu_kernels.swiglu(rows), got.reshape(1, 1, n)).item()
    if n % 4 == 0:
        grid = mx.concatenate([g.reshape(4, -1), u.reshape(4, -1)], axis=-1)
        assert mx.array_equal(cpu_kernels.swiglu(grid), got.reshape(4, -1)).item()


def test_swiglu_saturates_without_nan():
    g = mx.array([-1e4, -100.0, -88.0, 0.0, 88.0, 100.0, 1e4, -0.0], dtype=mx.float32)
    got = np.array(cpu_kernels.swiglu(g, mx.ones_like(g)))
    assert np.isfinite(got).all()
    assert np.allclose(got, [0, 0, 0, 0, 88, 100, 1e4, 0], atol=1e-3)


def _exact_rope(x, offsets, base=100000.0):
    x = np.array(x, dtype=np.float64)
    half = x.shape[-1] // 2
    inv = base ** (-np.arange(half) * 2 / x.shape[-1])
    out = np.empty_like(x)
    for b, offset in enumerate(offsets):
        angle = (offset + np.arange(x.shape[2]))[:, None] * inv[None, :]
        c, s = np.cos(angle), np.sin(angle)
        out[b, ..., :half] = x[b, ..., :half] * c - x[b, ..., half:] * s
        out[b, ..., half:] = x[b, ..., :half] * s + x[b, ..., half:] * c
    return out


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 4), n=st.integers(1, 40), offset=st.integers(0, 9000), seed=st.integers(0, 2**16))
def test_rope_turns_each_row_by_its_angle(batch, n, offset, seed):
    """Against float64 math, within the float angles' rounding (ggml's way of computing them, which grows
    with the position); each row of a batch from its own offset; and mx.fast.rope's result near the start."""
    rng = np.random.default_rng(seed)
    offsets = [offset + int(d) for d in rng.integers(0, 50, batch)]
    x = mx.array(rng.standard_normal((batch, 9, n, 64)).astype(np.float32))
    got = np.array(cpu_kernels.rope(x, 64, 100000.0, 1.0, offsets))
    last = max(offsets) + n
    assert np.abs(got - _exact_rope(x, offsets)).max() < 1e-5 + 4e-7 * last
    first = mx.fast.rope(x[:1], 64, traditional=False, base=100000.0, scale=1.0, offset=offsets[0])
    assert np.abs(got[:1] - np.array(first)).max() < 1e-5 + 4e-7 * last


def test_rope_reads_a_transposed_projection_in_place():
    """The attention block hands over (B, L, H, D) projections transposed to (B, H, L, D)."""
    rng = np.random.default_rng(3)
    flat = mx.array(rng.standard_normal((1, 5, 9 * 64)).astype(np.float32))
    x = flat.reshape(1, 5, 9, 64).transpose(0, 2, 1, 3)
    got = np.array(cpu_kernels.rope(x, 64, 100000.0, 1.0, [17]))
    assert np.abs(got - _exact_rope(mx.contiguous(x), [17])).max() < 2e-5


@pytest.mark.parametrize(("K", "N"), [(576, 960), (1536, 576), (100, 37), (7, 16)])
def test_products_over_panel_twins_are_bitwise_the_kernels_own(K, N):
    """A float weight's column panels (cpu_kernels.c, in a huge-page arena) give every few-row product
    bitwise what the plain few-row kernel gives over the weight itself, at every row count up to 16."""
    import ctypes

    from server import blas
    from server.models.huge_pages import Arena

    native = blas.STATE.native
    native.mlxcel_pack_floats.restype = ctypes.c_long
    rng = np.random.default_rng(K * N)
    (weight,) = _arrays(rng, (K, N))
    plain = mx.array(np.array(weight))  # the same values elsewhere: no twin
    mx.eval(weight, plain)
    arena = Arena(4 * native.mlxcel_pack_floats(K, N))
    ptr = ctypes.c_void_p(np.array(weight, copy=False).ctypes.data)
    assert not native.mlxcel_has_twin(ptr)
    assert native.mlxcel_pack_register(ptr, K, N, ctypes.c_void_p(arena.address)) == 0
    try:
        assert native.mlxcel_has_twin(ptr)
        for m in range(1, 17):
            x = _arrays(rng, (m, K))[0]
            before = native.mlxcel_packed_calls()
            packed, own = x @ weight, x @ plain
            mx.eval(packed, own)
            assert native.mlxcel_packed_calls() - before == 1
            assert mx.array_equal(packed, own).item(), m
        assert native.mlxcel_pack_register(ptr, K, N, ctypes.c_void_p(arena.address + 4)) == -1  # misaligned
    finally:
        native.mlxcel_quant_unregister(ptr)
    assert not native.mlxcel_has_twin(ptr)


def test_an_arena_is_collapsed_into_huge_pages_where_the_kernel_gives_them():
    import ctypes
    from pathlib import Path

    from server.models import huge_pages

    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not setting.is_file() or "[never]" in setting.read_text():
        pytest.skip("no transparent huge pages here")
    before = huge_pages.huge_bytes()
    arena = huge_pages.Arena(64 << 20)
    ctypes.memset(arena.address, 1, 64 << 20)  # touch it: small pages
    assert arena.address % huge_pages.HUGE_PAGE == 0
    arena.collapse(delay=0).join()
    assert huge_pages.huge_bytes() - before >= 32 << 20
    assert ctypes.string_at(arena.address + (40 << 20), 4) == b"\x01" * 4  # collapsing changes no byte
