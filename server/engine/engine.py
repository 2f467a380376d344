"""The engine thread: owns the model, takes plain requests, publishes plain events to asyncio.

Each step asks the pure Scheduler what to run (prefill chunks and decode rows across slots), runs it with
the Runner, samples, applies b10621's stop rules and publishes events. Rows run one forward pass each, so
a request's numbers never depend on what else is in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable

from .prompt_cache import PromptCache
from .scheduler import Scheduler, Sequence
from .stopping import TextStream
from .types import (EngineInfo, ErrorEvent, Event, FinalEvent, GenerationRequest, ProgressEvent, ScoredPosition,
                    ScoreEvent,
                    ScoreRequest, Timings, TokenEvent)

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


@dataclass
class _Running:
    """Engine-side state of one generation (lives in Sequence.payload)."""

    request: GenerationRequest
    handle: Handle
    text: TextStream
    cache: list | None = None
    n_cached: int = 0  # prompt positions restored from the prompt cache
    has_new_line: bool = False
    last_nl_pos: int = 0
    logits: object = None
    last_token: int = -1
    t_start: float = 0.0
    t_prompt: float = 0.0
    t_gen_last: float = 0.0


# Prefill runs in chunks of this many tokens (at most --ubatch-size), ending on multiples of it counted from
# position 0: every prompt position is then always computed in the same chunk shape, which makes a
# prompt-cache hit bit-identical to a cold run at a 64-token reuse granularity. (Measured on the CPU: 64-token
# chunks prefill faster than 512-token ones, 198 vs 159 tokens/s.)
PREFILL_ALIGN = 64


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 0  # per slot; 0: the model's training context
    n_slots: int = 1
    n_batch: int = 2048
    cont_batching: bool = True
    ubatch: int = 512  # the largest prefill chunk
    cache_prompt: bool = True
    cache_ram_mib: int = 8192  # -1: no limit, 0: no prompt cache


class Engine:
    def __init__(self, checkpoint: Path, config: EngineConfig = EngineConfig(), eog_ids: frozenset[int] = frozenset(),
                 piece: Callable[[int], bytes] = lambda _: b""):
        self.checkpoint = checkpoint
        self.config = config
        self.eog_ids = eog_ids
        self.piece = piece  # token id -> bytes as b10621 renders generated text (special tokens empty)
        self.info = EngineInfo(model_path=str(checkpoint), n_slots=config.n_slots)
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._ids = itertools.count()
        mib = config.cache_ram_mib
        enabled = config.cache_prompt and mib != 0
        self.align = min(PREFILL_ALIGN, config.ubatch)
        self.prompt_cache = PromptCache(0 if not enabled else None if mib < 0 else mib << 20, self.align)
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
            self.runner = Runner(loaded, n_batch=self.config.n_batch)
            self.info.n_ctx = self.config.n_ctx or loaded.n_ctx_train
            log.info("model loaded in %.2f s (%s, dequantized=%s, n_ctx=%d per slot, %d slot(s))",
                     time.perf_counter() - started, self.checkpoint, loaded.dequantized, self.info.n_ctx,
                     self.config.n_slots)
        except Exception as exc:  # the server reports load failures and exits
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("failed to load model: %s", self.load_error)
            self.ready.set()
            return
        self.ready.set()
        sched = Scheduler(self.config.n_slots, self.config.n_batch, self.config.cont_batching, self.align)
        while True:
            if not self._drain(sched, block=sched.idle()):
                return
            try:
                self._step(sched)
            except Exception as exc:  # never leave a client hanging
                log.exception("engine step failed")
                for seq in [*sched.running, *sched.waiting]:
                    seq.payload.handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
                    sched.free(seq)

    def _drain(self, sched: Scheduler, block: bool) -> bool:
        """Move submitted requests into the scheduler; False when asked to stop."""
        while True:
            try:
                item = self._queue.get(block=block)
            except queue.Empty:
                return True
            block = False
            if item is None:
                return False
            request, handle = item
            if isinstance(request, ScoreRequest):  # scoring runs alone, between steps
                try:
                    self._score(request, handle)
                except Exception as exc:
                    handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
                continue
            run = _Running(request, handle, TextStream(stops=[s.encode() for s in request.stop]))
            prompt = list(request.prompt_tokens)
            n_reuse, snap = self.prompt_cache.lookup(prompt) if request.cache_prompt else (0, None)
            run.cache = self.runner.restore(snap, n_reuse) if n_reuse else self.runner.new_cache()
            run.n_cached = n_reuse
            sched.add(Sequence(next(self._ids), prompt, payload=run, n_prefilled=n_reuse))

    def _score(self, req: ScoreRequest, handle: Handle) -> None:
        from .runner import score

        rows = score(self.runner, list(req.prompt_tokens), list(req.continuation), req.n_probs)
        handle.publish(ScoreEvent(tuple(ScoredPosition(t, lp, top) for t, lp, top in rows)))

    def _step(self, sched: Scheduler) -> None:
        for seq in [*sched.running, *sched.waiting]:
            if seq.payload.handle.cancelled.is_set():
                seq.cancelled = True
        for seq in sched.cancelled():  # the client went away: free the slot within this step
            sched.free(seq)
        step = sched.schedule()
        runner = self.runner
        progressed: dict[int, Sequence] = {}
        for chunk in step.prefill:
            run: _Running = chunk.seq.payload
            if not run.t_start:
                run.t_start = time.perf_counter()
                self._progress(chunk.seq)  # the request has started: 0% (or its cached share)
            progressed[chunk.seq.rid] = chunk.seq
            run.logits = runner.prefill(run.cache, chunk.seq.prompt[chunk.start:chunk.end])
            sched.prefilled(chunk)
            if chunk.completes_prompt:
                run.t_prompt = time.perf_counter()
                self._progress(chunk.seq)
                progressed.pop(chunk.seq.rid)
                self._sample(sched, chunk.seq)
        for seq in progressed.values():  # prompts still being processed: one progress event per step
            self._progress(seq)
        for seq in step.decode:
            run = seq.payload
            run.logits = runner.decode(run.cache, run.last_token)
            self._sample(sched, seq)

    @staticmethod
    def _progress(seq: Sequence) -> None:
        run: _Running = seq.payload
        if run.request.return_progress:
            elapsed = int((time.perf_counter() - run.t_start) * 1e3) if seq.n_prefilled > run.n_cached else 0
            run.handle.publish(ProgressEvent(len(seq.prompt), run.n_cached, seq.n_prefilled, elapsed))

    def _sample(self, sched: Scheduler, seq: Sequence) -> None:
        run: _Running = seq.payload
        req = run.request
        banned = self.eog_ids if req.ignore_eos else frozenset()
        token = self.runner.greedy(run.logits, banned)
        run.last_token = token
        seq.n_decoded += 1
        run.t_gen_last = time.perf_counter()
        is_eog = token in self.eog_ids and not req.ignore_eos
        text = run.text.push(self.piece(token), is_eog=is_eog)
        # b10621 attaches the timings to a partial only when the stop is already known (a stop word)
        timings = self._timings(seq) if run.text.stopped_by_word or req.timings_per_token else None
        run.handle.publish(TokenEvent(token, text, seq.n_decoded, timings))
        # b10621's process_token order: a stop word, the context bound, the budget; EOS wins over a limit
        stop_type, truncated = None, False
        if run.text.stopped_by_word:
            stop_type = "word"
        if len(seq.prompt) + seq.n_decoded >= self.info.n_ctx:
            stop_type, truncated = "limit", True
        if stop_type is None and 0 <= req.n_predict <= seq.n_decoded:
            stop_type = "limit"
        if self._line_limits(run, text):
            stop_type = "limit"
        if is_eog:
            stop_type = "eos"
        if stop_type is not None:
            self._finish(sched, seq, stop_type, truncated)

    @staticmethod
    def _line_limits(run: _Running, text: bytes) -> bool:
        """b10621's n_indent and t_max_predict_ms checks, in its order; True when either stops generation."""
        req, g, stop = run.request, run.text.generated, False
        if run.has_new_line and req.n_indent > 0:
            if run.last_nl_pos > 0:
                pos, n = run.last_nl_pos, 0
                while pos < len(g) and g[pos] in b" \t":
                    n, pos = n + 1, pos + 1
                if pos < len(g) and n < req.n_indent:
                    del g[pos:]  # cut the under-indented line, keeping its indentation
                    stop = True
            nl = g.find(b"\n", run.last_nl_pos)
            if nl != -1:
                run.last_nl_pos = nl + 1
        if b"\n" in text:
            run.has_new_line = True
            elapsed_ms = (run.t_gen_last - run.t_prompt) * 1e3
            if req.t_max_predict_ms > 0 and elapsed_ms > req.t_max_predict_ms:
                stop = True
        return stop

    @staticmethod
    def _timings(seq: Sequence) -> Timings:
        run: _Running = seq.payload
        n = seq.n_decoded
        return Timings(n_cached=run.n_cached, n_prompt_processed=len(seq.prompt) - run.n_cached,
                       t_prompt_ms=(run.t_prompt - run.t_start) * 1e3,
                       n_decoded=n, t_gen_ms=max(run.t_gen_last - run.t_prompt, 1e-6) * 1e3 if n else 0.0)

    def _finish(self, sched: Scheduler, seq: Sequence, stop_type: str, truncated: bool) -> None:
        run: _Running = seq.payload
        n = seq.n_decoded
        run.handle.publish(FinalEvent(
            stop_type=stop_type,
            n_prompt=len(seq.prompt),
            n_prompt_processed=len(seq.prompt) - run.n_cached,
            n_cached=run.n_cached,
            n_decoded=n,
            n_tokens_cached=len(seq.prompt) + max(n - 1, 0),
            truncated=truncated,
            t_prompt_ms=(run.t_prompt - run.t_start) * 1e3,
            t_gen_ms=max(run.t_gen_last - run.t_prompt, 1e-6) * 1e3 if n else 0.0,
            id_slot=seq.slot if seq.slot is not None else -1,
            content=run.text.content,
            stopping_word=run.text.stopping_word,
            has_new_line=run.has_new_line,
        ))
        sched.free(seq)
        if run.request.cache_prompt and self.prompt_cache.enabled:
            # only whole aligned chunks of the prompt: those are computed identically by every run
            n = len(seq.prompt) - len(seq.prompt) % self.align
            if n:
                snap, nbytes = self.runner.snapshot(run.cache, n)
                self.prompt_cache.store(tuple(seq.prompt[:n]), snap, nbytes)
