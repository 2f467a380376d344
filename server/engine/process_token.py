"""A drawn token through b10621's process_token: published, then the stop rules in upstream's order; a finished
or failed sequence released (its slot keeps its state, the registry and the metrics hear of it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .decode_batch import DecodeBatch
from .draw import Drawer, DrawFailed
from .metrics import ServerMetrics
from .running import Running
from .scheduler import Scheduler, Sequence
from .sequence_tokens import shift_frees_nothing, slot_tokens
from .slot_registry import SlotRegistry
from .slot_states import SlotStates
from .types import ErrorEvent, FinalEvent, ProgressEvent, Timings, TokenEvent, TokenProbs


@dataclass(frozen=True)
class Limits:
    n_ctx: int
    special: bool  # --special: generated special tokens are rendered as text
    add_bos: bool  # a context shift keeps one more token
    ctx_shift: Callable[[], bool]  # a full context shifts instead of stopping


class TokenProcessor:
    def __init__(
        self,
        sched: Scheduler,
        drawer: Drawer,
        slots: SlotStates,
        registry: SlotRegistry,
        metrics: ServerMetrics,
        batch: DecodeBatch,
        limits: Limits,
    ):
        self.sched, self.drawer, self.slots, self.registry = sched, drawer, slots, registry
        self.metrics, self.batch, self.limits = metrics, batch, limits

    def sample(self, seq: Sequence) -> None:
        drawn = self.draw(seq)
        if drawn is not None:
            self.emit(seq, *drawn)

    def draw(self, seq: Sequence) -> tuple[int, TokenProbs | None] | None:
        """The request's sampler draws from run.logits; None when the sequence failed (and was released)."""
        try:
            return self.drawer.draw(seq.payload, seq.prompt)
        except DrawFailed as failed:
            self.fail(seq, str(failed))
            return None

    def emit(self, seq: Sequence, token: int, probs: TokenProbs | None) -> bool:
        """Published, then the stop rules; True when it ended the generation."""
        run: Running = seq.payload
        req, lim = run.request, self.limits
        run.last_token = token
        run.generated_ids.append(token)
        seq.n_decoded += 1
        run.clock.gen_last = time.perf_counter()
        is_eog = token in self.drawer.eog_ids and not req.ignore_eos
        # b10621's accept_special_token(): special tokens show as text with --special or when preserved
        text = run.text.push(self.drawer.piece(token, lim.special or token in req.preserved_tokens), is_eog=is_eog)
        # b10621 attaches the timings to a partial only when the stop is already known (a stop word)
        timings = (
            run.timings(len(seq.prompt), seq.n_decoded) if run.text.stopped_by_word or req.timings_per_token else None
        )
        run.handle.publish(TokenEvent(token, text, seq.n_decoded, timings, probs, run.n_cached))
        # b10621's process_token order: a stop word, the context bound, the budget; EOS wins over a limit
        stop_type, truncated = None, False
        if run.text.stopped_by_word:
            stop_type = "word"
        full = slot_tokens(seq) + 1 >= lim.n_ctx
        if full and (not lim.ctx_shift() or shift_frees_nothing(seq, lim.n_ctx, lim.add_bos)):
            stop_type, truncated = "limit", True
        if stop_type is None and 0 <= req.n_predict <= seq.n_decoded:
            stop_type = "limit"
        if _line_limits(run, text):
            stop_type = "limit"
        if is_eog:
            stop_type = "eos"
        if stop_type is not None:
            self.finish(seq, stop_type, truncated)
        return stop_type is not None

    def progress(self, seq: Sequence) -> None:
        run: Running = seq.payload
        if not run.request.return_progress:
            return
        done = max(seq.n_prefilled, run.n_cached)  # (a hit recomputing positions before n_past: none yet)
        elapsed = int((time.perf_counter() - run.clock.start) * 1e3) if done > run.n_cached else 0
        timings = None
        if run.request.timings_per_token:  # the slot's stats so far: nothing generated yet
            n_done = done - run.n_cached
            timings = Timings(
                n_cached=run.n_cached,
                n_prompt_processed=n_done,
                n_decoded=0,
                t_gen_ms=0.0,
                t_prompt_ms=(run.clock.prompt_last - run.clock.start) * 1e3 if n_done else 0.0,
            )
        run.handle.publish(ProgressEvent(len(seq.prompt), run.n_cached, done, elapsed, timings))

    def fail(self, seq: Sequence, message: str) -> None:
        """This sequence alone ends in an error (b10621's exception inside the slot's sampling)."""
        self.release(seq)
        seq.payload.handle.publish(ErrorEvent(message))
        self.sched.free(seq)

    def finish(self, seq: Sequence, stop_type: str, truncated: bool) -> None:
        run: Running = seq.payload
        n = seq.n_decoded
        final = FinalEvent(
            stop_type=stop_type,
            n_prompt=len(seq.prompt),
            n_prompt_processed=len(seq.prompt) - run.n_cached,
            n_cached=run.n_cached,
            n_decoded=n,
            n_tokens_cached=slot_tokens(seq),
            truncated=truncated or run.shifts.shifted,
            t_prompt_ms=run.clock.prompt_ms(),
            t_gen_ms=run.clock.gen_ms(n),
            id_slot=seq.slot if seq.slot is not None else -1,
            content=run.text.content,
            stopping_word=run.text.stopping_word,
            has_new_line=run.has_new_line,
            n_draft=run.drafts.n_draft,
            n_draft_accepted=run.drafts.n_accepted,
        )
        self.release(seq)  # before the client hears of the end: a /slots read then sees the slot free
        run.handle.publish(final)
        self.sched.free(seq)

    def release(self, seq: Sequence) -> None:
        """b10621's release() then reset(): the slot keeps its tokens and last task, its counters go to zero."""
        run: Running = seq.payload
        if seq.slot is None:
            run.done = True
            return
        self.batch.own_cache(seq)
        run.done = True
        self.slots.keep(seq)
        n = seq.n_decoded
        if n > 0:  # callback_on_reset: every release counts what was generated (a cancelled or failed one too)
            self.metrics.on_prediction(n, int(max(run.clock.gen_last - run.clock.prompt, 1e-6) * 1e6))
            d = run.drafts
            self.metrics.on_drafts(d.n_draft, d.n_accepted, d.n_rounds, d.accepted_per_pos)
        self.registry.released(seq, self.limits.n_ctx)


def _line_limits(run: Running, text: bytes) -> bool:
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
        elapsed_ms = (run.clock.gen_last - run.clock.prompt) * 1e3
        if req.t_max_predict_ms > 0 and elapsed_ms > req.t_max_predict_ms:
            stop = True
    return stop
