"""What GET /v1/models says of a checkpoint (b10621's meta block), read from its files without loading weights."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

# what llama.cpp's converter leaves out of a BERT checkpoint (conversion/bert.py): a buffer, and the pooler the
# embedding graph never runs; b10621 counts the GGUF, so neither is counted here
_NOT_CONVERTED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# safetensors dtype -> bytes per element
_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


@dataclass(frozen=True)
class ModelFacts:
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_params: int
    size: int  # bytes


def model_facts(checkpoint: Path) -> ModelFacts:
    config = json.loads((checkpoint / "config.json").read_text())
    recorded = config.get("mlxcel") or {}
    if "n_params" in recorded and "size" in recorded:  # converted from a GGUF: that file's own figures
        n_params, size = int(recorded["n_params"]), int(recorded["size"])
    else:
        n_params, size = _counted(checkpoint, config)
    return ModelFacts(
        n_vocab=int(config.get("vocab_size", 0)),
        n_ctx_train=int(config.get("max_position_embeddings", 0)),
        n_embd=int(config.get("hidden_size", 0)),
        n_params=n_params,
        size=size,
    )


def head_dim(config: dict) -> int:
    """The attention heads' size (llama.cpp's n_embd_head_k): config.json's head_dim, else hidden / heads."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads = int(text.get("num_attention_heads") or 0)
    return int(text.get("head_dim") or (int(text.get("hidden_size", 0)) // heads if heads else 0))


def _counted(checkpoint: Path, config: dict) -> tuple[int, int]:
    """Elements and bytes of the checkpoint's tensors, from the safetensors headers; a quantized weight counts the
    elements it stands for, and its scales and biases count as bytes only."""
    quant = config.get("quantization") or {}
    headers: dict[str, dict] = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        headers.update(_header(f))
    n_params = size = 0
    for name, info in headers.items():
        if name == "__metadata__" or name.endswith(_NOT_CONVERTED):
            continue
        count = 1
        for d in info["shape"]:
            count *= int(d)
        nbytes = count * _DTYPE_BYTES.get(info["dtype"], 4)
        size += nbytes
        base = name.rsplit(".", 1)[0]
        if name.endswith((".scales", ".biases")) and f"{base}.weight" in headers:
            continue
        if name.endswith(".weight") and f"{base}.scales" in headers:
            bits = (quant.get(base) or {}).get("bits", quant.get("bits", 4))
            count = nbytes * 8 // int(bits)
        n_params += count
    return n_params, size


def _header(path: Path) -> dict:
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))
