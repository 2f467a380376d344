"""The KV cache's block types (server/native/kv_quant.c) against ggml's own functions: the pinned sdist's
ggml-quants.c (the reference quantizers and every to_float, built as ggml-base is: no FMA) and
ggml-cpu/arch/x86/quants.c (quantize_row_q8_0 / _q8_1 as the AVX2 build runs them) compiled into a small library
in the cache. Every row of every type must give the same bytes, and every block the same floats back."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import require
from server import blas
from server.cachedir import build_once, cache_root

# kv_quant.c's codes, ggml's functions for them (quantize: the CPU's from_float; dequantize: to_float)
TYPES = {
    "q8_0": (3, "quantize_row_q8_0", "dequantize_row_q8_0"),
    "q4_0": (4, "quantize_row_q4_0_ref", "dequantize_row_q4_0"),
    "q4_1": (5, "quantize_row_q4_1_ref", "dequantize_row_q4_1"),
    "iq4_nl": (6, "quantize_row_iq4_nl_ref", "dequantize_row_iq4_nl"),
    "q5_0": (7, "quantize_row_q5_0_ref", "dequantize_row_q5_0"),
    "q5_1": (8, "quantize_row_q5_1_ref", "dequantize_row_q5_1"),
    "q8_1": (9, "quantize_row_q8_1", None),  # a query's vec_dot type for q4_1 / q5_1 keys
}
STUBS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) { fprintf(stderr, "%s:%d\n", file, line); abort(); }
size_t ggml_row_size(int type, long ne) { (void)type; (void)ne; return 0; }
const char *ggml_type_name(int type) { (void)type; return "?"; }
size_t ggml_type_size(int type) { (void)type; return 0; }
float ggml_table_f32_f16[1 << 16], ggml_table_f32_e8m0_half[256], ggml_table_f32_ue4m3[256];
#include <math.h>
__attribute__((constructor)) static void fill_f16_table(void) { /* ggml_cpu_init's table: every half as a float */
    for (unsigned h = 0; h < 65536; h++) {
        unsigned e = (h >> 10) & 31, m = h & 1023;
        float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), (int)e - 25);
        ggml_table_f32_f16[h] = (h & 0x8000) ? -f : f;
    }
}
"""


def _ggml() -> ctypes.CDLL:
    from oracle.reference import SDIST_SHA256, SOURCE_SUBDIR

    ggml = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "ggml"
    require((ggml / "src" / "ggml-quants.c").is_file(), "the reference sdist's sources are not unpacked")

    def build(tmp: Path) -> None:
        (tmp / "stubs.c").write_text(STUBS)
        inc = [f"-I{ggml / 'include'}", f"-I{ggml / 'src'}", f"-I{ggml / 'src' / 'ggml-cpu'}"]
        objs = []
        for src, flags in (
            (ggml / "src" / "ggml-quants.c", []),  # ggml-base: baseline x86-64, no FMA
            (ggml / "src" / "ggml-cpu" / "arch" / "x86" / "quants.c", ["-mavx2", "-mfma", "-mf16c"]),
            (tmp / "stubs.c", []),
        ):
            obj = tmp / f"{len(objs)}.o"
            subprocess.run(["cc", "-O2", "-fPIC", "-c", *flags, *inc, "-o", str(obj), str(src)], check=True)
            objs.append(str(obj))
        subprocess.run(["cc", "-shared", "-o", str(tmp / "libggmlq.so"), *objs, "-lm"], check=True)
        for o in objs:
            os.unlink(o)

    root = build_once(cache_root() / "native" / "ggml-quants", {"sdist_sha256": SDIST_SHA256, "v": 2}, build)
    return ctypes.CDLL(str(root / "libggmlq.so"), mode=os.RTLD_LAZY)


@pytest.fixture(scope="module")
def ggml():
    return _ggml()


@pytest.fixture(scope="module")
def native():
    lib = blas.STATE.native
    require(lib is not None and hasattr(lib, "mlxcel_kv_quantize_row"), "mlxcel's CPU kernels are not built")
    lib.mlxcel_kv_row_bytes.restype = ctypes.c_long
    return lib


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    rows = [rng.standard_normal(n) * s for s in (1e-3, 0.5, 3.0, 40.0)]
    rows.append(np.zeros(n))
    rows.append(np.where(np.arange(n) % 7 == 0, 5.0, 0.0))  # one dominant value per block
    tie = rng.integers(-127, 128, n).astype(np.float64)
    tie[::32] = 127.0  # amax 127: q8_0's scale is 1, so x.5 values are exact ties (nearest even)
    tie[5::32] = 2.5
    rows.append(tie)
    rows.append(-np.abs(rng.standard_normal(n)))  # all negative
    return np.ascontiguousarray(np.stack(rows).astype(np.float32))


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


@pytest.mark.parametrize("name", list(TYPES))
def test_a_row_is_stored_as_ggml_stores_it_and_read_back_as_ggml_reads_it(ggml, native, name):
    code, quantize, dequantize = TYPES[name]
    n = 128
    nbytes = native.mlxcel_kv_row_bytes(code, n)
    assert nbytes == n // 32 * {3: 34, 4: 18, 5: 20, 6: 18, 7: 22, 8: 24, 9: 36}[code]
    for row in _rows(n):
        mine, theirs = np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        assert native.mlxcel_kv_quantize_row(code, _ptr(row), _ptr(mine), ctypes.c_long(n)) == 0
        getattr(ggml, quantize)(_ptr(row), _ptr(theirs), ctypes.c_int64(n))
        if name == "iq4_nl":  # a block of zeros: ggml packs indices it never set (scale 0: read back as 0)
            for b in range(n // 32):
                if not row[32 * b : 32 * (b + 1)].any():
                    mine[18 * b + 2 : 18 * b + 18], theirs[18 * b + 2 : 18 * b + 18] = 0, 0
        assert mine.tobytes() == theirs.tobytes(), (name, row[:4])
        if dequantize is None:
            continue
        back, want = np.zeros(n, np.float32), np.zeros(n, np.float32)
        assert native.mlxcel_kv_dequantize_row(code, _ptr(mine), _ptr(back), ctypes.c_long(n)) == 0
        getattr(ggml, dequantize)(_ptr(theirs), _ptr(want), ctypes.c_int64(n))
        assert back.tobytes() == want.tobytes(), name


def test_what_is_no_block_type_is_refused(native):
    row = np.zeros(64, np.float32)
    out = np.zeros(64, np.uint8)
    assert native.mlxcel_kv_row_bytes(1, 64) == 0  # f16: not a block type
    assert native.mlxcel_kv_quantize_row(1, _ptr(row), _ptr(out), ctypes.c_long(64)) == -1
    assert native.mlxcel_kv_quantize_row(3, _ptr(row), _ptr(out), ctypes.c_long(48)) == -1  # not whole blocks


DOTS = {  # a key row's type -> ggml's AVX2 vec_dot, the query's vec_dot type
    "q8_0": ("ggml_vec_dot_q8_0_q8_0", "q8_0"),
    "q4_0": ("ggml_vec_dot_q4_0_q8_0", "q8_0"),
    "q4_1": ("ggml_vec_dot_q4_1_q8_1", "q8_1"),
    "iq4_nl": ("ggml_vec_dot_iq4_nl_q8_0", "q8_0"),
    "q5_0": ("ggml_vec_dot_q5_0_q8_0", "q8_0"),
    "q5_1": ("ggml_vec_dot_q5_1_q8_1", "q8_1"),
}


def _quantized(native, name: str, row: np.ndarray) -> np.ndarray:
    code = TYPES[name][0]
    out = np.zeros(native.mlxcel_kv_row_bytes(code, row.size), np.uint8)
    native.mlxcel_kv_quantize_row(code, _ptr(row), _ptr(out), ctypes.c_long(row.size))
    return out


@pytest.mark.parametrize("name", list(DOTS))
@pytest.mark.parametrize("n", [64, 96, 128])
def test_a_key_times_a_quantized_query_is_ggmls_vec_dot_bit_for_bit(ggml, native, name, n):
    """What flash attention scores over such a cache: K . Q with the query quantized to the key type's vec_dot
    type, summed as ggml-cpu's AVX2 build sums it."""
    fn, qtype = DOTS[name]
    native.mlxcel_kv_dot.restype = ctypes.c_float
    rng = np.random.default_rng(n)
    for scale in (0.05, 1.0, 30.0):
        keys = (rng.standard_normal((6, n)) * scale).astype(np.float32)
        query = (rng.standard_normal(n) * scale).astype(np.float32)
        q = _quantized(native, qtype, query)
        for key in keys:
            k = _quantized(native, name, key)
            want = ctypes.c_float()
            getattr(ggml, fn)(
                n, ctypes.byref(want), ctypes.c_size_t(0), _ptr(k), ctypes.c_size_t(0), _ptr(q), ctypes.c_size_t(0), 1
            )
            got = native.mlxcel_kv_dot(TYPES[name][0], _ptr(k), _ptr(q), ctypes.c_long(n))
            assert np.float32(got).tobytes() == np.float32(want.value).tobytes(), (name, n, scale, got, want.value)


def _hadamard(n: int) -> np.ndarray:
    """ggml_gen_hadamard (llama-kv-cache.cpp): the orthonormal Walsh-Hadamard matrix, built by doubling."""
    h = np.array([[1.0 / np.sqrt(n)]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@pytest.mark.parametrize("rot", [64, 128, 256])
def test_the_rotation_is_b10621s_hadamard_product_and_undoes_itself(native, rot):
    """mlxcel_kv_rotate is the product with b10621's attn_rot matrix, chunk by chunk (its fast transform: sums
    within float32 rounding of the exact product), and twice over it gives the values back (H H = I)."""
    native.mlxcel_kv_rotate.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    rng = np.random.default_rng(rot)
    x = rng.standard_normal(3 * rot).astype(np.float32)
    y = x.copy()
    native.mlxcel_kv_rotate(_ptr(y), y.size, rot)
    want = (x.astype(np.float64).reshape(3, rot) @ _hadamard(rot).T).reshape(-1)
    assert np.abs(y - want).max() <= 1e-5 * np.abs(want).max()
    assert not np.allclose(y, x)
    native.mlxcel_kv_rotate(_ptr(y), y.size, rot)
    assert np.abs(y - x).max() <= 1e-5 * np.abs(x).max()


def test_the_rotation_sizes_are_llama_kv_caches(native):
    """attn_rot_k: a block type and a head of a multiple of 64, the largest power of two dividing it; attn_rot_v:
    64; none for a float type or another head size."""
    rotation = native.mlxcel_kv_rotation
    q8_0, q4_1 = TYPES["q8_0"][0], TYPES["q4_1"][0]
    assert [rotation(q8_0, d, 1) for d in (64, 128, 192, 256, 96, 32)] == [64, 128, 64, 256, 0, 0]
    assert [rotation(q4_1, d, 0) for d in (64, 128, 256, 96)] == [64, 64, 64, 0]
    assert [rotation(code, 128, 1) for code in (0, 1, 2)] == [0, 0, 0]  # f32, f16, bf16


def test_the_sizes_python_counts_are_the_blocks_the_kernels_store(native):
    """backends/state_size.py's block sizes (what --cache-ram counts) are kv_quant.c's."""
    from server.backends.state_size import BLOCK_BYTES, row_bytes

    for name, nbytes in BLOCK_BYTES.items():
        assert native.mlxcel_kv_row_bytes(TYPES[name][0], 32) == nbytes
        assert row_bytes(name, 192) == native.mlxcel_kv_row_bytes(TYPES[name][0], 192)
