"""/tokenize agrees with b10621's on the same vocabulary: a committed corpus plus generated strings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.recorded import reference_answers
from oracle import loopback

CORPUS = json.loads((Path(__file__).parent.parent / "fixtures" / "corpora" / "tokenize.json").read_text("utf-8"))


def _tokenize(server, body: dict) -> list:
    r = loopback.post(server.base_url + "/tokenize", json=body, timeout=60)
    return [r.status_code, r.json()]


def _corpus_bodies(parse_special: bool) -> list[dict]:
    return [{"content": t, "parse_special": parse_special, "with_pieces": True} for t in CORPUS["strings"]]


def test_corpus_is_large_and_covers_special_spellings():
    strings = CORPUS["strings"]
    assert len(strings) >= 200
    assert any("<|im_start|>" in s for s in strings) and any(s.isspace() for s in strings)


@pytest.mark.parametrize("parse_special", [True, False])
def test_tokenize_matches_reference_on_corpus(live_reference_q4_1, mlxcel_q4_1, parse_special):
    bodies = _corpus_bodies(parse_special)
    live = (lambda: [_tokenize(live_reference_q4_1, b) for b in bodies]) if live_reference_q4_1 else None
    ref = reference_answers(f"tokenize-corpus-parse-special-{str(parse_special).lower()}", live)
    mine = [_tokenize(mlxcel_q4_1, b) for b in bodies]
    mismatches = [(b["content"], r, m) for b, r, m in zip(bodies, ref, mine, strict=False) if r != m]
    assert not mismatches, f"{len(mismatches)} of {len(bodies)} differ; first: {mismatches[0]}"


_alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",))
_fragments = st.one_of(
    st.text(_alphabet, max_size=24),
    st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", " ", "\n", "  ", "123", "'s", "🤖"]),
)


@pytest.mark.reference
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_fragments, min_size=1, max_size=6), parse_special=st.booleans())
def test_tokenize_matches_reference_on_generated_text(reference_q4_1, mlxcel_q4_1, parts, parse_special):
    body = {"content": "".join(parts), "parse_special": parse_special}
    assert _tokenize(reference_q4_1, body) == _tokenize(mlxcel_q4_1, body)


# bytes SmolLM2's byte-level vocabulary has no symbol for (control characters, a 4-byte character's lead byte),
# alone, between pieces that would merge, beside a control token's spelling
GAPS = ["]\x16{", "a\x16b", "x\x04\x06y", " ]\x16{ x", "hello\U00040000world", "<|im_start|>\x16user\x1d<|im_end|>"]


@pytest.mark.reference
@pytest.mark.parametrize("parse_special", [True, False])
@pytest.mark.parametrize("content", GAPS)
def test_bytes_without_a_symbol_split_and_vanish_as_in_b10621(reference_q4_1, mlxcel_q4_1, content, parse_special):
    body = {"content": content, "parse_special": parse_special}
    mine = _tokenize(mlxcel_q4_1, body)
    assert mine == _tokenize(reference_q4_1, body)
    assert mine[1]["tokens"]  # (not a refusal both servers give)
