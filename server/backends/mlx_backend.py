"""The MLX backend: any mlx-lm architecture, every cache kind mlx-lm hands out, on MLX's default device.

A sequence's cache is mlx-lm's own list of per-layer caches (`LayerCaches`, which also counts its positions:
a state-space layer has no offset to read). What each kind allows is declared once, at load (`_KINDS`): plain
and quantized KV caches rewind (a snapshot or restore at any position, a trimmed draft); sliding-window
(`RotatingKVCache`), chunked and state-space (`ArraysCache`) caches are kept and restored whole only; a kind
not listed is refused at load. Where MLX runs on a GPU, the weights' wired limit is raised as mlx-lm's own
generate loop raises it, a greedy draw's argmax runs on the device and the next step is pipelined (`_Pending`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, cast

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models import cache as mlx_cache

from ..models import control_vector, cpu_layers, kv_numerics, lora
from ..models.kv_numerics import KVNumerics
from ..models.loader import LoadedModel
from .base import BackendRefusal, Capabilities, Logits, TargetPass
from .state_size import row_bytes, state_bytes

log = logging.getLogger("mlxcel.backend")


@dataclass(frozen=True)
class _Kind:
    rewind: bool  # trimmable at any position
    batch: bool  # merged into a BatchKVCache for a decode pass
    turn: bool  # its keys can be turned by a rope shift


_KINDS = {
    "KVCache": _Kind(rewind=True, batch=True, turn=True),
    "QuantizedKVCache": _Kind(rewind=True, batch=False, turn=False),
    "ConcatenateKVCache": _Kind(rewind=True, batch=False, turn=False),
    "RotatingKVCache": _Kind(rewind=False, batch=False, turn=False),
    "ChunkedKVCache": _Kind(rewind=False, batch=False, turn=False),
    "ArraysCache": _Kind(rewind=False, batch=False, turn=False),
    "MambaCache": _Kind(rewind=False, batch=False, turn=False),
    "CacheList": _Kind(rewind=False, batch=False, turn=False),
}
_SLICED = ("KVCache", "QuantizedKVCache", "ConcatenateKVCache")  # snapshots keep their first n positions only
DECODE_BATCH_ROWS = 1024  # MLX takes any number of rows; the scheduler's slots are the real bound
# The rows a prompt chunk may have and still be summed as decode steps are (engine/provenance.py) and a verify
# pass's chunk: the native few-row kernels' bound (cpu_kernels.c SMALL_M), kept here so that a model on either
# backend recomputes the same positions on a prompt-cache hit
FEW_ROWS = 16


@dataclass(frozen=True)
class MLXSnapshot:
    """A cache's first n positions, evaluated, kept apart from it."""

    layers: list[tuple[str, Any]]  # per layer ("kv", (keys, values)) or ("state", (its class, its state))
    n: int

    def kv(self) -> list[tuple[mx.array, mx.array]]:
        """The KV layers' keys and values."""
        return [arrays for how, arrays in self.layers if how == "kv"]


class LayerCaches(list):
    """One sequence's per-layer mlx-lm caches, and how many positions they hold; where the backend captures layer
    inputs, the passes over them not yet taken (`passes`, backends/native_backend.py)."""

    n: int = 0
    passes: list | None = None


@dataclass(frozen=True)
class _Pending:
    """A decode step issued ahead (mlx-lm's generate loop: async_eval of step t+1 on the lazy token t, then
    token t read back), so the device computes while the host checks token t. Its position is written in the
    cache but not counted in cache.n; the next decode of the same token there takes its logits, anything else
    that touches a cache first withdraws it (`_settle`: the cache trimmed back by one)."""

    cache: LayerCaches
    token: int
    logits: mx.array


def _trunk_and_head(model: nn.Module) -> tuple[nn.Module, Callable[[mx.array], mx.array]] | None:
    """An mlx-lm llama-shaped model's transformer trunk and output head, or None for another model. The model's
    own call runs the head on every position of a prompt (512 x vocab x hidden multiply-adds for a 512-token
    chunk, about a fifth of its work) where a prompt needs the last position's logits only."""
    if hasattr(model, "trunk_and_head"):  # (a model of mlxcel's own that says which: models/qwen35.py)
        return model.trunk_and_head()
    if not cpu_layers.llama_shaped(model):
        return None
    trunk = model.model
    return trunk, trunk.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head


def _copy(x: Any) -> Any:
    """New array objects with the same values (mlx-lm updates a cache's buffers in place)."""
    return tree_map(lambda a: mx.array(a) if isinstance(a, mx.array) else a, x)


def _kind_names(caches: list) -> tuple[str, ...]:
    names = []
    for c in caches:
        names.append(type(c).__name__)
        if isinstance(c, mlx_cache.CacheList):
            names.extend(type(s).__name__ for s in c.caches)
    return tuple(dict.fromkeys(names))


def _layer_widths(model: nn.Module) -> list[tuple[int, int]]:
    """Each layer's key and value row widths (n_embd_k_gqa, n_embd_v_gqa), as b10621 sizes a KV state."""
    a = model.args
    heads = getattr(a, "num_attention_heads", 1) or 1
    kv_heads = getattr(a, "num_key_value_heads", None) or heads
    head_dim = getattr(a, "head_dim", None) or getattr(a, "hidden_size", 0) // heads
    return [(kv_heads * head_dim, kv_heads * head_dim)] * len(model.layers)


def _wire_limit() -> None:
    """On a GPU, the weights' pages wired as mlx-lm's generate loop wires them (its wired_limit)."""
    metal = getattr(mx, "metal", None)
    if metal is not None and metal.is_available():
        mx.set_wired_limit(int(mx.device_info()["max_recommended_working_set_size"]))


class MLXBackend:
    """A loaded mlx-lm model (use `server.backends.open_backend`)."""

    def __init__(self, loaded: LoadedModel, n_batch: int = 2048, kv: KVNumerics | None = None):
        self.loaded = loaded
        self.model = loaded.model
        self.n_batch = n_batch
        self.kv = kv  # None: a float32 cache
        if kv is not None:  # before any native step is built: they take the model's
            kv_numerics.apply(loaded.model, kv)
        self._split = _trunk_and_head(loaded.model)
        self.lora: lora.LoraSet | None = None  # while a pass adds adapter terms it runs through MLX
        self.steered = False  # control vectors added to layer outputs: every pass runs through MLX
        self.n_vocab = int(loaded.config.get("vocab_size", 0))
        self.n_ctx_train = loaded.n_ctx_train
        kinds = _kind_names(mlx_cache.make_prompt_cache(loaded.model))
        unknown = [k for k in kinds if k not in _KINDS]
        if unknown:
            raise BackendRefusal(f"the model's cache kind {', '.join(unknown)} is not supported by mlxcel")
        self._kinds = [_KINDS[k] for k in kinds]
        self._on_device_argmax = mx.default_device() != mx.cpu
        if self._on_device_argmax:
            _wire_limit()
        self.capabilities = self._capabilities(kinds)
        # where a greedy draw's token may be fed to the next step before it is read back: on a GPU, with
        # caches that can withdraw the step (tests set it on the CPU)
        self.pipeline = self._on_device_argmax and self.capabilities.rewind
        self._pending: _Pending | None = None
        self._last_decode: tuple[LayerCaches, mx.array] | None = None
        self.capturing_outputs = False  # every pass keeps its rows' final hidden states (an MTP block reads them)

    def _capabilities(self, kinds: tuple[str, ...]) -> Capabilities:
        batch = all(k.batch for k in self._kinds)
        return Capabilities(
            cache_kinds=kinds,
            rewind=all(k.rewind for k in self._kinds),
            draft_rewind=set(kinds) <= {"KVCache", "ArraysCache"} and getattr(self.model, "step_states", False),
            batch_rows=DECODE_BATCH_ROWS if batch else 1,
            row_invariant=False,
            turn_keys=all(k.turn for k in self._kinds) and self._turnable(),
            few_rows=FEW_ROWS,
            adapters=True,
            control_vectors=hasattr(self.model, "layers"),
        )

    # --- forward passes ---------------------------------------------------------------------------------------

    def _forward(self, cache: list, tokens: list[list[int]] | mx.array) -> mx.array:
        return self.model(mx.array(tokens) if isinstance(tokens, list) else tokens, cache=cache)

    def prefill(self, cache: LayerCaches, tokens: list[int]) -> Logits:
        """Feed tokens in chunks of n_batch; the last position's logits (1 x vocab, float32)."""
        self._settle()
        logits = None
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            logits = self._prefill_chunk(cache, chunk, start + self.n_batch >= len(tokens))
            cache.n += len(chunk)
        assert logits is not None, "an empty prompt"
        return logits.astype(mx.float32)

    def prefill_rows(self, cache: LayerCaches, rows: np.ndarray, non_causal: bool = False) -> Logits:
        """Embedding rows in chunks of n_batch (an image's rows are one chunk when it fits, as mtmd decodes it)."""
        self._settle()
        logits = None
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start : start + self.n_batch]
            logits = self._rows_chunk(cache, chunk, start + self.n_batch >= len(rows), non_causal)
            cache.n += len(chunk)
        assert logits is not None, "no rows"
        return logits.astype(mx.float32)

    def _rows_chunk(
        self, cache: LayerCaches, chunk: np.ndarray, last: bool, non_causal: bool = False
    ) -> mx.array | None:
        if self._split is None:
            raise BackendRefusal("this model takes no embedding rows (an image's) in mlxcel yet")
        if non_causal:
            raise BackendRefusal("an image decoded non-causally (Gemma 3's) runs on the native steps only")
        trunk, head = self._split
        self._record_outputs(cache, None, None)
        hidden = trunk(None, cache=cache, input_embeddings=mx.array(chunk)[None])
        if not last:
            mx.eval(hidden)
            return None
        logits = head(hidden[:, -1:, :])[:, -1, :]
        mx.eval(logits)
        return logits

    def _prefill_chunk(self, cache: LayerCaches, chunk: list[int], last: bool) -> mx.array | None:
        if self._split is None:
            logits = self._forward(cache, [chunk])[:, -1, :]
            mx.eval(logits)
            return logits
        trunk, head = self._split
        hidden = trunk(mx.array([chunk]), cache=cache)
        self._record_outputs(cache, list(chunk), hidden)
        if not last:
            mx.eval(hidden)
            return None
        logits = head(hidden[:, -1:, :])[:, -1, :]  # the head on the last position only
        mx.eval(logits)
        return logits

    def decode(self, cache: LayerCaches, token: int) -> Logits:
        pending = self._pending
        if pending is not None and pending.cache is cache and pending.token == token:
            self._pending = None
            cache.n += 1
            self._last_decode = (cache, pending.logits)
            return pending.logits
        self._settle()
        if self.capturing_outputs:
            logits = self._outputs_pass(cache, [token])[-1:]
        else:
            logits = self._forward(cache, [[token]])[:, -1, :].astype(mx.float32)
        cache.n += 1
        self._last_decode = (cache, logits)
        return logits

    def _outputs_pass(self, cache: LayerCaches, tokens: list[int]) -> mx.array:
        """Every row's logits (float32), the rows' final hidden states recorded."""
        assert self._split is not None
        trunk, head = self._split
        hidden = trunk(mx.array([tokens]), cache=cache)
        self._record_outputs(cache, tokens, hidden)
        logits = head(hidden)[0].astype(mx.float32)
        mx.eval(logits)
        return logits

    # --- the final hidden states of every pass (an MTP block's input: engine/mtp_drafter.py) ------------------

    def capture_outputs(self) -> None:
        """From now on every pass keeps its rows' final hidden states (after the output norm), as TargetPass
        records on the sequence's cache (`take_passes`); decode steps then run one sequence a pass."""
        if self._split is None:
            raise BackendRefusal("this model's final hidden states are not reachable in mlxcel")
        self.capturing_outputs = True
        self.pipeline = False

    def take_passes(self, cache: LayerCaches) -> list[TargetPass]:
        """The passes over this cache since the last take, in order."""
        passes, cache.passes = cache.passes or [], []
        return passes

    def _record_outputs(self, cache: LayerCaches, tokens: list[int] | None, hidden: mx.array | None) -> None:
        if self.capturing_outputs:
            if cache.passes is None:
                cache.passes = []
            cache.passes.append(TargetPass(cache.n, tokens, None if hidden is None else hidden[0]))

    def _settle(self) -> None:
        """Withdraw a step issued ahead (its position trimmed from its cache) before a cache is used otherwise."""
        pending, self._pending, self._last_decode = self._pending, None, None
        if pending is not None:
            for c in pending.cache:
                c.trim(1)

    def _issue_ahead(self, cache: LayerCaches, token: mx.array) -> None:
        logits = self._forward(cache, token.reshape(1, 1))[:, -1, :].astype(mx.float32)
        mx.async_eval(logits)
        self._pending = _Pending(cache, int(cast(int, token.item())), logits)

    def decode_rows(self, batch: list, tokens: list[int]) -> Logits:
        """One token for each row of a merged batch; the rows' logits (float32), one per row."""
        self._settle()
        logits = self._forward(batch, [[t] for t in tokens])[:, -1, :]
        return logits.astype(mx.float32)

    def verify(self, cache: LayerCaches, tokens: list[int]) -> Logits:
        self._settle()
        out = []
        rows = self._verify_rows()
        states = [c for c in cache if type(c) is mlx_cache.ArraysCache] if self.capabilities.draft_rewind else []
        for c in states:  # (StepStatesDeltaNet: each row's state kept, the one before them first)
            vars(c).update(keep_steps=True, steps=[(c[0], c[1])], steps_first=cache.n)
        try:
            for start in range(0, len(tokens), rows):
                out.append(self._verify_chunk(cache, tokens[start : start + rows]))
                cache.n += len(out[-1])
        finally:
            for c in states:
                vars(c)["keep_steps"] = False
        return out[0] if len(out) == 1 else mx.concatenate(out, axis=0)

    def _verify_rows(self) -> int:
        """The rows of one verify pass (a longer draft is verified in several)."""
        return FEW_ROWS

    def _verify_chunk(self, cache: LayerCaches, chunk: list[int]) -> mx.array:
        if self.capturing_outputs:
            return self._outputs_pass(cache, chunk)
        logits = self._forward(cache, [chunk])[0].astype(mx.float32)
        mx.eval(logits)
        return logits

    def score(self, prompt: list[int], continuation: list[int], n_probs: int) -> list[tuple]:
        """(token, logprob, top-k) for each continuation token, teacher-forced as a generation computes it: the
        prompt prefilled, then one decode step per token (over a narrower KV cache type a prompt's rows and a
        decode step's round differently, as in b10621: models/kv_numerics.py)."""
        cache = self.new_cache()
        rows = [self.prefill(cache, prompt)]
        for token in continuation[:-1]:
            rows.append(self.decode(cache, token))
            # each step evaluated before the next is built: in a pipeline split (distributed.pipeline) every step
            # sends and gathers, and a graph of several steps may run them on each rank in another order
            mx.eval(rows[-1])
        logits = mx.concatenate([r.reshape(1, -1) for r in rows], axis=0).astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        k = max(1, min(n_probs, logprobs.shape[-1]))
        top_ids = mx.argsort(-logprobs, axis=-1)[:, :k]
        top_lp = mx.take_along_axis(logprobs, top_ids, axis=-1)
        chosen = mx.take_along_axis(logprobs, mx.array(continuation)[:, None], axis=-1)[:, 0]
        mx.eval(top_ids, top_lp, chosen)
        ids, lps, ch = cast(list, top_ids.tolist()), cast(list, top_lp.tolist()), cast(list, chosen.tolist())
        return [(t, ch[i], tuple(zip(ids[i], lps[i], strict=False))) for i, t in enumerate(continuation)]

    def weights(self) -> list:
        return [pair[1] for pair in tree_flatten(self.model.parameters())]

    # --- caches -----------------------------------------------------------------------------------------------

    def new_cache(self) -> LayerCaches:
        return LayerCaches(mlx_cache.make_prompt_cache(self.model))

    @staticmethod
    def length(cache: LayerCaches) -> int:
        return cache.n

    def snapshot(self, cache: LayerCaches, n: int, n_stream: int = 1) -> tuple[MLXSnapshot, int]:
        """The first n positions of every layer, evaluated, and the size b10621 gives such a state
        (state_size.py). A whole-state kind keeps its whole state (n must be the cache's length)."""
        self._settle()
        if n != cache.n and not self.capabilities.rewind:
            raise ValueError(f"a snapshot at {n} of {cache.n} positions: this model's caches do not rewind")
        snap = [self._layer_snapshot(c, n) for c in cache]
        mx.eval([arrays for _, arrays in snap])
        return MLXSnapshot(snap, n), self.state_bytes(n, n_stream)

    @staticmethod
    def _layer_snapshot(c: Any, n: int) -> tuple[str, Any]:
        if type(c).__name__ in _SLICED:
            return "kv", tree_map(lambda a: a[..., :n, :], (c.keys, c.values))
        return "state", (type(c), _copy(c.state))

    def state_bytes(self, n: int, n_stream: int = 1) -> int:
        kv = self.kv or KVNumerics()
        return state_bytes(n, _layer_widths(self.model), kv.k_type, kv.v_type, n_stream)

    def kv_report(self, cells: int, n_stream: int, n_seq: int) -> str:
        """b10621's llama_kv_cache size line: `cells` per stream, over this model's layers and cache types
        (mlxcel allocates cells as positions fill, 256 at a time: this is what a full context takes)."""
        kv = self.kv or KVNumerics()
        widths = _layer_widths(self.model)
        k = sum(row_bytes(kv.k_type, wk) for wk, _ in widths) * cells * n_stream / 2**20
        v = sum(row_bytes(kv.v_type, wv) for _, wv in widths) * cells * n_stream / 2**20
        return (
            f"llama_kv_cache: size = {k + v:7.2f} MiB ({cells:6d} cells, {len(widths):3d} layers, "
            f"{n_seq:2d}/{n_stream} seqs), K ({kv.k_type}): {k:7.2f} MiB, V ({kv.v_type}): {v:7.2f} MiB"
        )

    def restore(self, snap: MLXSnapshot, n: int) -> LayerCaches:
        layers, held = snap.layers, snap.n
        if n != held and not self.capabilities.rewind:
            raise ValueError(f"a restore at {n} of {held} positions: this model's caches do not rewind")
        cache = self.new_cache()
        for i, (how, arrays) in enumerate(layers):
            if how == "kv":
                c = cache[i]
                c.keys, c.values = tree_map(lambda a: a[..., :n, :], arrays)
                c.offset = n
            else:
                cls, state = arrays
                cache[i] = cls.from_state(_copy(state))
        cache.n = n
        return cache

    def trim(self, cache: LayerCaches, n: int) -> None:
        """Forget every position from n on (a rejected draft's): the next write lands at n."""
        self._settle()
        for c in cache:
            if type(c) is mlx_cache.ArraysCache:  # back to a state its last verify kept (draft_rewind)
                steps, first = getattr(c, "steps", None), getattr(c, "steps_first", 0)
                if n < cache.n:
                    if not steps or not first <= n < first + len(steps):
                        raise ValueError(f"a recurrent state at {n} of {cache.n} positions was not kept")
                    c[0], c[1] = steps[n - first]
                vars(c)["steps"] = None
            else:
                c.trim(max(c.offset - n, 0))
        cache.n = min(cache.n, n)

    # --- moving cached keys (a plain rope only) ---------------------------------------------------------------

    def _rope(self, layer: int = 0) -> nn.Module:
        rope = self.model.layers[layer].self_attn.rope  # (each layer's own: Gemma 3's sliding layers' base)
        # mlx-lm's scaled variants (its YaRN, Llama 3, ...) carry frequencies of their own; mlxcel's YarnRoPE
        # computes ggml's rope_yarn and turns keys as b10621 does
        if type(rope).__name__ not in ("RoPE", "YarnRoPE"):
            raise NotImplementedError(f"turning cached keys with {type(rope).__name__} is not implemented")
        return rope

    def _turnable(self) -> bool:
        try:
            for layer in range(len(self.model.layers)):
                self._rope(layer)
            return True
        except (NotImplementedError, AttributeError, IndexError):
            return False

    def _turn(self, keys: mx.array, shift: int, layer: int = 0) -> mx.array:
        """A layer's keys rotated as if they sat `shift` positions further on (llama.cpp's K-shift)."""
        rope = self._rope(layer)
        b, h, t, d = keys.shape
        stored, keys = keys.dtype, keys.astype(mx.float32)  # turned in float32, stored back in the cache's type
        if type(rope).__name__ == "YarnRoPE":
            # b10621's build_rope_shift: rope_yarn at the shift with the context's ext_factor, attn_factor and
            # correction dims, so a turned key is scaled by YaRN's mscale once more, as upstream's is
            turned = rope(keys.reshape(1, b * h * t, 1, d), offset=shift)
            return turned.reshape(b, h, t, d).astype(stored)
        # one position per row, all at offset shift: a rotation by shift * theta
        turned = mx.fast.rope(
            keys.reshape(b * h * t, 1, d),
            rope.dims,
            traditional=rope.traditional,
            base=rope.base,
            scale=rope.scale,
            offset=shift,
        )
        return turned.reshape(b, h, t, d).astype(stored)

    def restore_chunks(self, snap: MLXSnapshot, prefix: int, chunks: list[tuple[int, int, int]]) -> LayerCaches:
        """restore() of a prefix, then each (cached start, prompt start, length) chunk of the snapshot moved to
        its prompt start, its keys turned by the move: b10621's cache reuse (seq_rm, then seq_add)."""
        cache = self.new_cache()
        for layer, (c, (k, v)) in enumerate(zip(cache, snap.kv(), strict=False)):
            keys, values = [k[..., :prefix, :]], [v[..., :prefix, :]]
            for head_c, head_p, n in chunks:
                moved = k[..., head_c : head_c + n, :]
                keys.append(self._turn(moved, head_p - head_c, layer) if head_p != head_c else moved)
                values.append(v[..., head_c : head_c + n, :])
            c.keys, c.values = mx.concatenate(keys, axis=2), mx.concatenate(values, axis=2)
            c.offset = prefix + sum(n for _, _, n in chunks)
        mx.eval([(c.keys, c.values) for c in cache])
        cache.n = cache[0].offset
        return cache

    def shift(self, cache: LayerCaches, n_keep: int, n_discard: int) -> None:
        """b10621's context shift: drop positions [n_keep, n_keep + n_discard) from every layer and move the
        rest back by n_discard, re-rotating their keys (llama.cpp's seq_rm + seq_add K-shift)."""
        self._settle()
        self._rope()
        for layer, c in enumerate(cache):
            n = c.offset
            keys, values = c.keys[..., :n, :], c.values[..., :n, :]
            tail = self._turn(keys[..., n_keep + n_discard :, :], -n_discard, layer)
            c.keys = mx.concatenate([keys[..., :n_keep, :], tail], axis=2)
            c.values = mx.concatenate([values[..., :n_keep, :], values[..., n_keep + n_discard :, :]], axis=2)
            c.offset = n - n_discard
            mx.eval(c.keys, c.values)
        cache.n -= n_discard

    # --- decoding several sequences in one forward pass -------------------------------------------------------
    # Their caches are merged once into one left-padded BatchKVCache per layer and stay merged while the same
    # sequences decode together (tests/test_engine_batching.py).

    def can_batch(self, caches: list[LayerCaches]) -> bool:
        return (
            not self.capturing_outputs
            and self.capabilities.batch_rows > 1
            and all(type(c) is mlx_cache.KVCache for cache in caches for c in cache)
        )

    def batch_merge(self, caches: list[LayerCaches]) -> list:
        self._settle()
        return [mlx_cache.BatchKVCache.merge([cache[i] for cache in caches]) for i in range(len(caches[0]))]

    @staticmethod
    def batch_keep(batch: list, rows: list[int]) -> None:
        for c in batch:
            c.filter(mx.array(rows))

    @staticmethod
    def batch_extend(batch: list, other: list) -> None:
        for c, o in zip(batch, other, strict=False):
            c.extend(o)

    @staticmethod
    def batch_extract(batch: list, row: int) -> LayerCaches:
        out = LayerCaches(c.extract(row) for c in batch)
        mx.eval([(c.keys, c.values) for c in out])
        out.n = out[0].offset
        return out

    # --- logits -----------------------------------------------------------------------------------------------

    @staticmethod
    def to_numpy(logits: mx.array) -> np.ndarray:
        return np.array(logits[0], copy=False)

    def greedy(self, logits: mx.array, banned: frozenset[int] | tuple[int, ...] = ()) -> int:
        """The first highest logit of a one-row logits array, the banned tokens left out (on a GPU, found there:
        only the token id comes back). A decode step's token also starts the next step ahead (`_Pending`)."""
        last = self._last_decode
        if self._on_device_argmax or self.pipeline:
            row = logits.reshape(-1)
            if banned:
                row = row.at[mx.array(sorted(banned))].add(-mx.inf)
            token = mx.argmax(row)
            if self.pipeline and last is not None and last[1] is logits and self._pending is None:
                self._issue_ahead(last[0], token)
            return int(cast(int, token.item()))
        host = np.array(logits, copy=False).reshape(-1)
        if banned:
            host = host.copy()  # (the row may be a view of a batch's logits)
            host[sorted(banned)] = -np.inf
        return int(np.argmax(host))

    # --- what a pass adds to the model ------------------------------------------------------------------------

    def attach_adapters(self, adapters: lora.LoraSet) -> None:
        if not adapters.fused:
            lora.attach(self.model, adapters)
            self.lora = adapters

    def attach_control_vectors(self, specs: tuple[tuple[str, float], ...], layers: tuple[int, int]) -> None:
        n_embd, data = control_vector.load(specs)
        args = self.model.args
        vectors = control_vector.per_layer(n_embd, data, args.num_hidden_layers, args.hidden_size, *layers)
        control_vector.attach(self.model.model, vectors)
        self.steered = bool(vectors)
