"""A compiled request grammar as plain data: what server/grammar/constraint.py makes on the HTTP side and the
engine thread's GrammarMatcher reads (it crosses the engine boundary in server/engine/types.py's requests)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrammarSpec:
    """A request grammar, already parsed and lowered to llguidance's Lark (server/grammar/)."""

    lark: str
    lazy: bool = False
    trigger_tokens: tuple[int, ...] = ()
    trigger_patterns: tuple[str, ...] = ()
    prefill: tuple[int, ...] = ()  # the generation prompt's tokens, accepted before the first draw
