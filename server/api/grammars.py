"""A request's grammar settings compiled as common_sampler_init() would take them (the native routes and,
later, the chat routes share this)."""

from __future__ import annotations

import re

from ..errors import SAMPLERS_FAILED, ErrorKind, UpstreamError
from ..grammar.constraint import GrammarRefused
from ..grammar.spec import GrammarSpec
from .budget import prefill_tokens
from .task_params import GRAMMAR_TRIGGER_TOKEN, GRAMMAR_TRIGGER_WORD, TaskParams

GRAMMAR_TRIGGER_PATTERN, GRAMMAR_TRIGGER_PATTERN_FULL = 2, 3

_REGEX_SPECIAL = re.compile(r"[.^$|()*+?\[\]{}\\]")


def _anchored(pattern: str) -> str:
    if not pattern:
        return "^$"
    return ("" if pattern[0] == "^" else "^") + pattern + ("" if pattern[-1] == "$" else "$")


def _triggers(p: TaskParams) -> tuple[tuple[int, ...], tuple[str, ...]]:
    tokens: list[int] = []
    patterns: list[str] = []
    for t in p.grammar_triggers:
        kind = t["type"]
        if kind == GRAMMAR_TRIGGER_WORD:
            patterns.append(_REGEX_SPECIAL.sub(lambda m: "\\" + m.group(0), t["value"]))
        elif kind == GRAMMAR_TRIGGER_PATTERN:
            patterns.append(t["value"])
        elif kind == GRAMMAR_TRIGGER_PATTERN_FULL:
            patterns.append(_anchored(t["value"]))
        elif kind == GRAMMAR_TRIGGER_TOKEN:
            tokens.append(t["token"])
    return tuple(tokens), tuple(patterns)


def _prefill(p: TaskParams, vocab) -> tuple[int, ...]:
    """common_sampler_init's grammar prefill: for schema and chat grammars only, never a lazy one."""
    if p.grammar_lazy or p.grammar_type not in ("output_format", "tool_calls"):
        return ()
    return prefill_tokens(p.generation_prompt, vocab.tokenizer)


def grammar_spec(p: TaskParams, vocab_of) -> GrammarSpec | None:
    """The request's grammar, parsed and lowered; None without one. `vocab_of()` gives the GrammarVocab."""
    if not p.grammar:
        return None
    tokens, patterns = _triggers(p) if p.grammar_lazy else ((), ())
    vocab = vocab_of()
    try:
        return vocab.compile(p.grammar, p.grammar_lazy, tokens, patterns, _prefill(p, vocab))
    except GrammarRefused as e:
        raise UpstreamError(SAMPLERS_FAILED + str(e), ErrorKind.INVALID_REQUEST) from None
