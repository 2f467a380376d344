"""The engine thread: owns the model, takes plain requests, publishes plain events to asyncio.

This walking-skeleton engine runs one request at a time (one slot) with greedy decoding; the scheduler
with continuous batching and the b10621 sampler chain replace the loop body, not this interface.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator

from .types import (EngineInfo, ErrorEvent, Event, FinalEvent, GenerationRequest, ScoredPosition, ScoreEvent,
                    ScoreRequest, TokenEvent)

log = logging.getLogger("mlxcel.engine")


@dataclass
class Handle:
    """An async iterator of events for one request, plus cancel()."""

    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def publish(self, event: Event) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def cancel(self) -> None:
        self.cancelled.set()

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self.events.get()
            yield event
            if isinstance(event, (FinalEvent, ErrorEvent, ScoreEvent)):
                return


class Engine:
    def __init__(self, checkpoint: Path, n_ctx: int = 0, eog_ids: frozenset[int] = frozenset()):
        self.checkpoint = checkpoint
        self.requested_n_ctx = n_ctx
        self.eog_ids = eog_ids
        self.info = EngineInfo(model_path=str(checkpoint))
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="mlxcel-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)

    def submit(self, request: GenerationRequest | ScoreRequest) -> Handle:
        handle = Handle(loop=asyncio.get_running_loop())
        self._queue.put((request, handle))
        return handle

    # --- engine thread -------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            from ..models.loader import load_checkpoint
            from .runner import Runner

            started = time.perf_counter()
            loaded = load_checkpoint(self.checkpoint)
            self.runner = Runner(loaded)
            self.info.n_ctx = self.requested_n_ctx or loaded.n_ctx_train
            log.info("model loaded in %.2f s (%s, dequantized=%s, n_ctx=%d)", time.perf_counter() - started,
                     self.checkpoint, loaded.dequantized, self.info.n_ctx)
        except Exception as exc:  # the server reports load failures and exits
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("failed to load model: %s", self.load_error)
            self.ready.set()
            return
        self.ready.set()
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, handle = item
            try:
                if isinstance(request, ScoreRequest):
                    self._score(request, handle)
                else:
                    self._generate(request, handle)
            except Exception as exc:  # never leave a client hanging
                log.exception("generation failed")
                handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))

    def _score(self, req: ScoreRequest, handle: Handle) -> None:
        from .runner import score

        rows = score(self.runner, list(req.prompt_tokens), list(req.continuation), req.n_probs)
        handle.publish(ScoreEvent(tuple(ScoredPosition(t, lp, top) for t, lp, top in rows)))

    def _generate(self, req: GenerationRequest, handle: Handle) -> None:
        t_start = time.perf_counter()
        runner = self.runner
        n_ctx = self.info.n_ctx
        prompt = list(req.prompt_tokens)
        cache = runner.new_cache()
        banned = self.eog_ids if req.ignore_eos else frozenset()
        logits = runner.prefill(cache, prompt)
        t_prompt = time.perf_counter()
        n_decoded, stop_type, truncated, t_gen_last = 0, "none", False, t_prompt
        while not handle.cancelled.is_set():
            token = runner.greedy(logits, banned)
            n_decoded += 1
            t_gen_last = time.perf_counter()
            handle.publish(TokenEvent(token))
            # the same checks, in the same order, as b10621's process_token: EOS wins over a limit
            if token in self.eog_ids and not req.ignore_eos:
                stop_type = "eos"
                break
            if len(prompt) + n_decoded >= n_ctx:
                stop_type, truncated = "limit", True
                break
            if 0 <= req.n_predict <= n_decoded:
                stop_type = "limit"
                break
            logits = runner.decode(cache, token)
        handle.publish(
            FinalEvent(
                stop_type=stop_type,
                n_prompt=len(prompt),
                n_prompt_processed=len(prompt),
                n_cached=0,
                n_decoded=n_decoded,
                n_tokens_cached=len(prompt) + max(n_decoded - 1, 0),
                truncated=truncated,
                t_prompt_ms=(t_prompt - t_start) * 1e3,
                t_gen_ms=max(t_gen_last - t_prompt, 1e-6) * 1e3 if n_decoded else 0.0,
            )
        )
