"""A DFlash draft (b10621's src/models/dflash.cpp) loaded from the GGUF its converter writes, on MLX.

The draft is an encoder and a small decoder that reads the target's embedding and output head unless it has its
own (a reduced draft vocabulary's head: its rows land on their d2t ids, every other id -inf).
The encoder (`encode`) fuses the target's inputs to a few layers (rows x n_layers x target width) into g rows:
`fc`, then an RMS norm (`enc.output_norm`). Injection (`inject`) writes each g row straight into every decoder
layer's KV cache at the target's position (k: `wk`, per-head RMS norm, NeoX rope; v: `wv`), computing no
attention. Drafting (`block`) decodes [last token, MASK, ...] at the next positions: each layer's q/k/v from the
RMS-normed rows (per-head norms, rope), attention over every cell of the sequence (context and block alike:
non-causal), then llama's feed-forward; the rows' logits through the output norm and the target's head. The
block's cells are written to the cache like b10621's (their keys then read by the block itself) and dropped
again by the caller (`DraftCache.trim`).

A DSpark draft is a DFlash draft with a Markov head (low-rank bigram biases chained greedily along the block)
and a confidence head, applied to the block's logits where the GGUF holds them (`_markov`).

The KV cache stores keys and values as the draft context's cache type rounds them, and attention rounds what
ggml-cpu rounds over that type (models/kv_numerics.py: b10621's draft context defaults to f16 and flash
attention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx import nn

from .. import cpu_kernels
from .gguf_reader import header_of
from .kv_numerics import KVNumerics, round_to

ARCH = "dflash"
F32, BF16 = 0, 30  # GGML types


class DraftRefusal(ValueError):
    """A GGUF that is no DFlash draft mlxcel can run (its one line says why)."""


@dataclass
class DraftCache:
    """The draft's KV cache of one sequence: per layer keys (rope turned) and values as the cache type holds
    them, in position order, and their positions."""

    keys: list[mx.array | None] = field(default_factory=list)  # per layer (1, kv heads, n, head dim), float32
    values: list[mx.array | None] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def trim(self, pos: int) -> None:
        """Forget every position from pos on (llama_memory_seq_rm(pos, -1))."""
        keep = next((i for i, p in enumerate(self.positions) if p >= pos), len(self.positions))
        if keep == len(self.positions):
            return
        del self.positions[keep:]
        self.keys = [None if keep == 0 or k is None else k[:, :, :keep] for k in self.keys]
        self.values = [None if keep == 0 or v is None else v[:, :, :keep] for v in self.values]

    def append(self, layer: int, k: mx.array, v: mx.array) -> None:
        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = k if old_k is None else mx.concatenate([old_k, k], axis=2)
        self.values[layer] = v if old_v is None else mx.concatenate([old_v, v], axis=2)

    @property
    def pos_max(self) -> int:
        """The last position held (-1: none), llama_memory_seq_pos_max."""
        return self.positions[-1] if self.positions else -1


@dataclass(frozen=True)
class DFlashDraft:
    target_layers: tuple[int, ...]  # the target layers whose inputs the encoder reads (b10621's extract ids)
    width: int
    n_layer: int
    n_head: int
    n_kv: int
    head_dim: int
    eps: float
    rope_base: float
    block_size: int
    mask_token: int
    weights: dict[str, mx.array]  # the GGUF's names
    # DSpark's Markov head (markov_w1/w2, conf_proj) applies where the GGUF has it; its first biased row is the
    # anchor's where the draft samples from the anchor (dflash.sample_from_anchor, true unless written false)
    sample_from_anchor: bool = True
    # a reduced draft vocabulary: draft id -> target id (its own output head's rows); None: the target's vocabulary
    d2t: np.ndarray | None = None
    vocab: int = 0  # the target's vocabulary size

    @property
    def markov(self) -> bool:
        """Whether the draft has DSpark's Markov and confidence heads."""
        return "markov_w1.weight" in self.weights

    @classmethod
    def load(cls, path: Path, target_vocab: int) -> DFlashDraft:
        key, tensors = header_of(path)
        _check(path, key, tensors)
        n_head, n_kv = int(key(f"{ARCH}.attention.head_count")), int(key(f"{ARCH}.attention.head_count_kv"))
        width = int(key(f"{ARCH}.embedding_length"))
        mask = key("tokenizer.ggml.mask_token_id")
        if mask is None or not 0 <= int(mask) < target_vocab:
            # (b10621 then adds token -1 to every block: its decode fails and no draft is ever made)
            raise DraftRefusal("the DFlash draft names no mask token (tokenizer.ggml.mask_token_id) in the vocabulary")
        return cls(
            target_layers=tuple(int(x) for x in key(f"{ARCH}.target_layers")),
            width=width,
            n_layer=int(key(f"{ARCH}.block_count")),
            n_head=n_head,
            n_kv=n_kv,
            head_dim=int(key(f"{ARCH}.attention.key_length", width // n_head)),
            eps=float(key(f"{ARCH}.attention.layer_norm_rms_epsilon")),
            rope_base=float(key(f"{ARCH}.rope.freq_base", 10000.0)),
            block_size=int(key(f"{ARCH}.block_size", 16)),
            mask_token=int(mask),
            weights=_weights(tensors),
            sample_from_anchor=bool(key(f"{ARCH}.sample_from_anchor", True)),
            d2t=_d2t(tensors, target_vocab),
            vocab=target_vocab,
        )

    def _w(self, layer: int, name: str) -> mx.array:
        return self.weights[f"blk.{layer}.{name}.weight"]

    def _heads(self, x: mx.array, n_heads: int, norm: mx.array | None = None) -> mx.array:
        """Rows (n, heads x D) as (1, heads, n, D), each head RMS-normed with `norm` where given."""
        h = x.reshape(1, x.shape[0], n_heads, self.head_dim)
        if norm is not None:
            h = mx.fast.rms_norm(h, norm, self.eps)
        return h.transpose(0, 2, 1, 3)

    def encode(self, features: np.ndarray) -> mx.array:
        """g rows (rows x width) from the target's features (rows x n target layers x target width)."""
        fused = mx.array(features) @ self.weights["fc.weight"].T
        return mx.fast.rms_norm(fused, self.weights["enc.output_norm.weight"], self.eps)

    def _kv(self, layer: int, x: mx.array, first: int, numerics: KVNumerics) -> tuple[mx.array, mx.array]:
        k = self._heads(x @ self._w(layer, "attn_k").T, self.n_kv, self._w(layer, "attn_k_norm"))
        k = cpu_kernels.rope(k, self.head_dim, self.rope_base, 1.0, [first])
        v = self._heads(x @ self._w(layer, "attn_v").T, self.n_kv)
        return round_to(k, numerics.k_type), round_to(v, numerics.v_type)

    def inject(self, cache: DraftCache, g: mx.array, first: int, numerics: KVNumerics) -> None:
        """The g rows of positions first.. written into every layer's cache (trimmed to first before)."""
        cache.trim(first)
        for layer in range(self.n_layer):
            cache.append(layer, *self._kv(layer, g, first, numerics))
        cache.positions.extend(range(first, first + g.shape[0]))
        mx.eval(cache.keys, cache.values)

    def block(
        self,
        cache: DraftCache,
        tokens: list[int],
        first: int,
        embed: Callable[[mx.array], mx.array],
        head: Callable[[mx.array], mx.array],
        numerics: KVNumerics,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The block's rows (tokens at first..) decoded over the cache and themselves, every row seeing every
        cell; their cells stay in the cache. Returns the rows' logits over the target's vocabulary (float32) and,
        for a DSpark draft, their confidences (None else)."""
        n, D = len(tokens), self.head_dim
        cache.trim(first)
        own = self.weights.get("token_embd.weight")  # (a draft with its own embedding reads it, not the target's)
        x = embed(mx.array(tokens)).astype(mx.float32) if own is None else mx.take(own, mx.array(tokens), axis=0)
        for layer in range(self.n_layer):
            h = mx.fast.rms_norm(x, self._w(layer, "attn_norm"), self.eps)
            q = self._heads(h @ self._w(layer, "attn_q").T, self.n_head, self._w(layer, "attn_q_norm"))
            q = cpu_kernels.rope(q, D, self.rope_base, 1.0, [first])
            cache.append(layer, *self._kv(layer, h, first, numerics))
            keys, values = cache.keys[layer], cache.values[layer]
            assert keys is not None and values is not None
            # non-causal: each row attends as the last query over every key (ggml's rows are independent)
            rows = [cpu_kernels.attention(q[:, :, i : i + 1], keys, values, D**-0.5, None, numerics) for i in range(n)]
            attended = mx.concatenate(rows, axis=2).transpose(0, 2, 1, 3).reshape(n, self.n_head * D)
            mid = attended @ self._w(layer, "attn_output").T + x
            f = mx.fast.rms_norm(mid, self._w(layer, "ffn_norm"), self.eps)
            x = (
                mid
                + (nn.silu(f @ self._w(layer, "ffn_gate").T) * (f @ self._w(layer, "ffn_up").T))
                @ self._w(layer, "ffn_down").T
            )
        cache.positions.extend(range(first, first + n))
        normed = mx.fast.rms_norm(x, self.weights["output_norm.weight"], self.eps)
        output = self.weights.get("output.weight")  # (its own head, over the draft vocabulary where d2t maps it)
        logits = self._scattered(head(normed).astype(mx.float32) if output is None else normed @ output.T, -np.inf)
        if not self.markov:
            mx.eval(logits)
            return np.array(logits, np.float32), None
        return self._markov(tokens[0], logits, normed)

    def _scattered(self, rows: mx.array, fill: float) -> mx.array:
        """Draft-vocabulary rows over the target's vocabulary: each at its d2t id, every other id `fill`."""
        if self.d2t is None:
            return rows
        full = mx.full((rows.shape[0], self.vocab), fill, mx.float32)
        full[:, mx.array(self.d2t)] = rows
        return full

    def _markov(self, anchor: int, logits: mx.array, normed: mx.array) -> tuple[np.ndarray, np.ndarray]:
        """DSpark's head (dflash.cpp build_dspark_markov_head), greedy in-graph: from the first drafted row on,
        each row's logits get the bias w2 . w1[prev] (prev: the anchor, then the argmax of the row before, biased)
        and a confidence sigmoid(conf_proj . [its normed output; w1[prev]] + b). Returns the rows' logits and
        confidences (a row left unbiased: its confidence the sigmoid of its first logit, as b10621 pads it)."""
        w = self.weights
        w1, w2, proj = w["markov_w1.weight"], w["markov_w2.weight"], w["conf_proj.weight"]
        bias_c = w.get("conf_proj.bias")
        begin = 0 if self.sample_from_anchor else 1
        rows = [logits[i] for i in range(begin)]
        confs = [mx.sigmoid(logits[i, :1]) for i in range(begin)]
        prev = anchor
        for i in range(begin, logits.shape[0]):
            code = w1[prev]
            row = logits[i] + self._scattered((w2 @ code)[None], 0.0)[0]  # (-inf off the draft vocabulary stays)
            conf = proj @ mx.concatenate([normed[i], code])
            confs.append(mx.sigmoid(conf if bias_c is None else conf + bias_c))
            rows.append(row)
            mx.eval(row)
            prev = int(np.argmax(np.array(row)))  # (ggml_argmax: the first of equals, as numpy's)
        out, conf_rows = mx.stack(rows), mx.concatenate(confs)
        mx.eval(out, conf_rows)
        return np.array(out, np.float32), np.array(conf_rows, np.float32)


def _check(path: Path, key: Callable, tensors: dict) -> None:
    """b10621's refusals of a draft (llama_model_dflash::load_arch_hparams, the loader's tensors), then mlxcel's of
    what it does not run."""
    if key("general.architecture") != ARCH:
        raise DraftRefusal(f"'{path}' is no DFlash draft (general.architecture {key('general.architecture')})")
    if key(f"{ARCH}.target_layers") is None:
        raise DraftRefusal("DFlash model requires 'target_layers' in GGUF metadata")
    if key(f"{ARCH}.attention.layer_norm_rms_epsilon") is None:
        raise DraftRefusal(f"key not found in model: {ARCH}.attention.layer_norm_rms_epsilon")
    for name in ("fc.weight", "enc.output_norm.weight", "output_norm.weight"):
        if name not in tensors:
            raise DraftRefusal(f"missing tensor '{name}'")
    _check_served(key, tensors)


def _check_served(key: Callable, tensors: dict) -> None:
    """What mlxcel does not run yet (b10621 does): one line each."""
    if key(f"{ARCH}.attention.sliding_window") is not None or key(f"{ARCH}.hyper_connection.count") is not None:
        raise DraftRefusal("a DFlash draft with sliding-window or hyper-connection layers is not served by mlxcel yet")
    if key(f"{ARCH}.rope.scaling.type") not in (None, "none") or "fc.scale" in tensors:
        raise DraftRefusal("a DFlash draft with rope scaling or a scaled fc is not served by mlxcel yet")
    if any(int(t.tensor_type) not in (F32, BF16) for name, t in tensors.items() if name != "d2t"):
        raise DraftRefusal("a DFlash draft of other than F32 or BF16 tensors is not served by mlxcel yet")


def _d2t(tensors: dict, target_vocab: int) -> np.ndarray | None:
    """A reduced draft vocabulary's target ids (the converter writes them absolute, I64), checked as b10621's
    graph needs them: one per row of the draft's own output head, inside the target's vocabulary."""
    if "d2t" not in tensors:
        return None
    ids = np.asarray(tensors["d2t"].data, np.int64).reshape(-1)
    output = tensors.get("output.weight")
    if output is None or int(np.asarray(output.data).shape[0]) != ids.size:
        raise DraftRefusal("the DFlash draft's d2t needs its own output head of one row per draft token")
    if ids.min() < 0 or ids.max() >= target_vocab:
        raise DraftRefusal("the DFlash draft's d2t names ids outside the target's vocabulary")
    return ids


def _weights(tensors: dict) -> dict[str, mx.array]:
    """The draft's float tensors by GGUF name (HF's layout: the converter permutes no rows for NeoX rope)."""
    weights = {}
    for name, t in tensors.items():
        if name == "d2t":
            continue
        data = np.asarray(t.data)
        if int(t.tensor_type) == BF16:  # the upper halves of float32s
            data = (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        weights[name] = mx.array(np.ascontiguousarray(data, np.float32))
    return weights
