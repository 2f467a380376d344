"""A llama-family model's prompt chunk in one native call (server/native/prefill_step.c), on the CPU.

Through MLX a chunk's layer hands over between MLX's stream thread and mlxcel's kernels several times, copies
each kernel's result back and runs its norms and residual adds on one core. `PrefillStep` runs the chunk in
C over the native decode step's model (the same weights, `DecodeStep`) and writes every layer's keys and
values into the sequence's mlx-lm cache in place, at the chunk's positions, grown first as `update_and_fetch`
grows it; the cache's offset then moves on as it would have. The last layer computes only its keys and
values, and its other work for the last position alone when the chunk ends the prompt.
"""

from __future__ import annotations

import ctypes

import mlx.core as mx
import numpy as np

from .decode_step import DecodeStep

_VOID_P = ctypes.c_void_p


class PrefillStep:
    """The native prompt chunk for one loaded model (use `build`)."""

    def __init__(self, step: DecodeStep):
        self._step = step
        self._native = step.native

    @classmethod
    def build(cls, step: DecodeStep | None) -> PrefillStep | None:
        if step is None or not hasattr(step.native, "mlxcel_prefill"):
            return None
        return cls(step)

    def __call__(self, caches: list, tokens: list[int], want_logits: bool) -> mx.array | None:
        """Prefill `tokens` into one sequence's per-layer KVCaches (DecodeStep.takes_sequence(caches, rows, None)
        first); the last position's logits (1 x vocab, float32), or None when not wanted."""
        logits = np.empty((1, self._step.vocab), np.float32) if want_logits else None
        self._step.sequence_pass(self._native.mlxcel_prefill, caches, tokens, logits, "prefill step")
        return None if logits is None else mx.array(logits)

    def rows(self, caches: list, embd: np.ndarray, want_logits: bool, non_causal: bool = False) -> mx.array | None:
        """The same over embedding rows (positions x hidden, float32: an image's), taken unscaled; non_causal:
        each row sees the chunk's later rows too (b10621's causal attention off for a Gemma 3 image)."""
        if embd.ndim != 2 or embd.shape[1] != self._step.hidden:
            raise ValueError(f"embedding rows of width {embd.shape[-1]}, the model's is {self._step.hidden}")
        logits = np.empty((1, self._step.vocab), np.float32) if want_logits else None
        rows = np.ascontiguousarray(embd, np.float32)
        native = self._native.mlxcel_prefill_embd

        def call(handle, n, given, index, *rest):
            return native(handle, n, given, int(non_causal), index, *rest)

        self._step.sequence_pass(call, caches, rows, logits, "prefill step")
        return None if logits is None else mx.array(logits)
