"""The engine thread: owns the model, takes plain requests, publishes plain events to asyncio.

Each step asks the pure Scheduler what to run (prefill chunks and decode rows across slots), runs it with
the Runner, samples, applies b10621's stop rules and publishes events. Decode rows of plain-KV models share
one forward pass (their caches merged once, kept merged while the same rows decode together). On the CPU a
row gets bitwise the logits it gets alone, with up to 15 others (server/native/cpu_kernels.c sums its
products and its attention in the same order; tests/test_model_loading.py); elsewhere the last bits can
differ, and its tokens are the same in the fixtures (tests/test_engine_batching.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable

from server.grammar.constraint import GrammarMatcher

from ..models.kv_numerics import KVNumerics
from .metrics import ServerMetrics
from .prompt_cache import PromptCache, Reuse, Slot, State, choose_slot, plan_reuse
from .provenance import DECODE, Provenance, chunk_kind, exact_start
from .reasoning_budget import ReasoningBudget, accept_generated, grammar_should_apply
from .sampling import Chain, GrammarDeadEnd, InfillVocab, draws_the_argmax, pre_probs, sample_constrained
from .scheduler import Scheduler, Sequence
from .speculative import DraftConfig, Drafter, NgramSimple, Speculator, draft_max
from .stopping import TextStream
from .types import (
    EngineInfo,
    ErrorEvent,
    Event,
    FinalEvent,
    GenerationRequest,
    ProgressEvent,
    ScoredPosition,
    ScoreEvent,
    ScoreRequest,
    SlotAction,
    SlotActionError,
    SlotRecord,
    Timings,
    TokenEvent,
    TokenProbs,
)

log = logging.getLogger("mlxcel.engine")


@dataclass
class Handle:
    """An async iterator of events for one request, plus cancel()."""

    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def publish(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the HTTP side's loop is closed (the server shut down): nobody is listening
            self.cancelled.set()

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
    n_cached: int = 0  # prompt positions reused from the slot's state (b10621's n_past: cache_n)
    update_cache: bool = False  # its slot was chosen by LRU (or loses most of its tokens): go by the prompt cache
    has_new_line: bool = False
    last_nl_pos: int = 0
    logits: object = None
    last_token: int = -1
    t_start: float = 0.0
    t_prompt: float = 0.0
    t_prompt_last: float = 0.0  # when the last prompt chunk was computed (b10621's t_prompt_last)
    t_gen_last: float = 0.0
    n_shifted: int = 0  # positions discarded by context shifts
    shifted: bool = False
    discards: list = field(default_factory=list)  # each context shift's (n_keep, n_discard), in order
    inexact: bool = False  # resumed from moved cache chunks (n_cache_reuse): not what a cold run computes
    made: Provenance | None = None  # how each cached position was computed (None: not as a cold run would)
    is_child: bool = False  # an n_cmpl > 1 completion that takes its prompt state from the first
    chain: Chain | None = None  # the request's sampler chain, built at its first draw
    grammar: GrammarMatcher | None = None  # the request's grammar state, built with the chain
    budget: ReasoningBudget | None = None  # the request's reasoning-budget sampler, built with the chain
    done: bool = False  # released: its cache is never needed again
    generated_ids: list = field(default_factory=list)  # every token drawn, in order
    force_reasoning_end: bool = False  # a reasoning_end control arrived before the budget sampler existed
    lora: tuple[float, ...] = ()  # the adapters' scales, fixed when the request was admitted
    # None until the first draw; then False (the sampler chain draws) or the tokens banned from an argmax
    # (a greedy request: sampling.draws_the_argmax)
    argmax: frozenset | tuple | bool | None = None
    draft: list | None = None  # each drafter's state for this sequence (the draft model's cache)
    n_draft: int = 0  # draft tokens proposed (b10621's n_draft_tokens)
    n_draft_accepted: int = 0
    n_draft_rounds: int = 0  # verification rounds (b10621's n_draft_verif_steps)
    accepted_per_pos: list = field(default_factory=list)  # verification rounds that accepted draft position i


# Prefill runs in chunks of --ubatch-size tokens ending on multiples of it counted from position 0, whatever
# else is in flight: a cold run computes every position of a prompt the same way. A request reuses b10621's
# n_past of its slot's state (prompt_cache.py) and recomputes from the point where a cold run's numbers are
# kept (provenance.py): a hit is bitwise a miss.


def _lora_key(scales: tuple[float, ...]) -> tuple[float, ...]:
    """What a prompt's cached positions were computed with besides the model: its adapters' scales, () when
    every scale is 0 (then the model alone computed them)."""
    return scales if any(scales) else ()


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 0  # per slot; 0: the model's training context
    n_slots: int = 1
    n_batch: int = 2048
    cont_batching: bool = True
    ubatch: int = 512  # the largest prefill chunk
    cache_prompt: bool = True
    cache_ram_mib: int = 8192  # -1: no limit, 0: no prompt cache
    slot_similarity: float = 0.1  # --slot-prompt-similarity (0: slots by LRU only)
    cache_idle_slots: bool = True  # --cache-idle-slots: idle slots saved to the prompt cache at each launch
    kv_unified: bool = False  # b10621's unified KV (-np auto): idle slots are also cleared at each launch
    ctx_shift: bool = False  # --context-shift: a full context discards old tokens instead of stopping
    add_bos: bool = False  # the vocabulary adds BOS: a context shift keeps one more token
    special: bool = False  # --special: generated special tokens are rendered as text
    sleep_idle_seconds: int = -1  # --sleep-idle-seconds: free the model after this long idle (-1: never)
    rope: tuple[float | None, float | None] = (None, None)  # --rope-freq-base, --rope-freq-scale (None: the model's)
    yarn: object = None  # server.models.yarn.YarnFlags: --rope-scaling yarn and the --yarn-* values
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (adapter, its starting scale)
    lora_fuse: bool = False  # --lora-fuse: the adapters baked into the weights at their starting scales
    # --control-vector / --control-vector-scaled: (file, strength); --control-vector-layer-range (0: default)
    control_vectors: tuple[tuple[str, float], ...] = ()
    control_vector_layers: tuple[int, int] = (0, 0)
    draft: DraftConfig | None = None  # --spec-draft-model with --spec-type draft-simple
    ngram_simple: tuple[int, int] | None = None  # --spec-type ngram-simple: (size_n, size_m)
    kv: KVNumerics = KVNumerics()  # -ctk, -ctv, -fa; this default a float32 cache (the CLI passes b10621's: f16)


class Engine:
    def __init__(self, checkpoint: Path, config: EngineConfig = EngineConfig(), eog_ids: frozenset[int] = frozenset(),
                 piece: Callable[[int, bool], bytes] = lambda _t, _s: b"", grammar_vocab=None,
                 end_token: Callable[[], int | None] = lambda: None):
        self.checkpoint = checkpoint
        self.config = config
        self.eog_ids = eog_ids
        self.piece = piece  # (token id, render special tokens) -> the bytes b10621 adds to the generated text
        self.grammar_vocab = grammar_vocab  # server.grammar.constraint.GrammarVocab, for requests with a grammar
        self.end_token = end_token  # token_eot(), else token_eos(): the infill sampler's fallback (lazily)
        self.info = EngineInfo(model_path=str(checkpoint), n_slots=config.n_slots)
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._ids = itertools.count()  # b10621's task ids: one per generation and per slots query
        self._slot_lock = threading.Lock()
        self._slot_records: list[SlotRecord] = []
        mib = config.cache_ram_mib
        # b10621's host-memory prompt cache (--cache-ram; its token limit, the context, is set at load)
        self.prompt_cache = PromptCache(max(mib, 0) << 20, 0) if mib != 0 else None
        self.slot_kv = [Slot() for _ in range(config.n_slots)]  # what each slot holds between tasks
        self._release_clock = itertools.count()  # b10621's t_last_used, as an order
        self._batch: list | None = None  # the decode rows' merged caches (one BatchKVCache per layer)
        self._batch_rows: list[Sequence | None] = []  # whose row is which; None: a row dropped at the next step
        self._thread = threading.Thread(target=self._main, name="mlxcel-engine", daemon=True)
        self.metrics = ServerMetrics()  # GET /metrics (b10621's server_metrics)
        self._slot_actions: list[tuple[SlotAction, Future]] = []  # waiting for their slot to be idle
        self.sleeping = False  # --sleep-idle-seconds: the weights and the prompt cache are freed
        self._own_asleep: str | None = None  # mlxcel's metric families as they were when it fell asleep
        self._last_task = 0.0
        self._sched: Scheduler | None = None
        self.lora = None  # server.models.lora.LoraSet once the adapters are loaded (--lora, --lora-scaled)
        self.drafter: Speculator | None = None  # speculative decoding's drafters, once loaded
        self._keys_turn = True  # the model's rope lets cached keys move (Runner.can_turn_keys), set at load

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: float | None = None) -> None:
        """Ask the engine thread to end after its current step (requests still running are dropped); with wait,
        join it for up to that many seconds."""
        self._queue.put(None)
        if wait is not None and self._thread is not None and self._thread.is_alive():
            self._thread.join(wait)

    def submit(self, request: GenerationRequest | ScoreRequest) -> Handle:
        if isinstance(request, GenerationRequest):
            return self.submit_group([request])[0]
        handle = Handle(loop=asyncio.get_running_loop())
        self._queue.put(([request], [handle], [-1]))
        return handle

    def submit_group(self, requests: list[GenerationRequest]) -> list[Handle]:
        """Completions of one prompt (b10621's n_cmpl): the first processes the prompt, the others get a copy
        of its state once it has. Each has its own handle and task id, the first's lowest."""
        loop = asyncio.get_running_loop()
        handles = [Handle(loop=loop) for _ in requests]
        self._queue.put((requests, handles, [next(self._ids) for _ in requests]))
        return handles

    def wake(self) -> Future:
        """b10621's wait_until_no_sleep(): a sleeping engine reloads its model; the future is done once it has
        (at once when it was awake)."""
        future: Future = Future()
        if not self.sleeping:
            future.set_result(None)
            return future
        self._queue.put(("wake", future))
        return future

    def slot_action(self, action: SlotAction) -> Future:
        """Save, restore or erase a slot (b10621's SLOT_SAVE / _RESTORE / _ERASE tasks); deferred while the slot
        is processing. The future's result is the action's figures, or a SlotActionError."""
        future: Future = Future()
        next(self._ids)
        self._queue.put(("slot", action, future))
        return future

    def control(self, cmpl_id: str, action: str) -> Future:
        """b10621's CONTROL task: act on the running completion with that id, mid generation, between two engine
        steps (never deferred). The future's result is {"success": bool, "message"?: str}."""
        future: Future = Future()
        next(self._ids)
        self._queue.put(("control", (cmpl_id, action), future))
        return future

    def lora_adapters(self) -> list[dict]:
        """GET /lora-adapters: each adapter in b10621's entry shape, with the server's current scale."""
        lora = self.lora
        if lora is None:
            return []
        return [{"id": i, "path": a.path, "scale": s, "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
                for i, (a, s) in enumerate(zip(lora.adapters, lora.defaults))]

    def set_lora(self, listed: dict[int, float]) -> Future:
        """POST /lora-adapters (b10621's SET_LORA task): the server's scales by upstream's rule, applied between
        two engine steps; requests already admitted keep the scales they were admitted with."""
        future: Future = Future()
        next(self._ids)
        self._queue.put(("lora", listed, future))
        return future

    def slots(self) -> list[SlotRecord]:
        """A copy of the slot registry, as of the last engine step; counts as a task, as upstream's does."""
        next(self._ids)
        with self._slot_lock:
            return [dataclasses.replace(r) for r in self._slot_records]

    # --- engine thread -------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            from ..models.loader import load_checkpoint
            from .runner import Runner

            started = time.perf_counter()
            loaded = load_checkpoint(self.checkpoint, fuse=self._fuser(), rope=self.config.rope, yarn=self.config.yarn)
            self.runner = Runner(loaded, n_batch=self.config.n_batch, kv=self.config.kv)
            self._load_adapters()
            self._load_draft()
            self._check_keys_turn()
            self.info.n_ctx = self.config.n_ctx or loaded.n_ctx_train
            log.info("model loaded in %.2f s (%s, dequantized=%s, n_ctx=%d per slot, %d slot(s))",
                     time.perf_counter() - started, self.checkpoint, loaded.dequantized, self.info.n_ctx,
                     self.config.n_slots)
            del loaded  # this frame lives as long as the engine: only the runner may hold the model
        except Exception as exc:  # the server reports load failures and exits
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("failed to load model: %s", self.load_error)
            self.ready.set()
            return
        with self._slot_lock:
            self._slot_records = [SlotRecord(i, self.info.n_ctx) for i in range(self.config.n_slots)]
        self.ready.set()
        sched = Scheduler(self.config.n_slots, self.config.n_batch, self.config.cont_batching, self.config.ubatch)
        sched.choose, sched.launched = self._choose_slot, self._launch
        self._sched = sched
        if self.prompt_cache is not None:  # b10621's token limit: the whole context (every slot's, unless unified)
            self.prompt_cache.limit_tokens = self.info.n_ctx * (1 if self.config.kv_unified else self.config.n_slots)
        self._last_task = time.monotonic()
        while True:
            idle = sched.idle() and not self._slot_actions
            drained = self._drain(sched, self._idle_wait() if idle else 0)
            if drained is False:
                self._free()
                return
            if drained is None:  # idle for --sleep-idle-seconds with nothing submitted
                self._sleep()
                continue
            if not idle:
                self._last_task = time.monotonic()  # a busy engine is not idle
            self._run_slot_actions(sched)
            try:
                self._step(sched)
            except Exception as exc:  # never leave a client hanging
                log.exception("engine step failed")
                for seq in sched.everyone():
                    seq.payload.handle.publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
                    sched.free(seq)

    def _check_keys_turn(self) -> None:
        self._keys_turn = self.runner.can_turn_keys()
        if self.config.ctx_shift and not self._keys_turn:
            log.warning("--context-shift: this model's rope cannot turn cached keys; a full context stops the "
                        "generation instead")

    def _load_draft(self) -> None:
        """The drafters, in b10621's priority order (n-gram first); the draft model loaded beside the target
        (after a wake too)."""
        sources, n_max = [], 0
        if self.config.ngram_simple is not None:
            sources.append(NgramSimple(*self.config.ngram_simple))
            n_max = max(n_max, self.config.ngram_simple[1])
        if self.config.draft is not None:
            from ..models.loader import load_checkpoint
            from .runner import Runner

            draft = self.config.draft
            sources.append(Drafter(Runner(load_checkpoint(Path(draft.model)), kv=draft.kv), draft))
            n_max = max(n_max, draft.n_max)
            log.info("draft model loaded: %s (n_max %d, n_min %d, p_min %g)", draft.model, draft.n_max,
                     draft.n_min, draft.p_min)
        self.drafter = Speculator(sources, n_max) if sources else None

    def _lora_set(self):
        """The adapters (read once): their files, and the scales they start at."""
        if self.lora is None and self.config.lora:
            from ..models import lora

            adapters = [lora.load_adapter(path) for path, _ in self.config.lora]
            self.lora = lora.LoraSet(adapters, [scale for _, scale in self.config.lora], fused=self.config.lora_fuse)
            log.info("loaded %d LoRA adapter(s)%s: %s", len(adapters), " fused into the weights" if
                     self.config.lora_fuse else "", ", ".join(f"{a.path} (scale {s:g})"
                                                             for a, s in zip(adapters, self.lora.defaults)))
        return self.lora

    def _fuser(self):
        """load_checkpoint's fuse step under --lora-fuse, else None."""
        if not (self.config.lora and self.config.lora_fuse):
            return None
        from ..models import lora

        return lambda model: lora.fuse(model, self._lora_set())

    def _load_adapters(self) -> None:
        """--lora / --lora-scaled: read every adapter and attach it to the model just built (after a wake too);
        the control vectors likewise."""
        if self.config.control_vectors:
            from ..models import control_vector

            model = self.runner.loaded.model
            n_embd, data = control_vector.load(self.config.control_vectors)
            args = model.args
            vectors = control_vector.per_layer(n_embd, data, args.num_hidden_layers, args.hidden_size,
                                               *self.config.control_vector_layers)
            control_vector.attach(model.model, vectors)
            self.runner.steered = bool(vectors)
        if not self.config.lora or self.config.lora_fuse:  # fused adapters are in the weights already
            return
        from ..models import lora

        lora.attach(self.runner.loaded.model, self._lora_set())
        self.runner.lora = self.lora

    def _use_lora(self, scales: tuple[float, ...]) -> None:
        """The scales the next forward pass adds its adapters' terms with."""
        if self.lora is not None:
            self.lora.current = scales

    def _admitted_lora(self, request: GenerationRequest) -> tuple[float, ...]:
        """b10621's launch_slot_with_task: the request's own scales (construct_lora_list), else the server's."""
        if self.lora is None or self.lora.fused:  # fused: the weights carry the one scale set there is
            return ()
        if request.lora:
            return tuple(self.lora.resolve(dict(request.lora)))
        return tuple(self.lora.defaults)

    def _idle_wait(self) -> float | None:
        """How long an idle engine waits for work: until --sleep-idle-seconds have passed, else for ever."""
        if self.config.sleep_idle_seconds < 0 or self.sleeping:
            return None
        return max(1e-3, self._last_task + self.config.sleep_idle_seconds - time.monotonic())

    def _drain(self, sched: Scheduler, timeout: float | None) -> bool | None:
        """Move submitted requests into the scheduler, waiting up to timeout (None: for ever, 0: not at all) for
        the first; False when asked to stop, None when the wait ran out with nothing submitted."""
        block = timeout != 0
        while True:
            try:
                item = self._queue.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                return None if block else True
            block = False
            if item is None:
                return False
            self._last_task = time.monotonic()
            if self.sleeping:  # a request wakes the server before anything of it runs
                self._wake()
            if item[0] == "wake":  # woken above: nothing else to do
                item[1].set_result(None)
                continue
            if item[0] == "slot":
                self._slot_actions.append(item[1:])
                continue
            if item[0] == "control":
                item[2].set_result(self._control(sched, *item[1]))
                continue
            if item[0] == "lora":
                if self.lora is not None and self.lora.fused:
                    item[2].set_result({"success": False})
                elif self.lora is not None:
                    self.lora.defaults = self.lora.resolve(item[1])
                    item[2].set_result({"success": True})
                else:
                    item[2].set_result({"success": True})
                continue
            requests, handles, task_ids = item
            if isinstance(requests[0], ScoreRequest):  # scoring runs alone, between steps
                try:
                    self._score(requests[0], handles[0])
                except Exception as exc:
                    handles[0].publish(ErrorEvent(f"{type(exc).__name__}: {exc}"))
                continue
            seqs = []
            for i, (request, handle, task_id) in enumerate(zip(requests, handles, task_ids)):
                run = _Running(request, handle, TextStream(stops=[s.encode() for s in request.stop]), is_child=i > 0)
                run.lora = self._admitted_lora(request)
                prompt = list(request.prompt_tokens)
                seqs.append(Sequence(task_id, prompt, payload=run, held=i > 0,
                                     want_slot=request.id_slot if i == 0 else None))
            seqs[0].children = seqs[1:]
            sched.add(seqs[0])

    # --- b10621's slots and prompt cache (prompt_cache.py): which slot a request takes, what it reuses -------

    def _choose_slot(self, seq: Sequence, free: list[int]) -> int | None:
        """get_available_slot for a request that asked for no slot (side-effect free: it may wait and ask again)."""
        for i, slot in enumerate(self.slot_kv):
            slot.processing = i not in free
        similarity = self.config.slot_similarity
        chosen, update = choose_slot(self.slot_kv, seq.prompt, None, similarity)
        seq.payload.update_cache = update
        return chosen

    def _launch(self, seq: Sequence) -> None:
        """A request (and its n_cmpl children) now holds its slot: the slot updated from the prompt cache where
        b10621 does, what the slot holds of the prompt restored (n_past), then the idle slots saved to the cache
        (and cleared with a unified KV). Children keep nothing of their slots: the parent's state is copied."""
        run: _Running = seq.payload
        slot = self.slot_kv[seq.slot]
        key = _lora_key(run.lora)
        if seq.want_slot is not None:  # the requested slot: by similarity only if it clears the threshold
            for i, s in enumerate(self.slot_kv):
                s.processing = i != seq.slot and self._sched.slots[i] is not None
            _, run.update_cache = choose_slot(self.slot_kv, seq.prompt, seq.slot, self.config.slot_similarity)
        cache = self.prompt_cache
        if run.update_cache and cache is not None and run.request.completion_task:
            cache.save(slot.state)
            loaded = cache.load(slot.state, seq.prompt, key)
            if loaded is not None:
                slot.state = loaded
            cache.update()
        if slot.state.key != key:  # other adapter scales computed it (b10621's lora_should_clear_cache)
            slot.clear()
        reuse = Reuse(0)
        if run.request.cache_prompt and slot.state.tokens:
            min_chunk = run.request.n_cache_reuse if self.runner.can_turn_keys() else 0
            reuse = plan_reuse(slot.state.tokens, seq.prompt, min_chunk)
        if reuse.chunks:  # moved keys: not what a cold run computes
            run.cache = self.runner.restore_chunks(slot.state.snapshot, reuse.prefix, reuse.chunks)
            run.inexact = True
            seq.n_prefilled = reuse.n
        elif reuse.n:
            # resumed where a cold run's numbers are kept (the positions after it, up to n_past, recomputed)
            start = exact_start(slot.state.made, len(seq.prompt), reuse.n, self.config.ubatch, self._few_rows())
            run.cache = self.runner.restore(slot.state.snapshot, start) if start else self.runner.new_cache()
            seq.n_prefilled = start
            run.made = slot.state.made.copy() if slot.state.made is not None else Provenance()
            run.made.truncate(start)
        else:
            run.cache = self.runner.new_cache()
            run.made = Provenance()
        run.n_cached = reuse.n
        self.metrics.add_prompt_cached(reuse.n)
        slot.clear()  # the slot's state is the request's now (b10621's keep_first(n_past)), until its release
        for child in seq.children:
            self.slot_kv[child.slot].clear()
        if self.config.cache_idle_slots and cache is not None:
            for i, s in enumerate(self.slot_kv):
                if self._sched.slots[i] is not None:
                    continue
                if cache.save(s.state):
                    cache.update()
                if self.config.kv_unified:
                    self._clear_slot(i)
        self._records_hold()

    def _clear_slot(self, i: int) -> None:
        self.slot_kv[i].clear()

    def _few_rows(self) -> int:
        """Up to how many rows a product runs on mlxcel's few-row kernels (cpu_kernels.c SMALL_M); with products in
        ggml's order (a float32 model's native steps), 1: one row sums as vec_dot, two or more as tinyBLAS."""
        from ..models.decode_step import MAX_ROWS

        runner = self.runner
        step = getattr(runner, "_step", None) if runner is not None else None
        return 1 if getattr(step, "ggml_order", False) and runner._native() else MAX_ROWS

    def _keep_slot_state(self, seq: Sequence) -> None:
        """b10621's slot keeps its KV state after its task: the prompt and every generated token but the last
        (less what context shifts discarded); a child's slot keeps nothing."""
        slot = self.slot_kv[seq.slot]
        slot.t_last_used = next(self._release_clock)
        run: _Running = seq.payload
        slot.clear()
        if run.is_child or run.cache is None:
            return
        tokens = tuple(self._cached_tokens(seq))
        if not tokens or run.cache[0].offset < len(tokens):
            return
        made = None
        if run.made is not None and not run.shifted:
            made = run.made.copy()
            made.add(seq.n_prefilled, len(tokens), DECODE)  # the generated tokens, decode steps' positions
        snap, nbytes = self._snapshot(run.cache, len(tokens))
        slot.state = State(tokens, snap, nbytes, _lora_key(run.lora), made)

    def _snapshot(self, cache: list, n: int) -> tuple[list, int]:
        """A slot's state and the bytes b10621's --cache-ram counts for it: the target's and the draft
        model's KV state (server_slot::prompt_save), streams as its KV cache has them."""
        n_stream = 1 if self.config.kv_unified else self.config.n_slots
        snap, nbytes = self.runner.snapshot(cache, n, n_stream)
        for source in self.drafter.sources if self.drafter is not None else ():
            if isinstance(source, Drafter):
                nbytes += source.runner.state_bytes(None, n, n_stream)
        return snap, nbytes

    def _records_hold(self) -> None:
        """The idle slots' registry entries hold what their slots hold (a load or a clear changes it)."""
        with self._slot_lock:
            for i, s in enumerate(self.slot_kv):
                r = self._slot_records[i]
                if self._sched.slots[i] is None and not r.is_processing and r.tokens != s.state.tokens:
                    self._slot_records[i] = dataclasses.replace(r, n_prompt_tokens=len(s.state.tokens),
                                                                tokens=s.state.tokens)

    def _sleep(self) -> None:
        """b10621's sleeping state: the model and everything computed with it freed until the next request."""
        log.info("server is entering sleeping state")
        self._own_asleep = self._own_metrics()  # GET /metrics while asleep: as it was right before sleeping
        self._free()
        self.sleeping = True

    def _free(self) -> None:
        """The model, the drafters, the batch and the prompt cache released, and MLX's buffer cache handed back
        (asleep, or once the thread ends: a stopped engine holds no weights)."""
        from .memory import hand_back

        self.runner = None
        self.drafter = None
        self._batch, self._batch_rows = None, []
        if self.prompt_cache is not None:
            self.prompt_cache.clear()
        for slot in self.slot_kv:
            slot.clear()
        hand_back()

    def _wake(self) -> None:
        from ..models.loader import load_checkpoint
        from .runner import Runner

        log.info("server is exiting sleeping state")
        self.runner = Runner(load_checkpoint(self.checkpoint, fuse=self._fuser(), rope=self.config.rope,
                                             yarn=self.config.yarn), n_batch=self.config.n_batch, kv=self.config.kv)
        self._load_adapters()
        self._load_draft()
        self.sleeping = False

    def _control(self, sched: Scheduler, cmpl_id: str, action: str) -> dict:
        run = next((s.payload for s in sched.running if cmpl_id and s.payload.request.cmpl_id == cmpl_id), None)
        if run is None:
            log.warning("control %s on unknown completion id=%s, no live slot", action, cmpl_id)
            return {"success": False, "message": "no active completion for this id"}
        if action != "reasoning_end":
            return {"success": False, "message": "unknown control action"}
        if not run.request.reasoning_control or run.request.reasoning_budget is None:
            return {"success": False, "message": "reasoning control not enabled for this completion"}
        if run.budget is not None:
            run.budget.force()  # only a block still counting moves to its forced end
        else:  # nothing drawn yet: the block ends as soon as it opens
            run.force_reasoning_end = True
        return {"success": True}

    def _run_slot_actions(self, sched: Scheduler) -> None:
        waiting = []
        for action, future in self._slot_actions:
            n = self.config.n_slots
            if any(s.slot == abs(action.id_slot) % n for s in sched.running):  # b10621 defers the task
                waiting.append((action, future))
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._slot_action(action))
            except SlotActionError as exc:
                future.set_exception(exc)
            except Exception as exc:  # noqa: BLE001 - the request answers with it
                log.exception("slot %s failed", action.action)
                future.set_exception(SlotActionError(f"{type(exc).__name__}: {exc}", "SERVER"))
        self._slot_actions = waiting

    def _slot_action(self, action: SlotAction) -> dict:
        from . import slot_files

        # get_slot_by_id wraps an id past the last slot around (C's %: a negative one finds no slot)
        slot = abs(action.id_slot) % self.config.n_slots * (1 if action.id_slot >= 0 else -1)
        if slot < 0:
            raise SlotActionError("Invalid slot ID")
        started = time.perf_counter()
        with self._slot_lock:
            record = self._slot_records[slot]
        if action.action == "erase":
            self.slot_kv[slot].clear()
            with self._slot_lock:
                self._slot_records[slot] = dataclasses.replace(record, n_prompt_tokens=0, tokens=())
            return {"n_erased": len(record.tokens)}
        if action.action == "save":
            try:
                n_bytes = slot_files.write(action.path, list(record.tokens), action.identity)
            except OSError:
                raise SlotActionError("Unable to save slot", "SERVER") from None
            return {"n_tokens": len(record.tokens), "n_bytes": n_bytes, "t_ms": (time.perf_counter() - started) * 1e3}
        try:  # restore
            tokens, n_bytes = slot_files.read(action.path, action.identity)
        except slot_files.SlotFileError:
            raise SlotActionError("Unable to restore slot: No available space in KV cache or invalid slot save "
                                  "file") from None
        if len(tokens) > self.info.n_ctx:
            raise SlotActionError("Unable to restore slot: Restored prompt does not fit in the slot context")
        if any(not 0 <= t < self.runner.n_vocab for t in tokens):
            raise SlotActionError("Unable to restore slot: Invalid tokens in slot save file")
        self._restore_slot(slot, tokens)
        with self._slot_lock:
            self._slot_records[slot] = dataclasses.replace(record, n_prompt_tokens=len(tokens),
                                                                     tokens=tuple(tokens))
        return {"n_tokens": len(tokens), "n_bytes": n_bytes, "t_ms": (time.perf_counter() - started) * 1e3}

    def _restore_slot(self, slot: int, tokens: list[int]) -> None:
        """A restored slot holds its tokens' KV state (b10621 reads it from the file; mlxcel's slot files hold
        the tokens, computed here as a cold run computes them: chunks ending on multiples of the ubatch)."""
        if not tokens:
            self.slot_kv[slot].clear()
            return
        cache, ub = self.runner.new_cache(), self.config.ubatch
        self._use_lora(())  # the model alone computes them
        made = Provenance()
        for start in range(0, len(tokens), ub):
            end = min(start + ub, len(tokens))
            self.runner.prefill(cache, tokens[start:end])
            made.add(start, end, chunk_kind(end - start, self._few_rows()))
        snap, nbytes = self._snapshot(cache, len(tokens))
        self.slot_kv[slot].state = State(tuple(tokens), snap, nbytes, (), made)

    def _score(self, req: ScoreRequest, handle: Handle) -> None:
        from .runner import score

        self._use_lora(tuple(self.lora.defaults) if self.lora is not None else ())
        rows = score(self.runner, list(req.prompt_tokens), list(req.continuation), req.n_probs)
        handle.publish(ScoreEvent(tuple(ScoredPosition(t, lp, top) for t, lp, top in rows)))

    def _step(self, sched: Scheduler) -> None:
        for seq in sched.everyone():
            if seq.payload.handle.cancelled.is_set():
                seq.cancelled = True
        for seq in sched.cancelled():  # the client went away: free the slot within this step
            for child in seq.children:  # children it had not served yet process the prompt themselves
                child.held = False
            self._release(seq)
            sched.free(seq)
        step = sched.schedule()
        if step:  # b10621 posts a NEXT_RESPONSE task (and so spends a task id) per busy loop iteration
            next(self._ids)
        runner = self.runner
        busy = len(sched.running)  # b10621 counts every processing slot at each decode
        involved = [chunk.seq for chunk in step.prefill] + list(step.decode)
        progressed: dict[int, Sequence] = {}
        for chunk in step.prefill:
            run: _Running = chunk.seq.payload
            if not run.t_start:
                run.t_start = time.perf_counter()
                self._progress(chunk.seq)  # the request has started: 0% (or its cached share)
            progressed[chunk.seq.rid] = chunk.seq
            t_chunk = time.perf_counter()
            self._use_lora(run.lora)
            run.logits = runner.prefill(run.cache, chunk.seq.prompt[chunk.start:chunk.end])
            run.t_prompt_last = time.perf_counter()
            if run.made is not None:
                run.made.add(chunk.start, chunk.end, chunk_kind(chunk.end - chunk.start, self._few_rows()))
            # b10621 counts the prompt tokens after n_past (a hit's recomputed positions before it are mlxcel's)
            self.metrics.add_prompt(chunk.end - max(chunk.start, run.n_cached),
                                    int((run.t_prompt_last - t_chunk) * 1e6))
            sched.prefilled(chunk)
            if chunk.completes_prompt:
                run.t_prompt = time.perf_counter()
                self._progress(chunk.seq)
                progressed.pop(chunk.seq.rid)
                forked = [self._fork(chunk.seq, c) for c in chunk.seq.children if c.held and c.slot is not None]
                for seq in (chunk.seq, *forked):
                    self._sample(sched, seq)
        for seq in progressed.values():  # prompts still being processed: one progress event per step
            self._progress(seq)
        for seq in step.decode:
            if self._ctx_shift() and self._slot_tokens(seq) + 1 >= self.info.n_ctx:
                self._shift(seq)
        drafting = [(seq, n) for seq in step.decode if (n := self._n_draft_max(seq)) > 0]
        if drafting:  # each runs its own round; the others decode as they would without a drafter
            ids = {id(seq) for seq, _ in drafting}
            step = dataclasses.replace(step, decode=[s for s in step.decode if id(s) not in ids])
        # one forward pass adds one set of adapter scales (b10621's can_batch_with): rows admitted with other
        # scales decode on their own
        one_lora = len({s.payload.lora for s in step.decode}) <= 1
        if len(step.decode) >= 2 and one_lora and runner.can_batch([s.payload.cache for s in step.decode
                                                                    if s.payload.cache is not None]):
            self._use_lora(step.decode[0].payload.lora)
            self._decode_batched(sched, step.decode)
        else:
            self._dissolve_batch()
            for seq in step.decode:
                run = seq.payload
                self._use_lora(run.lora)
                run.logits = runner.decode(run.cache, run.last_token)
                self._sample(sched, seq)
        for seq, n_max in drafting:
            self._speculate(sched, seq, n_max)
        if involved:
            self.metrics.post_decode(busy, [self._slot_tokens(s) for s in involved])
        self._publish_slots(sched.running)

    def metrics_text(self) -> str:
        """GET /metrics: the Prometheus text, then the throughput buckets start over. Asleep, b10621 serves the
        snapshot it took on entering sleep: its counters cannot move while nothing runs, so only mlxcel's own
        families (freed with the model) come from the snapshot taken in _sleep()."""
        sched = self._sched
        processing = len(sched.running) if sched is not None else 0
        deferred = len(sched.waiting) if sched is not None else 0
        own = self._own_asleep if self.sleeping and self._own_asleep is not None else self._own_metrics()
        return self.metrics.scrape(processing, deferred) + own

    def _own_metrics(self) -> str:
        """mlxcel's families, after b10621's: the prompt cache."""
        cache = self.prompt_cache or PromptCache(0, 0)
        lines = ["# HELP mlxcel:prompt_cache_bytes Bytes held by the prompt cache",
                 "# TYPE mlxcel:prompt_cache_bytes gauge", f"mlxcel:prompt_cache_bytes {cache.nbytes}",
                 "# HELP mlxcel:prompt_cache_entries Prompts held by the prompt cache",
                 "# TYPE mlxcel:prompt_cache_entries gauge", f"mlxcel:prompt_cache_entries {len(cache.entries)}"]
        return "\n".join(lines) + "\n"

    # --- batched decode: the rows' caches live merged in self._batch while they decode together -------------

    def _decode_batched(self, sched: Scheduler, decode: list[Sequence]) -> None:
        runner, rows = self.runner, self._batch_rows
        wanted = {id(s) for s in decode}
        if self._batch is not None:
            for i, s in enumerate(rows):  # a row leaving while still alive takes its cache with it
                if s is not None and id(s) not in wanted:
                    self._own_cache(s)
            keep = [i for i, s in enumerate(rows) if s is not None]
            if not keep:
                self._batch, rows = None, []
            elif len(keep) < len(rows):
                runner.batch_keep(self._batch, keep)
                rows = [rows[i] for i in keep]
        present = {id(s) for s in rows}
        new = [s for s in decode if id(s) not in present]
        if new:
            merged = runner.batch_merge([s.payload.cache for s in new])
            if self._batch is None:
                self._batch = merged
            else:
                runner.batch_extend(self._batch, merged)
            rows = rows + new
            for s in new:
                s.payload.cache = None  # its positions live in the batch now
        self._batch_rows = rows
        logits = runner.batch_decode(self._batch, [s.payload.last_token for s in rows])
        row = {id(s): i for i, s in enumerate(rows)}
        for seq in decode:  # sampled in the scheduler's order, as the rows would be one by one
            i = row[id(seq)]
            seq.payload.logits = logits[i:i + 1]
            self._sample(sched, seq)

    def _own_cache(self, seq: Sequence) -> None:
        """The sequence's own cache again, out of the batch (its row is dropped at the next step)."""
        run: _Running = seq.payload
        if run.cache is not None or self._batch is None:
            return
        i = next((i for i, s in enumerate(self._batch_rows) if s is seq), None)
        if i is None:  # never decoded in the batch (a child released before its copy)
            return
        run.cache = self.runner.batch_extract(self._batch, i)
        self._batch_rows[i] = None

    def _dissolve_batch(self) -> None:
        """Back to one cache per sequence (the rows still alive get theirs out)."""
        if self._batch is None:
            return
        for s in self._batch_rows:
            if s is not None and not s.payload.done:
                self._own_cache(s)
        self._batch, self._batch_rows = None, []

    def _fork(self, parent: Sequence, child: Sequence) -> Sequence:
        """b10621's copy_state_to(): the child gets the parent's prompt state, stats and last logits."""
        prun, crun = parent.payload, child.payload
        self._own_cache(parent)
        n = len(parent.prompt)
        snap, _ = self.runner.snapshot(prun.cache, n)
        crun.cache = self.runner.restore(snap, n)
        crun.logits = prun.logits * 1  # its own array: sampling may ban tokens in place
        crun.n_cached, crun.t_start, crun.t_prompt = prun.n_cached, prun.t_start, prun.t_prompt
        child.n_prefilled, child.held = n, False
        return child

    @staticmethod
    def _cached_tokens(seq: Sequence) -> list[int]:
        """The tokens in the slot's KV cache, in order: the prompt and every generated token but the last, less
        what each context shift discarded (b10621's slot.prompt.tokens)."""
        run: _Running = seq.payload
        tokens = [*seq.prompt[:seq.n_prefilled], *run.generated_ids[:-1]]
        for n_keep, n_discard in run.discards:
            del tokens[n_keep:n_keep + n_discard]
        return tokens

    @staticmethod
    def _slot_tokens(seq: Sequence) -> int:
        """Tokens in the slot's KV cache: the prompt fed so far and every generated token but the last."""
        return seq.n_prefilled + max(seq.n_decoded - 1, 0) - seq.payload.n_shifted

    def _shift_frees_nothing(self, seq: Sequence) -> bool:
        """A shift that would discard nothing (n_keep covers the context): stop at the bound instead."""
        req = seq.payload.request
        n_keep = len(seq.prompt) if req.n_keep < 0 else req.n_keep
        n_keep = min(self.info.n_ctx - 4, n_keep + (1 if self.config.add_bos else 0))
        return self._slot_tokens(seq) - n_keep - 1 <= 0

    def _shift(self, seq: Sequence) -> None:
        """b10621's context shift (pre_decode): keep n_keep tokens, discard n_discard after them."""
        run: _Running = seq.payload
        req = run.request
        n_keep = len(seq.prompt) if req.n_keep < 0 else req.n_keep
        n_keep = min(self.info.n_ctx - 4, n_keep + (1 if self.config.add_bos else 0))
        n_left = self._slot_tokens(seq) - n_keep
        n_discard = req.n_discard if req.n_discard else int(n_left / 2)
        n_discard = max(0, min(n_discard, max(0, n_left - 1)))
        self._own_cache(seq)
        log.warning("slot %d: context shift, n_keep = %d, n_left = %d, n_discard = %d", seq.slot, n_keep, n_left,
                    n_discard)
        self.runner.shift(run.cache, n_keep, n_discard)
        run.n_shifted += n_discard
        run.shifted = True
        run.discards.append((n_keep, n_discard))

    def _publish_slots(self, running: list[Sequence]) -> None:
        with self._slot_lock:
            for seq in running:
                run: _Running = seq.payload
                req = run.request
                self._slot_records[seq.slot] = SlotRecord(
                    seq.slot, self.info.n_ctx, is_processing=True, id_task=seq.rid,
                    n_prompt_tokens=self._slot_tokens(seq),
                    n_prompt_tokens_processed=max(seq.n_prefilled - run.n_cached, 0),
                    n_prompt_tokens_cache=run.n_cached,
                    params=req.params_echo, has_next_token=True, has_new_line=run.has_new_line,
                    n_remain=req.n_predict - seq.n_decoded if req.n_predict != -1 else -1, n_decoded=seq.n_decoded,
                    # the live buffer, not a copy per step: only the debug view reads it (copying it then)
                    prompt_tokens=req.prompt_tokens, generated=run.text.generated)

    def _release(self, seq: Sequence) -> None:
        """b10621's release() then reset(): the slot keeps its tokens and last task, its counters go to zero."""
        if seq.slot is None:
            seq.payload.done = True
            return
        self._own_cache(seq)
        seq.payload.done = True
        self._keep_slot_state(seq)
        run: _Running = seq.payload
        n = seq.n_decoded
        if n > 0:  # callback_on_reset: every release counts what was generated (a cancelled or failed one too)
            self.metrics.on_prediction(n, int(max(run.t_gen_last - run.t_prompt, 1e-6) * 1e6))
            self.metrics.on_drafts(run.n_draft, run.n_draft_accepted, run.n_draft_rounds, run.accepted_per_pos)
        with self._slot_lock:
            n_held = 0 if run.is_child else self._slot_tokens(seq)
            held = [*seq.prompt[:seq.n_prefilled], *run.generated_ids[:-1]]
            self._slot_records[seq.slot] = SlotRecord(
                seq.slot, self.info.n_ctx, id_task=seq.rid,
                # a child slot does not keep its context: the parent's is enough (b10621's release())
                n_prompt_tokens=n_held, params=run.request.params_echo,
                prompt_tokens=run.request.prompt_tokens, generated=bytes(run.text.generated),
                tokens=tuple(held[len(held) - n_held:]) if n_held else ())

    @staticmethod
    def _progress(seq: Sequence) -> None:
        run: _Running = seq.payload
        if run.request.return_progress:
            done = max(seq.n_prefilled, run.n_cached)  # (a hit recomputing positions before n_past: none yet)
            elapsed = int((time.perf_counter() - run.t_start) * 1e3) if done > run.n_cached else 0
            timings = None
            if run.request.timings_per_token:  # the slot's stats so far: nothing generated yet
                n_done = done - run.n_cached
                timings = Timings(n_cached=run.n_cached, n_prompt_processed=n_done, n_decoded=0, t_gen_ms=0.0,
                                  t_prompt_ms=(run.t_prompt_last - run.t_start) * 1e3 if n_done else 0.0)
            run.handle.publish(ProgressEvent(len(seq.prompt), run.n_cached, done, elapsed, timings))

    def _sample(self, sched: Scheduler, seq: Sequence) -> None:
        drawn = self._draw(sched, seq)
        if drawn is not None:
            self._emit(sched, seq, *drawn)

    def _ctx_shift(self) -> bool:
        """--context-shift, where the model's rope lets cached keys turn (mlx-lm's scaled ropes, Llama 3's
        among them, do not: their sequences stop at the context end instead, as without the flag; warned at load)."""
        return self.config.ctx_shift and self._keys_turn

    def _n_draft_max(self, seq: Sequence) -> int:
        """How many tokens this decode step may draft (0: it decodes plainly): b10621's get_n_draft_max, for a
        sequence in plain KV caches (a trimmed position is one that is simply written again)."""
        run: _Running = seq.payload
        if self.drafter is None or (run.cache is not None and not self.runner.can_batch([run.cache])):
            return 0
        return draft_max(self.info.n_ctx, self._slot_tokens(seq), run.request.n_predict, seq.n_decoded)

    def _speculate(self, sched: Scheduler, seq: Sequence, n_max: int) -> None:
        """One speculative round: the draft, the target's pass over the last token and the draft, the draws
        (common_sampler_sample_and_accept_n), the rejected positions forgotten, the tokens emitted in order."""
        run: _Running = seq.payload
        runner, drafter = self.runner, self.drafter
        self._own_cache(seq)
        if run.draft is None:
            run.draft = drafter.new_state()
        # after a context shift the draft cache keeps its common prefix with the shifted tokens and is fed the rest
        draft = drafter.propose(run.draft, self._cached_tokens(seq), run.last_token, n_max)
        run.n_draft += len(draft)
        self._use_lora(run.lora)
        if not draft:
            run.logits = runner.decode(run.cache, run.last_token)
            self._sample(sched, seq)
            return
        n_past = run.cache[0].offset
        rows = runner.verify(run.cache, [run.last_token, *draft])
        ids = []
        for i in range(len(draft) + 1):
            run.logits = rows[i:i + 1]
            drawn = self._draw(sched, seq)
            if drawn is None:  # the sequence failed (a grammar dead end)
                return
            ids.append(drawn[0])
            if i == len(draft) or drawn[0] != draft[i]:
                break
        runner.trim(run.cache, n_past + len(ids))
        n_accepted = len(ids) - 1
        run.n_draft_accepted += n_accepted
        run.n_draft_rounds += 1
        if not run.accepted_per_pos:
            run.accepted_per_pos = [0] * drafter.n_max
        for i in range(min(n_accepted, len(run.accepted_per_pos))):
            run.accepted_per_pos[i] += 1
        # b10621 reports no candidates for a verified round's tokens: probability 1, an empty list
        probs = TokenProbs(1.0, ()) if run.request.n_probs > 0 else None
        for token in ids:
            if self._emit(sched, seq, token, probs):
                return

    def _draw(self, sched: Scheduler, seq: Sequence) -> tuple[int, TokenProbs | None] | None:
        """The request's sampler draws from run.logits (and accepts the token); None when the sequence failed."""
        run: _Running = seq.payload
        req = run.request
        probs = None
        if run.argmax is None:  # settled at the first draw
            if req.sampling is None:
                run.argmax = self.eog_ids if req.ignore_eos else frozenset()
            elif req.n_probs == 0 and req.grammar is None and req.reasoning_budget is None:
                banned = draws_the_argmax(req.sampling)  # (ignore_eos's bans are in its logit bias)
                run.argmax = False if banned is None else banned
            else:
                run.argmax = False
        if run.argmax is not False:
            token = self.runner.greedy(run.logits, run.argmax)
        else:
            if run.chain is None:  # b10621's init_sampler(): the prompt's tokens are its first history
                infill = InfillVocab(self.eog_ids, lambda t: self.piece(t, False), self.end_token()) \
                    if "infill" in req.sampling.samplers else None
                run.chain = Chain(req.sampling, self.runner.n_vocab, infill)
                for t in seq.prompt:
                    run.chain.accept(t)
                if req.grammar is not None:  # the prompt is not fed to it (is_generated = false)
                    run.grammar = GrammarMatcher(req.grammar, self.grammar_vocab)
                if (spec := req.reasoning_budget) is not None:
                    run.budget = ReasoningBudget([spec.start], spec.ends, spec.forced, spec.budget,
                                                 token_bytes=lambda t: self.piece(t, False))
                    for t in spec.prefill:
                        run.budget.accept(t)
                    if run.force_reasoning_end:
                        run.budget.force()
            logits = self.runner.to_numpy(run.logits)
            lazy = req.grammar is not None and req.grammar.lazy
            grammar = run.grammar if grammar_should_apply(run.grammar is not None, run.budget, lazy) else None
            try:
                token = sample_constrained(run.chain, grammar, run.budget.apply(logits) if run.budget else logits)
            except GrammarDeadEnd as dead:
                self._fail(sched, seq, "got exception: Unexpected empty grammar stack after accepting piece: "
                           f"{self.piece(dead.token, True).decode('utf-8', 'replace')} ({dead.token})")
                return None
            accept_generated(token, run.budget, run.grammar, lazy)
            run.chain.accept(token)
            if req.n_probs > 0:
                prob, top = (run.chain.post_probs(token, req.n_probs) if req.post_sampling_probs
                             else pre_probs(logits, token, req.n_probs))
                probs = TokenProbs(prob, tuple(top))
        return token, probs

    def _emit(self, sched: Scheduler, seq: Sequence, token: int, probs: TokenProbs | None) -> bool:
        """A drawn token through b10621's process_token: published, then the stop rules; True when it ended
        the generation."""
        run: _Running = seq.payload
        req = run.request
        run.last_token = token
        run.generated_ids.append(token)
        seq.n_decoded += 1
        run.t_gen_last = time.perf_counter()
        is_eog = token in self.eog_ids and not req.ignore_eos
        # b10621's accept_special_token(): special tokens show as text with --special or when preserved
        text = run.text.push(self.piece(token, self.config.special or token in req.preserved_tokens), is_eog=is_eog)
        # b10621 attaches the timings to a partial only when the stop is already known (a stop word)
        timings = self._timings(seq) if run.text.stopped_by_word or req.timings_per_token else None
        run.handle.publish(TokenEvent(token, text, seq.n_decoded, timings, probs, run.n_cached))
        # b10621's process_token order: a stop word, the context bound, the budget; EOS wins over a limit
        stop_type, truncated = None, False
        if run.text.stopped_by_word:
            stop_type = "word"
        full = self._slot_tokens(seq) + 1 >= self.info.n_ctx
        if full and (not self._ctx_shift() or self._shift_frees_nothing(seq)):
            stop_type, truncated = "limit", True
        if stop_type is None and 0 <= req.n_predict <= seq.n_decoded:
            stop_type = "limit"
        if self._line_limits(run, text):
            stop_type = "limit"
        if is_eog:
            stop_type = "eos"
        if stop_type is not None:
            self._finish(sched, seq, stop_type, truncated)
        return stop_type is not None

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
                       n_decoded=n, t_gen_ms=max(run.t_gen_last - run.t_prompt, 1e-6) * 1e3 if n else 0.0,
                       n_draft=run.n_draft, n_draft_accepted=run.n_draft_accepted)

    def _fail(self, sched: Scheduler, seq: Sequence, message: str) -> None:
        """This sequence alone ends in an error (b10621's exception inside the slot's sampling)."""
        self._release(seq)
        seq.payload.handle.publish(ErrorEvent(message))
        sched.free(seq)

    def _finish(self, sched: Scheduler, seq: Sequence, stop_type: str, truncated: bool) -> None:
        run: _Running = seq.payload
        n = seq.n_decoded
        final = FinalEvent(
            stop_type=stop_type,
            n_prompt=len(seq.prompt),
            n_prompt_processed=len(seq.prompt) - run.n_cached,
            n_cached=run.n_cached,
            n_decoded=n,
            n_tokens_cached=self._slot_tokens(seq),
            truncated=truncated or run.shifted,
            t_prompt_ms=(run.t_prompt - run.t_start) * 1e3,
            t_gen_ms=max(run.t_gen_last - run.t_prompt, 1e-6) * 1e3 if n else 0.0,
            id_slot=seq.slot if seq.slot is not None else -1,
            content=run.text.content,
            stopping_word=run.text.stopping_word,
            has_new_line=run.has_new_line,
            n_draft=run.n_draft,
            n_draft_accepted=run.n_draft_accepted,
        )
        self._release(seq)  # before the client hears of the end: a /slots read then sees the slot free
        run.handle.publish(final)
        sched.free(seq)
