"""An EAGLE-3 draft head (b10621's src/models/eagle3.cpp) loaded from the GGUF its converter writes, on MLX.

The head is an encoder and a one-layer decoder. The encoder (`encode`) fuses the target's hidden states at three
layers' inputs (rows x 3 target widths) into g rows (`fc`, after an RMS norm where `norm_before_fc`). The decoder
(`decode`) takes a token and a g row per position: the token's embedding (the target's, unless the head has its
own) and g, each RMS-normed, concatenated (2 x width) into q, k and v; attention over the head's own KV cache;
the residual is g itself (or its norm, `norm_before_residual`); then llama's feed-forward. Its pre-norm output
is the next position's g while drafting; the logits are the output norm and `lm_head` over the draft vocabulary,
scattered into the target's vocabulary at `d2t`'s ids (every other id -inf).

The KV cache stores keys and values as the draft context's cache type rounds them, and attention rounds what
ggml-cpu rounds over that type (models/kv_numerics.py: b10621's draft context defaults to f16 and flash
attention). Positions are explicit: b10621 writes the head's KV at the target's positions, which a prompt's
image leaves unwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx import nn

from .. import cpu_kernels
from .gguf_quants import permute_rows
from .gguf_reader import header_of
from .kv_numerics import KVNumerics, round_to

ARCH = "eagle3"
F32, BF16 = 0, 30  # GGML types


class HeadRefusal(ValueError):
    """A GGUF that is no EAGLE-3 head mlxcel can run (its one line says why)."""


@dataclass
class HeadCache:
    """The head's KV cache of one sequence: keys (rope turned) and values as the cache type holds them, in
    position order, and their positions."""

    keys: mx.array | None = None  # (1, kv heads, n, head dim), float32
    values: mx.array | None = None
    positions: list[int] = field(default_factory=list)

    def trim(self, pos: int) -> None:
        """Forget every position from pos on (llama_memory_seq_rm(pos, -1))."""
        keep = next((i for i, p in enumerate(self.positions) if p >= pos), len(self.positions))
        if keep < len(self.positions):
            del self.positions[keep:]
            if keep == 0:
                self.keys = self.values = None
            else:
                assert self.keys is not None and self.values is not None
                self.keys, self.values = self.keys[:, :, :keep], self.values[:, :, :keep]

    @property
    def pos_max(self) -> int:
        """The last position held (-1: none), llama_memory_seq_pos_max."""
        return self.positions[-1] if self.positions else -1


@dataclass(frozen=True)
class Eagle3Head:
    target_layers: tuple[int, ...]
    target_width: int
    width: int
    n_head: int
    n_kv: int
    head_dim: int
    eps: float
    rope_base: float
    norm_before_residual: bool
    weights: dict[str, mx.array]  # the GGUF's names; q and k rows in HF's rotate-half order
    d2t: np.ndarray | None  # draft id -> target id (None: the draft vocab is the target's)
    vocab: int  # the target's vocabulary size
    # whether the draft ids keep the target ids' order (d2t ascending, or none): the first of equal logits is then
    # the same in either vocabulary, and a pick over the draft's logits is the pick over the target's
    ordered: bool = True

    @classmethod
    def load(cls, path: Path, target_vocab: int) -> Eagle3Head:
        key, tensors = header_of(path)
        _check(path, key, tensors)
        n_head, n_kv = int(key(f"{ARCH}.attention.head_count")), int(key(f"{ARCH}.attention.head_count_kv"))
        d2t = np.asarray(tensors["d2t"].data, np.int64).reshape(-1) if "d2t" in tensors else None
        if d2t is not None and (d2t.min() < 0 or d2t.max() >= target_vocab):
            raise HeadRefusal("the EAGLE-3 head's d2t names ids outside the target's vocabulary")
        width = int(key(f"{ARCH}.embedding_length"))
        return cls(
            target_layers=tuple(int(x) for x in key(f"{ARCH}.target_layers")),
            target_width=int(key(f"{ARCH}.target_hidden_size")),
            width=width,
            n_head=n_head,
            n_kv=n_kv,
            head_dim=width // n_head,
            eps=float(key(f"{ARCH}.attention.layer_norm_rms_epsilon")),
            rope_base=float(key(f"{ARCH}.rope.freq_base", 10000.0)),
            norm_before_residual=bool(key(f"{ARCH}.norm_before_residual", False)),
            weights=_weights(tensors, n_head, n_kv),
            d2t=d2t,
            vocab=target_vocab,
            ordered=d2t is None or bool(np.all(np.diff(d2t) > 0)),
        )

    def _norm(self, x: mx.array, name: str) -> mx.array:
        return mx.fast.rms_norm(x, self.weights[name], self.eps)

    def encode(self, features: np.ndarray) -> mx.array:
        """g rows (rows x width) from the target's features (rows x 3 target widths)."""
        return mx.array(features) @ self.weights["fc.weight"].T

    def decode(
        self,
        cache: HeadCache,
        tokens: list[int],
        g: mx.array,
        first_pos: int,
        embed: Callable[[mx.array], mx.array],
        numerics: KVNumerics,
    ) -> tuple[np.ndarray, mx.array]:
        """Consecutive positions first_pos.. (one per token, its g row) written to the cache (trimmed to
        first_pos first), causal over it. Returns every row's logits over the target's vocabulary (rows x vocab,
        float32) and their pre-norm outputs (rows x width)."""
        w = self.weights
        n, H, Hkv, D = len(tokens), self.n_head, self.n_kv, self.head_dim
        cache.trim(first_pos)
        ids = mx.array(tokens)
        own = w.get("token_embd.weight")  # (a head with its own embedding: Llama 3.3 70B's)
        e = embed(ids).astype(mx.float32) if own is None else mx.take(own, ids, axis=0)
        g_norm = self._norm(g, "blk.0.attn_norm_2.weight")
        x = mx.concatenate([self._norm(e, "blk.0.attn_norm.weight"), g_norm], axis=-1)
        q = (x @ w["blk.0.attn_q.weight"].T).reshape(1, n, H, D).transpose(0, 2, 1, 3)
        k = (x @ w["blk.0.attn_k.weight"].T).reshape(1, n, Hkv, D).transpose(0, 2, 1, 3)
        v = (x @ w["blk.0.attn_v.weight"].T).reshape(1, n, Hkv, D).transpose(0, 2, 1, 3)
        q = cpu_kernels.rope(q, D, self.rope_base, 1.0, [first_pos])
        k = round_to(cpu_kernels.rope(k, D, self.rope_base, 1.0, [first_pos]), numerics.k_type)
        v = round_to(v, numerics.v_type)
        cache.keys = k if cache.keys is None else mx.concatenate([cache.keys, k], axis=2)
        cache.values = v if cache.values is None else mx.concatenate([cache.values, v], axis=2)
        cache.positions.extend(range(first_pos, first_pos + n))
        attended = cpu_kernels.attention(q, cache.keys, cache.values, D**-0.5, None, numerics)
        attended = attended.transpose(0, 2, 1, 3).reshape(n, H * D)
        mid = attended @ w["blk.0.attn_output.weight"].T + (g_norm if self.norm_before_residual else g)
        h = self._norm(mid, "blk.0.ffn_norm.weight")
        ffn = (nn.silu(h @ w["blk.0.ffn_gate.weight"].T) * (h @ w["blk.0.ffn_up.weight"].T)) @ w[
            "blk.0.ffn_down.weight"
        ].T
        prenorm = mid + ffn
        logits = self._norm(prenorm, "output_norm.weight") @ w["output.weight"].T
        mx.eval(prenorm, logits)
        return np.array(logits, np.float32), prenorm

    def target_logits(self, draft: np.ndarray) -> np.ndarray:
        """Rows of draft-vocab logits over the target's vocabulary: each at its d2t id, every other id -inf."""
        if self.d2t is None:
            return draft
        full = np.full((draft.shape[0], self.vocab), -np.inf, np.float32)
        full[:, self.d2t] = draft
        return full


def _check(path: Path, key: Callable, tensors: dict) -> None:
    """b10621's refusals of a head (llama_model_eagle3::load_arch_hparams) and mlxcel's of what it does not run."""
    if key("general.architecture") != ARCH:
        raise HeadRefusal(f"'{path}' is no EAGLE-3 head (general.architecture {key('general.architecture')})")
    if key(f"{ARCH}.target_layers") is None:
        raise HeadRefusal("EAGLE3 model requires 'extract_layers' in GGUF metadata")
    if len(key(f"{ARCH}.target_layers")) != 3:
        raise HeadRefusal("EAGLE3 requires exactly 3 entries in 'extract_layers'")
    if int(key(f"{ARCH}.block_count", 1)) != 1:
        raise HeadRefusal("an EAGLE-3 head has one decoder layer")
    if key(f"{ARCH}.norm_before_fc", False):
        raise HeadRefusal("an EAGLE-3 head with norm_before_fc (EAGLE-3.1) is not served by mlxcel yet")
    if "output.weight" not in tensors:
        raise HeadRefusal("an EAGLE-3 head without its own lm_head (the target's) is not served by mlxcel yet")
    if any(name.startswith("rope_freqs") for name in tensors):
        raise HeadRefusal("an EAGLE-3 head with llama3 rope scaling (rope_freqs) is not served by mlxcel yet")
    if any(int(t.tensor_type) not in (F32, BF16) for name, t in tensors.items() if name != "d2t"):
        raise HeadRefusal("an EAGLE-3 head of other than F32 or BF16 tensors is not served by mlxcel yet")


def _weights(tensors: dict, n_head: int, n_kv: int) -> dict[str, mx.array]:
    """The head's float tensors by GGUF name, q and k rows back in HF's rotate-half order."""
    weights = {}
    for name, t in tensors.items():
        if name == "d2t":
            continue
        data = np.asarray(t.data)
        if int(t.tensor_type) == BF16:  # the upper halves of float32s
            data = (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if name == "blk.0.attn_q.weight":
            data = permute_rows(data, n_head)
        elif name == "blk.0.attn_k.weight":
            data = permute_rows(data, n_kv)
        weights[name] = mx.array(np.ascontiguousarray(data, np.float32))
    return weights
