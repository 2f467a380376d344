"""draft-dflash against b10621 (issue 34): the EAGLE-3 head twin (fixtures/eagle3_twin.py, fitted to agree with
its target part of the time) drafting for the SmolLM2 F32 twin.

Server state: each case a fresh pair, `-np 1` and the case's flags on both command lines (`-md <head> --spec-type
draft-dflash`, b10621's draft defaults or tuned ones); its requests run in order on the one slot, the second
reusing the first's prompt (the head's KV and its deferred boundary carried over, as b10621 keeps its draft
context's sequence), then seeded sampling. What must be equal: the text and `timings.draft_n` /
`draft_n_accepted` (every draft's length and tokens follow from the head's arithmetic over the target's
features, so one flipped draft token changes the counts). Not vacuous: drafts are made and taken in each case.
The output is also plain decoding's (mlxcel without the head, the same requests).
"""

from __future__ import annotations

import pytest

from conformance.drafted_pairs import answers, counts, record
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

BASE = "The history of the Roman Empire begins with"
REQUESTS = [
    {"prompt": BASE, "n_predict": 48, "temperature": 0},
    {"prompt": BASE + " the founding of Rome", "n_predict": 48, "temperature": 0},  # (its prefix reused)
    {"prompt": "Count: 1, 2, 3,", "n_predict": 48, "temperature": 0.8, "seed": 42},
]
CASES = {  # case: (the draft twin, its flags)
    "defaults": ("dflash", ["--spec-type", "draft-dflash"]),
    "tuned": (
        "dflash",
        [
            "--spec-type",
            "draft-dflash",
            "--spec-draft-n-max",
            "5",
            "--spec-draft-p-min",
            "0.11",
            "--spec-draft-n-min",
            "2",
        ],
    ),
    "type-from-gguf-clamped": ("dflash", ["--spec-draft-n-max", "12", "-ctkd", "f32", "-ctvd", "f32"]),
    "dspark-defaults": ("dspark", ["--spec-type", "draft-dspark"]),
    "dspark-type-from-gguf-confidence": ("dspark", ["--spec-draft-p-min", "0.5", "--spec-draft-n-max", "6"]),
    "dspark-own-embedding-head-2k-vocab": ("reduced", ["--spec-type", "draft-dspark"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dflash_and_dspark_drafts_and_acceptances_are_b10621s(case, reference_binary, twin_f32):
    from fixtures.dflash_twin import dflash_twin, dspark_twin, reduced_dspark_twin

    draft, flags = CASES[case]
    gguf = {"dflash": dflash_twin, "dspark": dspark_twin, "reduced": reduced_dspark_twin}[draft]()
    args = ["-np", "1", "-md", str(gguf), *flags]
    ref, mine = reference_server(reference_binary, twin_f32.gguf, args), mlxcel_server(str(twin_f32.gguf), args)
    plain = mlxcel_server(str(twin_f32.gguf), ["-np", "1"])
    seen = []
    with started(ref, mine, plain) as urls:
        for body in REQUESTS:
            want, got, undrafted = answers(urls, body)
            same = want["content"] == got["content"] == undrafted["content"]
            seen.append((same, counts(want), counts(got)))
    given = sorted({a for a in args if a.startswith(("--spec-draft", "-ctkd", "-ctvd")) or a == "--spec-type"})
    given = sorted({*given, "--spec-draft-model"})
    identical = record(
        f"dflash-drafter-{case}", given, "f32", f"pytest conformance/test_dflash_drafter.py -k {case}", seen
    )
    assert identical, seen
    assert all(w[0] > 0 for _, w, _ in seen) and any(w[1] > 0 for _, w, _ in seen), seen  # (not vacuous)
