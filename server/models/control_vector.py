"""Control vectors (b10621's --control-vector, --control-vector-scaled, --control-vector-layer-range).

A control vector file is a GGUF of 1-D F32 tensors `direction.N`, one per layer N >= 1. The vectors of every file
are multiplied by the file's strength and summed per layer (common_control_vector_load), and each layer il in the
range [start, end] (default 1 .. n_layer; layer 0 never has one) adds its vector to its output, after the FFN's
residual add (llama.cpp's build_cvec). The words of every refusal are common.cpp's.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from ..textparse import stoi


class ControlVectorError(ValueError):
    pass


def _layer_index(name: str) -> int:
    """'direction.N' -> N read with std::stoi (a prefix of digits), else -1."""
    head, dot, rest = name.partition(".")
    if not dot or head != "direction":
        return -1
    try:
        return stoi(rest)
    except ValueError:
        return -1


def _load_one(path: str, strength: float) -> tuple[int, np.ndarray]:  # noqa: C901
    """(n_embd, data): layer il's vector at data[n_embd * (il - 1):], as common_control_vector_load_one."""
    import gguf  # deferred: gguf (~50 ms) only to read a control vector file

    if not Path(path).is_file():
        raise ControlVectorError(f"failed to load control vector file from {path}")
    try:
        reader = gguf.GGUFReader(path)
    except Exception:
        raise ControlVectorError(f"failed to load control vector file from {path}") from None
    n_embd, data = -1, np.zeros(0, np.float32)
    for t in reader.tensors:
        layer = _layer_index(t.name)
        if layer < 0:
            raise ControlVectorError(f"invalid/unparsable direction tensor layer index in {path}")
        if layer == 0:
            raise ControlVectorError(f"invalid (zero) direction tensor layer index in {path}")
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise ControlVectorError(f"invalid (non-F32) direction tensor type in {path}")
        if len(t.shape) != 1:
            raise ControlVectorError(f"invalid (non-1D) direction tensor shape in {path}")
        n = int(t.n_elements)
        if n_embd == -1:
            n_embd = n
        elif n != n_embd:
            raise ControlVectorError(f"direction tensor in {path} does not match previous dimensions")
        if data.size < n_embd * layer:
            data = np.concatenate([data, np.zeros(n_embd * layer - data.size, np.float32)])
        dst = data[n_embd * (layer - 1) : n_embd * layer]
        dst += np.asarray(t.data, np.float32) * np.float32(strength)  # several directions for one layer add up
    return n_embd, data


def load(specs: tuple[tuple[str, float], ...]) -> tuple[int, np.ndarray]:
    """Every file's vectors, scaled and summed (common_control_vector_load)."""
    n_embd, data = -1, np.zeros(0, np.float32)
    for path, strength in specs:
        n, cur = _load_one(path, strength)
        if n_embd != -1 and n != n_embd:
            raise ControlVectorError(f"control vectors in {path} does not match previous dimensions")
        if n_embd == -1:
            n_embd, data = n, cur
        else:
            if data.size < cur.size:
                data = np.concatenate([data, np.zeros(cur.size - data.size, np.float32)])
            data[: cur.size] += cur
    return n_embd, data


def per_layer(
    n_embd: int, data: np.ndarray, n_layer: int, model_n_embd: int, start: int, end: int
) -> dict[int, mx.array]:
    """The vector each layer adds (llama_adapter_cvec::apply): layers 1 .. n_layer - 1 within [start, end] whose
    data the files hold; start <= 0 means 1, end <= 0 means n_layer."""
    if n_embd != model_n_embd:
        raise ControlVectorError("control vector n_embd does not match model")
    start = start if start > 0 else 1
    end = end if end > 0 else n_layer
    out = {}
    for il in range(1, n_layer):
        off = n_embd * (il - 1)
        if start <= il <= end and off + n_embd <= data.size and np.any(data[off : off + n_embd]):
            out[il] = mx.array(data[off : off + n_embd])
    return out


_BLOCKS: dict[type, type] = {}


def _steered(cls: type) -> type:
    if cls not in _BLOCKS:

        def __call__(self, x, *args, **kwargs):
            return cls.__call__(self, x, *args, **kwargs) + self.__dict__["control_vector"]

        _BLOCKS[cls] = type(f"Steered{cls.__name__}", (cls,), {"__call__": __call__})
    return _BLOCKS[cls]


def attach(model, vectors: dict[int, mx.array]) -> None:
    """Each steered layer adds its vector to its output (the residual stream the next layer reads)."""
    layers = model.layers
    for il, vec in vectors.items():
        layer = layers[il]
        layer.__class__ = _steered(type(layer))
        object.__setattr__(layer, "control_vector", vec)
