"""GBNF parsing, lowering and checking against b10621's recorded verdicts (fixtures/grammars/verdicts.json).

The verdicts were captured from the real b10621 server by fixtures/grammars/capture_verdicts.py: every
grammar of the reference sdist's grammars/ directory and the 97 edge cases under fixtures/grammars/edge/,
each sent to POST /completion (prompt "Answer:", 8 greedy tokens, F32 twin). Accepted means b10621 got
past sampler init (a 200, or a 500 when the grammar can never match); refused is its 400.
"""

from __future__ import annotations

import random

import llguidance
import pytest

from conformance.grammar_check import Recognizer, parses
from fixtures.grammar_corpus import VERDICTS
from fixtures.grammar_corpus import grammar_source as _source
from server.grammar.constraint import GrammarRefused, GrammarVocab
from server.grammar.gbnf import GrammarError, parse_gbnf


@pytest.fixture(scope="module")
def vocab():
    from server.models.bundled import BUNDLED_MODELS
    from server.models.tokenizer import ModelTokenizer

    tok = ModelTokenizer(BUNDLED_MODELS["smollm2-135m-instruct-q4_1"].materialize())
    return GrammarVocab(tok, tok.eog_ids)


@pytest.mark.parametrize("key", sorted(VERDICTS))
def test_grammar_is_accepted_or_refused_as_b10621_does(key, vocab):
    verdict = VERDICTS[key]
    try:
        vocab.compile(_source(key))
        accepted = True
    except GrammarRefused:
        accepted = False
    assert accepted == (verdict["status"] != 400)


@pytest.mark.parametrize("key", sorted(k for k, v in VERDICTS.items() if v["status"] == 400 and v["log"]))
def test_refusal_reason_is_the_one_b10621_logs(key, vocab):
    with pytest.raises(GrammarError) as err:
        parse_gbnf(_source(key), vocab.tokenize_special)
    log = VERDICTS[key]["log"]
    reason = str(err.value)
    if log.startswith("parse: error parsing grammar: "):
        assert log.startswith(f"parse: error parsing grammar: {reason}")
    else:
        assert log.startswith(reason)


@pytest.mark.parametrize("key", sorted(k for k, v in VERDICTS.items() if v["status"] == 200))
def test_b10621_output_parses_under_the_recognizer(key, vocab):
    """The reference's own constrained output is a sentence (or a prefix, when cut by n_predict)."""
    source = _source(key)
    grammar = parse_gbnf(source, vocab.tokenize_special)
    if "<" in source and any(k in (8, 9) for rule in grammar.rules for k, _ in rule):
        pytest.skip("token terminals are not in content (special tokens are not rendered)")
    v = VERDICTS[key]
    assert parses(grammar, v["content"], complete=v["stop_type"] == "eos")


def test_recognizer_rejects_what_the_grammar_does_not_allow():
    grammar = parse_gbnf('root ::= ("yes" | "no") "."\n')
    assert parses(grammar, "yes.", complete=True)
    assert parses(grammar, "ye", complete=False)
    assert not parses(grammar, "ye", complete=True)
    assert not parses(grammar, "yes!", complete=False)


LOWERING_GRAMMARS = [
    'root ::= "a" "bc" | "ab" "d"\n',  # a multi-character lexeme would cut this short
    'root ::= [a]* "a"\n',
    'root ::= ("ab" | "a") "b"? "c"\n',
    'root ::= x{2,3} y\nx ::= "a" | "ab"\ny ::= "b"*\n',
    'root ::= [^b-c]+ "b" | "c" [a-c]{0,2}\n',
    'root ::= "(" root ")" | ""\n',
    'root ::= "a"? "a"? "a" ("b" | )\n',
]


@pytest.mark.parametrize("source", LOWERING_GRAMMARS)
def test_llguidance_lowering_accepts_exactly_the_recognizers_prefixes(source, vocab):
    """For random strings over the grammar's alphabet, llguidance (fed one character token at a time)
    and b10621's stack recognizer agree on every prefix and on completeness."""
    grammar = parse_gbnf(source, vocab.tokenize_special)
    lark = llguidance.LLMatcher.grammar_from_lark(grammar.lark)
    char_token = {c: vocab.tokenizer.tokenize(c, False, False)[0] for c in "abcd()"}
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice("abcd()") for _ in range(rng.randint(0, 6)))
        matcher = llguidance.LLMatcher(vocab.ll, lark, log_level=0)
        rec = Recognizer(grammar)
        for c in text:
            ours = matcher.consume_token(char_token[c])
            upstream = rec.accept_char(ord(c))
            assert ours == upstream, (source, text)
            if not upstream:
                break
        else:
            assert matcher.is_accepting() == rec.complete, (source, text)


def test_a_grammar_that_allows_no_token_is_a_dead_end_not_a_free_draw(vocab):
    import numpy as np

    from server.engine.sampling import Chain, GrammarDeadEnd, sample_constrained
    from server.engine.types import SamplingParams
    from server.grammar.constraint import GrammarMatcher

    spec = vocab.compile("root ::= [z-a]\n")  # b10621 parses this; no character can ever match it
    matcher = GrammarMatcher(spec, vocab)
    chain = Chain(SamplingParams(temperature=0.0), vocab.n_vocab)
    with pytest.raises(GrammarDeadEnd):
        sample_constrained(chain, matcher, np.zeros(vocab.n_vocab, dtype=np.float32))
