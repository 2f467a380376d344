"""n_probs against the reference within 1e-3 in probability (F32 twins), token by token.

The corpus cases post-completion.*probs* compare ids, text, bytes and order exactly with the values
masked; here the values: each reported probability (from a logprob, or post-sampling as is) of mlxcel's
answer is within 1e-3 of the reference's recorded one.
"""

from __future__ import annotations

import json
import math

import pytest

from oracle import loopback
from oracle.corpus import load_corpus
from oracle.transcripts import transcript_path

CASES = [c for c in load_corpus() if c.twin == "f32" and not c.args and "probs" in c.normalize]


def _values(entries: list[dict]) -> list[tuple[int, float]]:
    out = []
    for e in entries:
        for item in [e, *e.get("top_logprobs", e.get("top_probs", []))]:
            p = item["prob"] if "prob" in item else math.exp(item["logprob"])
            out.append((item["id"], p))
    return out


def _probs(text: str, stream: bool) -> list[dict]:
    if not stream:
        return json.loads(text).get("completion_probabilities", [])
    frames = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]
    return [e for f in frames for e in f.get("completion_probabilities", [])]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_probabilities_agree_within_1e_3(case, mlxcel_f32):
    recorded = json.loads(transcript_path(case.name).read_text())["reference"]
    stream = bool((case.request.body or {}).get("stream"))
    ref = _values(_probs(recorded["body"]["text"], stream))
    r = loopback.post(mlxcel_f32.base_url + case.request.path, json=case.request.body, timeout=300)
    mine = _values(_probs(r.text, stream))
    assert ref and [i for i, _ in mine] == [i for i, _ in ref]
    worst = max(abs(a - b) for (_, a), (_, b) in zip(mine, ref, strict=False))
    assert worst < 1e-3, worst
