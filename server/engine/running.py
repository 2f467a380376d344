"""One generation's engine-side state (it lives in Sequence.payload), and the handle its events go out on."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from ..grammar.constraint import GrammarMatcher
from .provenance import Provenance
from .reasoning_budget import ReasoningBudget
from .sampling import Chain
from .speculative import SpecState
from .stopping import TextStream
from .types import ErrorEvent, Event, FinalEvent, GenerationRequest, ScoreEvent, Timings


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
class Clock:
    """perf_counter() readings of one generation (b10621's t_start_process_prompt, t_prompt_processing, ...)."""

    start: float = 0.0
    prompt: float = 0.0  # when the prompt was done
    prompt_last: float = 0.0  # when the last prompt chunk was computed (b10621's t_prompt_last)
    gen_last: float = 0.0  # when the last token was drawn

    def prompt_ms(self) -> float:
        return (self.prompt - self.start) * 1e3

    def gen_ms(self, n_decoded: int) -> float:
        """b10621's t_token_generation: at least a microsecond once anything was generated."""
        return max(self.gen_last - self.prompt, 1e-6) * 1e3 if n_decoded else 0.0


@dataclass
class Shifts:
    """The context shifts a generation went through (b10621's n_discard arithmetic)."""

    n_shifted: int = 0  # positions discarded
    discards: list[tuple[int, int]] = field(default_factory=list)  # each shift's (n_keep, n_discard), in order

    @property
    def shifted(self) -> bool:
        return bool(self.discards)


@dataclass
class Draws:
    """How a generation draws its tokens, settled at its first draw."""

    greedy: bool | None = None  # None until the first draw; True: an argmax (sampling.draws_the_argmax)
    banned: frozenset[int] = frozenset()  # the tokens a greedy draw leaves out
    chain: Chain | None = None  # the request's sampler chain (b10621's init_sampler)
    grammar: GrammarMatcher | None = None  # the request's grammar state, built with the chain
    budget: ReasoningBudget | None = None  # the request's reasoning-budget sampler, built with the chain
    force_reasoning_end: bool = False  # a reasoning_end control arrived before the budget sampler existed


@dataclass
class DraftStats:
    """Speculative decoding of one generation: the drafters' state and b10621's counters."""

    state: SpecState | None = None  # each drafter's state for this sequence (its slot's, or the draft model's cache)
    n_draft: int = 0  # draft tokens proposed (b10621's n_draft_tokens)
    n_accepted: int = 0
    n_rounds: int = 0  # verification rounds (b10621's n_draft_verif_steps)
    accepted_per_pos: list[int] = field(default_factory=list)  # rounds that accepted draft position i


@dataclass
class Running:
    """Engine-side state of one generation."""

    request: GenerationRequest
    handle: Handle
    text: TextStream
    cache: Any = None  # the backend's cache for this sequence (None while its row lives in a decode batch)
    n_cached: int = 0  # prompt positions reused from the slot's state (b10621's n_past: cache_n)
    update_cache: bool = False  # its slot was chosen by LRU (or loses most of its tokens): go by the prompt cache
    has_new_line: bool = False
    last_nl_pos: int = 0
    logits: Any = None
    last_token: int = -1
    inexact: bool = False  # resumed from moved cache chunks (n_cache_reuse): not what a cold run computes
    made: Provenance | None = None  # how each cached position was computed (None: not as a cold run would)
    is_child: bool = False  # an n_cmpl > 1 completion that takes its prompt state from the first
    done: bool = False  # released: its cache is never needed again
    generated_ids: list[int] = field(default_factory=list)  # every token drawn, in order
    lora: tuple[float, ...] = ()  # the adapters' scales, fixed when the request was admitted
    media_rows: dict = field(default_factory=dict)  # each image's encoded rows, by its start position
    clock: Clock = field(default_factory=Clock)
    shifts: Shifts = field(default_factory=Shifts)
    draws: Draws = field(default_factory=Draws)
    drafts: DraftStats = field(default_factory=DraftStats)

    def timings(self, n_prompt: int, n_decoded: int) -> Timings:
        return Timings(
            n_cached=self.n_cached,
            n_prompt_processed=n_prompt - self.n_cached,
            t_prompt_ms=self.clock.prompt_ms(),
            n_decoded=n_decoded,
            t_gen_ms=self.clock.gen_ms(n_decoded),
            n_draft=self.drafts.n_draft,
            n_draft_accepted=self.drafts.n_accepted,
        )
