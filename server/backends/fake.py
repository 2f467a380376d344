"""A deterministic fake backend: no weights, no MLX, numpy only, for engine and API tests.

Its "model" is a rule: after token t the next token is (t + 1) mod vocab by a clear margin (greedy decoding
counts up; a test may give its own rule over the history), plus small noise seeded by every token before it and its position, so two histories that differ
anywhere give different logits, and a prompt-cache hit equals a cold run only where the cache holds exactly
what a cold run would. A cache is the list of (token, position) pairs it holds; shifts and moves rewrite the
positions as a rope would turn the keys. Capabilities are the constructor's, so a test can declare a backend
that does not rewind, batch or turn keys and check the engine plans around it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..models.lora import LoraSet
from .base import Capabilities
from .state_size import state_bytes

FAKE_CAPABILITIES = Capabilities(
    cache_kinds=("FakeCache",), rewind=True, batch_rows=16, row_invariant=True, turn_keys=True, few_rows=16
)
MARGIN = 8.0  # the counting rule's lead over the noise (whose values are within +-1)


@dataclass
class FakeCache:
    cells: list[tuple[int, int]] = field(default_factory=list)  # (token, position), in cache order


class FakeBackend:
    def __init__(
        self,
        n_vocab: int = 64,
        n_ctx_train: int = 4096,
        capabilities: Capabilities = FAKE_CAPABILITIES,
        layers: int = 2,
        width: int = 8,
        rule: Callable[[list[int]], int] | None = None,
        pass_seconds: float = 0.0,
    ):
        self.n_vocab, self.n_ctx_train, self.capabilities = n_vocab, n_ctx_train, capabilities
        # the token the model favours after a history (default: the last one plus one)
        self.rule = rule or (lambda tokens: (tokens[-1] + 1) % self.n_vocab)
        self._layers = [(width, width)] * layers
        self.passes: list[tuple[str, int]] = []  # (kind, rows) of every forward pass, for tests to read
        self.pass_seconds = pass_seconds  # each pass takes at least this long (a test watching work in flight)
        self.adapters: LoraSet | None = None
        self.control_vectors: tuple = ()

    # --- the rule -------------------------------------------------------------------------------------------

    def _row(self, cells: list[tuple[int, int]]) -> np.ndarray:
        digest = hashlib.blake2b(np.asarray(cells, dtype=np.int64).tobytes(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        row = rng.uniform(-1.0, 1.0, self.n_vocab).astype(np.float32)
        row[self.rule([t for t, _ in cells])] += MARGIN
        scales = getattr(self.adapters, "current", ()) or ()
        if any(scales):  # an adapter's term: a different model
            row = np.roll(row, 1)
        return row

    def _feed(self, cache: FakeCache, tokens: list[int]) -> np.ndarray:
        if self.pass_seconds:
            time.sleep(self.pass_seconds)
        rows = []
        for t in tokens:
            cache.cells.append((t, cache.cells[-1][1] + 1 if cache.cells else 0))
            rows.append(self._row(cache.cells))
        return np.stack(rows)

    # --- forward passes ---------------------------------------------------------------------------------------

    def prefill(self, cache: FakeCache, tokens: list[int]) -> np.ndarray:
        self.passes.append(("prefill", len(tokens)))
        return self._feed(cache, tokens)[-1:]

    def decode(self, cache: FakeCache, token: int) -> np.ndarray:
        self.passes.append(("decode", 1))
        return self._feed(cache, [token])

    def decode_rows(self, batch: list[FakeCache], tokens: list[int]) -> np.ndarray:
        self.passes.append(("decode_rows", len(tokens)))
        return np.concatenate([self._feed(c, [t]) for c, t in zip(batch, tokens, strict=False)])

    def verify(self, cache: FakeCache, tokens: list[int]) -> np.ndarray:
        self.passes.append(("verify", len(tokens)))
        return self._feed(cache, tokens)

    def score(self, prompt: list[int], continuation: list[int], n_probs: int) -> list[tuple]:
        cache = self.new_cache()
        rows = [self.prefill(cache, prompt)[0]] + [self.decode(cache, t)[0] for t in continuation[:-1]]
        out = []
        for t, row in zip(continuation, rows, strict=False):
            lp = row.astype(np.float64) - np.log(np.exp(row.astype(np.float64)).sum())
            top = np.argsort(-lp, kind="stable")[: max(1, n_probs)]
            out.append((t, float(lp[t]), tuple((int(i), float(lp[i])) for i in top)))
        return out

    # --- caches -----------------------------------------------------------------------------------------------

    def new_cache(self) -> FakeCache:
        return FakeCache()

    @staticmethod
    def length(cache: FakeCache) -> int:
        return len(cache.cells)

    def _check_rewind(self, n: int, held: int) -> None:
        if n != held and not self.capabilities.rewind:
            raise ValueError(f"{n} of {held} positions: this backend does not rewind")

    def snapshot(self, cache: FakeCache, n: int, n_stream: int = 1) -> tuple[FakeCache, int]:
        self._check_rewind(n, len(cache.cells))
        return FakeCache(list(cache.cells[:n])), self.state_bytes(n, n_stream)

    def state_bytes(self, n: int, n_stream: int = 1) -> int:
        return state_bytes(n, self._layers, "f16", "f16", n_stream)

    def kv_report(self, cells: int, n_stream: int, n_seq: int) -> str:
        return f"llama_kv_cache: {cells} cells x {n_stream} stream(s) of a fake model (no memory)"

    def restore(self, snap: FakeCache, n: int) -> FakeCache:
        self._check_rewind(n, len(snap.cells))
        return FakeCache(list(snap.cells[:n]))

    def restore_chunks(self, snap: FakeCache, prefix: int, chunks: list[tuple[int, int, int]]) -> FakeCache:
        cells = list(snap.cells[:prefix])
        for head_c, head_p, n in chunks:
            cells += [(t, p + head_p - head_c) for t, p in snap.cells[head_c : head_c + n]]
        return FakeCache(cells)

    def trim(self, cache: FakeCache, n: int) -> None:
        self._check_rewind(n, len(cache.cells))
        del cache.cells[n:]

    def shift(self, cache: FakeCache, n_keep: int, n_discard: int) -> None:
        if not self.capabilities.turn_keys:
            raise ValueError("this backend cannot turn cached keys")
        tail = [(t, p - n_discard) for t, p in cache.cells[n_keep + n_discard :]]
        cache.cells[n_keep:] = tail

    # --- decode batches ---------------------------------------------------------------------------------------

    def can_batch(self, caches: list[FakeCache]) -> bool:
        return self.capabilities.batch_rows > 1

    @staticmethod
    def batch_merge(caches: list[FakeCache]) -> list[FakeCache]:
        return [replace(c, cells=list(c.cells)) for c in caches]

    @staticmethod
    def batch_keep(batch: list[FakeCache], rows: list[int]) -> None:
        batch[:] = [batch[i] for i in rows]

    @staticmethod
    def batch_extend(batch: list[FakeCache], other: list[FakeCache]) -> None:
        batch.extend(other)

    @staticmethod
    def batch_extract(batch: list[FakeCache], row: int) -> FakeCache:
        return FakeCache(list(batch[row].cells))

    # --- logits -----------------------------------------------------------------------------------------------

    @staticmethod
    def greedy(logits: np.ndarray, banned: frozenset[int] | tuple[int, ...] = ()) -> int:
        row = np.array(logits, dtype=np.float32).reshape(-1)
        if banned:
            row[sorted(banned)] = -np.inf
        return int(np.argmax(row))

    @staticmethod
    def to_numpy(logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits[0], dtype=np.float32)

    # --- what a pass adds to the model ------------------------------------------------------------------------

    def attach_adapters(self, lora: LoraSet) -> None:
        self.adapters = lora

    def attach_control_vectors(self, specs: tuple[tuple[str, float], ...], layers: tuple[int, int]) -> None:
        self.control_vectors = specs
