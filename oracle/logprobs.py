"""Two answers' top logprobs compared position by position (the differential cases' bound on one request)."""

from __future__ import annotations


def top_logprob_gap(want: list[dict], got: list[dict]) -> float:
    """The largest |delta logprob| between b10621's answer and mlxcel's over each position's top logprobs
    (/completion's completion_probabilities or a chat answer's logprobs.content); AssertionError where the chosen
    tokens, the top ids or the lengths differ (then the answers are not the same, whatever the numbers)."""
    assert len(want) == len(got), (len(want), len(got))
    worst = 0.0
    for a, b in zip(want, got, strict=True):
        assert a["id"] == b["id"] and [t["id"] for t in a["top_logprobs"]] == [t["id"] for t in b["top_logprobs"]]
        pairs = zip(a["top_logprobs"], b["top_logprobs"], strict=True)
        worst = max(worst, *(abs(x["logprob"] - y["logprob"]) for x, y in pairs))
    return worst
