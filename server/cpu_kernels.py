"""mlxcel's CPU kernels for attention, rope and the SwiGLU gate, on MLX arrays (server/native/cpu_kernels.c).

On Linux x86 MLX's CPU exp and sigmoid cost ~15-20 ns an element: a prompt's softmax over its attention
scores and its MLPs' SiLU took most of a prefill. These kernels read the evaluated arrays in place (the
buffer protocol, no copy) and return a new array; they end the lazy graph there, which costs nothing on
the CPU, where every op runs as soon as it is evaluated anyway.
"""

from __future__ import annotations

import ctypes

import mlx.core as mx
import numpy as np

from . import blas


def available() -> bool:
    """The kernels are loaded and have their vector paths (otherwise MLX's own ops are the faster choice)."""
    return blas.STATE.native is not None and bool(blas.STATE.native.mlxcel_has_avx2())


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _view(a: mx.array) -> np.ndarray:
    """The evaluated float32 array's memory as numpy (no copy); its last axis must be contiguous."""
    view = np.array(a, copy=False)
    assert view.dtype == np.float32 and view.strides[-1] == 4, (view.dtype, view.strides)
    return view


def swiglu(gate: mx.array, up: mx.array | None = None) -> mx.array:
    """silu(gate) * up for float32 arrays of one shape; with up None, gate is one fused product (..., 2n)
    whose first half is the gate and second half the up projection (read in place, no copy)."""
    if up is None:
        fused = mx.contiguous(gate)
        mx.eval(fused)
        view = _view(fused)
        width = view.shape[-1] // 2
        g, u, ld = view, view[..., width:], 2 * width
    else:
        g, u = mx.contiguous(gate), mx.contiguous(up)
        mx.eval(g, u)
        g, u = _view(g), _view(u)
        width, ld = g.shape[-1], g.shape[-1]
    out = np.empty((*g.shape[:-1], width), np.float32)
    rows = out.size // width if width else 0
    blas.STATE.native.mlxcel_swiglu(
        _ptr(g), _ptr(u), ctypes.c_long(rows), ctypes.c_long(width), ctypes.c_long(ld), _ptr(out)
    )
    return mx.array(out)


def rope(
    x: mx.array,
    dims: int,
    base: float,
    scale: float,
    offsets: list[int],
    yarn: tuple[float, float, float, float] | None = None,
) -> mx.array:
    """mx.fast.rope(x, dims, traditional=False, base=base, scale=scale, offset=...) for x (B, H, L, D),
    row b's positions starting at offsets[b]; the angles computed as ggml computes them (with YaRN's
    ext_factor, attn_factor and correction dims where yarn is given: server/models/yarn.py)."""
    mx.eval(x)
    view = _view(x)
    batch, heads, length, dim = view.shape
    out = np.empty(view.shape, np.float32)
    steps = [ctypes.c_long(stride // 4) for stride in view.strides[:3]]
    blas.STATE.native.mlxcel_rope(
        _ptr(view),
        *steps,
        batch,
        heads,
        length,
        dim,
        dims,
        ctypes.c_float(base),
        ctypes.c_float(scale),
        None if yarn is None else (ctypes.c_float * 4)(*yarn),
        (ctypes.c_int * batch)(*offsets),
        _ptr(out),
    )
    return mx.array(out)


def attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, first: list[int] | None = None, numerics=None
) -> mx.array:
    """Causal attention: queries (B, H, L, D), keys and values (B, Hkv, T, D) with T >= L, the queries being
    the last L positions; in row b the keys before first[b] are left padding, unseen. Returns (B, H, L, D),
    as mx.fast.scaled_dot_product_attention with the matching mask; with numerics (models.kv_numerics) over
    keys and values of a narrower cache type, as ggml-cpu computes it there (the L queries one ubatch)."""
    mx.eval(queries, keys, values)
    q, k, v = _view(queries), _view(keys), _view(values)
    (batch, n_heads, n_q, dim), (_, n_kv, n_keys, _) = q.shape, k.shape
    out = np.empty((batch, n_q, n_heads, dim), np.float32)
    starts = None if first is None else (ctypes.c_int * batch)(*first)
    steps = [ctypes.c_long(stride // 4) for a in (q, k, v) for stride in a.strides[:3]]
    args = (
        _ptr(q),
        *steps[0:3],
        _ptr(k),
        *steps[3:6],
        _ptr(v),
        *steps[6:9],
        batch,
        n_heads,
        n_kv,
        n_q,
        n_keys,
        dim,
        ctypes.c_float(scale),
        starts,
        _ptr(out),
    )
    if numerics is None or numerics.exact:
        status = blas.STATE.native.mlxcel_attention(*args)
    else:
        status = blas.STATE.native.mlxcel_attention_kv(*args, *numerics.codes(), batch * n_q)
    if status != 0:
        raise MemoryError("attention scores")
    return mx.array(out).transpose(0, 2, 1, 3)
