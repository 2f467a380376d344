"""llama-family attention and MLP blocks that run their exp-heavy parts on mlxcel's CPU kernels.

The blocks keep mlx-lm's parameters and math (mlx_lm.models.llama) and change only where the softmax and
the SiLU run (server/cpu_kernels.py). Anything the kernels do not cover (a batch, an explicit mask, a
sliding-window or quantized cache, another dtype) goes to mlx-lm's own code unchanged.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import KVCache

from .. import cpu_kernels


class KernelAttention(llama.Attention):
    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        batch, length, _ = x.shape
        plain_mask = mask is None or (isinstance(mask, str) and mask == "causal")
        plain_cache = cache is None or type(cache) is KVCache
        if batch != 1 or not plain_mask or not plain_cache or x.dtype != mx.float32:
            return super().__call__(x, mask=mask, cache=cache)
        queries = self.q_proj(x).reshape(batch, length, self.n_heads, -1).transpose(0, 2, 1, 3)
        keys = self.k_proj(x).reshape(batch, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        values = self.v_proj(x).reshape(batch, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        offset = cache.offset if cache is not None else 0
        queries, keys = self.rope(queries, offset=offset), self.rope(keys, offset=offset)
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        output = cpu_kernels.attention(queries, keys, values, self.scale)
        return self.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class KernelMLP(llama.MLP):
    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            return super().__call__(x)
        return self.down_proj(cpu_kernels.swiglu(self.gate_proj(x), self.up_proj(x)))


def use_kernels(model: nn.Module) -> int:
    """Switch every mlx-lm llama attention and MLP block of the model to its kernel variant (the same
    parameters; only the class changes). Returns how many blocks were switched."""
    switched = 0
    for _, module in model.named_modules():
        if type(module) is llama.Attention:
            module.__class__ = KernelAttention
            switched += 1
        elif type(module) is llama.MLP:
            module.__class__ = KernelMLP
            switched += 1
    return switched
