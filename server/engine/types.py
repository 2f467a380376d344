"""The plain-data boundary between the HTTP layer and the engine thread: no MLX objects cross it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..grammar.spec import GrammarSpec
from .slot_files import Identity


@dataclass(frozen=True)
class SamplingParams:
    """The request's resolved sampling settings (plain data across the engine boundary)."""

    seed: int = 0xFFFFFFFF
    temperature: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    typical_p: float = 1.0
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    min_keep: int = 0
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    # the sequence breakers as (head token, its tails): get_overlapping_token_sequences() of the strings
    dry_breakers: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...] = ()
    samplers: tuple[str, ...] = (
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
    )
    logit_bias: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class ReasoningBudgetSpec:
    """A request's reasoning-budget sampler as token ids (server/engine/reasoning_budget.py builds it)."""

    start: tuple[int, ...]  # the start tag's tokens: arms the budget
    ends: tuple[tuple[int, ...], ...]  # each end tag's tokens: a natural end of the block
    forced: tuple[int, ...]  # the message then the first end tag, forced once the budget is spent
    budget: int  # tokens allowed inside the block
    prefill: tuple[int, ...] = ()  # the generation prompt's tokens, accepted before the first draw


@dataclass(frozen=True, eq=False)
class MediaChunk:
    """An image's span in a prompt (b10621's mtmd chunk): positions start .. start + n_tokens - 1 hold its
    placeholder id, and the engine's media encoder turns `image` into their rows when prefill reaches them."""

    start: int
    n_tokens: int
    chunk_id: str  # sha256 of the file's bytes (mtmd's bitmap id: what the prompt cache compares)
    image: Any  # what the media encoder takes (the decoded pixels)
    non_causal: bool = False  # its rows attend to each other both ways (b10621's Gemma 3 images)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    @property
    def placeholder(self) -> int:
        return placeholder_id(self.chunk_id)


def placeholder_id(chunk_id: str) -> int:
    """The id an image's positions carry: negative (no vocabulary id), the same for the same file, so a prompt
    cache compares images as b10621 does, by their id, with the token lists it compares text with."""
    return -1 - int(hashlib.sha256(chunk_id.encode()).hexdigest()[:15], 16)


class PromptTokens(list):
    """A prompt's ids with the media chunks that some of its positions stand for (placeholders)."""

    media: tuple[MediaChunk, ...] = ()

    @classmethod
    def with_media(cls, ids: list[int], media: tuple[MediaChunk, ...]) -> "PromptTokens":
        out = cls(ids)
        out.media = media
        return out


@dataclass(frozen=True)
class GenerationRequest:
    prompt_tokens: tuple[int, ...]
    n_predict: int = -1  # -1: until end of generation or the context is full
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()  # stop strings, matched on the decoded bytes
    cache_prompt: bool = True  # reuse (and offer) the prompt's prefix through the prompt cache
    n_cache_reuse: int = 0  # > 0: also reuse cached chunks of at least this many tokens, moved (KV shifting)
    timings_per_token: bool = False  # every token event carries the slot's timings
    return_progress: bool = False  # publish prompt-processing progress events
    n_indent: int = 0  # stop when a line after the first newline is indented less than this
    t_max_predict_ms: int = -1  # stop at a newline once generation has run this long
    n_keep: int = 0  # context shift: tokens kept from the start (-1: the whole prompt)
    n_discard: int = 0  # context shift: tokens discarded after them (0: half of what is left)
    n_probs: int = 0  # report the top n probabilities of each generated token
    post_sampling_probs: bool = False  # ... after the sampler chain instead of the raw softmax
    sampling: SamplingParams | None = None  # b10621's sampler chain; None: plain argmax (engine-internal use)
    preserved_tokens: frozenset[int] = frozenset()  # special tokens rendered as text in this request's output
    id_slot: int | None = None  # run on this slot (waiting for it if busy); None: the lowest free one
    params_echo: dict | None = None  # the resolved parameters as GET /slots shows them (JSON-ready)
    grammar: GrammarSpec | None = None  # constrain every draw to keep the output parsable
    reasoning_budget: ReasoningBudgetSpec | None = None  # cap the tokens spent inside a reasoning block
    reasoning_control: bool = False  # POST /v1/chat/completions/control may end the reasoning block
    cmpl_id: str = ""  # the OpenAI-shaped answer's id ("chatcmpl-..."), what a control request names
    # the request's lora field as (id, scale) pairs; None (or empty, as b10621 reads an empty list): the
    # server's scales when the request is admitted
    lora: tuple[tuple[int, float], ...] | None = None
    # b10621's get_available_slot saves and loads the host-memory prompt cache for completion tasks only, not
    # for infill (server-context.cpp: "cache prompts only for completion tasks")
    completion_task: bool = True
    media: tuple[MediaChunk, ...] = ()  # the images some prompt positions stand for (their placeholder ids)
    # where the template's user messages start in the prompt (b10621's message spans), and the last of them: a
    # sliding-window model's prompt batches end there (engine/checkpoints.py)
    user_starts: frozenset[int] = frozenset()
    last_user: int = -1


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced scoring: the log-probabilities of `continuation` after `prompt_tokens`."""

    prompt_tokens: tuple[int, ...]
    continuation: tuple[int, ...]
    n_probs: int = 5


@dataclass(frozen=True)
class SlotAction:
    """POST /slots/:id_slot: save, restore or erase, run between engine steps once the slot is idle."""

    action: str  # "save", "restore" or "erase"
    id_slot: int
    path: Path | None = None  # the slot file (save, restore)
    identity: Identity | None = None  # what the file is bound to (the model, the tokenizer)


class SlotActionError(Exception):
    """A slot action refused in b10621's words; kind is the ErrorKind name."""

    def __init__(self, message: str, kind: str = "INVALID_REQUEST"):
        super().__init__(message)
        self.message, self.kind = message, kind


@dataclass(frozen=True)
class ScoredPosition:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), best first


@dataclass(frozen=True)
class ScoreEvent:
    positions: tuple[ScoredPosition, ...]


@dataclass(frozen=True)
class Timings:
    """A slot's counters and clocks (b10621's server_slot_stats)."""

    n_cached: int
    n_prompt_processed: int
    t_prompt_ms: float
    n_decoded: int
    t_gen_ms: float
    n_draft: int = 0  # speculative decoding: draft tokens proposed, and how many the target accepted
    n_draft_accepted: int = 0


@dataclass(frozen=True)
class ProgressEvent:
    """Prompt processing progress (b10621's prompt_progress): sent at the start and after each step."""

    total: int
    cache: int
    processed: int
    time_ms: int
    timings: Timings | None = None  # the slot's stats so far, under timings_per_token (b10621 sends them then)


@dataclass(frozen=True)
class TokenProbs:
    """n_probs: the sampled token's probability and the top candidates, as (id, probability)."""

    prob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: bytes = b""  # what may be sent now (stop strings and incomplete UTF-8 withheld)
    n_decoded: int = 0
    timings: Timings | None = None  # set when this token already ended the request (a stop word)
    probs: TokenProbs | None = None  # with n_probs > 0
    n_cached: int = 0  # prompt tokens reused from the cache (the Anthropic stream's first event reports it)


@dataclass(frozen=True)
class FinalEvent:
    stop_type: str  # "eos" | "limit" | "word" | "none"
    n_prompt: int
    n_prompt_processed: int
    n_cached: int
    n_decoded: int
    n_tokens_cached: int  # tokens held in the KV cache at the end (the last sampled one is not)
    truncated: bool
    t_prompt_ms: float
    t_gen_ms: float
    id_slot: int = 0
    content: bytes = b""  # the whole generated text, stop word cut
    stopping_word: str = ""
    has_new_line: bool = False  # a newline was among the text sent
    n_draft: int = 0  # speculative decoding: draft tokens proposed, and how many the target accepted
    n_draft_accepted: int = 0


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    kind: str = "server"  # an errors.ErrorKind name


Event = TokenEvent | FinalEvent | ErrorEvent | ScoreEvent | ProgressEvent


@dataclass
class SlotRecord:
    """One slot as GET /slots shows it (b10621's server_slot::to_json inputs)."""

    id: int
    n_ctx: int
    is_processing: bool = False
    id_task: int | None = None  # the running task's, else the last one's; None before any
    n_prompt_tokens: int = 0  # tokens held in the slot
    n_prompt_tokens_processed: int = 0
    n_prompt_tokens_cache: int = 0
    params: dict | None = None
    has_next_token: bool = False
    has_new_line: bool = False
    n_remain: int = -1
    n_decoded: int = 0
    prompt_tokens: tuple[int, ...] = ()
    generated: bytes | bytearray = b""
    tokens: tuple[int, ...] = ()  # the tokens the slot holds (what a slot save writes)


@dataclass
class EngineInfo:
    """What the HTTP layer may read about the loaded model."""

    model_path: str = ""
    n_ctx: int = 0
    n_slots: int = 1
