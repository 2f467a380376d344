"""One engine step (nano-vllm's small step): the scheduler's prefill chunks and decode rows run on the backend,
drawn, checked against the stop rules (process_token.py) and published; the forked n_cmpl children and context
shifts happen here too."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..backends import Backend
from .adapters import Adapters
from .decode_batch import DecodeBatch
from .drafting import Speculation
from .metrics import ServerMetrics
from .process_token import TokenProcessor
from .provenance import chunk_kind
from .running import Running
from .scheduler import Scheduler, Sequence, Step
from .sequence_tokens import shift_plan, slot_tokens
from .slot_registry import SlotRegistry
from .types import MediaChunk

log = logging.getLogger("mlxcel.engine")


@dataclass
class EngineStep:
    backend: Backend
    batch: DecodeBatch
    tokens: TokenProcessor
    speculation: Speculation | None
    adapters: Adapters
    metrics: ServerMetrics
    registry: SlotRegistry
    n_ctx: int
    add_bos: bool
    ctx_shift: Callable[[], bool]
    next_task_id: Callable[[], int]
    encode_media: Callable[[Any], np.ndarray] | None = None  # an image's rows (the projector's), if one is loaded

    def run(self, sched: Scheduler) -> None:
        for seq in sched.everyone():
            if seq.payload.handle.cancelled.is_set():
                seq.cancelled = True
        for seq in sched.cancelled():  # the client went away: free the slot within this step
            for child in seq.children:  # children it had not served yet process the prompt themselves
                child.held = False
            self.tokens.release(seq)
            sched.free(seq)
        step = sched.schedule()
        if step:  # b10621 posts a NEXT_RESPONSE task (and so spends a task id) per busy loop iteration
            self.next_task_id()
        busy = len(sched.running)  # b10621 counts every processing slot at each decode
        involved = [chunk.seq for chunk in step.prefill] + list(step.decode)
        self._prefill(sched, step)
        self._decode(step)
        if involved:
            self.metrics.post_decode(busy, [slot_tokens(s) for s in involved])
        self.registry.publish(sched.running, self.n_ctx)

    def _prefill(self, sched: Scheduler, step: Step) -> None:
        backend, tokens = self.backend, self.tokens
        progressed: dict[int, Sequence] = {}
        for chunk in step.prefill:
            run: Running = chunk.seq.payload
            if not run.clock.start:
                run.clock.start = time.perf_counter()
                tokens.progress(chunk.seq)  # the request has started: 0% (or its cached share)
            progressed[chunk.seq.rid] = chunk.seq
            t_chunk = time.perf_counter()
            self.adapters.use(run.lora)
            media = next((m for m in run.request.media if m.start <= chunk.start < m.end), None)
            if media is None:
                run.logits = backend.prefill(run.cache, chunk.seq.prompt[chunk.start : chunk.end])
            else:  # an image's rows (the scheduler cut the chunk at its bounds)
                rows = self._media_rows(run, media)
                part = rows[chunk.start - media.start : chunk.end - media.start]
                run.logits = backend.prefill_rows(run.cache, part, media.non_causal)
            run.clock.prompt_last = time.perf_counter()
            if run.made is not None:
                run.made.add(chunk.start, chunk.end, chunk_kind(chunk.end - chunk.start, backend.capabilities.few_rows))
            # b10621 counts the prompt tokens after n_past (a hit's recomputed positions before it are mlxcel's)
            self.metrics.add_prompt(
                chunk.end - max(chunk.start, run.n_cached), int((run.clock.prompt_last - t_chunk) * 1e6)
            )
            sched.prefilled(chunk)
            if chunk.completes_prompt:
                run.clock.prompt = time.perf_counter()
                tokens.progress(chunk.seq)
                progressed.pop(chunk.seq.rid)
                forked = [self._fork(chunk.seq, c) for c in chunk.seq.children if c.held and c.slot is not None]
                for seq in (chunk.seq, *forked):
                    if self.speculation is not None:  # (b10621's common_speculative_begin, before the first draw)
                        self.speculation.begin(seq)
                    tokens.sample(seq)
        for seq in progressed.values():  # prompts still being processed: one progress event per step
            tokens.progress(seq)

    def _media_rows(self, run: Running, media: MediaChunk) -> np.ndarray:
        """The image's rows from the media encoder, once per request (mtmd_encode_chunk, then its decode)."""
        rows = run.media_rows.get(media.start)
        if rows is None:
            if self.encode_media is None:
                raise RuntimeError("an image in a prompt without a media encoder")
            rows = run.media_rows[media.start] = self.encode_media(media.image)
            if len(rows) != media.n_tokens:
                raise RuntimeError(f"the image gave {len(rows)} rows for its {media.n_tokens} positions")
        return rows

    def _decode(self, step: Step) -> None:
        backend, tokens = self.backend, self.tokens
        for seq in step.decode:
            if self.ctx_shift() and slot_tokens(seq) + 1 >= self.n_ctx:
                self._shift(seq)
        spec = self.speculation
        drafting = [(seq, n) for seq in step.decode if spec is not None and (n := spec.n_max(seq)) > 0]
        ids = {id(seq) for seq, _ in drafting}  # each runs its own round; the others decode as without a drafter
        decode = [s for s in step.decode if id(s) not in ids]
        # one forward pass adds one set of adapter scales (b10621's can_batch_with): rows admitted with other
        # scales decode on their own
        one_lora = len({s.payload.lora for s in decode}) <= 1
        if (
            len(decode) >= 2
            and one_lora
            and backend.can_batch([s.payload.cache for s in decode if s.payload.cache is not None])
        ):
            self.adapters.use(decode[0].payload.lora)
            self.batch.decode(decode)
            for seq in decode:  # drawn in the scheduler's order, as the rows would be one by one
                tokens.sample(seq)
        else:
            self.batch.dissolve()
            for seq in decode:
                run = seq.payload
                self.adapters.use(run.lora)
                run.logits = backend.decode(run.cache, run.last_token)
                tokens.sample(seq)
        for seq, n_max in drafting:
            self.batch.own_cache(seq)
            self.adapters.use(seq.payload.lora)
            assert spec is not None  # (only a speculation drafts)
            spec.round(seq, n_max)

    def _fork(self, parent: Sequence, child: Sequence) -> Sequence:
        """b10621's copy_state_to(): the child gets the parent's prompt state, stats and last logits."""
        prun, crun = parent.payload, child.payload
        self.batch.own_cache(parent)
        n = len(parent.prompt)
        snap, _ = self.backend.snapshot(prun.cache, n)
        crun.cache = self.backend.restore(snap, n)
        crun.logits = prun.logits * 1  # its own array: sampling may ban tokens in place
        crun.n_cached, crun.clock.start, crun.clock.prompt = prun.n_cached, prun.clock.start, prun.clock.prompt
        child.n_prefilled, child.held = n, False
        return child

    def _shift(self, seq: Sequence) -> None:
        """b10621's context shift (pre_decode): keep n_keep tokens, discard n_discard after them."""
        run: Running = seq.payload
        plan = shift_plan(seq, self.n_ctx, self.add_bos)
        self.batch.own_cache(seq)
        log.warning(
            "slot %d: context shift, n_keep = %d, n_left = %d, n_discard = %d",
            seq.slot,
            plan.n_keep,
            plan.n_left,
            plan.n_discard,
        )
        self.backend.shift(run.cache, plan.n_keep, plan.n_discard)
        run.shifts.n_shifted += plan.n_discard
        run.shifts.discards.append((plan.n_keep, plan.n_discard))
