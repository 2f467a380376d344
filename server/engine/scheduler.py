"""The scheduling policy, pure Python: slots, admission, prefill chunks and decode rows per step.

No MLX here; the engine thread asks `schedule()` what to run, runs it, and reports back. Continuous
batching: a request admitted while others decode joins the next step; prefill is chunked to the step's
token budget (n_batch) and interleaved with decode rows. Without continuous batching a step either
decodes or prefills, never both, and prompts wait until no slot is decoding (b10621's --no-cont-batching).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Sequence:
    """One request's progress through the engine."""

    rid: int
    prompt: list[int]
    payload: Any = None  # what the engine attaches (request, handle, caches); opaque here
    slot: int | None = None
    n_prefilled: int = 0  # prompt tokens already in the slot's KV cache (reused or fed)
    n_decoded: int = 0
    cancelled: bool = False
    # n_cmpl > 1: the other completions of the same prompt. They are admitted together with this one and wait
    # (held) until its prompt is processed; the engine then gives them a copy of its state.
    children: list["Sequence"] = field(default_factory=list)
    held: bool = False
    want_slot: int | None = None  # the request asked for this slot (id_slot): it waits for that one
    cuts: tuple[int, ...] = ()  # positions a prefill chunk must end at (where an image's rows begin and end)
    batch_ends: tuple[int, ...] = ()  # where every chunk ends instead (b10621's batches on a sliding-window model)

    @property
    def prefilling(self) -> bool:
        return self.n_prefilled < len(self.prompt)


@dataclass(frozen=True)
class PrefillChunk:
    seq: Sequence
    start: int
    end: int

    @property
    def completes_prompt(self) -> bool:
        return self.end == len(self.seq.prompt)


@dataclass
class Step:
    prefill: list[PrefillChunk] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.prefill or self.decode)


class Scheduler:
    def __init__(self, n_slots: int, n_batch: int = 2048, cont_batching: bool = True, ubatch: int = 512):
        if n_slots < 1 or n_batch < 1 or ubatch < 1:
            raise ValueError("n_slots, n_batch and ubatch must be positive")
        self.ubatch = ubatch
        self.slots: list[Sequence | None] = [None] * n_slots
        self.waiting: deque[Sequence] = deque()
        self.n_batch = n_batch
        self.cont_batching = cont_batching
        # the engine's slot policy: choose(seq, free slots) -> the slot for a request that asked for none (None:
        # it waits), and launched(seq) once it and its children hold their slots, before their prompts are cut
        # into chunks (the engine restores what the slot holds of the prompt there)
        self.choose: Callable[[Sequence, list[int]], int | None] = lambda seq, free: free[0]
        self.launched: Callable[[Sequence], None] = lambda seq: None

    # --- bookkeeping -----------------------------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def running(self) -> list[Sequence]:
        return [s for s in self.slots if s is not None]

    def idle(self) -> bool:
        return not self.waiting and not self.running

    def free(self, seq: Sequence) -> None:
        if seq.slot is not None and self.slots[seq.slot] is seq:
            self.slots[seq.slot] = None
        if seq in self.waiting:
            self.waiting.remove(seq)
            self.waiting.extendleft(reversed(seq.children))  # children still waiting go on alone, in place
            for c in seq.children:
                c.held = False

    def everyone(self) -> list[Sequence]:
        """Every sequence in a slot or waiting for one (children of waiting requests included)."""
        return [*self.running, *(s for w in self.waiting for s in (w, *w.children))]

    def cancelled(self) -> list[Sequence]:
        """Sequences cancelled by their clients; the engine finishes them, freeing their slots."""
        return [s for s in self.everyone() if s.cancelled]

    # --- policy ----------------------------------------------------------------------------------

    def _admit(self) -> list[Sequence]:
        """Requests in arrival order take free slots; one that cannot start yet (its requested slot is busy,
        or too few slots for its n_cmpl children) waits without holding up those behind it, as b10621 defers."""
        admitted = []
        for seq in list(self.waiting):
            free = [i for i, s in enumerate(self.slots) if s is None]
            if not free:
                break
            first = seq.want_slot if seq.want_slot is not None else self.choose(seq, free)
            if first is None or first not in free or len(free) - 1 < len(seq.children):
                continue
            self.waiting.remove(seq)
            for s, slot in zip((seq, *seq.children), [first, *(i for i in free if i != first)], strict=False):
                s.slot = slot
                self.slots[slot] = s
                admitted.append(s)
            self.launched(seq)
        return admitted

    def schedule(self) -> Step:
        step = Step()
        decoding = [s for s in self.running if not s.prefilling and not s.held]
        if self.cont_batching or not decoding:
            self._admit()
        budget = self.n_batch
        if self.cont_batching or not any(s.prefilling and not s.held for s in self.running):
            step.decode = [s for s in self.running if not s.prefilling and not s.held]
            budget -= len(step.decode)
        if self.cont_batching or not step.decode:
            for seq in sorted(
                (s for s in self.running if s.prefilling and not s.held),
                key=lambda s: s.slot if s.slot is not None else -1,
            ):
                start = seq.n_prefilled
                while start < len(seq.prompt):
                    # chunks end on multiples of ubatch counted from position 0, whatever else is in
                    # flight, so every prompt position is always computed in the same chunk shape: that is
                    # what makes a prompt-cache hit bit-identical to a cold run
                    if seq.batch_ends:
                        end = min((e for e in seq.batch_ends if e > start), default=len(seq.prompt))
                    else:
                        end = min(len(seq.prompt), (start // self.ubatch + 1) * self.ubatch)
                        end = min((c for c in seq.cuts if start < c < end), default=end)  # (mtmd's chunks apart)
                    if end - start > budget and step.prefill:
                        return step
                    step.prefill.append(PrefillChunk(seq, start, end))
                    budget -= end - start
                    start = end
        return step

    def prefilled(self, chunk: PrefillChunk) -> None:
        chunk.seq.n_prefilled = chunk.end
