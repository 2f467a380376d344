"""`mlxcel convert GGUF OUT_DIR`: write an MLX checkpoint (that mlx-lm loads) from a GGUF file.

Quantized blocks map losslessly onto MLX affine quantization (see gguf_quants); with `dtype="f32"`
every tensor is dequantized to float32 instead. The tokenizer is rebuilt from the GGUF vocabulary.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable, Iterator

import gguf
import mlx.core as mx
import numpy as np

from . import kv_override
from .gguf_arch import ROPE_FREQS, ArchSpec, HParams, ImportRefused, spec_of
from .gguf_check import DamagedGGUF, check_gguf
from .gguf_quants import (
    AFFINE_CONVERTERS,
    FLOAT32_HELD,
    GROUP_SIZE,
    KEPT_BLOCKS,
    KEPT_KEY,
    permute_rows,
)
from .gguf_reader import FastGGUFReader
from .rope_factors import CONFIG_KEY as ROPE_FACTORS_KEY
from .vocab_rules import default_add_bos

__all__ = ["ImportRefused", "convert_gguf", "hf_tensor_name", "read_vocab"]
from .gguf_tokenizer import GGUFVocab, tokenizer_config, tokenizer_json


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def hf_tensor_name(gguf_name: str, arch: str = "llama") -> str:
    return spec_of(arch).hf_name(gguf_name)


def _n_tokens(reader) -> int:
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return len(tokens.data) if tokens is not None else 0


def read_vocab(reader) -> GGUFVocab:
    def opt_int(key):
        v = _field(reader, key)
        return None if v is None else int(v)

    model = str(_field(reader, "tokenizer.ggml.model"))
    pre = str(_field(reader, "tokenizer.ggml.pre", "default"))
    return GGUFVocab(
        model=model,
        pre=pre,
        tokens=list(_field(reader, "tokenizer.ggml.tokens")),
        token_types=[int(t) for t in _field(reader, "tokenizer.ggml.token_type")],
        merges=list(_field(reader, "tokenizer.ggml.merges", [])),
        bos_id=opt_int("tokenizer.ggml.bos_token_id"),
        eos_id=opt_int("tokenizer.ggml.eos_token_id"),
        unk_id=opt_int("tokenizer.ggml.unknown_token_id"),
        pad_id=opt_int("tokenizer.ggml.padding_token_id"),
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", default_add_bos(model, pre))),
        add_eos=bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        chat_template=_field(reader, "tokenizer.chat_template"),
        fim_declared={
            k: int(v)
            for k in ("pre", "suf", "mid", "pad", "rep", "sep")
            if (v := _field(reader, f"tokenizer.ggml.fim_{k}_token_id")) is not None
        },
        eot_declared=opt_int("tokenizer.ggml.eot_token_id"),
        scores=[float(x) for x in _field(reader, "tokenizer.ggml.scores", [])],
        add_space_prefix=bool(_field(reader, "tokenizer.ggml.add_space_prefix", True)),
        general_name=str(_field(reader, "general.name", "") or ""),
    )


def _converted_tensors(
    reader,
    spec: ArchSpec,
    hp: HParams,
    dtype: str,
    progress: Callable[[str, int, int], None] | None = None,
    blocks: bool = False,
) -> Iterator[tuple[str, np.ndarray, int | str | None]]:
    """Yield (hf_name, array, bits) where bits is set for affine-quantized weights (rope_freqs excepted), or is
    "ggml:<type>" for a weight kept as the file's K-quant blocks (blocks True)."""
    permuted = {"attn_q.weight": hp.n_head, "attn_k.weight": hp.n_head_kv, "attn_q.bias": hp.n_head}
    permuted["attn_k.bias"] = hp.n_head_kv
    n_trunk = hp.n_layer - int(_field(reader, f"{spec.gguf}.nextn_predict_layers", 0) or 0) if spec.nextn else None
    for i, t in enumerate(reader.tensors):
        if progress is not None and i:
            progress("tensors", i, len(reader.tensors))
        if t.name == ROPE_FREQS:
            continue
        suffix = t.name.split(".", 2)[-1]
        n_head = permuted.get(suffix) if spec.permute_qk else None
        for name, arr, bits in _converted_tensor(t, spec.hf_name(t.name, n_trunk), n_head, dtype, blocks):
            if spec.norm_shift and name.endswith("norm.weight"):
                arr = arr - np.float32(spec.norm_shift)  # exact for a stored value >= 0.5 (module docstring)
            if suffix in spec.reshape and bits is None:
                arr = arr.reshape(spec.reshape[suffix](arr.shape))
            yield name, arr, bits


def _converted_tensor(
    t, name: str, n_head: int | None, dtype: str, blocks: bool = False
) -> Iterator[tuple[str, np.ndarray, int | str | None]]:
    """One GGUF tensor as the checkpoint holds it, its rows un-permuted where n_head is given."""
    qtype = t.tensor_type.name
    data = np.asarray(t.data)
    shape = tuple(int(x) for x in reversed(t.shape))
    if blocks and qtype in KEPT_BLOCKS and dtype != "f32" and data.ndim in (2, 3) and name.endswith(".weight"):
        # the file's blocks, a row of them per output row (quant_layers.GGMLLinear reads them; a stack of experts'
        # matrices, experts x rows: quant_layers.GGMLSwitchLinear)
        yield (
            f"{name.removesuffix('.weight')}.ggml",
            (permute_rows(data, n_head) if n_head is not None else data),
            (f"ggml:{qtype}"),
        )
    elif qtype in AFFINE_CONVERTERS and dtype != "f32":
        rows = data.reshape(-1, data.shape[-1])  # a stack of experts' matrices converts row by row
        q = AFFINE_CONVERTERS[qtype](permute_rows(rows, n_head) if n_head is not None else rows)
        base = name.removesuffix(".weight")
        lead = data.shape[:-1]
        yield f"{base}.weight", q.weight.reshape(*lead, -1), q.bits
        yield f"{base}.scales", q.scales.reshape(*lead, -1), None
        yield f"{base}.biases", q.biases.reshape(*lead, -1), None
    elif qtype in (*AFFINE_CONVERTERS, *FLOAT32_HELD) or (qtype in ("F16", "BF16") and dtype == "f32"):
        arr = gguf.quants.dequantize(data, t.tensor_type).reshape(shape)  # float32, every value exact
        yield name, (permute_rows(arr, n_head) if n_head is not None else arr), None
    elif qtype in ("F32", "F16", "BF16"):
        arr = data.reshape(shape)
        yield name, (permute_rows(arr, n_head) if n_head is not None else arr), ("bf16" if qtype == "BF16" else None)
    else:
        raise ImportRefused(
            f"tensor '{t.name}' has type {qtype}, which mlxcel cannot import losslessly "
            f"(supported: F32, F16, BF16, {', '.join([*AFFINE_CONVERTERS, *FLOAT32_HELD])})"
        )


# GGUF general.file_type -> llama_model_ftype_name(), for the types the converter accepts
FTYPE_NAMES = {
    0: "all F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K - Medium",
    11: "Q3_K - Small",
    12: "Q3_K - Medium",
    13: "Q3_K - Large",
    14: "Q4_K - Small",
    15: "Q4_K - Medium",
    16: "Q5_K - Small",
    17: "Q5_K - Medium",
    18: "Q6_K",
    21: "Q2_K - Small",
    25: "IQ4_NL - 4.5 bpw",
    32: "BF16",
}


def _reader(path, header: int, progress: Callable[[str, int, int], None] | None):
    """gguf's reader (its string arrays read fast), saying how far into the header it is."""
    reader = FastGGUFReader(str(path), None if progress is None else lambda offset: progress("header", offset, header))
    if progress is not None:
        progress("header", header, header)
    return reader


def convert_gguf(  # noqa: C901
    gguf_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    dtype: str = "auto",
    progress: Callable[[str, int, int], None] | None = None,
    blocks: bool = False,
    overrides: tuple = (),
) -> Path:
    """Convert `gguf_path` into an MLX checkpoint directory `out_dir`. dtype: "auto" (keep) or "f32".
    overrides: --override-kv's (server/models/kv_override.py), in place of the file's metadata values.
    `progress(stage, done, total)` is called as the header is read ("header", in bytes) and as each tensor is
    converted ("tensors"). blocks: the K-quant weights kept as the file's blocks (the server's own cache: its
    CPU kernels read them, other devices convert them at load); else a plain MLX checkpoint (mlxcel convert)."""
    if dtype not in ("auto", "f32"):
        raise ImportRefused(f"unknown dtype '{dtype}' (expected auto or f32)")
    header = check_gguf(gguf_path)  # a damaged file named in b10621's words, before gguf's reader trips over it
    try:
        reader = _reader(gguf_path, header, progress)
    except (ValueError, IndexError, KeyError, struct.error) as exc:  # what the check above does not cover
        raise DamagedGGUF(gguf_path, f"unreadable GGUF ({type(exc).__name__}: {exc})") from None
    kv_override.apply(reader.fields, overrides)  # --override-kv: every key read below sees them
    spec = spec_of(str(_field(reader, "general.architecture")))
    hp = HParams.read(spec.gguf, lambda key, default=None: _field(reader, key, default), _n_tokens(reader))
    vocab = read_vocab(reader)
    tok_json = tokenizer_json(vocab)  # raises on an unknown pre-tokenizer before any tensor work

    weights: dict[str, mx.array] = {}
    per_layer_quant: dict[str, dict] = {}
    kept: dict[str, str] = {}
    for name, arr, bits in _converted_tensors(reader, spec, hp, dtype, progress, blocks):
        if isinstance(bits, str) and bits.startswith("ggml:"):
            weights[name] = mx.array(np.ascontiguousarray(arr))
            kept[name.removesuffix(".ggml")] = bits.removeprefix("ggml:")
            continue
        if bits == "bf16":
            weights[name] = mx.array(np.ascontiguousarray(arr).view(np.uint16)).view(mx.bfloat16)
            continue
        weights[name] = mx.array(np.ascontiguousarray(arr))
        if isinstance(bits, int):
            per_layer_quant[name.removesuffix(".weight")] = {"group_size": GROUP_SIZE, "bits": bits}
    if progress is not None:
        progress("tensors", len(reader.tensors), len(reader.tensors))
    tied = "lm_head.weight" not in weights and "lm_head.ggml" not in weights

    config = spec.config(hp, tied, lambda key, default=None: _field(reader, key, default))
    if spec.gguf == "llama" and any(n.endswith("q_proj.bias") for n in weights):
        config["attention_bias"] = True
    if per_layer_quant:
        common_bits = max(
            set(q["bits"] for q in per_layer_quant.values()),
            key=lambda b: sum(q["bits"] == b for q in per_layer_quant.values()),
        )
        quant = {"group_size": GROUP_SIZE, "bits": common_bits, "mode": "affine"}
        quant.update({k: v for k, v in per_layer_quant.items() if v["bits"] != common_bits})
        config["quantization"] = quant
        config["quantization_config"] = quant
    config["eos_token_id"] = vocab.eog_ids()
    if vocab.bos_id is not None:
        config["bos_token_id"] = vocab.bos_id
    config["mlxcel"] = {
        "source": "gguf",
        "gguf_name": Path(gguf_path).name,
        "gguf_general_name": _field(reader, "general.name"),
        "dtype": dtype,
        # what GET /props reports as model_ftype, spelled as llama_model_ftype_name() spells it
        "ftype": "all F32" if dtype == "f32" else FTYPE_NAMES.get(_field(reader, "general.file_type"), "unknown"),
        # what GET /v1/models reports as n_params and size: llama_model_n_params / llama_model_size of the file
        # the checkpoint equals (its tensors' elements, and their bytes as that file's types store them)
        "n_params": sum(int(t.n_elements) for t in reader.tensors),
        "size": sum(int(t.n_elements) * 4 if dtype == "f32" else int(t.n_bytes) for t in reader.tensors),
    }
    config["mlxcel"].update(spec.mlxcel_flags)
    if kept:
        config["mlxcel"][KEPT_KEY] = kept
    factors = next((t for t in reader.tensors if t.name == ROPE_FREQS), None)
    if factors is not None:
        config["mlxcel"][ROPE_FACTORS_KEY] = [float(x) for x in np.asarray(factors.data, dtype=np.float32)]

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write_json(out / "config.json", config)
    (out / "tokenizer.json").write_text(tok_json, encoding="utf-8")
    _write_json(out / "tokenizer_config.json", tokenizer_config(vocab))
    gen = {"eos_token_id": vocab.eog_ids()}
    if vocab.bos_id is not None:
        gen["bos_token_id"] = vocab.bos_id
    _write_json(out / "generation_config.json", gen)
    return out


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
