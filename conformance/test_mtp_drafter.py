"""draft-mtp against b10621 (issue 34): the Qwen3.5 family twin's own MTP block (fixtures/qwen35_twin.py, built
to agree with its trunk part of the time) drafting for it, `--spec-type draft-mtp` with no draft model (b10621
builds its MTP draft context on the target model).

Server state: each case a fresh pair, `-np 1` and the case's flags on both command lines (b10621's draft defaults
or tuned ones); its requests run in order on the one slot: the second reuses the first's prompt (the block's KV and
its pending hidden state carried over, as b10621 keeps them per sequence, stale ones included), then seeded
sampling. What must be equal: the text and `timings.draft_n` / `draft_n_accepted` (every draft follows from the
block's arithmetic over the target's hidden states, so one flipped draft token changes the counts). Not vacuous:
drafts are made and taken, and some refused, in each case. The output is also plain decoding's (mlxcel without
drafting, the same requests).
"""

from __future__ import annotations

import pytest

from conformance.drafted_pairs import answers, counts, record
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

BASE = "The quick brown fox jumps over the lazy dog. The quick brown fox"
REQUESTS = [
    {"prompt": BASE, "n_predict": 48, "temperature": 0},
    {"prompt": BASE + " jumps over", "n_predict": 48, "temperature": 0},  # (its prefix reused)
    {"prompt": "def fibonacci(n):", "n_predict": 48, "temperature": 0.8, "seed": 42},
]
CASES = {
    "defaults": [],
    "tuned": ["--spec-draft-n-max", "5", "--spec-draft-p-min", "0.11", "--spec-draft-n-min", "2"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_mtp_drafts_and_acceptances_are_b10621s(case, reference_binary):
    from fixtures.families import family_twin

    gguf = str(family_twin("qwen3.5").gguf)
    args = ["-np", "1", "--spec-type", "draft-mtp", *CASES[case]]
    ref, mine = reference_server(reference_binary, gguf, args), mlxcel_server(gguf, args)
    plain = mlxcel_server(gguf, ["-np", "1"])
    seen = []
    with started(ref, mine, plain) as urls:
        for body in REQUESTS:
            want, got, undrafted = answers(urls, body)
            same = want["content"] == got["content"] == undrafted["content"]
            seen.append((same, counts(want), counts(got)))
    given = sorted({a for a in args if a.startswith("--spec-draft") or a == "--spec-type"})
    identical = record(
        f"mtp-drafter-{case}", given, "qwen3.5", f"pytest conformance/test_mtp_drafter.py -k {case}", seen
    )
    assert identical, seen
    assert all(w[0] > 0 for _, w, _ in seen), seen  # (not vacuous: drafts made, taken and refused)
    assert any(w[1] > 0 for _, w, _ in seen) and any(w[1] < w[0] for _, w, _ in seen), seen
