"""Gemma 3 (text) as b10621 runs it (src/models/gemma3.cpp), on mlx-lm's layers and parameters.

Two things differ from mlx-lm's model. The token embeddings are scaled by sqrtf(n_embd) in float32 (mlx-lm
rounds the scale to bfloat16 first: 34.0 for the 1B's 33.94), and embeddings given as input (an image's) are not
scaled at all, as b10621 scales only tokens' (`ubatch.token ? sqrtf(n_embd) : 1.0f`). And every layer's cache is a
plain KVCache, the sliding layers' window applied by their mask, as for Gemma 2 (gemma2_swa.py): the same keys
b10621 attends to, in caches that rewind, batch and shift as any plain cache does.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models import gemma3_text
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

ModelArgs = gemma3_text.ModelArgs


def embed_scale(hidden: int) -> float:
    """b10621's sqrtf(n_embd), as a float32 value."""
    return float(np.sqrt(np.float32(hidden)))


def is_sliding(layer: int, args: ModelArgs) -> bool:
    """b10621's set_swa_pattern(period): the last layer of each period is global."""
    return (layer + 1) % args.sliding_window_pattern != 0


class Gemma3Model(gemma3_text.Gemma3Model):
    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None) -> mx.array:
        if input_embeddings is not None:
            h = input_embeddings
        else:
            h = self.embed_tokens(inputs)
            h = h * mx.array(embed_scale(self.args.hidden_size), mx.float32).astype(h.dtype)
        cache = cache if cache is not None else [None] * len(self.layers)
        sliding = [is_sliding(i, self.args) for i in range(len(self.layers))]
        global_mask = create_attention_mask(h, cache[0])
        window_mask = create_attention_mask(h, cache[0], window_size=self.window_size) if any(sliding) else None
        for layer, c, slides in zip(self.layers, cache, sliding, strict=True):
            h = layer(h, window_mask if slides else global_mask, c)
        return self.norm(h)


class Model(gemma3_text.Model):
    def __init__(self, args: ModelArgs):
        super().__init__(args)
        self.model = Gemma3Model(args)

    def make_cache(self) -> list:
        return [KVCache() for _ in self.layers]
