"""A Qwen3.5 checkpoint's multi-token-prediction block (`mtp.*`), as src/models/qwen35.cpp graph_mtp runs it: the
draft head of `--spec-type draft-mtp` (engine/mtp_drafter.py).

For a token x at position p and the target's final hidden state h of the position before (after the output norm):
x' = fc(concat(rms(embed(x)) * enorm, rms(h) * hnorm)); one full-attention decoder layer of the trunk's kind over
the block's own KV cache; out = rms(x') * norm, which the trunk's output head turns into logits and which is the
next draft step's h. The token embedding and output head are the trunk's (the converter writes no
nextn.embed_tokens nor shared_head_head for Qwen3.5). The HF checkpoint stores its norms as w for 1 + w (mlx-lm adds
the 1 to the trunk's at load), a GGUF's import as 1 + w already (server/models/qwen35.py's ggml layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import qwen3_5
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from .gguf_arch import GGML_LAYOUT
from .kv_numerics import KVNumerics
from .qwen35 import CacheTypedAttention

PREFIX = "mtp."
# every mtp.* norm (HF's 1 + w): the two before fc, the last one, the layer's four
_NORMS = ("norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")


class MTPRefusal(ValueError):
    """The checkpoint has no MTP block mlxcel runs."""


class MTPHead(nn.Module):
    def __init__(self, args: qwen3_5.TextModelArgs):
        super().__init__()
        hidden, eps = args.hidden_size, args.rms_norm_eps
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = nn.RMSNorm(hidden, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(hidden, eps=eps)
        self.norm = nn.RMSNorm(hidden, eps=eps)
        layer = qwen3_5.DecoderLayer(args, layer_idx=args.full_attention_interval - 1)  # a full-attention layer
        layer.self_attn = CacheTypedAttention(args)
        self.layers = [layer]

    def set_numerics(self, kv: KVNumerics) -> None:
        """The block's KV cache types (-ctkd / -ctvd: b10621's draft context's, f16 by default) and -fa."""
        self.layers[0].self_attn.kv_numerics = kv

    def __call__(self, embeds: mx.array, hidden: mx.array, cache: KVCache) -> mx.array:
        """Rows (1, n, width) of token embeddings and the hidden states paired with them, at the cache's next
        positions; the block's normed outputs (1, n, width)."""
        x = self.fc(mx.concatenate([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], axis=-1))
        x = self.layers[0](x, create_attention_mask(x, cache), cache)
        return self.norm(x)

    @classmethod
    def load(cls, checkpoint: Path, config: dict, weights: dict[str, mx.array] | None = None) -> MTPHead:
        """The block of an MLX checkpoint (HF's layout, or a GGUF's import), float weights only."""
        text = config.get("text_config") or config
        if not int(text.get("mtp_num_hidden_layers") or 0):
            raise MTPRefusal("the model has no MTP layers")
        if weights is None:
            weights = {}
            for f in sorted(Path(checkpoint).glob("*.safetensors")):
                weights.update({k: v for k, v in mx.load(str(f)).items() if PREFIX in k})
        own = {k[k.index(PREFIX) + len(PREFIX) :]: v for k, v in weights.items() if PREFIX in k}
        if not own:
            raise MTPRefusal("the model's MTP layers are not in its checkpoint")
        if any(k.endswith((".scales", ".biases", ".ggml")) for k in own):
            raise MTPRefusal("a quantized MTP block is not served by mlxcel yet")
        args = qwen3_5.TextModelArgs.from_dict(text)
        head = cls(args)
        shifted = bool((config.get("mlxcel") or {}).get(GGML_LAYOUT))
        if not shifted:  # HF's (1 + w) norms: the 1 added as mlx-lm adds it to the trunk's
            own = {k: (v + 1.0 if k.endswith(_NORMS) and v.ndim == 1 else v) for k, v in own.items()}
        head.load_weights(list(own.items()), strict=True)
        mx.eval(head.parameters())
        return head


class MTPRunner:
    """The block with the trunk's token embedding and output head: one call per run of consecutive positions."""

    def __init__(self, head: MTPHead, embed: Callable[[mx.array], mx.array], output: Callable[[mx.array], Any]):
        self.head, self.embed, self.output = head, embed, output

    def run(self, cache: KVCache, first: int, tokens: list[int], hidden: mx.array) -> tuple[mx.array, mx.array]:
        """Positions first.. (the cache trimmed to first), token i paired with hidden row i; every row's logits
        (n x vocab, float32) and the block's outputs (n x width)."""
        if cache.offset > first:
            cache.trim(cache.offset - first)
        if cache.offset != first:
            raise ValueError(f"the MTP cache holds {cache.offset} positions, a run starts at {first}")
        out = self.head(self.embed(mx.array([tokens])), hidden.reshape(1, len(tokens), -1), cache)
        logits = self.output(out)[0].astype(mx.float32)
        mx.eval(logits, out)
        return logits, out[0]
