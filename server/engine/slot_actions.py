"""POST /slots/:id_slot (b10621's SLOT_SAVE / _RESTORE / _ERASE tasks): run between engine steps, deferred while
the slot is processing."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Callable

from ..errors import (
    SLOT_INVALID_FILE,
    SLOT_INVALID_ID,
    SLOT_RESTORE_BAD_TOKENS,
    SLOT_RESTORE_FAILED,
    SLOT_RESTORE_TOO_LONG,
    SLOT_SAVE_FAILED,
)
from . import slot_files
from .scheduler import Scheduler
from .slot_registry import SlotRegistry
from .slot_states import SlotStates
from .types import SlotAction, SlotActionError

log = logging.getLogger("mlxcel.engine")


SLOT_HOLDS_IMAGES = "this slot holds an image's positions, which mlxcel's slot files cannot carry (text only)"


class SlotActions:
    def __init__(self, n_slots: int, registry: SlotRegistry, states: SlotStates, base_scales: Callable[[], None]):
        self.n_slots, self.registry, self.states = n_slots, registry, states
        self.base_scales = base_scales  # a restore computes with the model alone
        self.waiting: list[tuple[SlotAction, Future]] = []
        self.n_ctx = 0
        self.n_vocab = 0

    def run(self, sched: Scheduler) -> None:
        waiting = []
        for action, future in self.waiting:
            if any(s.slot == abs(action.id_slot) % self.n_slots for s in sched.running):  # b10621 defers the task
                waiting.append((action, future))
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._act(action))
            except SlotActionError as exc:
                future.set_exception(exc)
            except Exception as exc:  # noqa: BLE001 - the request answers with it
                log.exception("slot %s failed", action.action)
                future.set_exception(SlotActionError(f"{type(exc).__name__}: {exc}", "SERVER"))
        self.waiting = waiting

    def _act(self, action: SlotAction) -> dict:
        # get_slot_by_id wraps an id past the last slot around (C's %: a negative one finds no slot)
        slot = abs(action.id_slot) % self.n_slots * (1 if action.id_slot >= 0 else -1)
        if slot < 0:
            raise SlotActionError(SLOT_INVALID_ID)
        started = time.perf_counter()
        record = self.registry.get(slot)
        if action.action == "erase":
            self.states.slots[slot].clear()
            self.registry.hold(slot, ())
            return {"n_erased": len(record.tokens)}
        if action.path is None or action.identity is None:
            raise SlotActionError(SLOT_INVALID_FILE)  # (the API layer always names one)
        if action.action == "save":
            if any(t < 0 for t in record.tokens):  # (b10621 serializes its media chunks; mlxcel's files hold ids)
                raise SlotActionError(SLOT_HOLDS_IMAGES)
            try:
                n_bytes = slot_files.write(action.path, list(record.tokens), action.identity)
            except OSError:
                raise SlotActionError(SLOT_SAVE_FAILED, "SERVER") from None
            return {"n_tokens": len(record.tokens), "n_bytes": n_bytes, "t_ms": (time.perf_counter() - started) * 1e3}
        try:  # restore
            tokens, n_bytes = slot_files.read(action.path, action.identity)
        except slot_files.SlotFileError:
            raise SlotActionError(SLOT_RESTORE_FAILED) from None
        if len(tokens) > self.n_ctx:
            raise SlotActionError(SLOT_RESTORE_TOO_LONG)
        if any(not 0 <= t < self.n_vocab for t in tokens):
            raise SlotActionError(SLOT_RESTORE_BAD_TOKENS)
        self.base_scales()
        self.states.restore_tokens(slot, tokens)
        self.registry.hold(slot, tuple(tokens))
        return {"n_tokens": len(tokens), "n_bytes": n_bytes, "t_ms": (time.perf_counter() - started) * 1e3}
