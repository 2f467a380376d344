"""The encoder worker: one thread that owns the BERT-family model and answers batches of token lists.

The HTTP layer hands over plain data (lists of token ids) and gets back, per list, one pooled float32 vector
(mean, cls, last or rank pooling) or, with pooling none, one vector per token.

On x86 with AVX2 the model runs in server/native/encoder_ggml.c, b10621's CPU arithmetic bit for bit, one
sequence at a time (as b10621 evaluates a lone prompt). Elsewhere it runs in MLX (server/models/bert.py),
where lists of similar length go together as one padded batch: padded keys are masked out of attention.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import mlx.core as mx
import numpy as np

from .. import blas, cpu_kernels
from ..engine.commands import MetricsSnapshot
from ..engine.metrics import ServerMetrics
from ..engine.ngram_drafters import NgramDrafters
from ..engine.types import EngineInfo
from ..models.bert import BertEncoder, NativeBert

log = logging.getLogger("mlxcel.encoder")
BATCH_TOKENS = 4096  # padded tokens per forward pass


@dataclass(frozen=True)
class EncoderConfig:
    mode: str  # "embedding" or "rerank": what the server was started for
    pooling: str  # none, mean, cls, last or rank, as resolved at startup
    embd_normalize: int = 2  # --embd-normalize, a request's default
    n_ubatch: int = 512  # --ubatch-size: the most tokens one input may have (b10621 evaluates it in one ubatch)
    n_ctx: int = 0  # --ctx-size; 0: the model's max_position_embeddings
    n_slots: int = 4
    sleep_idle_seconds: int = -1  # --sleep-idle-seconds: free the model after this long idle (-1: never)
    # where the HTTP layer reads an engine's drafters (GET /props): an encoder server drafts nothing
    ngram_simple: ClassVar[None] = None
    ngram: ClassVar[NgramDrafters] = NgramDrafters()
    draft: ClassVar[None] = None


class EncoderWorker:
    """The engine of an --embeddings / --reranking server; quacks like Engine where the HTTP layer looks."""

    def __init__(self, checkpoint: Path, config: EncoderConfig):
        self.checkpoint = checkpoint
        self.config = config
        self.info = EngineInfo(model_path=str(checkpoint), n_slots=config.n_slots)
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.eog_ids: frozenset[int] = frozenset()
        self.grammar_vocab = None
        self.n_ctx_train = 0
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.model = None
        self.metrics = ServerMetrics()  # GET /metrics: every prompt counts as processed, one decode each
        self.sleeping = False

    def use_grammar_vocab(self, vocab: object) -> None:
        """(The API layer hands every engine the grammar vocabulary; an encoder draws nothing with it.)"""
        self.grammar_vocab = vocab

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mlxcel-encoder", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 0) -> None:
        self._jobs.put(None)
        if wait and self._thread is not None:
            self._thread.join(wait)

    def submit(self, prompts: list[list[int]]) -> Future:
        """A future of one result per prompt: a float32 vector, or a [tokens, n_embd] matrix for pooling none."""
        future: Future = Future()
        self._jobs.put((prompts, future))
        return future

    def wake(self) -> Future:
        """A sleeping encoder reloads its model (b10621's wait_until_no_sleep); done at once when awake."""
        if not self.sleeping:
            future: Future = Future()
            future.set_result(None)
            return future
        return self.submit([])

    def metrics_snapshot(self) -> MetricsSnapshot:
        return MetricsSnapshot(
            self.metrics.take(),
            min(self._jobs.qsize(), self.config.n_slots),
            max(self._jobs.qsize() - self.config.n_slots, 0),
        )

    def _load(self):
        if cpu_kernels.available():
            return NativeBert.load(self.checkpoint, blas.STATE.native)
        return BertEncoder.load(self.checkpoint)

    def _run(self) -> None:

        started = time.perf_counter()
        try:
            self.model = self._load()
        except Exception as exc:  # noqa: BLE001 - a damaged checkpoint is reported, and the server exits
            self.load_error = f"failed to load the encoder from {self.checkpoint}: {exc}"
            self.ready.set()
            return
        self.n_ctx_train = self.model.args.max_position_embeddings
        self.info.n_ctx = self.config.n_ctx or self.n_ctx_train
        log.info(
            "encoder loaded in %.2f s: %s (%s, pooling %s, %s)",
            time.perf_counter() - started,
            self.checkpoint,
            self.config.mode,
            self.config.pooling,
            "b10621's CPU arithmetic" if hasattr(self.model, "pool") else "MLX",
        )
        self.ready.set()
        while True:
            wait = self.config.sleep_idle_seconds if self.config.sleep_idle_seconds > 0 and not self.sleeping else None
            try:
                job = self._jobs.get(timeout=wait)
            except queue.Empty:  # idle for --sleep-idle-seconds: free the model until the next request
                log.info("server is entering sleeping state")
                self.model, self.sleeping = None, True
                continue
            if job is None:
                return
            if self.sleeping:
                log.info("server is exiting sleeping state")
                self.model, self.sleeping = self._load(), False
            prompts, future = job
            if not future.set_running_or_notify_cancel():
                continue
            if not prompts:  # a wake-up (wake()): the model is loaded again
                future.set_result([])
                continue
            try:
                future.set_result(self.encode(prompts))
            except Exception as exc:  # noqa: BLE001 - the request answers with it; the worker lives on
                log.exception("encoder batch failed")
                future.set_exception(exc)

    def encode(self, prompts: list[list[int]]) -> list[np.ndarray]:
        if hasattr(self.model, "pool"):  # the native encoder: one sequence a pass
            out = []
            for p in prompts:
                started = time.perf_counter()
                out.append(self.model.pool(self.model.hidden(p), self.config.pooling))
                self.metrics.add_prompt(len(p), int((time.perf_counter() - started) * 1e6))
                self.metrics.post_decode(1, [len(p)])
            return out
        out: list[np.ndarray | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * len(prompts[order[end]]) <= BATCH_TOKENS:
                end += 1
            group = order[start:end]
            for i, result in zip(group, self._batch([prompts[i] for i in group]), strict=False):
                out[i] = result
            start = end
        return out  # type: ignore[return-value]

    def _batch(self, prompts: list[list[int]]) -> list[np.ndarray]:
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        tokens = mx.array([p + [0] * (width - len(p)) for p in prompts], dtype=mx.int32)
        hidden = self.model.hidden(tokens, lengths)
        pooled = [self._pool(hidden[b], n) for b, n in enumerate(lengths)]
        mx.eval(pooled)
        return [np.array(p, dtype=np.float32) for p in pooled]

    def _pool(self, h: mx.array, n: int) -> mx.array:
        kind = self.config.pooling
        if kind == "mean":  # build_pooling: the rows times an inp_mean of 1/n, summed
            return mx.sum(h[:n] * mx.array(1.0 / n, dtype=mx.float32), axis=0)
        if kind == "cls":
            return h[0]
        if kind == "last":
            return h[n - 1]
        if kind == "rank":
            return self.model.rank_head(h[0])
        return h[:n]  # none: one vector per token
