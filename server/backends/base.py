"""The one interface between the engine and whatever computes logits: a strict point of cut-off.

The engine schedules, samples and keeps slots; a backend runs the model. Across this line go token ids,
opaque caches and snapshots, and logits (an array the backend can read back: `greedy`, `to_numpy`). The
engine never looks inside a cache: what a cache can do is in `Capabilities`, declared once at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Cache = Any  # one sequence's state, per layer (a backend's own type: the engine only hands it back)
Snapshot = Any  # a cache's first n positions, kept apart from the cache (the prompt cache's entries)
Batch = Any  # several sequences' caches merged for one decode pass
Logits = Any  # rows x vocab, float32; row i of a result is `logits[i:i + 1]`


@dataclass(frozen=True)
class TargetPass:
    """One pass over a sequence whose layer inputs are captured (an EAGLE-3 head's features): its first position,
    its tokens (None: embedding rows, an image's) and the rows' captured inputs (rows x captured layers x hidden;
    None where the pass ran without the capture)."""

    first: int
    tokens: list[int] | None
    features: Any


class PassSource(Protocol):
    """A backend that records its passes over a sequence's cache (a drafter that reads them: engine/drafting.py)."""

    def take_passes(self, cache: Cache) -> list[TargetPass]: ...


@runtime_checkable
class FeatureCapture(Protocol):
    """A backend whose passes can keep their rows' inputs to some layers (the native steps': an EAGLE-3 head's or a
    DFlash draft's features, backends/native_backend.py), and lend its embedding and output head."""

    @property
    def hidden_size(self) -> int: ...

    def capture(self, layers: tuple[int, ...]) -> None: ...

    def take_passes(self, cache: Cache) -> list[TargetPass]: ...

    def embed_tokens(self, tokens: Any) -> Any: ...

    def output_head(self, rows: Any) -> Any: ...


class BackendRefusal(RuntimeError):
    """The model cannot be served by this backend (said once, at load, in one line)."""


class BackendLost(RuntimeError):
    """The backend can no longer compute (a rank of a model split across ranks is gone): every request from now on
    is answered 503 with this message, and the server stops with a non-zero status."""


@dataclass(frozen=True)
class Capabilities:
    """What a loaded model's backend can do, declared at load; the engine plans by it, never by a type check."""

    cache_kinds: tuple[str, ...]  # the cache types the model's layers hold (mlx-lm's class names)
    rewind: bool  # a cache can go back to any earlier position (snapshot/restore/trim at n < its length)
    batch_rows: int  # decode rows one pass takes (1: each sequence decodes alone)
    row_invariant: bool  # a row's logits are bitwise the same alone or batched
    turn_keys: bool  # cached keys can move to other positions (context shift, n_cache_reuse)
    few_rows: int  # a prompt chunk of up to this many rows sums as decode steps do (engine/provenance.py)
    # a verify pass's positions can be forgotten (trim after verify), though the caches do not rewind otherwise:
    # recurrent layers that keep each verified row's state (b10621's n_rs_seq states for drafts)
    draft_rewind: bool = False
    adapters: bool = True  # LoRA adapters can be attached
    control_vectors: bool = True  # control vectors can be attached


@runtime_checkable
class Backend(Protocol):
    """A loaded model: its forward passes and the operations on its caches."""

    capabilities: Capabilities
    n_vocab: int
    n_ctx_train: int  # the model's training context (the slots' default)

    # --- forward passes ---------------------------------------------------------------------------------------
    def prefill(self, cache: Cache, tokens: list[int]) -> Logits:
        """Feed tokens at the cache's next positions; the last position's logits (1 x vocab)."""
        ...

    def prefill_rows(self, cache: Cache, rows: Any, non_causal: bool = False) -> Logits:
        """Feed embedding rows (positions x hidden, float32: an image's) at the cache's next positions; the last
        position's logits (1 x vocab). non_causal: each row also sees the later rows of the chunk."""
        ...

    def decode(self, cache: Cache, token: int) -> Logits:
        """One token at the cache's next position; its logits (1 x vocab)."""
        ...

    def decode_rows(self, batch: Batch, tokens: list[int]) -> Logits:
        """One token per row of a merged batch; the rows' logits (rows x vocab)."""
        ...

    def verify(self, cache: Cache, tokens: list[int]) -> Logits:
        """Consecutive tokens of one sequence (a speculative draft); every position's logits, each as decode()
        returns it at its position."""
        ...

    def score(self, prompt: list[int], continuation: list[int], n_probs: int) -> list[tuple]:
        """(token, logprob, top-k) for each continuation token, teacher-forced as a generation computes it."""
        ...

    def weights(self) -> list:
        """The arrays that hold the model's weights (what --mlock locks in RAM)."""
        ...

    # --- caches -----------------------------------------------------------------------------------------------
    def new_cache(self) -> Cache: ...

    def length(self, cache: Cache) -> int:
        """Positions the cache holds."""
        ...

    def snapshot(self, cache: Cache, n: int, n_stream: int = 1) -> tuple[Snapshot, int]:
        """The first n positions (n < length needs capabilities.rewind), and the bytes b10621 gives them."""
        ...

    def state_bytes(self, n: int, n_stream: int = 1) -> int:
        """The bytes b10621 gives n positions of this model's KV state (what --cache-ram counts)."""
        ...

    def kv_report(self, cells: int, n_stream: int, n_seq: int) -> str:
        """b10621's llama_kv_cache size line: the types, and the memory `cells` per stream take."""
        ...

    def restore(self, snap: Snapshot, n: int) -> Cache:
        """A new cache holding the snapshot's first n positions (fewer than it holds needs rewind)."""
        ...

    def restore_chunks(self, snap: Snapshot, prefix: int, chunks: list[tuple[int, int, int]]) -> Cache:
        """restore(prefix), then each (cached start, prompt start, length) chunk moved there (needs turn_keys)."""
        ...

    def trim(self, cache: Cache, n: int) -> None:
        """Forget every position from n on (needs rewind)."""
        ...

    def shift(self, cache: Cache, n_keep: int, n_discard: int) -> None:
        """Drop positions [n_keep, n_keep + n_discard), the rest moved back (needs turn_keys)."""
        ...

    # --- decode batches ---------------------------------------------------------------------------------------
    def can_batch(self, caches: list[Cache]) -> bool: ...

    def batch_merge(self, caches: list[Cache]) -> Batch: ...

    def batch_keep(self, batch: Batch, rows: list[int]) -> None:
        """Keep these rows, in this order, in place."""
        ...

    def batch_extend(self, batch: Batch, other: Batch) -> None: ...

    def batch_extract(self, batch: Batch, row: int) -> Cache:
        """A row's own cache again (a copy of its positions)."""
        ...

    # --- logits -----------------------------------------------------------------------------------------------
    def greedy(self, logits: Logits, banned: frozenset[int] | tuple[int, ...] = ()) -> int:
        """The first highest logit of a one-row logits array, the banned tokens left out."""
        ...

    def to_numpy(self, logits: Logits) -> Any:
        """A one-row logits array as a numpy vector (float32)."""
        ...

    # --- what a pass adds to the model ------------------------------------------------------------------------
    def attach_adapters(self, lora: Any) -> None:
        """LoRA adapters (server.models.lora.LoraSet) added to every pass at their current scales."""
        ...

    def attach_control_vectors(self, specs: tuple[tuple[str, float], ...], layers: tuple[int, int]) -> None: ...
