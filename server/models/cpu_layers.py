"""llama-family attention and MLP blocks for the CPU: fused projections and mlxcel's kernels.

The blocks keep mlx-lm's math (mlx_lm.models.llama) and change two things. Projections that read the same
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
from mlx_lm.models import llama
from mlx_lm.models.activations import swiglu
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.cache import BatchKVCache, KVCache

from .. import cpu_kernels
from . import batch_cache
from .kv_numerics import KVNumerics, stored
from .yarn import YarnRoPE

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


def _fuse(owner: nn.Module, names: list[str]) -> FusedLinear | None:
    """The owner's layers of these names as one FusedLinear, when they all store a transposed weight and agree
    on a bias."""
    layers = [owner[name] for name in names]
    if not all(hasattr(layer, "weight_t") for layer in layers):
        return None
    with_bias = ["bias" in layer for layer in layers]
    if any(with_bias) and not all(with_bias):
        return None
    biases = [layer.bias for layer in layers] if all(with_bias) else None
    return FusedLinear([layer.weight_t for layer in layers], biases, names)


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
        queries = q.reshape(batch, length, self.n_heads, -1).transpose(0, 2, 1, 3)
        keys = k.reshape(batch, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
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


def use_kernels(model: nn.Module) -> int:
    """Switch every mlx-lm llama attention and MLP block of the model to its kernel variant (only the class
    changes), with fused projections where the layers store transposed weights (loader.TransposedLinear).
    Returns how many blocks were switched."""
    switched = 0
    for _, module in model.named_modules():
        if type(module) is llama.Attention:
            module.__class__ = KernelAttention
            fused = _fuse(module, ["q_proj", "k_proj", "v_proj"])
            if fused is not None:
                module.qkv_proj = fused
                for name in ("q_proj", "k_proj", "v_proj"):
                    module.pop(name)
            switched += 1
        elif type(module) is llama.MLP:
            module.__class__ = KernelMLP
            fused = _fuse(module, ["gate_proj", "up_proj"])
            if fused is not None:
                module.gate_up_proj = fused
                for name in ("gate_proj", "up_proj"):
                    module.pop(name)
            switched += 1
    return switched
