"""The decided-position rule for judged generating cases, and the report's agreement rates per group."""

from __future__ import annotations

import json

from oracle.exchange import Exchange
from oracle.judge import judged_report
from oracle.report import build_report, to_markdown

JSON = {"content-type": "application/json; charset=utf-8"}


def _tok(chosen: int, *top: tuple[int, float]) -> dict:
    return {
        "id": chosen,
        "token": str(chosen),
        "bytes": [],
        "logprob": top[0][1],
        "top_logprobs": [{"id": i, "token": str(i), "bytes": [], "logprob": lp} for i, lp in top],
    }


def completion(*toks: dict) -> Exchange:
    return Exchange(200, dict(JSON), json.dumps({"content": "x", "completion_probabilities": list(toks)}).encode())


DECIDED = ((1, -0.1), (2, -5.0))  # a margin of 4.9 nats, past the Q4_1 threshold (2.0)
OPEN = ((1, -1.0), (2, -1.2))  # a near tie


def test_the_same_path_agrees_even_where_the_bytes_do_not():
    ref = completion(_tok(1, *DECIDED), _tok(3, (3, -0.5), (4, -0.9)))
    mine = completion(_tok(1, (1, -0.1004), (2, -5.0)), _tok(3, (3, -0.5), (4, -0.9)))
    report = judged_report(ref, mine, "greedy", "q4_1", ())
    assert report.identical and not report.bytes_identical
    assert report.judged["agreed"] == 2 and report.judged["parted_at"] is None


def test_a_different_token_at_a_decided_position_fails():
    report = judged_report(
        completion(_tok(1, *DECIDED)), completion(_tok(2, (2, -0.1), (1, -5.0))), "greedy", "q4_1", ()
    )
    assert not report.identical
    assert [(d.path, d.kind, d.reference, d.mlxcel) for d in report.divergences] == [
        ("$.generated[0]", "decided", 1, 2)
    ]


def test_paths_that_part_at_an_undecided_position_stop_being_compared():
    ref = completion(_tok(1, *DECIDED), _tok(1, *OPEN), _tok(1, *DECIDED))
    mine = completion(_tok(1, *DECIDED), _tok(2, (2, -1.0), (1, -1.1)), _tok(7, (7, -0.1), (1, -6.0)))
    report = judged_report(ref, mine, "seeded", "q4_1", ())
    assert report.identical and report.judged["parted_at"] == 1 and report.judged["compared"] == 2


def test_a_choice_other_than_the_raw_top_1_is_undecided():
    """A grammar (or a sampler) picked a token below the raw top-1: its margin among the allowed is unknown."""
    ref = completion(_tok(5, (9, -0.1), (8, -6.0)))
    assert judged_report(ref, completion(_tok(6, (9, -0.1), (8, -6.0))), "grammar", "q4_1", ()).identical


def test_stopping_early_at_a_decided_position_fails():
    ref = completion(_tok(1, *DECIDED), _tok(1, *DECIDED))
    assert not judged_report(ref, completion(_tok(1, *DECIDED)), "greedy", "q4_1", ()).identical
    assert not judged_report(completion(_tok(1, *DECIDED)), ref, "greedy", "q4_1", ()).identical


def test_streamed_frames_and_chat_logprobs_are_read():
    sse = {"content-type": "text/event-stream"}
    frames = tuple(
        b"data: " + json.dumps({"completion_probabilities": [t]}).encode()
        for t in (_tok(1, *DECIDED), _tok(3, (3, -0.1), (4, -5.0)))
    )
    ref = Exchange(200, sse, b"", frames)
    bad = Exchange(200, sse, b"", frames[:1] + (frames[0],))
    assert judged_report(ref, ref, "streamed", "q4_1", ()).judged["agreed"] == 2
    assert not judged_report(ref, bad, "streamed", "q4_1", ()).identical
    chat = Exchange(200, dict(JSON), json.dumps({"choices": [{"logprobs": {"content": [_tok(1, *DECIDED)]}}]}).encode())
    assert judged_report(chat, chat, "chat", "q4_1", ()).judged["generated"] == 1
    empty = Exchange(200, dict(JSON), b'{"choices":[]}')
    assert not judged_report(empty, empty, "chat", "q4_1", ()).identical  # nothing to judge is no evidence


def test_the_report_prints_agreement_rates_per_group():
    good = judged_report(completion(_tok(1, *DECIDED)), completion(_tok(1, *DECIDED)), "greedy", "q4_1", ())
    bad = judged_report(completion(_tok(1, *DECIDED)), completion(_tok(2, *DECIDED)), "greedy", "q4_1", ())
    records = [
        {"case": f"c{i}", "entries": ["POST /completion"], "twin": "q4_1", "reproduce": "x", **r.to_dict()}
        for i, r in enumerate((good, bad))
    ]
    report = build_report({"routes": [{"id": "POST /completion", "state": "supported"}]}, records)
    assert report["judged"]["greedy"]["agreeing"] == 1 and report["judged"]["greedy"]["cases"] == 2
    assert "| greedy | q4_1 | 2 | 1/2 (50%) | 1/2 | 1/2 |" in to_markdown(report)
