"""b10621's reasoning-budget sampler (common/reasoning-budget.{h,cpp}) and the server glue around it
(common/sampling.cpp, tools/server/server-schema.cpp, tools/server/server-common.cpp).

The sampler watches generated token ids. A start sequence (e.g. "<think>") arms it with a budget; each
further token spends one. A natural end sequence (e.g. "</think>") ends the block. When the budget runs
out on a token that ends mid-character, it waits for a token whose piece is complete UTF-8, then forces
the forced sequence (message + first end tag) one token at a time, all other logits set to -inf. A later
start sequence re-arms it. IDLE -> COUNTING -> WAITING_UTF8 -> FORCING -> DONE (-> COUNTING again on a new start sequence).

How b10621 drives it (common_sampler_*), per request:
- created once, when the sampler is (`reasoning_budget_needed`), then fed the generation-prompt prefill
  tokens (`prefill_tokens`); the prompt itself is never fed to it (accepted with is_generated=false);
- per step: `apply` on the raw logits first, then the grammar (only if `grammar_should_apply`), then
  the sampler chain (logit bias included); on grammar rejection the same order again;
- after the draw: `accept_generated` (budget, end-sequence replay into a lazy grammar, grammar), then
  the chain's accept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np

INT32_MAX = 2**31 - 1

Tokens = Sequence[int]


class ReasoningBudgetState(Enum):
    IDLE = "idle"  # waiting for a start sequence
    COUNTING = "counting"  # spending the budget, watching for an end sequence
    WAITING_UTF8 = "waiting_utf8"  # budget spent, letting the current character finish
    FORCING = "forcing"  # forcing forced_tokens one by one
    DONE = "done"  # passthrough, watching for a new start sequence


def utf8_is_complete(data: bytes) -> bool:
    """common_utf8_is_complete (common/unicode.cpp): does `data` not end inside a UTF-8 sequence?"""
    if not data:
        return True
    for back in range(1, min(4, len(data)) + 1):
        c = data[-back]
        if c & 0xC0 != 0x80:
            return back >= (4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1)
    return False  # only continuation bytes


class _TokenMatcher:
    """token_matcher: an Aho-Corasick scan over token ids that restarts after every match.

    The automaton's state is the longest suffix of the tokens seen since the last match that is a
    prefix of some sequence, so keeping the last max-length tokens and testing suffixes is equivalent.
    """

    def __init__(self, seqs: Iterable[Tokens]):
        self.seqs: list[tuple[int, ...]] = []
        for seq in map(tuple, seqs):
            if seq and seq not in self.seqs:  # empty and duplicate sequences are dropped, order kept
                self.seqs.append(seq)
        self._max_len = max(map(len, self.seqs), default=0)
        self._recent: list[int] = []

    def advance(self, token: int) -> int:
        """Index into seqs of the longest sequence ending at this token, or -1."""
        if not self.seqs:
            return -1
        self._recent.append(token)
        del self._recent[: -self._max_len]
        best = -1
        for i, seq in enumerate(self.seqs):
            if (
                len(seq) <= len(self._recent)
                and tuple(self._recent[-len(seq) :]) == seq
                and (best < 0 or len(seq) > len(self.seqs[best]))
            ):
                best = i
        if best >= 0:
            self._recent.clear()
        return best

    def reset(self) -> None:
        self._recent.clear()


class ReasoningBudget:
    """common_reasoning_budget_init's sampler, on token ids.

    `token_bytes(token)` is the token's piece as common_token_to_piece(vocab, token, special=false)
    renders it (control tokens empty). Each piece is judged on its own, not joined to the previous
    ones: a piece made only of continuation bytes counts as incomplete. None treats every token as
    complete (upstream's null vocab).
    """

    def __init__(
        self,
        start_seqs: Iterable[Tokens],
        end_seqs: Iterable[Tokens],
        forced_tokens: Tokens,
        budget: int,
        initial_state: ReasoningBudgetState = ReasoningBudgetState.IDLE,
        token_bytes: Callable[[int], bytes] | None = None,
    ):
        if initial_state is ReasoningBudgetState.COUNTING and budget <= 0:
            initial_state = ReasoningBudgetState.FORCING
        self._start = _TokenMatcher(start_seqs)
        self._end = _TokenMatcher(end_seqs)
        self.forced_tokens: tuple[int, ...] = tuple(forced_tokens)
        self.budget = budget
        self._token_bytes = token_bytes
        self._remaining = budget
        self._state = initial_state
        self._force_pos = 0
        self._end_match = -1

    @property
    def state(self) -> ReasoningBudgetState:
        return self._state

    @property
    def start_seqs(self) -> list[tuple[int, ...]]:
        return list(self._start.seqs)

    @property
    def end_seqs(self) -> list[tuple[int, ...]]:
        return list(self._end.seqs)

    @property
    def end_match(self) -> tuple[int, ...] | None:
        """The end sequence that led to DONE (naturally or as the tail of the forced tokens), cleared when
        a new start sequence re-arms the sampler."""
        return self._end.seqs[self._end_match] if self._end_match >= 0 else None

    def _arm(self) -> None:
        self._state = ReasoningBudgetState.COUNTING
        self._remaining = self.budget
        if self._remaining <= 0:
            self._start_forcing()

    def _start_forcing(self) -> None:
        self._state = ReasoningBudgetState.FORCING
        self._force_pos = 0

    def accept(self, token: int) -> None:  # noqa: C901
        S = ReasoningBudgetState
        if self._state is S.IDLE:
            if self._start.advance(token) >= 0:
                self._arm()
        elif self._state in (S.COUNTING, S.WAITING_UTF8):
            match = self._end.advance(token)
            if match >= 0:
                self._state = S.DONE
                self._end_match = match
                return
            complete = self._token_bytes is None or utf8_is_complete(self._token_bytes(token))
            if self._state is S.WAITING_UTF8:
                if complete:
                    self._start_forcing()
                    self._end.reset()
            else:
                self._remaining -= 1
                if self._remaining <= 0:
                    # a partial end tag in the reasoning must not combine with the tokens that follow
                    self._end.reset()
                    if complete:
                        self._start_forcing()
                    else:
                        self._state = S.WAITING_UTF8
        elif self._state is S.FORCING:
            match = self._end.advance(token)  # reports the end tag the forced tokens finish with
            self._force_pos += 1
            if self._force_pos >= len(self.forced_tokens):
                self._state = S.DONE
                self._end_match = match
        elif self._start.advance(token) >= 0:  # DONE: some models open several reasoning blocks
            self._end.reset()
            self._end_match = -1
            self._arm()

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """The logits to sample from: while forcing, only the forced token keeps its logit (a new array);
        otherwise `logits` itself, untouched."""
        if self._state is not ReasoningBudgetState.FORCING or self._force_pos >= len(self.forced_tokens):
            return logits
        forced = self.forced_tokens[self._force_pos]
        out = np.full_like(logits, -np.inf)
        if 0 <= forced < len(logits):
            out[forced] = logits[forced]
        return out

    def force(self) -> bool:
        """common_reasoning_budget_force: end the block now. Only a COUNTING sampler moves (to FORCING,
        from the first forced token); returns whether it did."""
        if self._state is not ReasoningBudgetState.COUNTING:
            return False
        self._start_forcing()
        self._end.reset()
        return True

    def reset(self) -> None:
        """Back to IDLE whatever the initial state was (upstream's reset; the server never calls it)."""
        self._state = ReasoningBudgetState.IDLE
        self._remaining = self.budget
        self._start.reset()
        self._end.reset()
        self._force_pos = 0
        self._end_match = -1

    def clone(self) -> ReasoningBudget:
        twin = copy.copy(self)
        twin._start = copy.deepcopy(self._start)
        twin._end = copy.deepcopy(self._end)
        return twin


# --- common/sampling.cpp -----------------------------------------------------------------------------


class _Grammar(Protocol):
    def accept(self, token: int) -> None: ...


def reasoning_budget_needed(
    start: Tokens, end: Sequence[Tokens], budget_tokens: int, grammar_lazy: bool, control: bool
) -> bool:
    """common_sampler_init's condition for creating the sampler: tags on both sides, and a budget, a lazy
    grammar (which must stay off inside the reasoning block) or armed reasoning control."""
    return bool(start) and bool(end) and (grammar_lazy or budget_tokens >= 0 or control)


def prefill_tokens(
    generation_prompt: str, tokenize: Callable[[str], list[int]], piece: Callable[[int], bytes]
) -> list[int]:
    """The generation prompt's tokens that common_sampler_init feeds the sampler (so a template that
    already opened "<think>" arms it). `tokenize` as common_tokenize(add_special=false,
    parse_special=true); `piece` as common_token_to_piece(special=true). A leading-space first token is
    dropped when the prompt itself does not start with whitespace (some tokenizers add one)."""
    if not generation_prompt:
        return []
    tokens = tokenize(generation_prompt)
    if tokens and piece(tokens[0])[:1].isspace() and not generation_prompt[:1].encode()[:1].isspace():
        tokens = tokens[1:]
    return tokens


def grammar_should_apply(has_grammar: bool, budget: ReasoningBudget | None, grammar_lazy: bool) -> bool:
    """A lazy grammar stays off while the budget sampler is inside a reasoning block."""
    if not has_grammar:
        return False
    if budget is None or not grammar_lazy:
        return True
    return budget.state in (ReasoningBudgetState.IDLE, ReasoningBudgetState.DONE)


def accept_generated(token: int, budget: ReasoningBudget | None, grammar: _Grammar | None, grammar_lazy: bool) -> None:
    """common_sampler_accept(is_generated=true) up to the chain, whose accept comes after.

    The grammar decision is taken before the budget sees the token. When the token ends the block while
    the grammar was off, the matched end sequence is replayed into the grammar: it may hold a trigger
    (e.g. "<tool_call>" as an end tag)."""
    accept_grammar = grammar_should_apply(grammar is not None, budget, grammar_lazy)
    if budget is not None:
        budget.accept(token)
        if grammar is not None and not accept_grammar and budget.state is ReasoningBudgetState.DONE:
            for t in budget.end_match or ():
                grammar.accept(t)
    if grammar is not None and accept_grammar:
        grammar.accept(token)


# --- tools/server -------------------------------------------------------------------------------------


def _json_int(value: object, default: int) -> int:
    """json_value<int>: a number (or boolean) as static_cast<int> makes it, the default otherwise."""
    if isinstance(value, bool | float):
        return int(value)
    if isinstance(value, int):
        return (value + 2**31) % 2**32 - 2**31
    return default


def _json_elements(value: object) -> list:
    """Iterating a nlohmann::json: an array's items, an object's values, null nothing, a scalar itself."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def chat_reasoning_budget_fields(
    body: dict, thinking_start_tag: str, thinking_end_tags: Sequence[str], cli_budget: int, cli_message: str
) -> dict:
    """The task fields oaicompat_chat_params_parse (server-common.cpp) sets from a chat body and the
    applied template; they override the body's own. Without end tags nothing is set, and the body's
    reasoning_budget_* fields (if any) pass through to the task unchanged."""
    budget = _json_int(body.get("reasoning_budget_tokens"), _json_int(body.get("thinking_budget_tokens"), -1))
    if budget == -1:  # an explicit -1 also takes --reasoning-budget
        budget = cli_budget
    if not thinking_end_tags:
        return {}
    message = body.get("reasoning_budget_message")
    control = body.get("reasoning_control")
    return {
        "reasoning_budget_tokens": budget,
        "reasoning_budget_start_tag": thinking_start_tag,
        "reasoning_budget_end_tags": list(thinking_end_tags),
        "reasoning_budget_message": message if isinstance(message, str) else cli_message,
        "reasoning_control": control if isinstance(control, bool) else False,
    }


@dataclass
class ReasoningBudgetParams:
    """The task's reasoning-budget fields (server-schema.cpp), validated upstream of this module.

    budget_tokens: reasoning_budget_tokens, -1 (unlimited) to INT32_MAX; default --reasoning-budget.
    start_tag: reasoning_budget_start_tag.
    end_tags: reasoning_budget_end_tags (alias reasoning_budget_end_tag); the first is the forced one.
    message: reasoning_budget_message; None when absent, which leaves nothing to force.
    control: reasoning_control, arms POST /v1/chat/completions/control's "reasoning_end" (`force`).
    """

    budget_tokens: int = -1
    start_tag: str = ""
    end_tags: list[str] = field(default_factory=list)
    message: str | None = None
    control: bool = False

    @classmethod
    def from_task(cls, data: dict, default_budget_tokens: int) -> ReasoningBudgetParams:
        """Read as server-schema.cpp does: a null field is absent."""
        p = cls(budget_tokens=default_budget_tokens)
        if data.get("reasoning_control") is not None:
            p.control = bool(data["reasoning_control"])
        if data.get("reasoning_budget_tokens") is not None:
            p.budget_tokens = int(data["reasoning_budget_tokens"])
        if data.get("reasoning_budget_start_tag") is not None:
            p.start_tag = data["reasoning_budget_start_tag"]
        if data.get("reasoning_budget_end_tags") is not None or data.get("reasoning_budget_end_tag") is not None:
            # the handler tests presence, not value: a null "…_end_tags" next to "…_end_tag" gives no tags
            tags = (
                _json_elements(data["reasoning_budget_end_tags"])
                if "reasoning_budget_end_tags" in data
                else [data["reasoning_budget_end_tag"]]
            )
            p.end_tags = [t for t in tags if t]
        if data.get("reasoning_budget_message") is not None:
            message = data["reasoning_budget_message"]
            p.message = message if isinstance(message, str) else ""  # json_value: a wrong type reads as ""
        return p


def build_reasoning_budget(
    params: ReasoningBudgetParams,
    tokenize: Callable[[str], list[int]],
    token_bytes: Callable[[int], bytes] | None = None,
    *,
    grammar_lazy: bool = False,
    prefill: Iterable[int] = (),
) -> ReasoningBudget | None:
    """The request's sampler, or None when b10621 creates none.

    `tokenize` as common_tokenize(add_special=false, parse_special=true), so tags become their special
    tokens. The forced sequence is the message's tokens then the first end tag's, and exists only when
    the message field was given (the chat endpoints always give it); `prefill` from `prefill_tokens`.
    """
    start = tokenize(params.start_tag) if params.start_tag else []
    end = [tokenize(tag) for tag in params.end_tags if tag]
    forced: list[int] = []
    if params.message is not None and end:
        forced = (tokenize(params.message) if params.message else []) + end[0]
    if not reasoning_budget_needed(start, end, params.budget_tokens, grammar_lazy, params.control):
        return None
    budget = ReasoningBudget(
        [start], end, forced, INT32_MAX if params.budget_tokens < 0 else params.budget_tokens, token_bytes=token_bytes
    )
    for token in prefill:
        budget.accept(token)
    return budget
