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
from .gguf_quants import AFFINE_CONVERTERS, KEPT_BLOCKS

KERNEL_TYPES = {**KEPT_BLOCKS, "F16": 1}  # the GGML layers' types the kernels read (F16: _keep_halves)
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


def _fuse_blocks(layers: list[nn.Module], names: list[str]) -> nn.Module | None:
    """GGML layers of one type as one FusedGGMLLinear (registered), or None where they differ."""
    if len({(x.ggml_type, x.in_dims, "bias" in x) for x in layers}) != 1:
        return None
    fused = FusedGGMLLinear(layers[0].ggml_type, layers[0].in_dims, sum(x.out_dims for x in layers), 1)
    fused.ggml = mx.concatenate([x.ggml for x in layers])
    if "bias" in layers[0]:
        fused.bias = mx.concatenate([x.bias for x in layers])
    fused.freeze()
    sizes = [x.out_dims for x in layers]
    object.__setattr__(fused, "splits", [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)])
    object.__setattr__(fused, "sources", names)
    object.__setattr__(fused, "int8", all(getattr(x, "int8", False) for x in layers))
    mx.eval(fused.parameters())
    return fused if _register_ggml(fused) else None


def fuse_quantized(layers: list[nn.Module], names: list[str]) -> nn.Module | None:
    """Kept quantized layers of one format as one fused layer (registered), or None where they differ."""
    if all(type(x) is GGMLLinear for x in layers):
        return _fuse_blocks(layers, names)
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
    object.__setattr__(fused, "int8", all(getattr(x, "int8", False) for x in layers))
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
    _int8(native, layer, key)
    return True


def _int8(native, layer: nn.Module, key: int) -> None:
    """A GGUF's layer (keep_quantized's int8): its few-row products quantize the activations to 8 bits and dot
    them in integers, as ggml multiplies a GGUF's weights (server/native/int8_dot.c; formats it does not read keep
    the float path)."""
    if getattr(layer, "int8", False):
        native.mlxcel_quant_int8(ctypes.c_void_p(key), 1)


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


def keep_quantized(model: nn.Module, int8: bool = False) -> int:
    """Switch every kernel-readable quantized layer (4 or 8 bits, groups of 32 or 64) to its kernel variant and
    register its packed values as a virtual twin, and every GGML layer's blocks; the model's other floating
    parameters become float32 (the native steps' type; norms and the like, small). int8: the layers' few-row
    products quantize the activations to 8 bits, as ggml does (a GGUF's weights; an MLX checkpoint's are
    multiplied in float, as mlx-lm does). Returns how many layers are kept quantized."""
    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_quant_register_virtual"):
        return 0
    halves = _keep_halves(model) if int8 else 0
    layers = [m for _, m in model.named_modules() if _kernel_readable(m)]
    for layer in layers:
        layer.scales, layer.biases = layer.scales.astype(mx.float32), layer.biases.astype(mx.float32)
    floats = [  # (a quantized model's own: a float checkpoint keeps its type)
        (k, v.astype(mx.float32))
        for k, v in tree_flatten(model.parameters())
        if (layers or halves) and v.dtype in (mx.float16, mx.bfloat16) and not k.endswith((".scales", ".biases"))
    ]
    if floats:
        model.update(tree_unflatten(floats))
    mx.eval([(m.weight, m.scales, m.biases) for m in layers], [v for _, v in floats])
    blocks = [m for _, m in model.named_modules() if isinstance(m, GGMLLinear)]
    stacks = [m for _, m in model.named_modules() if isinstance(m, GGMLSwitchLinear)]
    for layer in [*layers, *blocks, *stacks]:
        object.__setattr__(layer, "int8", int8)
    switched = 0
    for layer in layers:
        if _register(layer):
            layer.__class__ = KernelQuantEmbedding if isinstance(layer, nn.QuantizedEmbedding) else KernelQuantLinear
            switched += 1
    _register_all_blocks(blocks, stacks)
    return switched + len(blocks) + len(stacks)


def _register_all_blocks(blocks: list[GGMLLinear], stacks: list[GGMLSwitchLinear]) -> None:
    """Register the GGML layers' and the experts' stacks' blocks; a shape the kernels do not read is refused."""
    mx.eval([m.ggml for m in [*blocks, *stacks]])
    for layer in blocks:
        if not _register_ggml(layer):
            raise ValueError(f"{layer.ggml_type} blocks of a {layer.in_dims}-wide row: not a shape the kernels read")
    for stack in stacks:
        if not _register_switch(stack):
            raise ValueError(f"{stack.ggml_type} experts of {stack.in_dims}-wide rows: not registered with the kernels")


def _keep_halves(model: nn.Module) -> int:
    """A GGUF's F16 linear layers and embedding as GGML layers over their own halves (GGML type F16: the kernels read
    2 bytes a weight, as ggml does, where MLX's CPU ran float16 products op by op ~15x slower than b10621, and a
    float32 copy would double what a decode step reads). Returns how many."""
    replacements = []
    for path, layer in model.named_modules():
        if type(layer) not in (nn.Linear, nn.Embedding) or layer.weight.dtype != mx.float16:
            continue
        rows, dims = layer.weight.shape
        if isinstance(layer, nn.Embedding):
            new: GGMLLinear = GGMLEmbedding("F16", dims, rows, 2 * dims)
        else:
            new = GGMLLinear("F16", dims, rows, 2 * dims, bias="bias" in layer)
            if "bias" in layer:
                new.bias = layer.bias.astype(mx.float32)
        new.ggml = mx.contiguous(layer.weight).view(mx.uint8)
        replacements.append((path, new))
    if replacements:
        model.update_modules(tree_unflatten(replacements))
    return len(replacements)


def _unregister(native, keys: list[int], _keep: list) -> None:
    for key in keys:
        native.mlxcel_quant_unregister(ctypes.c_void_p(key))


class GGMLLinear(nn.Module):
    """A linear layer whose weight is kept as a GGUF's K-quant blocks (`ggml`: out rows of the file's bytes),
    read by mlxcel's kernels through a virtual twin (server/native/ggml_blocks.c): exact, at the file's size."""

    def __init__(self, ggml_type: str, in_dims: int, out_dims: int, row_bytes: int, bias: bool = False):
        super().__init__()
        self.ggml_type, self.in_dims, self.out_dims = ggml_type, in_dims, out_dims
        self.ggml = mx.zeros((out_dims, row_bytes), mx.uint8)  # (a placeholder: the checkpoint's bytes replace it)
        if bias:
            self.bias = mx.zeros((out_dims,))
        self.freeze()

    @property
    def key(self) -> int:
        return pointer(self.ggml)

    @property
    def shape(self) -> tuple[int, int]:
        """(in, out)"""
        return self.in_dims, self.out_dims

    def product(self, x: mx.array) -> mx.array:
        y = mx.array(_product(self.key, _rows(x), self.out_dims, trans=False)).reshape(*x.shape[:-1], self.out_dims)
        return y + self.bias if "bias" in self else y

    def __call__(self, x: mx.array) -> mx.array:
        return self.product(x)

    def dequantized(self) -> np.ndarray:
        """The weight (out x in) as float32, exactly (gguf-py's dequantization of the same blocks)."""
        import gguf  # deferred: gguf-py only where the blocks are converted (another device than the CPU)

        qtype = gguf.GGMLQuantizationType[self.ggml_type]
        return gguf.quants.dequantize(np.array(self.ggml), qtype).reshape(self.out_dims, self.in_dims)


class FusedGGMLLinear(GGMLLinear):
    """GGMLLinear layers of one type over one input as one product (FusedQuantLinear's kin)."""

    def product(self, x: mx.array) -> mx.array:
        y = super().product(x)
        hook = self.__dict__.get("lora_hook")
        return y if hook is None else hook(x, y)

    def __call__(self, x: mx.array) -> list[mx.array]:  # type: ignore[override]
        return mx.split(self.product(x), self.splits, axis=-1)


class GGMLEmbedding(GGMLLinear):
    """An embedding kept as K-quant blocks: rows dequantized exactly, as_linear through the virtual twin."""

    def __call__(self, ids: mx.array) -> mx.array:  # type: ignore[override]
        return _embedding_rows(self.key, ids, self.in_dims)

    def as_linear(self, x: mx.array) -> mx.array:
        return mx.array(_product(self.key, _rows(x), self.out_dims, trans=True)).reshape(*x.shape[:-1], self.out_dims)


class GGMLSwitchLinear(nn.Module):
    """A stack of experts' linear layers (mlx-lm's SwitchLinear: x through the experts `indices` names) kept as a
    GGUF's blocks (`ggml`: experts x out rows of the file's bytes), each expert's rows a virtual twin of its own
    (key: where its rows start), multiplied as GGMLLinear multiplies (int8_dot.c over activations quantized to 8
    bits, as ggml's mul_mat_id): the experts at the file's size, where MLX's gather_qmm held 4-bit groups or
    float32 (Q6_K's scales of 16) and ran op by op."""

    def __init__(self, ggml_type: str, in_dims: int, out_dims: int, num_experts: int, row_bytes: int, bias: bool):
        super().__init__()
        self.ggml_type, self.in_dims, self.out_dims, self.num_experts = ggml_type, in_dims, out_dims, num_experts
        self.ggml = mx.zeros((num_experts, out_dims, row_bytes), mx.uint8)  # (the checkpoint's bytes replace it)
        if bias:
            self.bias = mx.zeros((num_experts, out_dims))
        self.freeze()

    @property
    def input_dims(self) -> int:  # (SwitchLinear's names)
        return self.in_dims

    @property
    def output_dims(self) -> int:
        return self.out_dims

    def keys(self) -> list[int]:
        """Each expert's key: the address of its first row's blocks."""
        base, stride = pointer(self.ggml), self.out_dims * int(self.ggml.shape[2])
        return [base + e * stride for e in range(self.num_experts)]

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False) -> mx.array:
        """x (..., r, in) through the experts indices (...) names, as gather_qmm(transpose=True): (..., r, out).
        Each expert's rows go through one product (sorted_indices only says they already come in order)."""
        lead = tuple(indices.shape)
        r = int(x.shape[-2])
        rows = _rows(mx.broadcast_to(x, (*lead, r, int(x.shape[-1]))))
        experts = np.repeat(np.array(indices, copy=False).reshape(-1).astype(np.int64), r)
        if experts.size and (experts.min() < 0 or experts.max() >= self.num_experts):
            raise IndexError("expert index out of the stack's range")
        y = np.empty((rows.shape[0], self.out_dims), np.float32)
        keys = self.keys()
        order = np.argsort(experts, kind="stable")
        bounds = np.flatnonzero(np.diff(experts[order])) + 1
        for group in np.split(order, bounds) if order.size else []:
            y[group] = _product(keys[int(experts[group[0]])], np.ascontiguousarray(rows[group]), self.out_dims, False)
        out = mx.array(y).reshape(*lead, r, self.out_dims)
        return out + mx.expand_dims(self.bias[indices], -2) if "bias" in self else out

    def dequantized(self) -> np.ndarray:
        """The experts' weights (experts x out x in) as float32, exactly."""
        import gguf  # deferred: as GGMLLinear.dequantized's

        qtype = gguf.GGMLQuantizationType[self.ggml_type]
        raw = np.array(self.ggml).reshape(-1, self.ggml.shape[2])
        return gguf.quants.dequantize(raw, qtype).reshape(self.num_experts, self.out_dims, self.in_dims)


def _register_switch(layer: GGMLSwitchLinear) -> bool:
    """Register each expert's blocks of a GGMLSwitchLinear as a virtual twin, for the layer's life."""
    native = blas.STATE.native
    keys = layer.keys()
    for n, key in enumerate(keys):
        status = native.mlxcel_ggml_register(
            ctypes.c_void_p(key), 0, layer.in_dims, layer.out_dims, ctypes.c_void_p(key), KERNEL_TYPES[layer.ggml_type]
        )
        if status != 0:
            _unregister(native, keys[:n], [])
            return False
    weakref.finalize(layer, _unregister, native, keys, [layer.ggml])
    for key in keys:
        _int8(native, layer, key)
    return True


def _embedding_rows(key: int, ids: mx.array, dims: int) -> mx.array:
    flat = np.ascontiguousarray(np.array(ids, copy=False).reshape(-1), dtype=np.int32)
    out = np.empty((flat.size, dims), np.float32)
    status = blas.STATE.native.mlxcel_quant_rows(
        ctypes.c_void_p(key), ctypes.c_void_p(flat.ctypes.data), flat.size, ctypes.c_void_p(out.ctypes.data)
    )
    if status != 0:
        raise IndexError("token id out of the embedding's range")
    return mx.array(out).reshape(*ids.shape, dims)


def rows_of(layer: nn.Module, rows: np.ndarray) -> np.ndarray:
    """Rows of a kept quantized layer's weight (out x in) as mlxcel's kernels dequantize them."""
    ids = mx.array(np.asarray(rows, dtype=np.int32))
    return np.array(_embedding_rows(layer.key, ids, layer.shape[0]))


def register_blocks(layer: GGMLLinear) -> bool:
    """Register a GGML layer's blocks (evaluated) with mlxcel's kernels for the layer's life."""
    mx.eval(layer.ggml)
    return _register_ggml(layer)


def _register_ggml(layer: GGMLLinear) -> bool:
    """Register a GGML layer's blocks as a virtual twin, for the layer's life."""
    native = blas.STATE.native
    key = pointer(layer.ggml)
    status = native.mlxcel_ggml_register(
        ctypes.c_void_p(key),
        int(isinstance(layer, GGMLEmbedding)),
        layer.in_dims,
        layer.out_dims,
        ctypes.c_void_p(key),
        KERNEL_TYPES[layer.ggml_type],
    )
    if status != 0:
        return False
    weakref.finalize(layer, _unregister, native, [key], [layer.ggml])
    _int8(native, layer, key)
    return True


def install_blocks(model: nn.Module, kept: dict[str, str], weights: dict[str, mx.array]) -> None:
    """Put a GGMLLinear (GGMLEmbedding) where the checkpoint keeps a layer's K-quant blocks (config["mlxcel"]
    ["ggml_blocks"]: {module path: type}), before its weights are loaded."""
    modules = dict(model.named_modules())
    replacements: list[tuple[str, nn.Module]] = []
    for path, qtype in kept.items():
        old = modules.get(path)
        blocks = weights.get(f"{path}.ggml")
        if old is None or blocks is None:
            raise ValueError(f"the checkpoint keeps blocks for '{path}', which the model has no layer for")
        if qtype not in KERNEL_TYPES:
            raise ValueError(f"the checkpoint keeps {qtype} blocks for '{path}', which mlxcel's kernels do not read")
        if blocks.ndim == 3:  # a stack of experts (mlx-lm's SwitchLinear, or its quantized kin)
            switch = GGMLSwitchLinear(
                qtype, old.input_dims, old.output_dims, old.num_experts, int(blocks.shape[2]), "bias" in old
            )
            replacements.append((path, switch))
            continue
        if isinstance(old, nn.Embedding):
            vocab, dims = old.weight.shape
            new: GGMLLinear = GGMLEmbedding(qtype, dims, vocab, int(blocks.shape[1]))
        else:
            out_dims, in_dims = old.weight.shape
            new = GGMLLinear(qtype, in_dims, out_dims, int(blocks.shape[1]), bias="bias" in old)
        replacements.append((path, new))
    model.update_modules(tree_unflatten(replacements))


def unkeep_blocks(model: nn.Module) -> int:
    """Where mlxcel's kernels do not run (another device, kernels off): each GGML layer as MLX computes it, an
    affine QuantizedLinear where the type converts exactly (gguf_quants.AFFINE_CONVERTERS), else float32."""
    replacements: list[tuple[str, nn.Module]] = []
    for path, layer in model.named_modules():
        if isinstance(layer, GGMLSwitchLinear):
            replacements.append((path, _unkept_switch(layer)))
            continue
        if not isinstance(layer, GGMLLinear):
            continue
        raw = np.array(layer.ggml)
        convert = AFFINE_CONVERTERS.get(layer.ggml_type)
        if convert is not None:
            q = convert(raw)
            embedding = isinstance(layer, GGMLEmbedding)
            new = nn.Module.__new__(nn.QuantizedEmbedding if embedding else nn.QuantizedLinear)
            nn.Module.__init__(new)
            new.group_size, new.bits, new.mode = 32, q.bits, "affine"
            new.weight, new.scales, new.biases = mx.array(q.weight), mx.array(q.scales), mx.array(q.biases)
            if embedding:
                new.num_embeddings, new.dims = layer.out_dims, layer.in_dims
            new.freeze()
        else:
            w = mx.array(layer.dequantized())
            new = (
                nn.Embedding(layer.out_dims, layer.in_dims)
                if isinstance(layer, GGMLEmbedding)
                else nn.Linear(layer.in_dims, layer.out_dims, bias="bias" in layer)
            )
            new.weight = w
        if "bias" in layer and not isinstance(layer, GGMLEmbedding):
            new.bias = layer.bias
        replacements.append((path, new))
    if replacements:
        model.update_modules(tree_unflatten(replacements))
    return len(replacements)


def _unkept_switch(layer: GGMLSwitchLinear) -> nn.Module:
    """A GGMLSwitchLinear as mlx-lm computes a stack of experts: QuantizedSwitchLinear's affine groups where the type
    converts exactly, else SwitchLinear over float32."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear  # deferred: as architectures'

    experts, out_dims, row_bytes = (int(d) for d in layer.ggml.shape)
    convert = AFFINE_CONVERTERS.get(layer.ggml_type)
    new: nn.Module
    if convert is not None:
        q = convert(np.array(layer.ggml).reshape(-1, row_bytes))
        new = nn.Module.__new__(QuantizedSwitchLinear)
        nn.Module.__init__(new)
        new.group_size, new.bits, new.mode = 32, q.bits, "affine"
        new.weight = mx.array(q.weight.reshape(experts, out_dims, -1))
        new.scales = mx.array(q.scales.reshape(experts, out_dims, -1))
        new.biases = mx.array(q.biases.reshape(experts, out_dims, -1))
        new.global_scale = None
    else:
        new = SwitchLinear(layer.in_dims, out_dims, experts, bias=False)
        new.weight = mx.array(layer.dequantized())
    if "bias" in layer:
        new.bias = layer.bias
    new.freeze()
    return new
