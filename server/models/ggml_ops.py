"""ggml-cpu's operations one at a time, bit for bit (server/native/encoder_ggml.c, attention_ggml.c), for towers
composed in Python: a product as ggml_mul_mat sums it (tinyBLAS or vec_dot), ggml_norm, the F16-table GELUs, the
erf GELU and an encoder's unmasked flash attention over F16-cast keys and values. None where the kernels are not loaded (no
C compiler, another machine): callers then use their numpy forms, a few float32 ulps apart."""

from __future__ import annotations

import ctypes

import numpy as np

from .. import blas

_P = ctypes.c_void_p


def _ptr(a: np.ndarray) -> _P:
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return _P(a.ctypes.data)


class GgmlOps:
    def __init__(self, native: ctypes.CDLL):
        self.n = native
        native.mlxcel_ggml_mul_mat.argtypes = [_P, _P, _P, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        native.mlxcel_ggml_norm.argtypes = [_P, _P, _P, _P, ctypes.c_int, ctypes.c_int, ctypes.c_float]
        native.mlxcel_ggml_gelu.argtypes = [_P, ctypes.c_long]
        native.mlxcel_ggml_gelu_quick.argtypes = [_P, ctypes.c_long]
        native.mlxcel_ggml_gelu_erf.argtypes = [_P, ctypes.c_long]
        native.mlxcel_encoder_attention.argtypes = [_P, _P, _P, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        native.mlxcel_encoder_attention.argtypes += [ctypes.c_float, _P]

    @classmethod
    def load(cls) -> GgmlOps | None:
        native = blas.STATE.native
        if native is None or not hasattr(native, "mlxcel_encoder_attention") or not native.mlxcel_has_avx2():
            return None
        return cls(native)

    def mul_mat(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """ggml_mul_mat(a, b): b (n x k) times a (m x k) transposed, n x m."""
        a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
        (m, k), n = a.shape, b.shape[0]
        out = np.empty((n, m), np.float32)
        self.n.mlxcel_ggml_mul_mat(_ptr(a), _ptr(b), _ptr(out), m, n, k)
        return out

    def norm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        out = np.empty_like(x)
        w, b = np.ascontiguousarray(w, np.float32), np.ascontiguousarray(b, np.float32)
        self.n.mlxcel_ggml_norm(_ptr(x), _ptr(out), _ptr(w), _ptr(b), x.shape[0], x.shape[1], eps)
        return out

    def gelu(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, np.float32, order="C")
        self.n.mlxcel_ggml_gelu(_ptr(out), out.size)
        return out

    def gelu_erf(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, np.float32, order="C")
        self.n.mlxcel_ggml_gelu_erf(_ptr(out), out.size)
        return out

    def gelu_quick(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, np.float32, order="C")
        self.n.mlxcel_ggml_gelu_quick(_ptr(out), out.size)
        return out

    def attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int, scale: float) -> np.ndarray:
        """Every row attends to every row (n x n_head*D each), K and V cast to F16 as clip.cpp's build_attn does."""
        q, k, v = (np.ascontiguousarray(t, np.float32) for t in (q, k, v))
        out = np.empty_like(q)
        n, width = q.shape
        status = self.n.mlxcel_encoder_attention(
            _ptr(q), _ptr(k), _ptr(v), n, n_head, width // n_head, scale, _ptr(out)
        )
        if status:
            raise MemoryError("encoder attention")
        return out
