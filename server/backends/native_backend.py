"""The native CPU backend: a llama-family model's passes in mlxcel's C kernels (server/native), over the same
weights and mlx-lm caches as the MLX backend, whose operations it shares.

A pass runs natively where the kernels know everything it adds to the model (the base weights: no adapter terms
engaged, no control vector) and the caches are in the kernels' layout (`DecodeStep.takes_*`); otherwise that one
pass runs through MLX. A row's logits are bitwise the same alone or batched (its products and attention summed
in one order: tests/test_model_loading.py), and a speculative round's rows are bitwise decode steps'.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..models import kv_numerics, lora
from ..models.decode_step import MAX_ROWS, DecodeStep
from ..models.kv_numerics import KVNumerics
from ..models.loader import LoadedModel
from ..models.prefill_step import PrefillStep
from .base import BackendRefusal, Capabilities, Logits, TargetPass
from .mlx_backend import LayerCaches, MLXBackend

_BLOCK_PASSES = (
    "{what} run through MLX's passes, which cannot read a block-quantized KV cache (-ctk/-ctv q8_0...): use "
    "{alt}a float cache type (f16, b10621's default)"
)


class NativeBackend(MLXBackend):
    """A loaded llama-family model on the CPU kernels (use `server.backends.open_backend`)."""

    def __init__(self, loaded: LoadedModel, step: DecodeStep, n_batch: int = 2048, kv: KVNumerics | None = None):
        self._step = step
        self._prefill_step = PrefillStep(step)
        # which passes may run natively (tests switch them off to compare with MLX's passes)
        self.native_decode = self.native_prefill = True
        self.capturing = False  # (capture(): each pass's layer inputs kept on its cache)
        super().__init__(loaded, n_batch=n_batch, kv=kv)
        self.pipeline = False  # the kernels' steps are synchronous: nothing runs ahead on the CPU

    @staticmethod
    def build_step(loaded: LoadedModel, kv: KVNumerics | None) -> DecodeStep | None:
        """The model's native step, or None where the kernels do not cover the model (it then runs on MLX)."""
        if kv is not None:  # the step takes the model's numerics
            kv_numerics.apply(loaded.model, kv)
        return DecodeStep.build(loaded.model)

    def _capabilities(self, kinds: tuple[str, ...]) -> Capabilities:
        caps = super()._capabilities(kinds)
        # with products in ggml's order one row sums as vec_dot, two or more as tinyBLAS
        few = 1 if self._step.ggml_order else MAX_ROWS
        changed = {"row_invariant": True, "few_rows": few}
        if self.blocks:  # a block-quantized cache is read by the native steps only: batches they take
            changed.update(batch_rows=min(caps.batch_rows, MAX_ROWS), adapters=False, control_vectors=False)
        return Capabilities(**{**caps.__dict__, **changed})

    @property
    def blocks(self) -> bool:
        """Whether the KV cache is block-quantized (-ctk/-ctv q8_0...): MLX's own passes cannot read it."""
        return kv_numerics.is_block(self._step.k_kind) or kv_numerics.is_block(self._step.v_kind)

    def _turn(self, keys: mx.array, shift: int, layer: int = 0) -> mx.array:
        if kv_numerics.is_block(self._step.k_kind):  # read back, turned in float32, quantized again
            return self._step.turn_block_keys(keys, lambda k: super(NativeBackend, self)._turn(k, shift, layer))
        return super()._turn(keys, shift, layer)

    def attach_adapters(self, adapters: lora.LoraSet) -> None:
        if self.blocks and not adapters.fused:
            raise BackendRefusal(_BLOCK_PASSES.format(what="LoRA adapters (--lora)", alt="--lora-fuse, or "))
        super().attach_adapters(adapters)

    def attach_control_vectors(self, specs: tuple[tuple[str, float], ...], layers: tuple[int, int]) -> None:
        if self.blocks:
            raise BackendRefusal(_BLOCK_PASSES.format(what="control vectors (--control-vector)", alt=""))
        super().attach_control_vectors(specs, layers)

    def weights(self) -> list:
        return [*super().weights(), *self._step.weights]  # (its ggml-order copies too)

    @property
    def step(self) -> DecodeStep:
        return self._step

    def _native(self) -> bool:
        """Whether the kernels may run this pass: they know the base weights only."""
        return not self.steered and (self.lora is None or not self.lora.engaged())

    # --- captured layer inputs (an EAGLE-3 head's features) ----------------------------------------------------

    def capture(self, layers: tuple[int, ...]) -> None:
        """From now on every native pass copies its rows' inputs to these layers, kept on the sequence's cache as
        TargetPass records (`take_passes`); decode steps then run one sequence a pass."""
        self._step.set_capture(layers)
        self.capturing = True

    @property
    def hidden_size(self) -> int:
        return self._step.hidden

    def embed_tokens(self, tokens: mx.array) -> mx.array:
        """The model's token embedding rows (float32), as its input layer reads them."""
        return self.model.model.embed_tokens(tokens).astype(mx.float32)

    def output_head(self, rows: mx.array) -> mx.array:
        """The model's output head over normed rows (its logits): what a DFlash draft reads, as b10621's through
        the target context."""
        assert self._split is not None  # (a native step runs llama-shaped models only)
        return self._split[1](rows)

    def take_passes(self, cache: LayerCaches) -> list[TargetPass]:
        """The passes over this cache since the last take, in order."""
        passes, cache.passes = cache.passes or [], [] if self.capturing else None
        return passes

    def _record(self, cache: LayerCaches, first: int, tokens: list[int] | None, native: bool) -> None:
        if self.capturing:
            if cache.passes is None:
                cache.passes = []
            cache.passes.append(TargetPass(first, tokens, self._step.captured if native and tokens else None))

    def can_batch(self, caches: list[LayerCaches]) -> bool:
        return not self.capturing and super().can_batch(caches)

    def _prefill_chunk(self, cache: LayerCaches, chunk: list[int], last: bool) -> mx.array | None:
        if self.native_prefill and self._native() and self._step.takes_sequence(cache, len(chunk), None):
            logits = self._prefill_step(cache, chunk, last)
            self._record(cache, cache.n, list(chunk), True)
            return logits
        self._record(cache, cache.n, list(chunk), False)
        return super()._prefill_chunk(cache, chunk, last)

    def _rows_chunk(
        self, cache: LayerCaches, chunk: np.ndarray, last: bool, non_causal: bool = False
    ) -> mx.array | None:
        self._record(cache, cache.n, None, False)
        if self.native_prefill and self._native() and self._step.takes_sequence(cache, len(chunk), None):
            return self._prefill_step.rows(cache, chunk, last, non_causal)
        return super()._rows_chunk(cache, chunk, last, non_causal)

    def decode(self, cache: LayerCaches, token: int) -> Logits:
        if self.native_decode and self._native() and self._step.takes_rows(cache, 1):
            logits = self._step(cache, [token])
            self._record(cache, cache.n, [token], True)
            cache.n += 1
            return logits
        self._record(cache, cache.n, [token], False)
        return super().decode(cache, token)

    def decode_rows(self, batch: list, tokens: list[int]) -> Logits:
        if self.native_decode and self._native() and self._step.takes_rows(batch, len(tokens)):
            return self._step(batch, tokens)
        return super().decode_rows(batch, tokens)

    def _verify_rows(self) -> int:
        # the native step's verify takes up to its max_rows (in ggml's order, a long draft in one pass)
        return self._step.max_rows if self.native_decode and self._native() else super()._verify_rows()

    def _verify_chunk(self, cache: LayerCaches, chunk: list[int]) -> mx.array:
        if self.native_decode and self._native() and self._step.takes_sequence(cache, len(chunk), self._step.max_rows):
            logits = self._step.verify(cache, chunk)
            self._record(cache, cache.n, list(chunk), True)
            return logits
        self._record(cache, cache.n, list(chunk), False)
        return super()._verify_chunk(cache, chunk)
