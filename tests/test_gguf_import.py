"""`mlxcel convert`: the bundled Q4_1 GGUF imports losslessly; what cannot be imported is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import mlx.core as mx
import numpy as np
import pytest

from server.models.gguf_import import ImportRefused, convert_gguf, hf_tensor_name
from server.models.gguf_quants import permute_rows
from server.models.gguf_tokenizer import GGUFVocab, UnsupportedTokenizer, build_tokenizer


def _reference_dequantized(t, n_head: int, n_head_kv: int) -> np.ndarray:
    ref = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    ref = ref.reshape(tuple(int(x) for x in reversed(t.shape)))
    if t.name.endswith("attn_q.weight"):
        ref = permute_rows(ref, n_head)
    elif t.name.endswith("attn_k.weight"):
        ref = permute_rows(ref, n_head_kv)
    return ref


def test_every_tensor_of_the_q4_1_gguf_imports_losslessly(twin_q4_1):
    reader = gguf.GGUFReader(str(twin_q4_1.gguf))
    config = json.loads((twin_q4_1.mlx_dir / "config.json").read_text())
    weights = mx.load(str(twin_q4_1.mlx_dir / "model.safetensors"))
    quant = config["quantization"]
    worst, checked = 0.0, 0
    for t in reader.tensors:
        name = hf_tensor_name(t.name)
        base = name.removesuffix(".weight")
        if base + ".scales" in weights:
            bits = quant.get(base, quant)["bits"]
            got = mx.dequantize(
                weights[name], weights[base + ".scales"], weights[base + ".biases"], group_size=32, bits=bits
            )
        else:
            got = weights[name]
        diff = np.abs(
            np.array(got) - _reference_dequantized(t, config["num_attention_heads"], config["num_key_value_heads"])
        )
        worst = max(worst, float(diff.max()))
        checked += 1
    assert checked == len(reader.tensors) == 272
    assert worst == 0.0


def test_f32_checkpoint_holds_the_same_values(twin_q4_1, twin_f32):
    q = mx.load(str(twin_q4_1.mlx_dir / "model.safetensors"))
    f = mx.load(str(twin_f32.mlx_dir / "model.safetensors"))
    name = "model.layers.3.mlp.down_proj"
    deq = mx.dequantize(q[name + ".weight"], q[name + ".scales"], q[name + ".biases"], group_size=32, bits=4)
    assert f[name + ".weight"].dtype == mx.float32
    assert mx.array_equal(deq, f[name + ".weight"]).item()


def test_checkpoint_files_and_configs(twin_q4_1):
    d = twin_q4_1.mlx_dir
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (d / f).is_file(), f
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    assert tok_cfg["add_bos_token"] is False
    assert "<|im_start|>" in tok_cfg["chat_template"]
    # <|endoftext|>, <|im_end|> and the FIM repository token <reponame>, as llama-vocab.cpp marks them
    assert tok_cfg["gguf_eog_token_ids"] == [0, 2, 4]
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == [0, 2, 4]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True
    assert cfg["quantization"]["bits"] == 4 and cfg["quantization"]["model.embed_tokens"]["bits"] == 8


def test_mlx_lm_loads_the_converted_checkpoint(twin_q4_1):
    from mlx_lm import load

    model, tokenizer = load(str(twin_q4_1.mlx_dir))
    ids = tokenizer.encode("The capital of France is")
    logits = model(mx.array([ids]))
    assert logits.shape == (1, len(ids), 49152)


def _tiny_gguf(path, tensor_type: gguf.GGMLQuantizationType, pre: str = "gpt-2"):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_feed_forward_length(32)
    w.add_head_count(1)
    w.add_context_length(64)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"])
    w.add_token_types([1, 1, 1])
    w.add_token_merges(["a b"])
    if tensor_type == gguf.GGMLQuantizationType.F32:
        w.add_tensor("blk.0.attn_norm.weight", np.ones(32, dtype=np.float32))
    else:
        block_bytes = gguf.GGML_QUANT_SIZES[tensor_type][1]  # one 256-element block per row
        w.add_tensor("blk.0.ffn_up.weight", np.zeros((32, block_bytes), dtype=np.uint8), raw_dtype=tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_unsupported_tensor_type_is_refused_naming_tensor_and_type(tmp_path):
    src = tmp_path / "iq2xxs.gguf"
    _tiny_gguf(src, gguf.GGMLQuantizationType.IQ2_XXS)  # a lattice codebook: no exact layout of mlxcel's yet
    with pytest.raises(ImportRefused, match=r"tensor 'blk\.0\.ffn_up\.weight' has type IQ2_XXS"):
        convert_gguf(src, tmp_path / "out")


def test_unknown_pre_tokenizer_is_an_error_not_a_fallback(tmp_path):
    src = tmp_path / "pre.gguf"
    _tiny_gguf(src, gguf.GGMLQuantizationType.F32, pre="klingon")
    with pytest.raises(UnsupportedTokenizer, match="unknown pre-tokenizer 'klingon'"):
        convert_gguf(src, tmp_path / "out")


@pytest.mark.parametrize(
    "pre,text,pieces",
    [
        ("gpt-2", "abc 123", ["abc", " 123"]),
        ("smollm", "abc 123", ["abc", " ", "1", "2", "3"]),
        ("llama-bpe", "abc 12345", ["abc", " ", "123", "45"]),
        ("qwen2", "abc 123", ["abc", " ", "1", "2", "3"]),
    ],
)
def test_pre_tokenizers_split_like_llama_cpp(pre, text, pieces):
    vocab = GGUFVocab("gpt2", pre, ["a"], [1], [], None, None, None, None, False, False, None)
    tok = build_tokenizer(vocab)
    got = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
    byte_level = {" ": "Ġ"}
    assert got == ["".join(byte_level.get(c, c) for c in p) for p in pieces]


def test_convert_cli_reports_refusal_in_one_sentence(tmp_path):
    src = tmp_path / "iq2xxs.gguf"
    _tiny_gguf(src, gguf.GGMLQuantizationType.IQ2_XXS)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from server.cli.main import mlxcel_main; mlxcel_main()",
            "convert",
            str(src),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("mlxcel convert: error: tensor 'blk.0.ffn_up.weight' has type IQ2_XXS")
