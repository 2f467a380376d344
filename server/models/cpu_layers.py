"""llama-shaped attention and MLP blocks for the CPU: fused projections and mlxcel's kernels.

llama-shaped: mlx-lm's llama, qwen2 (q, k, v biases), qwen3 (q and k norms per head), phi3 (q|k|v and
gate|up stored fused), smollm3 (no rope on every fourth layer) and qwen3_moe (qwen3's attention; its mixture of
experts runs as mlx-lm's, or in the native steps: decode_step.py) models, whose blocks are llama's but for those. The blocks keep mlx-lm's math and change
two things. Projections that read the same
input run as one product (q, k and v; gate and up), their weights side by side: a decode step then makes 4
products a layer instead of 7, each a few microseconds of dispatch less, and every output element is summed
exactly as before (server/native/cpu_kernels.c sums each column alone). And the exp-heavy parts of a prompt
(rope, the causal softmax, the SiLU) run on mlxcel's kernels (server/cpu_kernels.py), a batch's decode step
included. What the kernels do not cover (a batched prompt, an explicit mask, a sliding-window or quantized
cache, another dtype) runs on MLX as in mlx-lm.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama, phi3, qwen2, qwen3, qwen3_moe, smollm3
from mlx_lm.models.activations import swiglu
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.cache import BatchKVCache, KVCache

from .. import cpu_kernels
from . import batch_cache
from .kv_numerics import KVNumerics, stored
from .quant_layers import FusedGGMLLinear, FusedQuantLinear, GGMLLinear, KernelQuantLinear, fuse_quantized
from .yarn import YarnRoPE

LLAMA_SHAPED = (llama.Model, qwen2.Model, qwen3.Model, phi3.Model, smollm3.Model, qwen3_moe.Model)
_ATTENTIONS = (llama.Attention, qwen2.Attention, qwen3.Attention, qwen3_moe.Attention)
_MLPS = (llama.MLP, qwen2.MLP, qwen3.MLP)

SOURCE = "weight_source"  # a linear layer's weight as loaded, out x in (a plain attribute, not a parameter)


class FusedLinear(nn.Module):
    """Linear layers over one input as one product: their transposed weights side by side (in x sum(out))."""

    def __init__(self, weights_t: list[mx.array], biases: list[mx.array] | None, sources: list[str]):
        super().__init__()
        self.weight_t = mx.concatenate(weights_t, axis=1)
        # as loaded (out x in: rows of the layers' weights one after the other), for the ggml-order decode step;
        # lazy, so a fused layer whose step never asks for it costs nothing (loader.release_sources)
        self.__dict__[SOURCE] = mx.concatenate([w.T for w in weights_t], axis=0)
        if biases is not None:
            self.bias = mx.concatenate(biases)
        sizes = [w.shape[1] for w in weights_t]
        # a plain attribute, not a parameter (nn.Module keeps lists among its parameters)
        object.__setattr__(self, "splits", [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)])
        object.__setattr__(self, "sources", sources)  # the fused layers' names

    def product(self, x: mx.array) -> mx.array:
        """The layers' outputs side by side in one array."""
        y = x @ self.weight_t
        y = y + self.bias if "bias" in self else y
        hook = self.__dict__.get("lora_hook")  # server/models/lora.py: adapters' terms, added after the product
        return y if hook is None else hook(x, y)

    def __call__(self, x: mx.array) -> list[mx.array]:
        return mx.split(self.product(x), self.splits, axis=-1)


def _fuse(owner: nn.Module, names: list[str]) -> nn.Module | None:
    """The owner's layers of these names as one FusedLinear, when they all store a transposed weight and agree
    on a bias."""
    layers = [owner[name] for name in names]
    if not all(hasattr(layer, "weight_t") for layer in layers):
        return fuse_quantized(layers, names)  # (kept quantized layers of one format: quant_layers)
    with_bias = ["bias" in layer for layer in layers]
    if any(with_bias) and not all(with_bias):
        return None
    biases = [layer.bias for layer in layers] if all(with_bias) else None
    return FusedLinear([layer.weight_t for layer in layers], biases, names)


def llama_shaped(model: nn.Module) -> bool:
    """Whether the model is one of mlx-lm's llama-shaped families (the native steps' and the trunk's models)."""
    return type(model) in LLAMA_SHAPED


def _presplit(layer: nn.Module, sizes: list[int], name: str) -> nn.Module | None:
    """A layer stored fused (phi3's qkv_proj, gate_up_proj) as a FusedLinear of these output sizes."""
    if type(layer) in (KernelQuantLinear, GGMLLinear) and sum(sizes) == layer.shape[1]:  # kept quantized: split
        layer.__class__ = FusedQuantLinear if type(layer) is KernelQuantLinear else FusedGGMLLinear
        object.__setattr__(layer, "splits", [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)])
        object.__setattr__(layer, "sources", [name])
        return layer
    if not hasattr(layer, "weight_t") or sum(sizes) != layer.weight_t.shape[1]:
        return None
    fused = FusedLinear([layer.weight_t], [layer.bias] if "bias" in layer else None, [name])
    fused.weight_t = mx.contiguous(layer.weight_t)  # (a one-array concatenate may stay a transposed view)
    object.__setattr__(fused, "splits", [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)])
    if SOURCE in layer.__dict__:  # the weight as loaded is already out x in: no copy
        fused.__dict__[SOURCE] = layer.__dict__[SOURCE]
    return fused


class KernelAttention(llama.Attention):
    kv_numerics = KVNumerics()  # the KV cache's types and flash attention (kv_numerics.apply sets a model's)

    def _projections(self, x: mx.array) -> list[mx.array]:
        if "qkv_proj" in self:
            return self.qkv_proj(x)
        return [self.q_proj(x), self.k_proj(x), self.v_proj(x)]

    @staticmethod
    def _kernel_rows(x: mx.array, mask, cache) -> list[int] | None:
        """Where the kernel takes this call: each row's first visible key ([] for all from 0), else None.
        It takes one sequence's causal attention, and a batch's decode step with left-padded rows: a row then
        gets bitwise the same attention alone or batched (its sums run in the same order)."""
        batch, length, _ = x.shape
        if x.dtype != mx.float32:
            return None
        if batch == 1 and (cache is None or type(cache) is KVCache):
            return [] if mask is None or (isinstance(mask, str) and mask == "causal") else None
        if type(cache) is BatchKVCache and length == 1 and batch_cache.left_padded_only(cache):
            return cache.left_padding.tolist()  # its mask shows each row its keys from its padding on
        return None

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        batch, length, _ = x.shape
        q, k, v = self._projections(x)
        queries, keys = q.reshape(batch, length, self.n_heads, -1), k.reshape(batch, length, self.n_kv_heads, -1)
        if "q_norm" in self:  # qwen3: each head normed before rope
            queries, keys = self.q_norm(queries), self.k_norm(keys)
        queries, keys = queries.transpose(0, 2, 1, 3), keys.transpose(0, 2, 1, 3)
        values = v.reshape(batch, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        first = self._kernel_rows(x, mask, cache)
        rope = self.rope
        if first is not None and type(rope) in (nn.RoPE, YarnRoPE) and not rope.traditional:
            # the kernel's rope: one call instead of MLX's CPU fallback (~130 us each), ggml's angles
            offsets = (
                [0] * batch
                if cache is None
                else cache.offset.tolist()
                if type(cache) is BatchKVCache
                else [cache.offset] * batch
            )
            yarn = getattr(rope, "yarn", None)
            queries = cpu_kernels.rope(queries, rope.dims, rope.base, rope.scale, offsets, yarn)
            keys = cpu_kernels.rope(keys, rope.dims, rope.base, rope.scale, offsets, yarn)
        elif cache is not None:
            queries, keys = rope(queries, offset=cache.offset), rope(keys, offset=cache.offset)
        else:
            queries, keys = rope(queries), rope(keys)
        numerics = self.kv_numerics
        keys, values = stored(keys, numerics.k_type), stored(values, numerics.v_type)  # as the cache holds them
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        keys, values = keys.astype(mx.float32), values.astype(mx.float32)  # (an f16 cache's values, exactly)
        if first is not None:
            output = cpu_kernels.attention(queries, keys, values, self.scale, first or None, numerics)
        else:
            output = scaled_dot_product_attention(queries, keys, values, cache=cache, scale=self.scale, mask=mask)
        return self.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class KernelMLP(llama.MLP):
    def __call__(self, x: mx.array) -> mx.array:
        if "gate_up_proj" in self:
            fused = self.gate_up_proj.product(x)
            if x.dtype == mx.float32:  # both halves read in place
                return self.down_proj(cpu_kernels.swiglu(fused))
            gate, up = mx.split(fused, self.gate_up_proj.splits, axis=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        if x.dtype == mx.float32:
            return self.down_proj(cpu_kernels.swiglu(gate, up))
        return self.down_proj(swiglu(gate, up))


def _switch_presplit(module: nn.Module) -> bool:
    """phi3's blocks, whose q|k|v and gate|up are stored fused: the same products, split as phi3 splits them."""
    if type(module) is phi3.Attention:
        sizes = [module.n_heads * module.head_dim] + [module.n_kv_heads * module.head_dim] * 2
        name, kind = "qkv_proj", KernelAttention
    else:
        proj = module.gate_up_proj
        width = (
            proj.weight_t.shape[1]
            if hasattr(proj, "weight_t")
            else proj.shape[1]
            if type(proj) is KernelQuantLinear
            else 0
        )
        sizes, name, kind = [width // 2, width // 2], "gate_up_proj", KernelMLP
    fused = _presplit(module[name], sizes, name)
    if fused is None:
        return False
    setattr(module, name, fused)
    module.__class__ = kind
    return True


def _switch(module: nn.Module, kind: type, names: list[str], fused_name: str) -> None:
    """A llama-shaped block to its kernel variant, its projections over one input fused where they can be."""
    module.__class__ = kind
    fused = _fuse(module, names)
    if fused is not None:
        setattr(module, fused_name, fused)
        for name in names:
            module.pop(name)


def use_kernels(model: nn.Module) -> int:
    """Switch every mlx-lm llama-shaped attention and MLP block of the model to its kernel variant (only the
    class changes), with fused projections where the layers store transposed weights (loader.TransposedLinear).
    Returns how many blocks were switched."""
    switched = 0
    for _, module in model.named_modules():
        if type(module) in (phi3.Attention, phi3.MLP):
            switched += _switch_presplit(module)
        elif type(module) in _ATTENTIONS:
            _switch(module, KernelAttention, ["q_proj", "k_proj", "v_proj"], "qkv_proj")
            switched += 1
        elif type(module) in _MLPS:
            _switch(module, KernelMLP, ["gate_proj", "up_proj"], "gate_up_proj")
            switched += 1
    return switched
