"""GGUF import per family (issue 29): each family twin's GGUF (written as b10621's converter writes it, proven
by conformance/test_families.py) imports into exactly the MLX checkpoint it was written from: every tensor
bitwise, the same structure in the config, and Llama 3's rope_freqs carried as the converter computed them."""

from __future__ import annotations

import json
import os

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from fixtures.families import FAMILIES, LLAMA3_ROPE, QUANT_TYPES, family_twin, in_turn, quantized_gguf, this_landing
from oracle.reference import SOURCE_SUBDIR
from server.cachedir import cache_root
from server.models.gguf_arch import ImportRefused, spec_of
from server.models.gguf_import import convert_gguf
from server.models.gguf_quants import KEPT_BLOCKS, KEPT_KEY
from server.models.rope_factors import CONFIG_KEY, FactorRoPE, llama3_rope_factors

needs_sdist = pytest.mark.skipif(
    not (cache_root() / "reference" / "source" / SOURCE_SUBDIR / "models").is_dir(),
    reason="the reference sdist's sources are not unpacked",
)
STRUCTURE = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "rope_theta",
    "tie_word_embeddings",
)


@needs_sdist
@pytest.mark.heavy  # builds the family twins (seconds each) on first use
@pytest.mark.parametrize("name", this_landing(FAMILIES))  # in CI a third of them each landing, in turn
def test_family_gguf_imports_into_the_checkpoint_it_was_written_from(name):
    """The server's own conversion of the family's F32 GGUF (the cache a `-m X.gguf` serves from, shared with
    conformance/test_families.py's pair) is the MLX checkpoint the GGUF was written from, tensor for tensor."""
    from server.models.store import converted_gguf

    twin = family_twin(name)
    out = converted_gguf(twin.gguf)
    got, want = mx.load(str(out / "model.safetensors")), mx.load(str(twin.mlx_dir / "model.safetensors"))
    if FAMILIES[name].gguf_arch == "qwen35":  # its DeltaNet tensors stay as the converter laid them out
        from fixtures.qwen35_twin import ggml_layout

        original = json.loads((twin.mlx_dir / "config.json").read_text())
        hf = {k: np.array(v) for k, v in want.items()}
        want = {k: mx.array(v) for k, v in ggml_layout(hf, original).items()}
    assert sorted(got) == sorted(want)
    shift = FAMILIES[name].norm_shift  # Gemma: both compute with 1 + w, which the converter stored (1 + w)
    effective = {k: (v + shift if shift and k.endswith("norm.weight") else v) for k, v in got.items()}
    expected = {k: (v + shift if shift and k.endswith("norm.weight") else v) for k, v in want.items()}
    assert [k for k in want if not mx.array_equal(effective[k], expected[k]).item()] == [], "tensors differ"
    config = json.loads((out / "config.json").read_text())
    original = json.loads((twin.mlx_dir / "config.json").read_text())
    text = original.get("text_config", {})  # (flattened, as the converter reads it; rope_parameters too)
    original = {**original, **text, **text.get("rope_parameters", {}), "model_type": original["model_type"]}
    remapped = {"mistral": "llama"}  # mlx-lm runs Mistral as llama; so does llama.cpp (general.architecture)
    original["model_type"] = remapped.get(original["model_type"], original["model_type"])
    if text:  # (the GGUF's epsilon is float32's)
        original["rms_norm_eps"] = float(np.float32(original["rms_norm_eps"]))
    assert {k: config[k] for k in STRUCTURE} == {k: original[k] for k in STRUCTURE}
    factors = config["mlxcel"].get(CONFIG_KEY)
    assert (factors is not None) == (original.get("rope_scaling") == LLAMA3_ROPE)
    if factors is not None:
        assert factors == llama3_rope_factors(original).tolist()
        assert len(set(factors)) > 2  # the smooth band is reached: not all 1 and 8


def test_llama3_factors_follow_the_converters_formula():
    config = {"rope_scaling": LLAMA3_ROPE, "rope_theta": 500000.0, "head_dim": 128}
    f = llama3_rope_factors(config)
    assert f[0] == 1.0 and f[-1] == 8.0  # high frequencies untouched, low ones divided by the factor
    assert np.all(np.diff(f) >= 0)


def test_factor_rope_divides_each_pairs_angle_by_its_factor():
    plain = FactorRoPE(8, 10000.0, 1.0, [1.0] * 4)
    scaled = FactorRoPE(8, 10000.0, 1.0, [1.0, 2.0, 4.0, 8.0])
    pos = np.arange(5)
    angle_p, angle_s = (np.arctan2(*reversed(rope.angles(pos))) for rope in (plain, scaled))
    assert np.array_equal(angle_p[:, 0], angle_s[:, 0])
    assert np.allclose(angle_p[1:, 1:] / angle_s[1:, 1:], [2.0, 4.0, 8.0], rtol=1e-4)
    x = mx.random.normal((1, 2, 5, 8))
    assert mx.allclose(plain(x), mx.fast.rope(x, 8, traditional=False, base=10000.0, scale=1.0, offset=0), atol=1e-5)


def test_an_architecture_without_a_mapping_is_refused_in_one_line():
    with pytest.raises(
        ImportRefused,
        match=r"^architecture 'mamba' is not supported \(supported: llama, smollm3, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, qwen35\)$",
    ):
        spec_of("mamba")


def _dequantized_as_imported(weights: dict, quant: dict, hf_name: str) -> np.ndarray:
    base = hf_name.removesuffix(".weight")
    if base + ".scales" not in weights:
        return np.array(weights[hf_name])
    bits = quant.get(base, quant)["bits"]
    w, s, b = weights[hf_name], weights[base + ".scales"], weights[base + ".biases"]
    return np.array(mx.dequantize(w, s, b, group_size=32, bits=bits))


def _gguf_dequantized(t, spec, config) -> np.ndarray:
    import gguf

    from server.models.gguf_quants import permute_rows

    ref = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(tuple(int(x) for x in reversed(t.shape)))
    heads = {"attn_q.weight": config["num_attention_heads"], "attn_k.weight": config["num_key_value_heads"]}
    n_head = heads.get(t.name.split(".", 2)[-1]) if spec.permute_qk else None
    return permute_rows(ref, n_head) if n_head is not None else ref


# every type on the family with the smallest vocabulary, and Q4_K_M (the most downloaded) on phi3, whose fused qkv
# and gate-up rows are laid out differently; MLXCEL_ALL_TWINS=1 checks Q4_K_M on every family too (the
# large-vocabulary ones take ~20 s each; all gave 0.0 on 2026-12-04)
VALUE_EXACT = [("mistral", q) for q in QUANT_TYPES] + [
    (f, "Q4_K_M") for f in sorted(FAMILIES) if f == "phi3" or (f != "mistral" and os.environ.get("MLXCEL_ALL_TWINS"))
]


# the server's own import differs from the plain one where a file holds K-quants (kept as the file's blocks)
# (in CI a third of them each landing, in turn: fixtures/families.py in_turn)
IMPORTS = in_turn([(f, q, False) for f, q in VALUE_EXACT] + [(f, q, True) for f, q in VALUE_EXACT if "_K" in q])


@pytest.mark.reference
@pytest.mark.parametrize(
    "name,qtype,blocks", IMPORTS, ids=[f"{f}-{q}-{'server' if b else 'plain'}" for f, q, b in IMPORTS]
)
def test_every_tensor_of_a_quantized_twin_imports_value_exact(reference_binary, tmp_path, name, qtype, blocks):
    """Every tensor as imported equals gguf-py's dequantization of the file's: the plain checkpoint (mlxcel convert:
    MLX affine groups and float32) by MLX's dequantization, the server's own (K-quants kept as the file's blocks)
    by mlxcel's kernels, which dequantize those blocks for every product (server/native/ggml_blocks.c)."""
    import gguf

    path = quantized_gguf(name, qtype)
    reader = gguf.GGUFReader(str(path))
    out = convert_gguf(path, tmp_path / "converted", blocks=blocks)
    config = json.loads((out / "config.json").read_text())
    weights = mx.load(str(out / "model.safetensors"))
    spec = spec_of(str(reader.fields["general.architecture"].contents()))
    kept = config["mlxcel"].get(KEPT_KEY, {})
    assert bool(kept) == (blocks and any(t.tensor_type.name in KEPT_BLOCKS for t in reader.tensors))
    types, worst = set(), 0.0
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        types.add(t.tensor_type.name)
        hf = spec.hf_name(t.name)
        if hf.removesuffix(".weight") in kept:
            got = _dequantized_by_the_kernels(weights[hf.removesuffix(".weight") + ".ggml"], t.tensor_type.name)
        else:
            got = _dequantized_as_imported(weights, config.get("quantization") or {}, hf)
        if spec.norm_shift and t.name.endswith("norm.weight"):
            got = got + np.float32(spec.norm_shift)
        worst = max(worst, float(np.abs(got - _gguf_dequantized(t, spec, config)).max()))
    assert worst == 0.0
    assert types - {"F32"}, "the twin holds no quantized tensor"


def _dequantized_by_the_kernels(blocks: mx.array, qtype: str) -> np.ndarray:
    """Every row of a kept K-quant weight as mlxcel's kernels dequantize it (the rows a product reads; a stack of
    experts' matrices row after row)."""
    from server.models.quant_layers import GGMLLinear, register_blocks, rows_of

    if blocks.ndim == 3:
        return _dequantized_by_the_kernels(blocks.reshape(-1, blocks.shape[2]), qtype).reshape(*blocks.shape[:2], -1)
    rows, row_bytes = blocks.shape
    block_bytes = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[qtype]  # ggml-common.h
    layer = GGMLLinear(qtype, row_bytes // block_bytes * 256, rows, row_bytes)
    layer.ggml = blocks
    assert register_blocks(layer)
    return rows_of(layer, np.arange(rows))


def test_an_mlx_llama3_checkpoint_ropes_with_the_converters_factors():
    """The MLX checkpoint of Llama 3 computes its rope as b10621 computes the GGUF converted from it: mlx-lm's
    Llama3RoPE becomes a FactorRoPE holding the factors the converter writes as rope_freqs."""
    from mlx_lm.models.rope_utils import Llama3RoPE

    from server.models.loader import load_checkpoint

    twin = family_twin("llama3")
    ropes = [
        m
        for _, m in load_checkpoint(twin.mlx_dir, kernels=False).model.named_modules()
        if "rope" in type(m).__name__.lower()
    ]
    assert ropes and all(type(r) is FactorRoPE for r in ropes), {type(r).__name__ for r in ropes}
    config = json.loads((twin.mlx_dir / "config.json").read_text())
    assert ropes[0].factors.tolist() == llama3_rope_factors(config).tolist()
    x = mx.random.normal((1, 4, 9, 64), key=mx.random.key(0))
    theirs = Llama3RoPE(64, base=config["rope_theta"], scaling_config=config["rope_scaling"])(x, offset=3)
    assert mx.allclose(ropes[0](x, offset=3), theirs, atol=1e-4).item()  # mlx-lm's scaling, ggml's rounding


@pytest.mark.reference
def test_kept_blocks_load_as_mlx_runs_them_where_the_kernels_do_not(tmp_path):
    """The server's import of a Q4_K_M twin loaded without mlxcel's kernels (what another device gets): its Q4_K
    layers as affine groups of 32, its Q6_K ones as float32, each holding the very values the kernels read."""
    from server.models.loader import load_checkpoint
    from server.models.quant_layers import GGMLLinear, register_blocks, rows_of

    out = convert_gguf(quantized_gguf("mistral", "Q4_K_M"), tmp_path / "converted", blocks=True)
    kept = json.loads((out / "config.json").read_text())["mlxcel"][KEPT_KEY]
    assert {"Q4_K", "Q6_K"} <= set(kept.values())
    blocks = mx.load(str(out / "model.safetensors"))
    modules = dict(load_checkpoint(out, kernels=False, dequantize=False).model.named_modules())
    for path, qtype in kept.items():
        layer = modules[path]
        raw = blocks[f"{path}.ggml"]
        twin = GGMLLinear(qtype, 0, raw.shape[0], raw.shape[1])
        if qtype == "Q6_K":
            assert type(layer) in (nn.Linear, nn.Embedding) and layer.weight.dtype == mx.float32
            dense = np.array(layer.weight)
        else:
            assert type(layer) in (nn.QuantizedLinear, nn.QuantizedEmbedding)
            assert (layer.bits, layer.group_size) == (4, 32)
            dense = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=4))
        twin.in_dims = dense.shape[1]
        twin.ggml = raw
        assert register_blocks(twin)
        assert np.array_equal(rows_of(twin, np.arange(raw.shape[0])), dense), path
