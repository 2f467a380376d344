"""GET /slots' registry: each slot's record as of the last engine step, written by the engine thread and read
(copied) by the HTTP side under one lock."""

from __future__ import annotations

import dataclasses
import threading

from .prompt_cache import Slot
from .running import Running
from .scheduler import Sequence
from .sequence_tokens import slot_index, slot_tokens
from .types import SlotRecord


class SlotRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[SlotRecord] = []

    def reset(self, n_slots: int, n_ctx: int) -> None:
        with self._lock:
            self._records = [SlotRecord(i, n_ctx) for i in range(n_slots)]

    def copy(self) -> list[SlotRecord]:
        with self._lock:
            return [dataclasses.replace(r) for r in self._records]

    def get(self, i: int) -> SlotRecord:
        with self._lock:
            return self._records[i]

    def hold(self, i: int, tokens: tuple[int, ...]) -> None:
        """The slot now holds these tokens (a restore, an erase)."""
        with self._lock:
            self._records[i] = dataclasses.replace(self._records[i], n_prompt_tokens=len(tokens), tokens=tokens)

    def idle_hold(self, slots: list[Slot], busy: list[bool]) -> None:
        """The idle slots' records hold what their slots hold (a load or a clear changes it)."""
        with self._lock:
            for i, s in enumerate(slots):
                r = self._records[i]
                if not busy[i] and not r.is_processing and r.tokens != s.state.tokens:
                    self._records[i] = dataclasses.replace(
                        r, n_prompt_tokens=len(s.state.tokens), tokens=s.state.tokens
                    )

    def publish(self, running: list[Sequence], n_ctx: int) -> None:
        """The processing slots' records, after a step."""
        with self._lock:
            for seq in running:
                run: Running = seq.payload
                req = run.request
                i = slot_index(seq)
                self._records[i] = SlotRecord(
                    i,
                    n_ctx,
                    is_processing=True,
                    id_task=seq.rid,
                    n_prompt_tokens=slot_tokens(seq),
                    n_prompt_tokens_processed=max(seq.n_prefilled - run.n_cached, 0),
                    n_prompt_tokens_cache=run.n_cached,
                    params=req.params_echo,
                    has_next_token=True,
                    has_new_line=run.has_new_line,
                    n_remain=req.n_predict - seq.n_decoded if req.n_predict != -1 else -1,
                    n_decoded=seq.n_decoded,
                    # the live buffer, not a copy per step: only the debug view reads it (copying it then)
                    prompt_tokens=req.prompt_tokens,
                    generated=run.text.generated,
                )

    def released(self, seq: Sequence, n_ctx: int) -> None:
        """b10621's release(): the slot keeps its tokens and last task; a child slot keeps nothing (the parent's
        context is enough)."""
        run: Running = seq.payload
        n_held = 0 if run.is_child else slot_tokens(seq)
        held = [*seq.prompt[: seq.n_prefilled], *run.generated_ids[:-1]]
        i = slot_index(seq)
        with self._lock:
            self._records[i] = SlotRecord(
                i,
                n_ctx,
                id_task=seq.rid,
                n_prompt_tokens=n_held,
                params=run.request.params_echo,
                prompt_tokens=run.request.prompt_tokens,
                generated=bytes(run.text.generated),
                tokens=tuple(held[len(held) - n_held :]) if n_held else (),
            )
