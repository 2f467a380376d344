"""The engine thread: owns the backend, takes typed commands, publishes plain events to asyncio.

Each step asks the pure Scheduler what to run (prefill chunks and decode rows across slots), runs it on the
backend, draws, applies b10621's stop rules (process_token.py) and publishes events. Decode rows share one
forward pass where the backend batches (decode_batch.py); on the native backend a row gets bitwise the logits it
gets alone (tests/test_model_loading.py), elsewhere the last bits can differ and its tokens are the same in the
fixtures (tests/test_engine_batching.py). The collaborators each have one job: step.py (one step), slot_states.py (slots and the
prompt cache), slot_registry.py (GET /slots), slot_actions.py, adapters.py, drafting.py, metrics.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..backends import Backend, BackendLost, BackendRefusal, hand_back, load_backend
from ..grammar.constraint import GrammarVocab
from ..models import weight_lock
from . import commands as cmd
from .adapters import Adapters
from .checkpoints import prompt_batches
from .config import DEFAULT_CONFIG, EngineConfig
from .decode_batch import DecodeBatch
from .drafting import Speculation, draft_state_bytes, load_drafters
from .draw import Drawer
from .metrics import ServerMetrics
from .process_token import Limits, TokenProcessor
from .running import Handle, Running
from .scheduler import Scheduler, Sequence
from .slot_actions import SlotActions
from .slot_registry import SlotRegistry
from .slot_states import SlotStates
from .speculative import Speculator
from .step import EngineStep
from .stopping import TextStream
from .types import (
    EngineInfo,
    ErrorEvent,
    GenerationRequest,
    ScoredPosition,
    ScoreEvent,
    ScoreRequest,
    SlotAction,
    SlotRecord,
)

log = logging.getLogger("mlxcel.engine")

__all__ = ["Engine", "EngineConfig", "Handle"]


@dataclass
class _Loaded:
    """What runs while the model is loaded: the backend and the collaborators that use it."""

    backend: Backend
    drafter: Speculator | None
    step: EngineStep
    sliding: bool = False  # a sliding-window model: b10621 batches its prompts for context checkpoints


SLIDING_FAMILIES = ("gemma2", "gemma3", "gemma3_text")  # b10621's n_swa > 0 among the families mlxcel serves


def sliding_window(backend: Backend) -> int:
    """The model's attention window where b10621 keeps a sliding-window cache (its n_swa), else 0."""
    config = getattr(getattr(backend, "loaded", None), "config", None) or {}
    if config.get("model_type") not in SLIDING_FAMILIES:
        return 0
    return int(config.get("sliding_window") or 0)


class Engine:
    def __init__(
        self,
        checkpoint: Path,
        config: EngineConfig = DEFAULT_CONFIG,
        eog_ids: frozenset[int] = frozenset(),
        piece: Callable[[int, bool], bytes] = lambda _t, _s: b"",
        grammar_vocab: GrammarVocab | None = None,
        end_token: Callable[[], int | None] = lambda: None,
        open_backend: Callable[[Adapters], Backend] | None = None,
        encode_media: Callable[[Any], np.ndarray] | None = None,
    ):
        self.checkpoint = checkpoint
        self.encode_media = encode_media  # an image's rows from the loaded projector (--mmproj), if any
        self.config = config
        self.eog_ids = eog_ids
        self.piece = piece  # (token id, render special tokens) -> the bytes b10621 adds to the generated text
        self.grammar_vocab = grammar_vocab  # server.grammar.constraint.GrammarVocab, for requests with a grammar
        self.end_token = end_token  # token_eot(), else token_eos(): the infill sampler's fallback (lazily)
        self._open = open_backend or self._load_checkpoint  # the backend, given the adapters (tests: a fake)
        self.info = EngineInfo(model_path=str(checkpoint), n_slots=config.n_slots)
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.lost = ""  # the backend can no longer compute (BackendLost): the server stops, status 1
        self.lost_event = threading.Event()
        self._queue: queue.Queue = queue.Queue()
        self._ids = itertools.count()  # b10621's task ids: one per generation and per slots query
        self.registry = SlotRegistry()
        self.states = SlotStates(
            config.n_slots,
            config.cache_ram_mib,
            config.ubatch,
            config.slot_similarity,
            config.cache_idle_slots,
            config.kv_unified,
        )
        self.adapters = Adapters(config.lora, config.lora_fuse, config.control_vectors, config.control_vector_layers)
        self.actions = SlotActions(config.n_slots, self.registry, self.states, lambda: self.adapters.use(()))
        self.metrics = ServerMetrics()  # GET /metrics (b10621's server_metrics)
        self._thread = threading.Thread(target=self._main, name="mlxcel-engine", daemon=True)
        self.sleeping = False  # --sleep-idle-seconds: the weights and the prompt cache are freed
        self._asleep_cache: tuple[int, int] | None = None  # the prompt cache's figures when it fell asleep
        self._last_task = 0.0
        self._sched: Scheduler | None = None
        self._loaded: _Loaded | None = None  # None before the load and while asleep

    # --- the HTTP side's calls (any thread) ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: float | None = None) -> None:
        """Ask the engine thread to end after its current step (requests still running are dropped); with wait,
        join it for up to that many seconds."""
        self._queue.put(cmd.Stop())
        if wait is not None and self._thread is not None and self._thread.is_alive():
            self._thread.join(wait)

    def submit(self, request: GenerationRequest | ScoreRequest) -> Handle:
        if isinstance(request, GenerationRequest):
            return self.submit_group([request])[0]
        handle = Handle(loop=asyncio.get_running_loop())
        self._queue.put(cmd.Score(request, handle))
        return handle

    def submit_group(self, requests: list[GenerationRequest]) -> list[Handle]:
        """Completions of one prompt (b10621's n_cmpl): the first processes the prompt, the others get a copy
        of its state once it has. Each has its own handle and task id, the first's lowest."""
        loop = asyncio.get_running_loop()
        handles = [Handle(loop=loop) for _ in requests]
        self._queue.put(cmd.Generate(requests, handles, [next(self._ids) for _ in requests]))
        return handles

    def wake(self) -> Future:
        """b10621's wait_until_no_sleep(): a sleeping engine reloads its model; the future is done once it has
        (at once when it was awake)."""
        command = cmd.Wake()
        if not self.sleeping:
            command.future.set_result(None)
            return command.future
        self._queue.put(command)
        return command.future

    def _task(self, command: cmd.SlotCommand | cmd.Control | cmd.SetLora) -> Future:
        next(self._ids)  # each is one of b10621's tasks
        self._queue.put(command)
        return command.future

    def slot_action(self, action: SlotAction) -> Future:
        """Save, restore or erase a slot; deferred while the slot is processing. The future's result is the
        action's figures, or a SlotActionError."""
        return self._task(cmd.SlotCommand(action))

    def control(self, cmpl_id: str, action: str) -> Future:
        """b10621's CONTROL task on the running completion with that id, between two engine steps (never
        deferred). The future's result is a commands.ControlOutcome."""
        return self._task(cmd.Control(cmpl_id, action))

    def set_lora(self, listed: dict[int, float]) -> Future:
        """POST /lora-adapters (b10621's SET_LORA task): the server's scales by upstream's rule, applied between
        two engine steps; requests already admitted keep their scales. The result: False where fused."""
        return self._task(cmd.SetLora(listed))

    def use_grammar_vocab(self, vocab: GrammarVocab) -> None:
        """The vocabulary request grammars compile against (the API layer builds it once, on first use)."""
        self.grammar_vocab = vocab

    def lora_adapters(self) -> list[cmd.AdapterInfo]:
        return self.adapters.listed()

    @property
    def lora_fused(self) -> bool:
        return self.adapters.fused

    def lora_conflicts(self, listed: dict[int, float]) -> bool:
        return self.adapters.conflicts(listed)

    def slots(self) -> list[SlotRecord]:
        """A copy of the slot registry, as of the last engine step; counts as a task, as upstream's does."""
        next(self._ids)
        return self.registry.copy()

    def rank_seconds(self) -> list[float]:
        """A model split over ranks: each rank's time for the same probe product, rank 0 first (a slow rank shows
        in GET /metrics); [] in one process. Blocks until the ranks are between passes."""
        probe = getattr(self.backend, "rank_seconds", None)
        return probe() if probe is not None else []

    def metrics_between_steps(self) -> Future:
        """metrics_snapshot() taken on the engine thread between two steps (at once while the model loads or the
        loop is not running); never wakes a sleeping engine."""
        command = cmd.Metrics()
        if self._sched is None or not self._thread_alive():
            command.future.set_result(self.metrics_snapshot())
        else:
            self._queue.put(command)
        return command.future

    def _thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def metrics_snapshot(self) -> cmd.MetricsSnapshot:
        """GET /metrics' figures; the throughput buckets then start over. Asleep, b10621 serves what it had on
        entering sleep: its counters cannot move while nothing runs, so only the prompt cache (freed with the
        model) is read from what it was then."""
        sched = self._sched
        cache = self._asleep_cache if self.sleeping and self._asleep_cache is not None else self._cache_figures()
        return cmd.MetricsSnapshot(
            self.metrics.take(),
            len(sched.running) if sched is not None else 0,
            len(sched.waiting) if sched is not None else 0,
            *cache,
        )

    def _cache_figures(self) -> tuple[int, int]:
        cache = self.states.prompt_cache
        return (cache.nbytes, len(cache.entries)) if cache is not None else (0, 0)

    # --- loading, sleeping, waking ------------------------------------------------------------------------------

    def _load_checkpoint(self, adapters: Adapters) -> Backend:
        c = self.config
        return load_backend(
            self.checkpoint, n_batch=c.n_batch, kv=c.kv, fuse=adapters.fuser(), rope=c.rope, yarn=c.yarn, ranks=c.ranks
        )

    @property
    def drafting(self) -> bool:
        """Whether drafters are loaded (GET /slots' speculative)."""
        return self._loaded is not None and self._loaded.drafter is not None

    @property
    def backend(self) -> Backend | None:
        return self._loaded.backend if self._loaded is not None else None

    def _load(self, sched: Scheduler) -> _Loaded:
        """The backend, its adapters and drafters, and the collaborators that run on them."""
        c = self.config
        backend = self._open(self.adapters)
        if c.mlock:
            weight_lock.lock(backend.weights())
        self.adapters.attach(backend)
        drafter = load_drafters(c.draft, c.ngram_simple, c.ngram, backend)
        self.states.backend = backend
        self.states.draft_bytes = draft_state_bytes(drafter)
        self.actions.n_vocab = backend.n_vocab
        if c.ctx_shift and not backend.capabilities.turn_keys:
            log.warning(
                "--context-shift: this model's rope cannot turn cached keys; a full context stops the "
                "generation instead"
            )
        self.info.n_ctx = self.info.n_ctx or c.n_ctx or backend.n_ctx_train
        batch = DecodeBatch(backend)
        drawer = Drawer(backend, self.eog_ids, self.piece, self.end_token, lambda: self.grammar_vocab)
        limits = Limits(self.info.n_ctx, c.special, c.add_bos, self._ctx_shift)
        tokens = TokenProcessor(sched, drawer, self.states, self.registry, self.metrics, batch, limits)
        speculation = Speculation(drafter, backend, tokens, self.info.n_ctx) if drafter is not None else None
        step = EngineStep(
            backend,
            batch,
            tokens,
            speculation,
            self.adapters,
            self.metrics,
            self.registry,
            self.info.n_ctx,
            c.add_bos,
            self._ctx_shift,
            lambda: next(self._ids),
            self.encode_media,
        )
        checkpoints = c.ctx_checkpoints > 0 and not c.swa_full  # (b10621's do_checkpoint: n_swa > 0 and these)
        return _Loaded(backend, drafter, step, checkpoints and sliding_window(backend) > 0)

    def _sleep(self) -> None:
        """b10621's sleeping state: the model and everything computed with it freed until the next request."""
        log.info("server is entering sleeping state")
        self._asleep_cache = self._cache_figures()
        self._free()
        self.sleeping = True

    def _free(self) -> None:
        """The backend, the drafters, the batch and the prompt cache released, and MLX's buffer cache handed back
        (asleep, or once the thread ends: a stopped engine holds no weights)."""
        self._loaded = self.states.backend = None
        self.states.clear()
        hand_back()

    def _wake(self, sched: Scheduler) -> None:
        log.info("server is exiting sleeping state")
        self._loaded = self._load(sched)
        self.sleeping = False

    def _ctx_shift(self) -> bool:
        """--context-shift, where the backend can turn cached keys (mlx-lm's scaled ropes, Llama 3's among them,
        cannot: their sequences stop at the context end instead, as without the flag; warned at load)."""
        backend = self.backend
        return self.config.ctx_shift and backend is not None and backend.capabilities.turn_keys

    # --- the engine thread ----------------------------------------------------------------------------------

    def _main(self) -> None:
        c = self.config
        sched = Scheduler(c.n_slots, c.n_batch, c.cont_batching, c.ubatch)
        try:
            started = time.perf_counter()
            self._loaded = self._load(sched)  # (no local: this frame lives as long as the engine, asleep too)
            log.info(
                "model loaded in %.2f s (%s, %s, n_ctx=%d per slot, %d slot(s))",
                time.perf_counter() - started,
                self.checkpoint,
                type(self._loaded.backend).__name__,
                self.info.n_ctx,
                c.n_slots,
            )
            n_stream = 1 if c.kv_unified else c.n_slots  # b10621: one stream with -kvu, else one per slot
            log.info("%s", self._loaded.backend.kv_report(self.info.n_ctx, n_stream, c.n_slots))
        except Exception as exc:  # the server reports load failures and exits
            # (a refusal is a sentence for the user; anything else is named by its type)
            self.load_error = str(exc) if isinstance(exc, BackendRefusal) else f"{type(exc).__name__}: {exc}"
            log.error("failed to load model: %s", self.load_error)
            self.ready.set()
            return
        self.registry.reset(c.n_slots, self.info.n_ctx)
        self.actions.n_ctx = self.info.n_ctx
        self.ready.set()
        sched.choose = self.states.choose
        sched.launched = lambda seq: self._launch(sched, seq)
        self._sched = sched
        self.states.set_context(self.info.n_ctx)
        self._last_task = time.monotonic()
        self._loop(sched)

    def _loop(self, sched: Scheduler) -> None:
        while True:
            idle = sched.idle() and not self.actions.waiting
            drained = self._drain(sched, self._idle_wait() if idle else 0)
            if drained is False:
                self._free()
                return
            if drained is None:  # idle for --sleep-idle-seconds with nothing submitted
                self._sleep()
                continue
            if self.sleeping:  # (only what a sleeping server answers came in: a metrics scrape)
                continue
            if not idle:
                self._last_task = time.monotonic()  # a busy engine is not idle
            self.actions.run(sched)
            try:
                self._require().step.run(sched)
            except BackendLost as exc:  # nothing can run any more: 503 to everyone, and the server stops
                self.lost = str(exc)
                for seq in sched.everyone():
                    seq.payload.handle.publish(ErrorEvent(str(exc), "unavailable"))
                    sched.free(seq)
                self.lost_event.set()
            except Exception as exc:  # never leave a client hanging
                log.exception("engine step failed")
                for seq in sched.everyone():
                    seq.payload.handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
                    sched.free(seq)

    def _idle_wait(self) -> float | None:
        """How long an idle engine waits for work: until --sleep-idle-seconds have passed, else for ever."""
        if self.config.sleep_idle_seconds < 0 or self.sleeping:
            return None
        return max(1e-3, self._last_task + self.config.sleep_idle_seconds - time.monotonic())

    def _drain(self, sched: Scheduler, timeout: float | None) -> bool | None:
        """Move submitted commands in, waiting up to timeout (None: for ever, 0: not at all) for the first; False
        when asked to stop, None when the wait ran out with nothing submitted."""
        block = timeout != 0
        while True:
            try:
                command = self._queue.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                return None if block else True
            block = False
            if isinstance(command, cmd.Stop):
                return False
            if isinstance(command, cmd.Metrics):  # (no activity: the idle clock and a sleeping model stay as they are)
                command.future.set_result(self.metrics_snapshot())
                continue
            self._last_task = time.monotonic()
            if self.sleeping:  # a request wakes the server before anything of it runs
                self._wake(sched)
                self._last_task = time.monotonic()  # idle counts from the end of the wake (server-queue.cpp)
            self._take(sched, command)

    def _take(self, sched: Scheduler, command: cmd.Command) -> None:
        if isinstance(command, cmd.Wake):  # woken already
            command.future.set_result(None)
        elif isinstance(command, cmd.SlotCommand):
            self.actions.waiting.append((command.action, command.future))
        elif isinstance(command, cmd.Control):
            command.future.set_result(self._control(sched, command.cmpl_id, command.action))
        elif isinstance(command, cmd.SetLora):
            command.future.set_result(self.adapters.set_defaults(command.listed))
        elif isinstance(command, cmd.Score):  # scoring runs alone, between steps
            try:
                self._score(command.request, command.handle)
            except Exception as exc:
                command.handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
        elif isinstance(command, cmd.Generate):
            self._admit(sched, command)

    def _admit(self, sched: Scheduler, command: cmd.Generate) -> None:
        seqs = []
        for i, (request, handle, task_id) in enumerate(
            zip(command.requests, command.handles, command.task_ids, strict=False)
        ):
            run = Running(request, handle, TextStream(stops=[s.encode() for s in request.stop]), is_child=i > 0)
            run.lora = self.adapters.admitted(request)
            seqs.append(
                Sequence(
                    task_id,
                    list(request.prompt_tokens),
                    payload=run,
                    held=i > 0,
                    want_slot=request.id_slot if i == 0 else None,
                    cuts=tuple(sorted({p for m in request.media for p in (m.start, m.end)})),
                )
            )
        seqs[0].children = seqs[1:]
        sched.add(seqs[0])

    def _require(self) -> _Loaded:
        if self._loaded is None:
            raise RuntimeError("the model is not loaded")
        return self._loaded

    def _launch(self, sched: Scheduler, seq: Sequence) -> None:
        busy = [s is not None for s in sched.slots]
        self.metrics.add_prompt_cached(self.states.launch(seq, busy))
        self.registry.idle_hold(self.states.slots, [s is not None for s in sched.slots])
        if self._loaded is not None and self._loaded.sliding:  # b10621 batches such a prompt for checkpoints
            req: GenerationRequest = seq.payload.request
            seq.batch_ends = tuple(
                prompt_batches(
                    len(seq.prompt),
                    seq.n_prefilled,
                    req.user_starts,
                    req.last_user,
                    {m.start: m.end for m in req.media},
                    self.config.n_batch,
                    self.config.ubatch,
                    self.config.checkpoint_min_step,
                )
            )

    def _control(self, sched: Scheduler, cmpl_id: str, action: str) -> cmd.ControlOutcome:
        run = next((s.payload for s in sched.running if cmpl_id and s.payload.request.cmpl_id == cmpl_id), None)
        if run is None:
            log.warning("control %s on unknown completion id=%s, no live slot", action, cmpl_id)
            return cmd.ControlOutcome.NO_COMPLETION
        if action != "reasoning_end":
            return cmd.ControlOutcome.UNKNOWN_ACTION
        if not run.request.reasoning_control or run.request.reasoning_budget is None:
            return cmd.ControlOutcome.NOT_ENABLED
        if run.draws.budget is not None:
            run.draws.budget.force()  # only a block still counting moves to its forced end
        else:  # nothing drawn yet: the block ends as soon as it opens
            run.draws.force_reasoning_end = True
        return cmd.ControlOutcome.DONE

    def _score(self, req: ScoreRequest, handle: Handle) -> None:
        self.adapters.use(self.adapters.defaults())
        rows = self._require().backend.score(list(req.prompt_tokens), list(req.continuation), req.n_probs)
        handle.publish(ScoreEvent(tuple(ScoredPosition(t, lp, top) for t, lp, top in rows)))
