"""b10621's slots and host-memory prompt cache (prompt_cache.py): which slot a request takes, what of its
prompt it reuses, what a slot keeps after its task.

Prefill runs in chunks of --ubatch-size tokens ending on multiples of it counted from position 0, whatever else
is in flight: a cold run computes every position of a prompt the same way. A request reuses b10621's n_past of
its slot's state and recomputes from the point where a cold run's numbers are kept (provenance.py): a hit is
bitwise a miss.
"""

from __future__ import annotations

import itertools
from typing import Callable

from ..backends import Backend
from ..backends.base import Cache, Snapshot
from . import adapters
from .prompt_cache import PromptCache, Reuse, Slot, State, choose_slot, plan_reuse
from .provenance import DECODE, Provenance, chunk_kind, exact_start
from .running import Running
from .scheduler import Sequence
from .sequence_tokens import cached_tokens, slot_index


class SlotStates:
    def __init__(
        self, n_slots: int, cache_ram_mib: int, ubatch: int, similarity: float, cache_idle_slots: bool, kv_unified: bool
    ):
        # b10621's host-memory prompt cache (--cache-ram; its token limit, the context, is set at load)
        self.prompt_cache = PromptCache(max(cache_ram_mib, 0) << 20, 0) if cache_ram_mib != 0 else None
        self.slots = [Slot() for _ in range(n_slots)]  # what each slot holds between tasks
        self.ubatch, self.similarity = ubatch, similarity
        self.cache_idle_slots, self.kv_unified = cache_idle_slots, kv_unified
        self.n_stream = 1 if kv_unified else n_slots  # the KV cache's streams, as --cache-ram counts a state
        self._release_clock = itertools.count()  # b10621's t_last_used, as an order
        self._backend: Backend | None = None  # set at each load, None while asleep
        self.draft_bytes: Callable[[int, int], int] = lambda _n, _s: 0  # the draft model's share of a state

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("the model is not loaded")
        return self._backend

    @backend.setter
    def backend(self, backend: Backend | None) -> None:
        self._backend = backend

    def set_context(self, n_ctx: int) -> None:
        """b10621's token limit: the whole context (every slot's, unless unified)."""
        if self.prompt_cache is not None:
            self.prompt_cache.limit_tokens = n_ctx * (1 if self.kv_unified else len(self.slots))

    def clear(self) -> None:
        if self.prompt_cache is not None:
            self.prompt_cache.clear()
        for slot in self.slots:
            slot.clear()

    def choose(self, seq: Sequence, free: list[int]) -> int | None:
        """get_available_slot for a request that asked for no slot (side-effect free: it may wait and ask again)."""
        for i, slot in enumerate(self.slots):
            slot.processing = i not in free
        chosen, update = choose_slot(self.slots, seq.prompt, None, self.similarity)
        seq.payload.update_cache = update
        return chosen

    def launch(self, seq: Sequence, busy: list[bool]) -> int:
        """A request (and its n_cmpl children) now holds its slot: the slot updated from the prompt cache where
        b10621 does, what the slot holds of the prompt restored (n_past), then the idle slots saved to the cache
        (and cleared with a unified KV). Children keep nothing of their slots: the parent's state is copied.
        Returns n_past."""
        run: Running = seq.payload
        slot = self.slots[slot_index(seq)]
        key = adapters.key(run.lora)
        if seq.want_slot is not None:  # the requested slot: by similarity only if it clears the threshold
            for i, s in enumerate(self.slots):
                s.processing = i != seq.slot and busy[i]
            _, run.update_cache = choose_slot(self.slots, seq.prompt, seq.slot, self.similarity)
        if run.update_cache and run.request.completion_task:
            self._from_prompt_cache(slot, seq.prompt, key)
        if slot.state.key != key:  # other adapter scales computed it (b10621's lora_should_clear_cache)
            slot.clear()
        reuse = self._reuse(run, seq, slot)
        self._resume(run, seq, slot, reuse)
        slot.clear()  # the slot's state is the request's now (b10621's keep_first(n_past)), until its release
        for child in seq.children:
            self.slots[slot_index(child)].clear()
        if self.cache_idle_slots:
            self._save_idle(busy)
        return reuse.n

    def _from_prompt_cache(self, slot: Slot, prompt: list[int], key: tuple[float, ...]) -> None:
        """The slot's state saved to the prompt cache, and the cache's best state for the prompt loaded."""
        cache = self.prompt_cache
        if cache is None:
            return
        cache.save(slot.state)
        loaded = cache.load(slot.state, prompt, key)
        if loaded is not None:
            slot.state = loaded
        cache.update()

    def _save_idle(self, busy: list[bool]) -> None:
        """The idle slots saved to the prompt cache (and cleared with a unified KV)."""
        cache = self.prompt_cache
        if cache is None:
            return
        for i, s in enumerate(self.slots):
            if busy[i]:
                continue
            if cache.save(s.state):
                cache.update()
            if self.kv_unified:
                s.clear()

    def _reuse(self, run: Running, seq: Sequence, slot: Slot) -> Reuse:
        caps = self.backend.capabilities
        if not (run.request.cache_prompt and slot.state.tokens):
            return Reuse(0)
        min_chunk = run.request.n_cache_reuse if caps.turn_keys else 0
        reuse = plan_reuse(slot.state.tokens, seq.prompt, min_chunk)
        if not caps.rewind and reuse.n != len(slot.state.tokens):
            return Reuse(0)  # a cache kept whole (a sliding window, a state) resumes at its end only
        return reuse

    def _resume(self, run: Running, seq: Sequence, slot: Slot, reuse: Reuse) -> None:
        backend = self.backend
        if reuse.chunks:  # moved keys: not what a cold run computes
            run.cache = backend.restore_chunks(slot.state.snapshot, reuse.prefix, reuse.chunks)
            run.inexact = True
            seq.n_prefilled = reuse.n
        elif reuse.n:
            # resumed where a cold run's numbers are kept (the positions after it, up to n_past, recomputed)
            start = exact_start(slot.state.made, len(seq.prompt), reuse.n, self.ubatch, backend.capabilities.few_rows)
            if not backend.capabilities.rewind and start != reuse.n:
                start = 0
            run.cache = backend.restore(slot.state.snapshot, start) if start else backend.new_cache()
            seq.n_prefilled = start
            run.made = slot.state.made.copy() if slot.state.made is not None else Provenance()
            run.made.truncate(start)
        else:
            run.cache = backend.new_cache()
            run.made = Provenance()
        run.n_cached = reuse.n

    def keep(self, seq: Sequence) -> None:
        """b10621's slot keeps its KV state after its task: the prompt and every generated token but the last
        (less what context shifts discarded); a child's slot keeps nothing."""
        slot = self.slots[slot_index(seq)]
        slot.t_last_used = next(self._release_clock)
        run: Running = seq.payload
        slot.clear()
        if run.is_child or run.cache is None:
            return
        tokens = tuple(cached_tokens(seq))
        n = self.backend.length(run.cache)
        if not tokens or n < len(tokens) or (n != len(tokens) and not self.backend.capabilities.rewind):
            return
        made = None
        if run.made is not None and not run.shifts.shifted:
            made = run.made.copy()
            made.add(seq.n_prefilled, len(tokens), DECODE)  # the generated tokens, decode steps' positions
        snap, nbytes = self.snapshot(run.cache, len(tokens))
        slot.state = State(tokens, snap, nbytes, adapters.key(run.lora), made)

    def snapshot(self, cache: Cache, n: int) -> tuple[Snapshot, int]:
        """A slot's state and the bytes b10621's --cache-ram counts for it: the target's and the draft model's
        KV state (server_slot::prompt_save), streams as its KV cache has them."""
        snap, nbytes = self.backend.snapshot(cache, n, self.n_stream)
        return snap, nbytes + self.draft_bytes(n, self.n_stream)

    def restore_tokens(self, i: int, tokens: list[int]) -> None:
        """A restored slot holds its tokens' KV state (b10621 reads it from the file; mlxcel's slot files hold
        the tokens, computed here as a cold run computes them: chunks ending on multiples of the ubatch). The
        caller has set the base model's scales (no adapter terms)."""
        if not tokens:
            self.slots[i].clear()
            return
        backend, ub = self.backend, self.ubatch
        cache = backend.new_cache()
        made = Provenance()
        for start in range(0, len(tokens), ub):
            end = min(start + ub, len(tokens))
            backend.prefill(cache, tokens[start:end])
            made.add(start, end, chunk_kind(end - start, backend.capabilities.few_rows))
        snap, nbytes = self.snapshot(cache, len(tokens))
        self.slots[i].state = State(tuple(tokens), snap, nbytes, (), made)
