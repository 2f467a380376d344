"""The reasoning-budget sampler against b10621's tests/test-reasoning-budget.cpp (same token ids, same
expected forcing windows), then the server-side glue (server-schema.cpp, server-common.cpp, sampling.cpp)
on a fake vocabulary."""

from __future__ import annotations

import re

import numpy as np
import pytest

from server.engine.reasoning_budget import (
    INT32_MAX,
    ReasoningBudget,
    ReasoningBudgetParams,
    accept_generated,
    build_reasoning_budget,
    chat_reasoning_budget_fields,
    grammar_should_apply,
    prefill_tokens,
    reasoning_budget_needed,
    utf8_is_complete,
)
from server.engine.reasoning_budget import ReasoningBudgetState as S


def _logits(max_token: int) -> np.ndarray:
    return np.log(np.arange(1, max_token + 2, dtype=np.float32))


def _forcing_window(sequence, start_seqs, end_seqs, forced, budget, initial_state):
    """The C++ helper's loop: apply, count finite logits, accept; stop once forcing has stopped."""
    max_token = max([*sequence, *forced, *(t for s in start_seqs for t in s), *(t for s in end_seqs for t in s)])
    rb = ReasoningBudget(start_seqs, end_seqs, forced, budget, initial_state)
    first = last = None
    for i, token in enumerate(sequence):
        logits = _logits(max_token)
        finite = int(np.isfinite(rb.apply(logits)).sum())
        rb.accept(token)
        if finite == 1:
            first = i if first is None else first
            last = i
        elif first is not None:
            break
    return first, last


# (name, sequence, start_seqs, end_seqs, forced, budget, initial state, forcing from, forcing through)
CASES = [
    ("natural end before budget exhausted", [100, 50, 51, 101, 52], [[100]], [[101]], [102], 5, S.IDLE, None, None),
    ("budget exhausted forcing", [100, 50, 51, 52, 53], [[100]], [[101]], [102, 101], 2, S.IDLE, 3, 4),
    ("activate immediately budget=0", [100, 50, 51, 52], [[100]], [[101]], [102, 101], 0, S.COUNTING, 0, 1),
    ("no start/end configured", [50, 51, 52, 53], [[]], [[]], [102], 2, S.IDLE, None, None),
    ("activate immediately with budget", [50, 51, 52, 53], [[100]], [[101]], [102, 101], 2, S.COUNTING, 2, 3),
    (
        "multi-block re-arms budget after DONE",
        [100, 50, 101, 100, 60, 61, 62, 63],
        [[100]],
        [[101]],
        [102, 101],
        2,
        S.IDLE,
        6,
        7,
    ),
    ("multiple start sequences", [110, 111, 50, 51, 52, 53], [[100], [110, 111]], [[101]], [102, 101], 2, S.IDLE, 4, 5),
    (
        "multiple end sequences",
        [100, 50, 103, 104, 52],
        [[100]],
        [[101], [103, 104]],
        [102, 101],
        5,
        S.IDLE,
        None,
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forcing_window(case):
    _, sequence, start, end, forced, budget, state, want_first, want_last = case
    assert _forcing_window(sequence, start, end, forced, budget, state) == (want_first, want_last)


def _forced_token(rb: ReasoningBudget, max_token: int) -> int:
    out = rb.apply(_logits(max_token))
    finite = np.flatnonzero(np.isfinite(out))
    assert len(finite) == 1, "sampler is not forcing exactly one token"
    return int(finite[0])


def test_clone_mid_counting_keeps_the_remaining_budget():
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 2)
    rb.accept(100)
    rb.accept(50)
    clone = rb.clone()
    clone.accept(51)
    assert _forced_token(clone, 102) == 102
    assert rb.state is S.COUNTING  # the original is untouched


def test_clone_mid_forcing_keeps_the_force_position():
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 0, S.FORCING)
    assert _forced_token(rb, 102) == 102
    rb.accept(102)
    assert _forced_token(rb.clone(), 102) == 101


def test_manual_force_from_counting_forces_the_whole_sequence():
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 5)
    rb.accept(100)
    rb.accept(50)
    assert rb.state is S.COUNTING
    assert rb.force() is True and rb.state is S.FORCING
    assert _forced_token(rb, 102) == 102
    rb.accept(102)
    assert _forced_token(rb, 102) == 101
    rb.accept(101)
    assert rb.state is S.DONE


def test_manual_force_is_a_no_op_outside_counting():
    idle = ReasoningBudget([[100]], [[101]], [102, 101], 5)
    assert idle.force() is False and idle.state is S.IDLE

    done = ReasoningBudget([[100]], [[101]], [102, 101], 5)
    done.accept(100)
    done.accept(101)
    assert done.state is S.DONE
    assert done.force() is False and done.state is S.DONE

    forcing = ReasoningBudget([[100]], [[101]], [102, 101], 0, S.FORCING)
    assert _forced_token(forcing, 102) == 102
    forcing.accept(102)
    assert forcing.force() is False and forcing.state is S.FORCING
    assert _forced_token(forcing, 102) == 101  # not rewound


def test_natural_end_records_the_matched_sequence_and_rearming_clears_it():
    rb = ReasoningBudget([[100]], [[101], [103, 104]], [102, 101], 5)
    assert rb.end_match is None
    for t in (100, 50, 103, 104):
        rb.accept(t)
    assert rb.end_match == (103, 104)
    rb.accept(100)
    assert rb.state is S.COUNTING and rb.end_match is None


def test_overlapping_end_sequences_report_the_longest():
    rb = ReasoningBudget([[100]], [[104], [103, 104]], [102, 104], 5)
    for t in (100, 103, 104):
        rb.accept(t)
    assert rb.end_match == (103, 104)
    reordered = ReasoningBudget([[100]], [[103, 104], [104]], [102, 104], 5)
    for t in (100, 103, 104):
        reordered.accept(t)
    assert reordered.end_match == (103, 104)


def test_forcing_records_the_end_sequence_that_finishes_the_forced_tokens():
    rb = ReasoningBudget([[100]], [[101], [103, 104]], [102, 103, 104], 0, S.FORCING)
    rb.accept(102)
    rb.accept(103)
    assert rb.end_match is None
    rb.accept(104)
    assert rb.state is S.DONE and rb.end_match == (103, 104)

    plain = ReasoningBudget([[100]], [[101], [103, 104]], [102], 0, S.FORCING)
    plain.accept(102)
    assert plain.state is S.DONE and plain.end_match is None


@pytest.mark.parametrize(
    "data", [b"hello", b"", b"\xc2\xa0", b"\xe2\x80\x9c", b"\xf0\x9f\x98\x80", b"abc\xc3\xa9", b"hello\xc3\xa9"]
)
def test_utf8_complete(data):
    assert utf8_is_complete(data)


@pytest.mark.parametrize(
    "data", [b"\xc2", b"\xe2\x80", b"\xe2", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xf0", b"\x80", b"hello\xc3"]
)
def test_utf8_incomplete(data):
    assert not utf8_is_complete(data)


# --- beyond the C++ test: the UTF-8 wait, partial matches, reset ---------------------------------------


def test_exhausted_budget_waits_for_a_token_whose_own_piece_is_complete():
    pieces = {100: b"<think>", 50: b"a", 60: b"\xe2", 61: b"\x80\x9c", 62: b"\xc3\xa9", 101: b"</think>"}
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 2, token_bytes=pieces.__getitem__)
    rb.accept(100)
    rb.accept(50)
    rb.accept(60)  # budget spent on a lead byte
    assert rb.state is S.WAITING_UTF8
    assert np.isfinite(rb.apply(_logits(102))).all()
    rb.accept(61)  # finishes the character, but each piece is judged alone: continuation bytes only
    assert rb.state is S.WAITING_UTF8
    rb.accept(62)
    assert rb.state is S.FORCING and _forced_token(rb, 102) == 102


def test_natural_end_still_counts_while_waiting_for_utf8():
    pieces = {100: b"<think>", 60: b"\xe2", 101: b"</think>"}
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 1, token_bytes=pieces.__getitem__)
    rb.accept(100)
    rb.accept(60)
    assert rb.state is S.WAITING_UTF8
    rb.accept(101)
    assert rb.state is S.DONE and rb.end_match == (101,)


def test_a_partial_start_sequence_restarts_on_mismatch():
    rb = ReasoningBudget([[110, 111]], [[101]], [102], 3)
    for t in (110, 50, 111):
        rb.accept(t)
    assert rb.state is S.IDLE
    for t in (110, 110, 111):  # the second 110 begins a new attempt
        rb.accept(t)
    assert rb.state is S.COUNTING


def test_a_match_consumes_its_tokens():
    rb = ReasoningBudget([[110, 110]], [[101]], [102], 5)
    for t in (110, 110, 101):  # armed, then ended
        rb.accept(t)
    rb.accept(110)  # the second 110 of the start tag does not count again
    assert rb.state is S.DONE
    rb.accept(110)
    assert rb.state is S.COUNTING


def test_clone_owns_its_partial_matches():
    rb = ReasoningBudget([[110, 111]], [[103, 104]], [102], 5)
    rb.accept(110)
    clone = rb.clone()
    clone.accept(111)
    rb.accept(111)
    assert clone.state is S.COUNTING and rb.state is S.COUNTING
    rb.accept(103)
    clone = rb.clone()
    clone.accept(104)
    rb.accept(104)
    assert clone.state is S.DONE and rb.state is S.DONE


def test_empty_and_repeated_sequences_are_dropped():
    rb = ReasoningBudget([[1], [], [1], [5, 6]], [[2], [2]], [2], 5)
    assert rb.start_seqs == [(1,), (5, 6)] and rb.end_seqs == [(2,)]


def test_a_partial_end_tag_does_not_join_the_forced_tokens():
    rb = ReasoningBudget([[100]], [[103, 104]], [104], 2)
    for t in (100, 50, 103):  # budget spent on 103, the first half of the end tag
        rb.accept(t)
    assert rb.state is S.FORCING
    rb.accept(104)
    assert rb.state is S.DONE and rb.end_match is None


def test_empty_forced_sequence_lets_one_token_through_then_stops():
    rb = ReasoningBudget([[100]], [[101]], [], 1)
    rb.accept(100)
    rb.accept(50)
    assert rb.state is S.FORCING
    logits = _logits(101)
    assert rb.apply(logits) is logits
    rb.accept(51)
    assert rb.state is S.DONE


def test_apply_keeps_the_forced_logit_and_leaves_the_input_alone():
    rb = ReasoningBudget([[1]], [[2]], [3, 2], 0, S.FORCING)
    logits = np.array([0.5, 1.5, 2.5, 3.5, 4.5], np.float32)
    out = rb.apply(logits)
    assert out.dtype == np.float32 and out[3] == np.float32(3.5) and np.isneginf(np.delete(out, 3)).all()
    assert logits[0] == np.float32(0.5)


def test_reset_returns_to_idle_with_a_full_budget():
    rb = ReasoningBudget([[100]], [[101]], [102, 101], 2, S.COUNTING)
    rb.accept(50)
    rb.reset()
    assert rb.state is S.IDLE and rb.end_match is None
    rb.accept(100)
    rb.accept(50)
    assert rb.state is S.COUNTING  # two tokens of budget again, one spent


# --- server glue on a fake vocabulary ------------------------------------------------------------------

SPECIAL = {"<think>": 1000, "</think>": 1001, "<tool_call>": 1002}
_SPLIT = re.compile("(" + "|".join(map(re.escape, SPECIAL)) + ")")


def tokenize(text: str) -> list[int]:
    """parse_special=true: a special tag is one token, anything else one token per character."""
    return [
        SPECIAL[p] if p in SPECIAL else ord(c) for p in _SPLIT.split(text) if p for c in ([p] if p in SPECIAL else p)
    ]


def piece(token: int) -> bytes:
    return next((k for k, v in SPECIAL.items() if v == token), None).encode() if token >= 1000 else chr(token).encode()


def test_forced_sequence_is_the_message_then_the_first_end_tag():
    p = ReasoningBudgetParams(3, "<think>", ["</think>", "<tool_call>"], "ok")
    rb = build_reasoning_budget(p, tokenize)
    assert rb.start_seqs == [(1000,)] and rb.end_seqs == [(1001,), (1002,)]
    assert rb.forced_tokens == (ord("o"), ord("k"), 1001) and rb.budget == 3


def test_forced_sequence_needs_the_message_field():
    base = {"budget_tokens": 3, "start_tag": "<think>", "end_tags": ["</think>"]}
    assert build_reasoning_budget(ReasoningBudgetParams(**base, message=""), tokenize).forced_tokens == (1001,)
    assert build_reasoning_budget(ReasoningBudgetParams(**base), tokenize).forced_tokens == ()


def test_when_the_sampler_exists():
    tags = {"start_tag": "<think>", "end_tags": ["</think>"]}
    assert build_reasoning_budget(ReasoningBudgetParams(-1, **tags), tokenize) is None
    assert build_reasoning_budget(ReasoningBudgetParams(-1, **tags), tokenize, grammar_lazy=True).budget == INT32_MAX
    assert build_reasoning_budget(ReasoningBudgetParams(-1, **tags, control=True), tokenize).budget == INT32_MAX
    assert build_reasoning_budget(ReasoningBudgetParams(0, **tags), tokenize).budget == 0
    assert build_reasoning_budget(ReasoningBudgetParams(5, "", ["</think>"]), tokenize) is None
    assert build_reasoning_budget(ReasoningBudgetParams(5, "<think>", ["", ""]), tokenize) is None
    assert reasoning_budget_needed([1], [[2]], -1, False, False) is False
    assert reasoning_budget_needed([1], [[2]], 0, False, False) is True


def test_prefill_arms_the_sampler_when_the_template_opened_the_block():
    p = ReasoningBudgetParams(1, "<think>", ["</think>"], "")
    rb = build_reasoning_budget(p, tokenize, prefill=prefill_tokens("<think>\n", tokenize, piece))
    # "<think>" armed it, "\n" spent the single token: the next step forces the end tag
    assert rb.state is S.FORCING and _forced_token(rb, 1002) == 1001


def test_prefill_drops_a_leading_space_token_the_tokenizer_added():
    def spaced(text: str) -> list[int]:
        return [ord(" "), *tokenize(text)]

    assert prefill_tokens("<think>", spaced, piece) == [1000]
    assert prefill_tokens(" <think>", spaced, piece) == [ord(" "), ord(" "), 1000]
    assert prefill_tokens("", spaced, piece) == []


def test_task_fields_as_server_schema_reads_them():
    p = ReasoningBudgetParams.from_task(
        {
            "reasoning_budget_tokens": None,
            "reasoning_budget_start_tag": "<think>",
            "reasoning_budget_end_tag": "</think>",
            "reasoning_control": True,
        },
        7,
    )
    assert p == ReasoningBudgetParams(7, "<think>", ["</think>"], None, True)
    both = ReasoningBudgetParams.from_task(
        {"reasoning_budget_end_tags": ["a", "", "b"], "reasoning_budget_end_tag": "c", "reasoning_budget_message": 5},
        -1,
    )
    assert both.end_tags == ["a", "b"] and both.message == ""
    # a null list next to the single tag: the handler still reads the (null) list
    quirk = ReasoningBudgetParams.from_task({"reasoning_budget_end_tags": None, "reasoning_budget_end_tag": "c"}, -1)
    assert quirk.end_tags == []
    assert ReasoningBudgetParams.from_task({"reasoning_budget_end_tags": "x"}, -1).end_tags == ["x"]


def test_chat_fields_as_server_common_sets_them():
    tags = ("<think>", ["</think>"])
    assert chat_reasoning_budget_fields({}, *tags, 64, "bye") == {
        "reasoning_budget_tokens": 64,
        "reasoning_budget_start_tag": "<think>",
        "reasoning_budget_end_tags": ["</think>"],
        "reasoning_budget_message": "bye",
        "reasoning_control": False,
    }
    f = chat_reasoning_budget_fields
    assert (
        f({"reasoning_budget_tokens": -1, "thinking_budget_tokens": 9}, *tags, 64, "")["reasoning_budget_tokens"] == 64
    )
    assert (
        f({"reasoning_budget_tokens": "x", "thinking_budget_tokens": 9}, *tags, 64, "")["reasoning_budget_tokens"] == 9
    )
    assert (
        f({"reasoning_budget_tokens": 3.9, "thinking_budget_tokens": 9}, *tags, 64, "")["reasoning_budget_tokens"] == 3
    )
    out = f({"reasoning_budget_message": "m", "reasoning_control": "yes"}, *tags, -1, "cli")
    assert out["reasoning_budget_message"] == "m" and out["reasoning_control"] is False
    assert f({"reasoning_budget_tokens": 5}, "<think>", [], -1, "") == {}


class _Recorder:
    def __init__(self):
        self.seen: list[int] = []

    def accept(self, token: int) -> None:
        self.seen.append(token)


def test_lazy_grammar_is_off_inside_the_block_and_gets_the_end_tag_replayed():
    rb = ReasoningBudget([[1000]], [[1001], [1002]], [1001], 5)
    grammar = _Recorder()
    for t in (1000, 50, 51):
        accept_generated(t, rb, grammar, grammar_lazy=True)
    assert grammar.seen == [1000] and not grammar_should_apply(True, rb, True)
    accept_generated(1002, rb, grammar, grammar_lazy=True)  # ends the block with a trigger
    assert grammar.seen == [1000, 1002] and grammar_should_apply(True, rb, True)
    accept_generated(60, rb, grammar, grammar_lazy=True)
    assert grammar.seen == [1000, 1002, 60]


def test_a_strict_grammar_sees_every_token_once():
    rb = ReasoningBudget([[1000]], [[1001]], [1001], 5)
    grammar = _Recorder()
    for t in (1000, 50, 1001, 60):
        accept_generated(t, rb, grammar, grammar_lazy=False)
    assert grammar.seen == [1000, 50, 1001, 60]
    assert grammar_should_apply(False, rb, False) is False and grammar_should_apply(True, None, True) is True
