"""GGUF import per family (issue 29): each family twin's GGUF (written as b10621's converter writes it, proven
by conformance/test_families.py) imports into exactly the MLX checkpoint it was written from: every tensor
bitwise, the same structure in the config, and Llama 3's rope_freqs carried as the converter computed them."""

from __future__ import annotations

import json
import os

import mlx.core as mx
import numpy as np
import pytest

from fixtures.families import FAMILIES, LLAMA3_ROPE, QUANT_TYPES, family_twin, quantized_gguf
from oracle.reference import SOURCE_SUBDIR
from server.cachedir import cache_root
from server.models.gguf_arch import ImportRefused, spec_of
from server.models.gguf_import import convert_gguf
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
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_gguf_imports_into_the_checkpoint_it_was_written_from(tmp_path, name):
    twin = family_twin(name)
    out = convert_gguf(twin.gguf, tmp_path / "converted")
    got, want = mx.load(str(out / "model.safetensors")), mx.load(str(twin.mlx_dir / "model.safetensors"))
    assert sorted(got) == sorted(want)
    shift = FAMILIES[name].norm_shift  # Gemma: both compute with 1 + w, which the converter stored (1 + w)
    effective = {k: (v + shift if shift and k.endswith("norm.weight") else v) for k, v in got.items()}
    expected = {k: (v + shift if shift and k.endswith("norm.weight") else v) for k, v in want.items()}
    assert [k for k in want if not mx.array_equal(effective[k], expected[k]).item()] == [], "tensors differ"
    config = json.loads((out / "config.json").read_text())
    original = json.loads((twin.mlx_dir / "config.json").read_text())
    remapped = {"mistral": "llama"}  # mlx-lm runs Mistral as llama; so does llama.cpp (general.architecture)
    original["model_type"] = remapped.get(original["model_type"], original["model_type"])
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
        match=r"^architecture 'mamba' is not supported \(supported: llama, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe\)$",
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


@pytest.mark.reference
@pytest.mark.parametrize("name,qtype", VALUE_EXACT, ids=[f"{f}-{q}" for f, q in VALUE_EXACT])
def test_every_tensor_of_a_quantized_twin_imports_value_exact(reference_binary, tmp_path, name, qtype):
    import gguf

    path = quantized_gguf(name, qtype)
    reader = gguf.GGUFReader(str(path))
    out = convert_gguf(path, tmp_path / "converted")
    config = json.loads((out / "config.json").read_text())
    weights = mx.load(str(out / "model.safetensors"))
    spec = spec_of(str(reader.fields["general.architecture"].contents()))
    types, worst = set(), 0.0
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        types.add(t.tensor_type.name)
        got = _dequantized_as_imported(weights, config.get("quantization") or {}, spec.hf_name(t.name))
        if spec.norm_shift and t.name.endswith("norm.weight"):
            got = got + np.float32(spec.norm_shift)
        worst = max(worst, float(np.abs(got - _gguf_dequantized(t, spec, config)).max()))
    assert worst == 0.0
    assert types - {"F32"}, "the twin holds no quantized tensor"


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
