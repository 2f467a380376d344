"""What the HTTP side asks of the engine thread: typed commands on its queue, each answered by a future or by
events on a handle. Results are plain data; the API layer words them."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum

from .metrics import ServerMetrics
from .running import Handle
from .types import GenerationRequest, ScoreRequest, SlotAction


@dataclass(frozen=True)
class Generate:
    """Completions of one prompt (b10621's n_cmpl): the first processes it, the others copy its state."""

    requests: list[GenerationRequest]
    handles: list[Handle]
    task_ids: list[int]


@dataclass(frozen=True)
class Score:
    request: ScoreRequest
    handle: Handle


@dataclass(frozen=True)
class Wake:
    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class SlotCommand:
    action: SlotAction
    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class Control:
    """b10621's CONTROL task on a running completion."""

    cmpl_id: str
    action: str
    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class SetLora:
    listed: dict[int, float]
    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class Metrics:
    """GET /metrics' figures, read between two engine steps (b10621's METRICS task): a request answered before
    the scrape is counted, its slot released."""

    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class Stop:
    pass


Command = Generate | Score | Wake | SlotCommand | Control | SetLora | Stop


class ControlOutcome(Enum):
    """How a control request ended (api/chat.py words each as b10621 does)."""

    DONE = "done"
    NO_COMPLETION = "no active completion"
    UNKNOWN_ACTION = "unknown action"
    NOT_ENABLED = "reasoning control not enabled"


@dataclass(frozen=True)
class AdapterInfo:
    """One loaded LoRA adapter as GET /lora-adapters lists it, with the server's current scale."""

    id: int
    path: str
    scale: float
    task_name: str
    prompt_prefix: str


@dataclass(frozen=True)
class MetricsSnapshot:
    """What GET /metrics renders: b10621's counters, the queue, and mlxcel's prompt cache."""

    counters: ServerMetrics  # a copy, taken as the buckets started over
    n_processing: int
    n_deferred: int
    prompt_cache_bytes: int | None = None  # None: no prompt cache families (the encoder's server)
    prompt_cache_entries: int | None = None
