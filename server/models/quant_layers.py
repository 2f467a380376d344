"""Quantized layers kept quantized on the CPU: no float copy of the weights.

MLX's affine layers (4 or 8 bits, groups of 32 or 64: GGUF Q4_0/Q4_1/Q4_K/Q8_0/IQ4_NL as imported, and
mlx-community's 4- and 8-bit checkpoints) are registered with mlxcel's kernels as "virtual" twins
(server/native/cpu_kernels.c): the address of the packed values is the key a product passes where a float
weight would be. A product of a few rows reads the packed values (the decode kernels); one of more rows
dequantizes the weight a panel of rows at a time, exactly, and hands each panel to the BLAS. The layers keep
MLX's QuantizedLinear / QuantizedEmbedding parameters (weight, scales, biases; scales and biases in float32,
as the kernels read them) and run eagerly on the CPU, as mlxcel's other kernels do. The native steps take the
keys as their weights (server/models/decode_step.py).
"""

from __future__ import annotations

import ctypes
import weakref

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten, tree_unflatten

from .. import blas

GROUPS = (32, 64)  # the kernels read groups of 32 values, and mlx-community's 64 as two of them
BITS = (4, 8)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def pointer(a: mx.array) -> int:
    """The address of an evaluated, contiguous array's memory."""
    view = np.array(a, copy=False)
    assert view.flags["C_CONTIGUOUS"]
    return view.ctypes.data


def _kernel_readable(layer: nn.Module) -> bool:
    return (
        type(layer) in (nn.QuantizedLinear, nn.QuantizedEmbedding)
        and layer.group_size in GROUPS
        and layer.bits in BITS
        and getattr(layer, "mode", "affine") == "affine"
    )


def _native():
    native = blas.STATE.native
    native.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    return native


def _rows(x: mx.array) -> np.ndarray:
    """x as evaluated float32 rows (M x in), C-contiguous, viewed in place where it already is."""
    flat = mx.contiguous(x.astype(mx.float32).reshape(-1, x.shape[-1]))
    mx.eval(flat)
    return np.array(flat, copy=False)


def _product(key: int, x: np.ndarray, n: int, trans: bool) -> np.ndarray:
    """x (M x K) times the weight registered under key (N x K, stored as the layer stores it): M x N."""
    m, k = x.shape
    y = np.empty((m, n), np.float32)
    if m:
        _native().cblas_sgemm(
            ROW_MAJOR,
            NO_TRANS,
            TRANS if trans else NO_TRANS,
            m,
            n,
            k,
            1.0,
            x.ctypes.data,
            k,
            key,
            k if trans else n,
            0.0,
            y.ctypes.data,
            n,
        )
    return y


class KernelQuantLinear(nn.QuantizedLinear):
    """QuantizedLinear over mlxcel's kernels (an instance's class is switched to it: keep_quantized)."""

    @property
    def key(self) -> int:
        return pointer(self.weight)

    @property
    def shape(self) -> tuple[int, int]:
        """(in, out)"""
        return int(self.weight.shape[1] * 32 // self.bits), int(self.weight.shape[0])

    def product(self, x: mx.array) -> mx.array:
        n_out = self.shape[1]
        y = mx.array(_product(self.key, _rows(x), n_out, trans=False)).reshape(*x.shape[:-1], n_out)
        return y + self.bias if "bias" in self else y

    def __call__(self, x: mx.array) -> mx.array:
        return self.product(x)


class FusedQuantLinear(KernelQuantLinear):
    """Kept quantized layers over one input as one product (cpu_layers.FusedLinear's quantized kin): their rows
    one after the other, one twin; called, the layers' outputs (a list); product, them side by side."""

    def product(self, x: mx.array) -> mx.array:
        y = super().product(x)
        hook = self.__dict__.get("lora_hook")  # server/models/lora.py: adapters' terms, added after the product
        return y if hook is None else hook(x, y)

    def __call__(self, x: mx.array) -> list[mx.array]:  # type: ignore[override]
        return mx.split(self.product(x), self.splits, axis=-1)


def fuse_quantized(layers: list[nn.Module], names: list[str]) -> FusedQuantLinear | None:
    """Kept quantized layers of one format as one FusedQuantLinear (registered), or None where they differ."""
    if not all(type(x) is KernelQuantLinear for x in layers):
        return None
    formats = {(x.bits, x.group_size, getattr(x, "mode", "affine"), "bias" in x) for x in layers}
    if len(formats) != 1 or len({x.shape[0] for x in layers}) != 1:
        return None
    fused = nn.Module.__new__(FusedQuantLinear)
    nn.Module.__init__(fused)
    fused.group_size, fused.bits, fused.mode = (
        layers[0].group_size,
        layers[0].bits,
        getattr(layers[0], "mode", "affine"),
    )
    for name in ("weight", "scales", "biases", *(("bias",) if "bias" in layers[0] else ())):
        fused[name] = mx.concatenate([x[name] for x in layers])
    fused.freeze()
    sizes = [x.shape[1] for x in layers]
    object.__setattr__(fused, "splits", [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)])
    object.__setattr__(fused, "sources", names)
    mx.eval(fused.parameters())
    return fused if _register(fused) else None


def _register(layer: nn.Module) -> bool:
    """Register a kept quantized layer's packed values as a virtual twin, for the layer's life."""
    native = blas.STATE.native
    embedding = isinstance(layer, nn.QuantizedEmbedding)
    rows, packed = layer.weight.shape
    key = pointer(layer.weight)
    # x @ W^T: a linear's weight passes as K x N (not transposed), an embedding's head as N x K (transposed)
    status = native.mlxcel_quant_register_virtual(
        ctypes.c_void_p(key),
        int(embedding),
        packed * 32 // layer.bits,
        rows,
        ctypes.c_void_p(key),
        ctypes.c_void_p(pointer(layer.scales)),
        ctypes.c_void_p(pointer(layer.biases)),
        layer.bits,
        layer.group_size,
    )
    if status != 0:
        return False
    # unregistered when the layer goes, before its arrays' memory can be reused
    weakref.finalize(layer, _unregister, native, [key], [layer.weight, layer.scales, layer.biases])
    return True


class KernelQuantEmbedding(nn.QuantizedEmbedding):
    """QuantizedEmbedding over mlxcel's kernels: rows dequantized exactly, as_linear through the virtual twin."""

    @property
    def key(self) -> int:
        return pointer(self.weight)

    def __call__(self, ids: mx.array) -> mx.array:
        flat = np.ascontiguousarray(np.array(ids, copy=False).reshape(-1), dtype=np.int32)
        dims = int(self.weight.shape[1] * 32 // self.bits)
        out = np.empty((flat.size, dims), np.float32)
        status = blas.STATE.native.mlxcel_quant_rows(
            ctypes.c_void_p(self.key), ctypes.c_void_p(flat.ctypes.data), flat.size, ctypes.c_void_p(out.ctypes.data)
        )
        if status != 0:
            raise IndexError("token id out of the embedding's range")
        return mx.array(out).reshape(*ids.shape, dims)

    def as_linear(self, x: mx.array) -> mx.array:
        vocab = int(self.weight.shape[0])
        return mx.array(_product(self.key, _rows(x), vocab, trans=True)).reshape(*x.shape[:-1], vocab)


def keep_quantized(model: nn.Module) -> int:
    """Switch every kernel-readable quantized layer (4 or 8 bits, groups of 32 or 64) to its kernel variant and
    register its packed values as a virtual twin; the model's other floating parameters become float32 (the
    native steps' type; norms and the like, small). Returns how many layers were switched."""
    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_quant_register_virtual"):
        return 0
    layers = [m for _, m in model.named_modules() if _kernel_readable(m)]
    for layer in layers:
        layer.scales, layer.biases = layer.scales.astype(mx.float32), layer.biases.astype(mx.float32)
    floats = [
        (k, v.astype(mx.float32))
        for k, v in tree_flatten(model.parameters())
        if v.dtype in (mx.float16, mx.bfloat16) and not k.endswith((".scales", ".biases"))
    ]
    if floats:
        model.update(tree_unflatten(floats))
    mx.eval([(m.weight, m.scales, m.biases) for m in layers], [v for _, v in floats])
    switched = 0
    for layer in layers:
        if _register(layer):
            layer.__class__ = KernelQuantEmbedding if isinstance(layer, nn.QuantizedEmbedding) else KernelQuantLinear
            switched += 1
    return switched


def _unregister(native, keys: list[int], _keep: list) -> None:
    for key in keys:
        native.mlxcel_quant_unregister(ctypes.c_void_p(key))
