"""The only code that calls the model: prefill a prompt, then decode one token at a time."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

from ..models import kv_numerics
from ..models.decode_step import MAX_ROWS, DecodeStep
from ..models.kv_numerics import KVNumerics
from ..models.loader import LoadedModel
from ..models.prefill_step import PrefillStep
from .state_size import state_bytes


def _trunk_and_head(model):
    """An mlx-lm llama-family model's transformer trunk and output head, or None for another model. The model's
    own call runs the head on every position of a prompt (512 x vocab x hidden multiply-adds for a 512-token
    chunk, about a fifth of its work) where a prompt needs the last position's logits only."""
    if type(model) is not llama.Model:
        return None
    trunk = model.model
    return trunk, trunk.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head


class Runner:
    def __init__(self, loaded: LoadedModel, n_batch: int = 2048, kv: KVNumerics | None = None):
        self.loaded = loaded
        self.n_batch = n_batch
        self.kv = kv  # None: a float32 cache
        if kv is not None:  # before the native steps are built: they take the model's
            kv_numerics.apply(loaded.model, kv)
        self._split = _trunk_and_head(loaded.model)
        self._step = DecodeStep.build(loaded.model)  # None: decode steps run through MLX
        self._prefill = PrefillStep.build(self._step)  # None: prompts run through MLX
        self.lora = None  # server.models.lora.LoraSet: while a pass adds adapter terms, it runs through MLX
        self.steered = False  # control vectors added to layer outputs: every pass runs through MLX

    def _native(self) -> bool:
        """Whether the native steps may run this pass: they know the base weights only."""
        return not self.steered and (self.lora is None or not self.lora.engaged())

    def new_cache(self) -> list:
        return make_prompt_cache(self.loaded.model)

    def snapshot(self, cache: list, n: int, n_stream: int = 1) -> tuple[list, int]:
        """The first n positions of every layer's keys and values, evaluated, and the size b10621 gives such a
        state (its cache types' bytes, server/engine/state_size.py)."""
        snap = [(c.keys[..., :n, :], c.values[..., :n, :]) for c in cache]
        mx.eval(snap)
        return snap, self.state_bytes(snap, n, n_stream)

    def state_bytes(self, snap: list | None, n: int, n_stream: int = 1) -> int:
        """snap: a snapshot's arrays, whose shapes give each layer's widths (None: the model's arguments)."""
        kv = self.kv or KVNumerics()
        if snap is not None:
            layers = [(k.shape[-3] * k.shape[-1], v.shape[-3] * v.shape[-1]) for k, v in snap]
        else:
            a = self.loaded.model.args
            width = a.num_key_value_heads * (getattr(a, "head_dim", None) or a.hidden_size // a.num_attention_heads)
            layers = [(width, width)] * a.num_hidden_layers
        return state_bytes(n, layers, kv.k_type, kv.v_type, n_stream)

    def restore(self, snap: list, n: int) -> list:
        cache = self.new_cache()
        for c, (k, v) in zip(cache, snap):
            c.keys, c.values, c.offset = k[..., :n, :], v[..., :n, :], n
        return cache

    def _rope(self):
        rope = self.loaded.model.layers[0].self_attn.rope
        # mlx-lm's scaled variants (its YaRN, Llama 3, ...) carry frequencies of their own; mlxcel's YarnRoPE
        # computes ggml's rope_yarn and turns keys as b10621 does
        if type(rope).__name__ not in ("RoPE", "YarnRoPE"):
            raise NotImplementedError(f"turning cached keys with {type(rope).__name__} is not implemented")
        return rope

    def can_turn_keys(self) -> bool:
        """Cached keys can be moved to other positions (context shift, cache reuse): a plain rope."""
        try:
            self._rope()
            return True
        except (NotImplementedError, AttributeError):
            return False

    def _turn(self, keys: mx.array, shift: int) -> mx.array:
        """Keys rotated as if they sat `shift` positions further on (llama.cpp's K-shift)."""
        rope = self._rope()
        b, h, t, d = keys.shape
        stored, keys = keys.dtype, keys.astype(mx.float32)  # turned in float32, stored back in the cache's type
        if type(rope).__name__ == "YarnRoPE":
            # b10621's build_rope_shift: rope_yarn at the shift with the context's ext_factor, attn_factor and
            # correction dims, so a turned key is scaled by YaRN's mscale once more, as upstream's is
            turned = rope(keys.reshape(1, b * h * t, 1, d), offset=shift)
            return turned.reshape(b, h, t, d).astype(stored)
        # one position per row, all at offset shift: a rotation by shift * theta
        turned = mx.fast.rope(keys.reshape(b * h * t, 1, d), rope.dims, traditional=rope.traditional,
                              base=rope.base, scale=rope.scale, offset=shift)
        return turned.reshape(b, h, t, d).astype(stored)

    def restore_chunks(self, snap: list, prefix: int, chunks: list[tuple[int, int, int]]) -> list:
        """restore() of a prefix, then each (cached start, prompt start, length) chunk of the snapshot moved to
        its prompt start, its keys turned by the move: b10621's cache reuse (seq_rm, then seq_add)."""
        cache = self.new_cache()
        for c, (k, v) in zip(cache, snap):
            keys, values = [k[..., :prefix, :]], [v[..., :prefix, :]]
            for head_c, head_p, n in chunks:
                moved = k[..., head_c:head_c + n, :]
                keys.append(self._turn(moved, head_p - head_c) if head_p != head_c else moved)
                values.append(v[..., head_c:head_c + n, :])
            c.keys, c.values = mx.concatenate(keys, axis=2), mx.concatenate(values, axis=2)
            c.offset = prefix + sum(n for _, _, n in chunks)
        mx.eval([(c.keys, c.values) for c in cache])
        return cache

    def shift(self, cache: list, n_keep: int, n_discard: int) -> None:
        """b10621's context shift: drop positions [n_keep, n_keep + n_discard) from every layer and move the
        rest back by n_discard, re-rotating their keys (llama.cpp's seq_rm + seq_add K-shift)."""
        self._rope()
        for c in cache:
            n = c.offset
            keys, values = c.keys[..., :n, :], c.values[..., :n, :]
            tail = self._turn(keys[..., n_keep + n_discard:, :], -n_discard)
            c.keys = mx.concatenate([keys[..., :n_keep, :], tail], axis=2)
            c.values = mx.concatenate([values[..., :n_keep, :], values[..., n_keep + n_discard:, :]], axis=2)
            c.offset = n - n_discard
            mx.eval(c.keys, c.values)

    def prefill(self, cache: list, tokens: list[int]) -> mx.array:
        """Feed `tokens` in chunks of n_batch; returns the last position's logits (float32)."""
        logits = None
        for start in range(0, len(tokens), self.n_batch):
            last = start + self.n_batch >= len(tokens)
            if self._prefill is not None and self._native():
                done, out = self._prefill(cache, tokens[start : start + self.n_batch], last)
                if done:
                    logits = out
                    continue
            chunk = mx.array([tokens[start : start + self.n_batch]])
            if self._split is None:
                logits = self.loaded.model(chunk, cache=cache)[:, -1, :]
                mx.eval(logits)
                continue
            trunk, head = self._split
            hidden = trunk(chunk, cache=cache)
            if last:  # the head on the last position only
                logits = head(hidden[:, -1:, :])[:, -1, :]
            mx.eval(logits if last else hidden)
        assert logits is not None
        return logits.astype(mx.float32)

    def decode(self, cache: list, token: int) -> mx.array:
        if self._step is not None and self._native() and (logits := self._step(cache, [token])) is not None:
            return logits
        logits = self.loaded.model(mx.array([[token]]), cache=cache)[:, -1, :]
        return logits.astype(mx.float32)

    def verify(self, cache: list, tokens: list[int]) -> mx.array:
        """A speculative round's tokens (the last sampled one, then the draft) fed at the sequence's next
        positions; every position's logits (rows x vocab, float32). Natively each row is bitwise what decode()
        returns at its position, so a verified draft changes no token (tests/test_speculative.py)."""
        out = []
        for start in range(0, len(tokens), MAX_ROWS):
            chunk = tokens[start:start + MAX_ROWS]
            if self._step is not None and self._native() and (logits := self._step.verify(cache, chunk)) is not None:
                out.append(logits)
                continue
            logits = self.loaded.model(mx.array([chunk]), cache=cache)[0].astype(mx.float32)
            mx.eval(logits)
            out.append(logits)
        return out[0] if len(out) == 1 else mx.concatenate(out, axis=0)

    @staticmethod
    def trim(cache: list, n: int) -> None:
        """Forget every position from n on (a rejected draft's): the next write lands at n."""
        for c in cache:
            c.offset = min(c.offset, n)

    # --- decoding several sequences in one forward pass -------------------------------------------------------
    # Their caches are merged once into one left-padded BatchKVCache per layer and stay merged while the same
    # sequences decode together (tests/test_engine_batching.py).

    @staticmethod
    def can_batch(caches: list[list]) -> bool:
        """Plain growing KV caches only (a sliding-window or quantized cache decodes alone)."""
        return all(type(c) is KVCache for cache in caches for c in cache)

    @staticmethod
    def batch_merge(caches: list[list]) -> list:
        return [BatchKVCache.merge([cache[i] for cache in caches]) for i in range(len(caches[0]))]

    @staticmethod
    def batch_keep(batch: list, rows: list[int]) -> None:
        """Keep these rows (in this order), in place."""
        for c in batch:
            c.filter(mx.array(rows))

    @staticmethod
    def batch_extend(batch: list, other: list) -> None:
        for c, o in zip(batch, other):
            c.extend(o)

    @staticmethod
    def batch_extract(batch: list, row: int) -> list:
        """A row's own cache again (a copy of its positions)."""
        out = [c.extract(row) for c in batch]
        mx.eval([(c.keys, c.values) for c in out])
        return out

    def batch_decode(self, batch: list, tokens: list[int]) -> mx.array:
        """One token for each row; the rows' logits (float32), one per row."""
        if self._step is not None and self._native() and (logits := self._step(batch, tokens)) is not None:
            return logits
        logits = self.loaded.model(mx.array([[t] for t in tokens]), cache=batch)[:, -1, :]
        return logits.astype(mx.float32)

    @property
    def n_vocab(self) -> int:
        return int(self.loaded.config.get("vocab_size", 0))

    @staticmethod
    def to_numpy(logits: mx.array):
        return np.array(logits[0], copy=False)

    @staticmethod
    def greedy(logits: mx.array, banned: frozenset[int] | tuple[int, ...] = ()) -> int:
        """The first highest logit of a one-row logits array, the banned tokens left out."""
        row = np.array(logits, copy=False).reshape(-1)
        if banned:
            row = row.copy()  # (the row may be a view of a batch's logits)
            row[sorted(banned)] = -np.inf
        return int(np.argmax(row))


def score(runner: Runner, prompt: list[int], continuation: list[int], n_probs: int) -> list[tuple]:
    """(token, logprob, top-k) for each continuation token, teacher-forced as a generation computes it: the
    prompt prefilled, then one decode step per token (over a narrower KV cache type a prompt's rows and a
    decode step's round differently, as in b10621: models/kv_numerics.py)."""
    cache = runner.new_cache()
    rows = [runner.prefill(cache, prompt)]
    rows += [runner.decode(cache, token) for token in continuation[:-1]]
    logits = mx.concatenate([r.reshape(1, -1) for r in rows], axis=0).astype(mx.float32)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    k = max(1, min(n_probs, logprobs.shape[-1]))
    top_ids = mx.argsort(-logprobs, axis=-1)[:, :k]
    top_lp = mx.take_along_axis(logprobs, top_ids, axis=-1)
    chosen = mx.take_along_axis(logprobs, mx.array(continuation)[:, None], axis=-1)[:, 0]
    mx.eval(top_ids, top_lp, chosen)
    ids, lps, ch = top_ids.tolist(), top_lp.tolist(), chosen.tolist()
    return [(t, ch[i], tuple(zip(ids[i], lps[i]))) for i, t in enumerate(continuation)]
