"""--check-tensors: every weight checked for NaN and infinity before the model loads, as b10621's loader checks
them (llama-model-loader.cpp load_all_data with ggml_validate_row_data, ggml-quants.c).

ggml checks a float tensor's every value and a quantized one's block scales (d, and m or dmin where the type has
one: its values are small integers, always finite), reporting the first bad one per tensor ("found nan value at
block N", N the value's or the block's index), then names the tensor; after every tensor the load fails with
"found tensors with invalid data". A GGUF is checked as its file holds it; an MLX checkpoint's safetensors by
their float arrays (a quantized layer's scales and biases among them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# quantized types: (block bytes, byte offsets of the f16 scales ggml validates) (ggml-common.h's layouts)
BLOCK_SCALES = {
    "Q4_0": (18, (0,)),
    "Q4_1": (20, (0, 2)),
    "Q5_0": (22, (0,)),
    "Q5_1": (24, (0, 2)),
    "Q8_0": (34, (0,)),
    "Q2_K": (84, (80, 82)),
    "Q3_K": (110, (108,)),
    "Q4_K": (144, (0, 2)),
    "Q5_K": (176, (0, 2)),
    "Q6_K": (210, (208,)),
    "IQ4_NL": (18, (0,)),
}
MESSAGE = "found tensors with invalid data"


def _first_bad(values: np.ndarray) -> str | None:
    """ggml's line for the first non-finite value (infinity checked before NaN, as validate_float does)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size == 0:
        return None
    i = int(bad[0])
    kind = "inf" if np.isinf(values[i]) else "nan"
    return f"ggml_validate_row_data: found {kind} value at block {i}"


def _f16_bits_bad(bits: np.ndarray) -> str | None:
    """validate_fp16 over raw f16 bits (its exponent all ones: infinity without a mantissa, else NaN)."""
    bad = np.flatnonzero((bits & 0x7C00) == 0x7C00)
    if bad.size == 0:
        return None
    i = int(bad[0])
    kind = "inf" if (int(bits[i]) & 0x03FF) == 0 else "nan"
    return f"ggml_validate_row_data: found {kind} value at block {i}"


def _gguf_tensor(kind: str, data: np.ndarray) -> str | None:
    raw = data.view(np.uint8).reshape(-1)
    if kind == "F32":
        return _first_bad(raw.view(np.float32))
    if kind == "F16":
        return _f16_bits_bad(raw.view(np.uint16))
    if kind == "BF16":
        bits = raw.view(np.uint16) & 0x7FFF
        nans, infs = int((bits > 0x7F80).sum()), int((bits == 0x7F80).sum())
        if nans:
            return f"ggml_validate_row_data: found {nans} NaNs in row of {bits.size} BF16 values"
        if infs:
            return f"ggml_validate_row_data: found {infs} infinities in row of {bits.size} BF16 values"
        return None
    if kind not in BLOCK_SCALES:
        return None
    size, offsets = BLOCK_SCALES[kind]
    blocks = raw[: raw.size // size * size].reshape(-1, size)
    scales = np.stack([blocks[:, o : o + 2].copy().view(np.uint16)[:, 0] for o in offsets], axis=1)  # per block
    bad = np.flatnonzero(((scales & 0x7C00) == 0x7C00).any(axis=1))
    if bad.size == 0:
        return None
    i = int(bad[0])
    first = next(s for s in scales[i] if (int(s) & 0x7C00) == 0x7C00)  # d before m / dmin
    kind_word = "inf" if (int(first) & 0x03FF) == 0 else "nan"
    return f"ggml_validate_row_data: found {kind_word} value at block {i}"


def check_gguf(path: Path) -> list[str]:
    """b10621's lines for each tensor of the GGUF with invalid data (empty: all valid)."""
    from .gguf_reader import FastGGUFReader  # deferred: gguf-py is read only when asked to check

    lines = []
    for t in FastGGUFReader(str(path)).tensors:
        line = _gguf_tensor(t.tensor_type.name, np.asarray(t.data))
        if line is not None:
            lines += [line, f"load_all_data: tensor '{t.name}' has invalid data"]
    return lines


def check_checkpoint(directory: Path) -> list[str]:
    """The same over an MLX checkpoint's safetensors: each float array's values."""
    import mlx.core as mx  # deferred: MLX reads every float type the files hold (bfloat16 included)

    lines = []
    index = directory / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.is_file()
        else [p.name for p in sorted(directory.glob("*.safetensors"))]
    )
    floats = (mx.float32, mx.float16, mx.bfloat16)
    for name in files:
        for key, values in mx.load(str(directory / name)).items():
            if values.dtype not in floats:
                continue
            line = _first_bad(np.array(values.astype(mx.float32)).reshape(-1))
            if line is not None:
                lines += [line, f"load_all_data: tensor '{key}' has invalid data"]
    return lines
