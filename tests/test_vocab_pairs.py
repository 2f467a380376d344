"""Every tokenizer test pair the pinned sdist ships (models/ggml-vocab-*.gguf.inp/.out, llama.cpp's
test-tokenizer-0: add_special and parse_special off) tokenizes as llama.cpp expects, through the tokenizer
mlxcel rebuilds from the GGUF vocabulary and serves with (server/models/gguf_tokenizer.py, tokenizer.py). A
vocabulary mlxcel cannot rebuild faithfully is refused in one line naming what it lacks, never served with a
tokenizer that differs: each file either passes every pair or is refused. The sdist's sources are unpacked by
the reference build (nox -s tests builds it first); without them these tests skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.families import in_turn
from fixtures.vocab_pairs import REFUSED, read_pairs, rebuilt_tokenizer, shipped_pairs
from oracle.reference import SDIST_SHA256, SOURCE_SUBDIR
from server.cachedir import cache_root
from server.models.tokenizer import ModelTokenizer

MODELS = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "models"
PAIRS = shipped_pairs(MODELS) if MODELS.is_dir() else []
# the vocabularies mlxcel refuses today, with the reason its refusal gives (#29 lists what comes next)
REFUSED_VOCABS = {
    "bert-bge": "tokenizer model 'bert' is not supported",
    "gemma-4": "tokenizer model 'gemma4' is not supported",
}
needs_sdist = pytest.mark.skipif(not PAIRS, reason="the reference sdist's sources are not unpacked")


@needs_sdist
@pytest.mark.parametrize("path", in_turn(PAIRS), ids=lambda p: p.name)  # (a third per CI landing)
def test_a_shipped_vocabulary_tokenizes_every_pair_as_llama_cpp_or_is_refused(path: Path):
    pairs = read_pairs(path)
    rebuilt = rebuilt_tokenizer(path, SDIST_SHA256)
    if pairs.name in REFUSED_VOCABS:
        assert (rebuilt / REFUSED).read_text(encoding="utf-8").startswith(REFUSED_VOCABS[pairs.name])
        return
    assert not (rebuilt / REFUSED).exists(), (rebuilt / REFUSED).read_text(encoding="utf-8")
    tok = ModelTokenizer(rebuilt)
    wrong = [
        (text, expected, got)
        for text, expected in pairs.cases
        if (got := tuple(tok.tokenize(text, add_special=False, parse_special=False))) != expected
    ]
    assert not wrong, f"{len(wrong)} of {len(pairs.cases)} pairs differ, first: {wrong[0]!r}"


@needs_sdist
def test_sentencepiece_pieces_read_back_as_llama_cpp_spells_them():
    """An SPM vocabulary's pieces: U+2581 a space, <0xXX> one byte (llama_vocab::token_to_piece)."""
    spm = next(p for p in PAIRS if read_pairs(p).name == "llama-spm")
    tok = ModelTokenizer(rebuilt_tokenizer(spm, SDIST_SHA256))
    ids = tok.tokenize(" Hello 🦙", add_special=False, parse_special=False)
    assert tok.sentencepiece and b"".join(tok.piece(i) for i in ids) == "  Hello 🦙".encode()


@needs_sdist
def test_the_sdist_ships_the_pairs_this_suite_names():
    names = {read_pairs(p).name for p in PAIRS}
    assert len(names) >= 15 and set(REFUSED_VOCABS) <= names
