"""Gemma 2 with its sliding window, as b10621 runs it (src/models/gemma2.cpp).

mlx-lm's Gemma 2 attends to every cached position on every layer. b10621 keeps a window of `sliding_window`
positions (4096 unless the GGUF says otherwise) on the even layers (set_swa_pattern(2): layer i slides when
i % 2 == 0) and the whole context on the odd ones; a position attends to the keys at most window - 1 before it.
Up to the window both agree; past it this model does what b10621 does: mlx-lm's own layers and parameters, each
layer given its own mask (as mlx-lm's Gemma 3 does it). Every layer's cache is a plain KVCache, the window applied
by the mask: the keys a sliding layer attends to are b10621's, and the caches rewind, batch and shift as any
plain cache does (b10621 keeps n_swa + n_ubatch cells on a sliding layer, mlxcel every position: memory only).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models import gemma2
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

SWA_PERIOD = 2  # b10621's Gemma 2 pattern: sliding, global, sliding, ...


@dataclass
class ModelArgs(gemma2.ModelArgs):
    sliding_window: int | None = None  # None: every layer global (mlx-lm's Gemma 2)


def is_sliding(layer: int, args: ModelArgs) -> bool:
    return bool(args.sliding_window) and layer % SWA_PERIOD < SWA_PERIOD - 1


class Model(gemma2.Model):
    args: ModelArgs

    def __call__(self, inputs: mx.array, cache=None) -> mx.array:
        trunk = self.model
        h = trunk.embed_tokens(inputs) * (self.args.hidden_size**0.5)
        layers = trunk.layers
        cache = cache if cache is not None else [None] * len(layers)
        sliding = [is_sliding(i, self.args) for i in range(len(layers))]
        global_mask = create_attention_mask(h, cache[0], return_array=True)
        window_mask = (
            create_attention_mask(h, cache[0], window_size=self.args.sliding_window, return_array=True)
            if any(sliding)
            else None
        )
        for layer, c, slides in zip(layers, cache, sliding, strict=True):
            h = layer(h, window_mask if slides else global_mask, c)
        out = trunk.embed_tokens.as_linear(trunk.norm(h))
        return mx.tanh(out / self.final_logit_softcapping) * self.final_logit_softcapping

    def make_cache(self) -> list:
        return [KVCache() for _ in self.layers]
