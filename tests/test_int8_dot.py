"""server/native/int8_dot.c: a GGUF's quantized weights multiplied over activations quantized to 8 bits, as ggml
multiplies them (its vec_dot_type: q8_0 for the legacy types, q8_K for the K-quants). Each product is checked
against numpy's sum of the same terms in float64 (the weights as gguf-py / MLX dequantize them, the activations
as ggml quantizes them), and a row's outputs must be bitwise the same alone or batched."""

from __future__ import annotations

import gguf
import mlx.core as mx
import numpy as np
import pytest
from mlx import nn

from server import blas
from server.models import quant_layers

pytestmark = pytest.mark.skipif(  # (conftest activated the BLAS and the kernels before mlx was imported)
    not (blas.STATE.native is not None and blas.STATE.native.mlxcel_has_avx2()), reason="mlxcel's kernels with AVX2"
)

K, N = 512, 40
LEGACY_BYTES = {"Q5_0": 22, "Q5_1": 24, "Q8_0": 34}  # blocks of 32 values (the legacy types kept as blocks)
K_QUANTS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]  # blocks of 256
ONE_ROW_ONLY = ("Q2_K", "Q3_K")  # one-row kernels only: their prompts of more than 16 rows take the BLAS in float
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210, **LEGACY_BYTES}


def _f16(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.float16).view(np.uint8).reshape(*np.shape(values), 2)


def random_blocks(qtype: str, rng) -> np.ndarray:
    """N rows of random blocks (any bytes are a block) with sane f16 scales."""
    size, per = BLOCK_BYTES[qtype], 32 if qtype in LEGACY_BYTES else 256
    blocks = rng.integers(0, 256, (N, K // per, size), dtype=np.uint8)
    scale = _f16(rng.uniform(0.001, 0.01, (N, K // per)))
    if qtype == "Q6_K":
        blocks[..., 208:210] = scale
    elif qtype == "Q3_K":
        blocks[..., 108:110] = scale
    elif qtype == "Q2_K":  # d and dmin last
        blocks[..., 80:82], blocks[..., 82:84] = scale, _f16(rng.uniform(0.0005, 0.005, (N, K // 256)))
    elif qtype in LEGACY_BYTES:
        blocks[..., 0:2] = scale
        if qtype == "Q5_1":  # and the minimum
            blocks[..., 2:4] = _f16(rng.uniform(-0.05, 0.0, (N, K // per)))
    else:
        blocks[..., 0:2], blocks[..., 2:4] = scale, _f16(rng.uniform(0.0005, 0.005, (N, K // 256)))
    return blocks.reshape(N, -1)


def int8_layer(qtype: str, blocks: np.ndarray) -> quant_layers.GGMLLinear:
    """A GGUF's K-quant layer over `blocks`, registered with the kernels' integer path (as a GGUF import is)."""
    layer = quant_layers.GGMLLinear(qtype, K, N, blocks.shape[1])
    layer.ggml = mx.array(blocks)
    object.__setattr__(layer, "int8", True)
    assert quant_layers.register_blocks(layer)
    return layer


def q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_row_q8_K_ref: per 256 values (d, int8 values)."""
    blocks = x.reshape(-1, 256).astype(np.float32)
    ds, qs = [], []
    for b in blocks:
        peak = b[np.argmax(np.abs(b))]
        iscale = np.float32(-127.0) / peak
        qs.append(np.minimum(127, np.rint(iscale * b)).astype(np.int64))
        ds.append(np.float32(1.0) / iscale)
    return np.asarray(ds, np.float64), np.asarray(qs)


def q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_row_q8_0 of ggml-cpu's AVX2 build: d = amax / 127 kept in f16, values x * (127 / amax) to nearest
    even."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)
    q = np.rint(blocks * (np.float32(127) / amax)[:, None]).astype(np.int64)
    return d, q


def expected_k(weights: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum over blocks of dx (w . xq) in float64, and the sum of the terms' magnitudes (the tolerance's scale)"""
    d, q = q8_k(x)
    w = weights.reshape(N, -1, 256).astype(np.float64)
    terms = w * (d[:, None] * q)[None]
    return terms.sum(axis=(1, 2)), np.abs(terms).sum(axis=(1, 2))


@pytest.mark.parametrize("qtype", K_QUANTS)
def test_k_quant_products_are_ggml_sums(qtype):
    rng = np.random.default_rng(7)
    blocks = random_blocks(qtype, rng)
    layer = int8_layer(qtype, blocks)
    weights = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[qtype]).reshape(N, K)
    x = rng.standard_normal((3, K)).astype(np.float32)
    got = np.array(layer(mx.array(x)))
    for m in range(3):
        want, scale = expected_k(weights, x[m])
        assert np.all(np.abs(got[m] - want) <= 1e-5 * scale), (qtype, m, np.abs(got[m] - want).max())
    # against the float path (what an MLX checkpoint gets): the activations' rounding shows, so the int8 path ran
    float_path = x @ weights.T.astype(np.float32)
    assert np.abs(got - float_path).max() > 1e-4
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(3)])
    assert np.array_equal(alone, got)


@pytest.mark.parametrize(("bits", "group"), [(4, 32), (8, 32), (4, 64), (8, 64)])
def test_affine_products_are_ggml_sums(bits, group):
    """MLX's affine groups (a GGUF's Q4_0 / Q4_1 / Q8_0 / IQ4_NL as imported): scale dx (q . xq) + bias dx sum(xq)
    per 32 values, the activations as ggml's q8_0."""
    rng = np.random.default_rng(bits + group)
    layer = affine_layer(bits, group, K, N, rng)
    q, scales, biases = (np.array(getattr(layer, n)) for n in ("weight", "scales", "biases"))
    values = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=group, bits=bits))
    x = rng.standard_normal((5, K)).astype(np.float32)
    got = np.array(layer(mx.array(x)))
    for m in range(5):
        d, xq = q8_0(x[m])
        terms = values.reshape(N, -1, 32).astype(np.float64) * (d[:, None] * xq)[None]
        want, scale = terms.sum(axis=(1, 2)), np.abs(terms).sum(axis=(1, 2))
        assert np.all(np.abs(got[m] - want) <= 1e-5 * scale), (bits, group, m, np.abs(got[m] - want).max())
    assert q.dtype == np.uint32 and scales.shape == biases.shape == (N, K // group)
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(5)])
    assert np.array_equal(alone, got)


@pytest.mark.parametrize("rows", [21, 22, 23])  # the last one, two or three rows in a panel product of their own
@pytest.mark.parametrize("bits", [4, 8])
def test_affine_prompts_rows_are_decode_rows_with_vnni(bits, rows):
    """With AVX-512 VNNI an affine prompt (more than 16 rows) is multiplied on the integer panels, not the BLAS: each
    row bitwise what it gets alone."""
    if not blas.STATE.native.mlxcel_int8_vnni():
        pytest.skip("a CPU with AVX-512 VNNI")
    rng = np.random.default_rng(bits)
    layer = affine_layer(bits, 32, K, N, rng)
    calls = blas.STATE.native.mlxcel_blas_calls()
    x = rng.standard_normal((rows, K)).astype(np.float32)
    prompt = np.array(layer(mx.array(x)))
    assert blas.STATE.native.mlxcel_blas_calls() == calls
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(rows)])
    assert np.array_equal(prompt, alone)


@pytest.mark.parametrize("qtype", sorted(LEGACY_BYTES))
def test_legacy_blocks_multiply_ggmls_integers(qtype):
    """A GGUF's legacy blocks kept as the file's (5.5-8.5 bits a weight): the products are sums over blocks of
    d dx (q . xq) (and m dx sum(xq)) as ggml's vec_dot_*_q8_0 take them, the rows dequantize as gguf-py's, and a row's
    outputs are bitwise the same alone, batched or in a prompt."""
    rng = np.random.default_rng(21)
    blocks = random_blocks(qtype, rng)
    layer = int8_layer(qtype, blocks)
    values = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[qtype]).reshape(N, K)
    assert np.array_equal(quant_layers.rows_of(layer, np.arange(N)), values)
    x = rng.standard_normal((23, K)).astype(np.float32)
    got = np.array(layer(mx.array(x)))
    for m in range(23):
        d, xq = q8_0(x[m])
        terms = values.reshape(N, -1, 32).astype(np.float64) * (d[:, None] * xq)[None]
        assert np.all(np.abs(got[m] - terms.sum(axis=(1, 2))) <= 1e-5 * np.abs(terms).sum(axis=(1, 2))), m
    assert np.abs(got - x @ values.T).max() > 1e-4  # the activations' rounding shows: the integer path ran
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(23)])
    assert np.array_equal(alone, got)


@pytest.mark.parametrize("qtype", ["Q5_0", "Q8_0"])
def test_legacy_blocks_give_the_affine_layers_outputs(qtype):
    """Before the cache kept Q5_0 and Q8_0 as blocks it held them as MLX affine layers of 8 bits (Q5_0 widened, q + 112
    with bias -128 d: still what a stack of experts' matrices is converted to): the same float steps, so bitwise
    the same outputs, at fewer bytes."""
    from server.models.gguf_quants import AFFINE_CONVERTERS, WIDENED_CONVERTERS

    rng = np.random.default_rng(22)
    blocks = random_blocks(qtype, rng)
    q = {**AFFINE_CONVERTERS, **WIDENED_CONVERTERS}[qtype](blocks)
    widened = nn.QuantizedLinear(K, N, bias=False, group_size=32, bits=q.bits)
    widened.weight, widened.scales, widened.biases = (mx.array(a) for a in (q.weight, q.scales, q.biases))
    model = nn.Sequential(widened)
    assert quant_layers.keep_quantized(model, int8=True) == 1
    kept = int8_layer(qtype, blocks)
    vnni = blas.STATE.native.mlxcel_int8_vnni()  # (without it an affine prompt goes to the BLAS in float)
    for rows in (1, 3, 23) if vnni else (1, 3):
        x = mx.array(rng.standard_normal((rows, K)).astype(np.float32))
        assert np.array_equal(np.array(kept(x)), np.array(model.layers[0](x))), rows
    assert blocks.nbytes * 1.15 < q.weight.nbytes + q.scales.nbytes + q.biases.nbytes


def test_mlx_checkpoint_layers_stay_in_float():
    """An MLX checkpoint's layers (int8 off) are multiplied in float32, as mlx-lm multiplies them."""
    rng = np.random.default_rng(3)
    linear = nn.Linear(K, N, bias=False)
    linear.weight = mx.array(rng.standard_normal((N, K)).astype(np.float32) * 0.05)
    model = nn.Sequential(linear)
    nn.quantize(model, group_size=32, bits=4)
    quant_layers.keep_quantized(model)
    layer = model.layers[0]
    values = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=4))
    x = rng.standard_normal((2, K)).astype(np.float32)
    assert np.allclose(np.array(layer(mx.array(x))), x @ values.T, rtol=0, atol=1e-4)


@pytest.mark.parametrize("rows", [2, 6, 9, 23])  # the last 2, 2, 1 and 3 rows in a panel product of their own
@pytest.mark.parametrize("qtype", sorted(BLOCK_BYTES))
def test_a_prompts_rows_are_decode_rows(qtype, rows):
    """Over K-quant blocks a batch's product gives every row bitwise what that row gets alone, as a decode step: a
    cached prefix and a cold run agree: four rows at a time against panels of 16 weight rows unpacked once (with
    AVX-512 VNNI; AVX2's four-row tiles otherwise: other instructions summing the same integers), the one to three
    rows left over together (VNNI; alone on AVX2), one row alone on the one-row kernel, and on N = 40 a last panel
    of 8 weight rows. (The legacy blocks' prompts of more than 16 rows take the panels with VNNI only: AVX2 has no
    tile kernel for them, and they go to the BLAS in float.)"""
    if qtype in LEGACY_BYTES and rows > 16 and not blas.STATE.native.mlxcel_int8_vnni():
        pytest.skip("a CPU with AVX-512 VNNI")
    if qtype in ONE_ROW_ONLY and rows > 16:
        pytest.skip("Q2_K / Q3_K prompts of more than 16 rows are multiplied in float (int8_dot.c)")
    rng = np.random.default_rng(11)
    blocks = random_blocks(qtype, rng)
    layer = int8_layer(qtype, blocks)
    calls = blas.STATE.native.mlxcel_blas_calls()
    x = rng.standard_normal((rows, K)).astype(np.float32)
    prompt = np.array(layer(mx.array(x)))
    assert blas.STATE.native.mlxcel_blas_calls() == calls  # no panel went to the BLAS
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(rows)])
    assert np.array_equal(prompt, alone)


def test_a_ggufs_f16_layers_keep_their_halves():
    """keep_quantized(int8=True) (a GGUF's import) keeps an F16 linear layer as its own halves, read by the kernels
    2 bytes a weight over activations rounded to f16 (ggml's vec_dot_type for F16), each row alone or batched the
    same; a prompt's product (more than 16 rows) dequantizes panels for the BLAS, within float32's rounding."""
    rng = np.random.default_rng(5)
    linear = nn.Linear(K, N, bias=False)
    linear.weight = mx.array(rng.standard_normal((N, K)).astype(np.float16) * np.float16(0.05))
    model = nn.Sequential(linear, nn.RMSNorm(N))
    model.layers[1].weight = model.layers[1].weight.astype(mx.float16)
    assert quant_layers.keep_quantized(model, int8=True) == 1
    layer = model.layers[0]
    assert isinstance(layer, quant_layers.GGMLLinear) and layer.ggml_type == "F16"
    assert model.layers[1].weight.dtype == mx.float32  # the other float parameters as the native steps read them
    weights = np.array(linear.weight).astype(np.float64)
    x = rng.standard_normal((20, K)).astype(np.float32)
    few = np.array(layer(mx.array(x[:5])))
    rounded = x[:5].astype(np.float16).astype(np.float64)
    terms = rounded[:, None, :] * weights[None]
    assert np.all(np.abs(few - terms.sum(-1)) <= 1e-5 * np.abs(terms).sum(-1))
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(5)])
    assert np.array_equal(alone, few)
    prompt = np.array(layer(mx.array(x)))
    assert np.allclose(prompt, x @ weights.T, rtol=1e-4, atol=1e-4)


def test_an_odd_count_of_4_bit_chunks_ends_alone():
    """A row of 3 chunks of 32 (4-bit weights pair chunks for the byte products; the last one goes alone)."""
    rng = np.random.default_rng(13)
    k, n = 96, 8
    layer = affine_layer(4, 32, k, n, rng)
    values = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=4))
    x = rng.standard_normal((5, k)).astype(np.float32)
    d, xq = q8_0(x[0])
    terms = values.reshape(n, -1, 32).astype(np.float64) * (d[:, None] * xq)[None]
    got = np.array(layer(mx.array(x[:1])))[0]
    assert np.all(np.abs(got - terms.sum(axis=(1, 2))) <= 1e-5 * np.abs(terms).sum(axis=(1, 2)))
    batched = np.array(layer(mx.array(x)))  # (a panel's four rows, then one alone)
    assert np.array_equal(batched[0], got)
    alone = np.stack([np.array(layer(mx.array(x[m : m + 1])))[0] for m in range(5)])
    assert np.array_equal(batched, alone)


_PRODUCTS = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from server import blas
blas.activate()
import test_int8_dot as t
sys.stdout.write(t.prompt_products().hex())
"""


def affine_layer(bits: int, group: int, k: int, n: int, rng) -> nn.Module:
    """An MLX affine layer (a GGUF's Q4_0 / Q4_1 / Q8_0 as imported) on the kernels' integer path."""
    linear = nn.Linear(k, n, bias=False)
    linear.weight = mx.array(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    model = nn.Sequential(linear)
    nn.quantize(model, group_size=group, bits=bits)
    assert quant_layers.keep_quantized(model, int8=True) == 1
    return model.layers[0]


def prompt_products() -> bytes:
    """A 23-row product over random blocks of each K-quant type and a 9-row one over random legacy blocks and
    affine weights (AVX2 multiplies their prompts of more than 16 rows in float, through the BLAS), as bytes."""
    out = b""
    for qtype in sorted(set(BLOCK_BYTES) - set(ONE_ROW_ONLY)):
        rng = np.random.default_rng(17)
        layer = int8_layer(qtype, random_blocks(qtype, rng))
        rows = 9 if qtype in LEGACY_BYTES else 23
        out += np.array(layer(mx.array(rng.standard_normal((rows, K)).astype(np.float32)))).tobytes()
    for bits, group in ((4, 32), (8, 64)):
        rng = np.random.default_rng(bits)
        layer = affine_layer(bits, group, K, N, rng)
        out += np.array(layer(mx.array(rng.standard_normal((9, K)).astype(np.float32)))).tobytes()
    return out


def test_avx512_and_avx2_products_are_the_same_floats():
    """The same prompt products with AVX-512 VNNI's panels (this process) and with AVX2's tiles only (a process
    with MLXCEL_NO_AVX512): bitwise equal, so a model answers the same on either kind of CPU."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not blas.STATE.native.mlxcel_int8_vnni():
        pytest.skip("a CPU with AVX-512 VNNI")
    tests = Path(__file__).parent
    code = _PRODUCTS.format(root=str(tests.parent), tests=str(tests))
    env = {**os.environ, "MLXCEL_NO_AVX512": "1"}
    avx2 = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert avx2 == prompt_products().hex()
