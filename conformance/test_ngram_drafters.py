"""The stateful n-gram drafters against b10621 (issue 34): ngram-map-k, ngram-map-k4v, ngram-mod (and
--spec-default, its preset), ngram-cache with static and dynamic lookup cache files, and two drafters chained.

Server state: each case a fresh pair on the SmolLM2 F32 twin, `-np 1` and the case's flags on both command lines;
its two requests (map-k4v: three) run in order on the one slot, so the drafters' state carried from request to request (b10621 keeps it
per slot) is compared too. What must be equal: the text, and `timings.draft_n` / `draft_n_accepted` (how many
tokens were drafted and how many the target took: they follow from every draft's length and content). Not
vacuous: each case drafts, and has drafts accepted, on at least one request.
"""

from __future__ import annotations

import pytest

from conformance.drafted_pairs import answers, counts, record
from oracle import loopback
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
PROMPTS = [
    "Count: " + ", ".join(str(i) for i in range(1, 40)) + ", " + ", ".join(str(i) for i in range(1, 30)),
    CODE * 3 + "def add(a, b):\n",
]
# ngram-map-k4v with min-hits 2 first drafts on a third request (its keys seen twice by then)
THIRD = "The quick brown fox jumps over the lazy dog. " * 6
KNOBS = {
    "--spec-ngram-map-k-size-n",
    "--spec-ngram-map-k-size-m",
    "--spec-ngram-map-k4v-size-n",
    "--spec-ngram-map-k4v-size-m",
    "--spec-ngram-map-k4v-min-hits",
    "--spec-ngram-mod-n-match",
    "--spec-ngram-mod-n-min",
    "--spec-ngram-mod-n-max",
}
CASES = {
    "map-k-small": ["--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "3", "--spec-ngram-map-k-size-m", "6"],
    "map-k4v": [
        "--spec-type",
        "ngram-map-k4v",
        "--spec-ngram-map-k4v-size-n",
        "4",
        "--spec-ngram-map-k4v-size-m",
        "8",
        "--spec-ngram-map-k4v-min-hits",
        "2",
    ],
    "mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "4"],
    "spec-default": ["--spec-default", "--spec-ngram-mod-n-max", "32"],  # (a knob after the preset overrides it)
    # ngram-map-k at its defaults first, ngram-mod where it drafts nothing (b10621's priority order, either way round)
    "chain": ["--spec-type", "ngram-mod,ngram-map-k", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2"],
    "cache": ["--spec-type", "ngram-cache", "-lcs", "{static}", "-lcd", "{dynamic}"],
}


def _entries(case: str, args: list[str]) -> list[str]:
    given = {a for a in args if a.startswith("-")}
    out = ["--spec-type"] if "--spec-type" in given else []
    out += sorted(given & KNOBS)
    out += ["--spec-default"] if "--spec-default" in given else []
    out += ["--lookup-cache-static", "--lookup-cache-dynamic"] if case == "cache" else []
    return out


def _lookup_files(reference_binary, twin_f32, tmp_path) -> dict[str, str]:
    """A static cache of the prompts' 2-grams (as llama-lookup-create builds one) and a dynamic one of a text's 1-
    to 4-grams, token ids from b10621's own tokenizer."""
    from fixtures import lookup_cache

    with started(reference_server(reference_binary, twin_f32.gguf, ["-np", "1"])) as (url,):

        def ids(text: str) -> list[int]:
            return loopback.post(url + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]

        static = lookup_cache.counts([t for p in PROMPTS for t in ids(p)], (2,))
        dynamic = lookup_cache.counts(ids(CODE * 4 + "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10"), (1, 2, 3, 4))
    return {
        "static": str(lookup_cache.write(tmp_path / "static.bin", static)),
        "dynamic": str(lookup_cache.write(tmp_path / "dynamic.bin", dynamic)),
    }


@pytest.mark.parametrize("case", list(CASES))
def test_drafts_and_acceptances_are_b10621s(case, reference_binary, twin_f32, tmp_path):
    args = ["-np", "1", *CASES[case]]
    if case == "cache":
        files = _lookup_files(reference_binary, twin_f32, tmp_path)
        args = [a.format(**files) for a in args]
    ref, mine = reference_server(reference_binary, twin_f32.gguf, args), mlxcel_server(str(twin_f32.gguf), args)
    seen = []
    with started(ref, mine) as urls:
        for prompt in [*PROMPTS, THIRD] if case == "map-k4v" else PROMPTS:
            want, got = answers(urls, {"prompt": prompt, "n_predict": 40, "temperature": 0})
            seen.append((want["content"] == got["content"], counts(want), counts(got)))
        if case == "mod":  # seeded sampling: each draw is the sampler's, a draft token taken where it equals it
            body = {"prompt": PROMPTS[1], "n_predict": 48, "temperature": 0.8, "seed": 42}
            want, got = answers(urls, body)
            seen.append((want["content"] == got["content"], counts(want), counts(got)))
    identical = record(
        f"ngram-drafters-{case}",
        _entries(case, args),
        "f32",
        f"pytest conformance/test_ngram_drafters.py -k {case}",
        seen,
    )
    assert identical, seen
    assert any(w[1] > 0 for _, w, _ in seen), seen  # (drafts made and taken: the case is not vacuous)
