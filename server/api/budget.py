"""A request's reasoning-budget settings as token ids for the engine (common_sampler_init's rbudget):
the tags tokenized with special parsing, the forced sequence, the generation prompt's prefill."""

from __future__ import annotations

from ..engine.reasoning_budget import INT32_MAX, reasoning_budget_needed
from ..engine.types import ReasoningBudgetSpec
from .task_params import TaskParams


def prefill_tokens(generation_prompt: str, tokenizer) -> tuple[int, ...]:
    """The generation prompt's tokens, as the grammar and the budget take them before the first draw
    (a leading space token some tokenizers add before a special token is skipped)."""
    if not generation_prompt:
        return ()
    out = []
    for i, t in enumerate(tokenizer.tokenize(generation_prompt, add_special=False, parse_special=True)):
        if i == 0 and tokenizer.piece(t, special=True)[:1].isspace() and not generation_prompt[:1].isspace():
            continue
        out.append(t)
    return tuple(out)


def reasoning_budget_spec(p: TaskParams, tokenizer) -> ReasoningBudgetSpec | None:
    """None where b10621 builds no budget sampler (no tags, or an unlimited budget with nothing needing it)."""

    def tokens(text: str) -> tuple[int, ...]:
        return tuple(tokenizer.tokenize(text, add_special=False, parse_special=True)) if text else ()

    start = tokens(p.reasoning_budget_start_tag)
    ends = tuple(tokens(tag) for tag in p.reasoning_budget_end_tags if tag)
    if not reasoning_budget_needed(start, ends, p.reasoning_budget_tokens, p.grammar_lazy, p.reasoning_control):
        return None
    forced = (tokens(p.reasoning_budget_message or "") + ends[0]) if p.reasoning_budget_message is not None else ()
    budget = INT32_MAX if p.reasoning_budget_tokens < 0 else p.reasoning_budget_tokens
    return ReasoningBudgetSpec(start, ends, forced, budget, prefill_tokens(p.generation_prompt, tokenizer))
