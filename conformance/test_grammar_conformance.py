"""Grammar conformance, live: every sdist grammar and every edge grammar sent to mlxcel as b10621 got it.

fixtures/grammars/verdicts.json holds b10621's answers (captured by fixtures/grammars/capture_verdicts.py
from the real server on the F32 twin). mlxcel, on the same twin with the same request, must refuse exactly
the grammars b10621 refuses, with its status and message, and what it generates under an accepted grammar
must parse under b10621's own recognizer (conformance/grammar_check.py). Greedy output is also compared with
the reference's; the share that is identical is reported.
"""

from __future__ import annotations

import pytest

from conformance.grammar_check import Recognizer
from fixtures.grammar_corpus import VERDICTS
from fixtures.grammar_corpus import grammar_source as _source
from oracle import loopback
from server.grammar.gbnf import TOKEN, TOKEN_NOT, parse_gbnf

_identical: list[bool] = []


@pytest.fixture(scope="module")
def tokenizer(twin_f32):
    from server.models.tokenizer import ModelTokenizer

    return ModelTokenizer(twin_f32.mlx_dir)


@pytest.mark.parametrize("key", sorted(VERDICTS))
def test_grammar_verdict_and_output_match_b10621(key, mlxcel_f32, tokenizer):
    source, verdict = _source(key), VERDICTS[key]
    body = {"prompt": "Answer:", "grammar": source, "n_predict": 8, "temperature": 0, "return_tokens": True}
    r = loopback.post(f"{mlxcel_f32.base_url}/completion", json=body, timeout=120)
    assert r.status_code == verdict["status"], r.text
    if r.status_code == 400:
        assert r.json()["error"]["message"] == verdict["error"]
        return
    if r.status_code != 200:  # a grammar no token can satisfy: both fail generation with a server error
        assert r.json()["error"]["type"] == "server_error"
        return
    answer = r.json()
    grammar = parse_gbnf(source, lambda t: tokenizer.tokenize(t, False, True))
    rec = Recognizer(grammar)
    eog = [t for t in answer["tokens"] if t in tokenizer.eog_ids]
    for t in answer["tokens"]:
        if t in tokenizer.eog_ids:
            break
        assert rec.accept_token(t, tokenizer.piece(t)), (key, answer["tokens"])
    if answer["stop_type"] == "eos":
        assert eog and rec.complete
    has_tokens = any(k in (TOKEN, TOKEN_NOT) for rule in grammar.rules for k, _ in rule)
    if not has_tokens:
        _identical.append(answer["content"] == verdict["content"])
        if answer["content"] != verdict["content"]:
            print(f"\n{key}: mlxcel {answer['content']!r} b10621 {verdict['content']!r}")


def test_report_identical_share():
    """Greedy constrained output equal to b10621's on the F32 twins: every grammar."""
    if not _identical:
        pytest.skip("no grammar ran")
    share = sum(_identical) / len(_identical)
    print(f"\ngrammar conformance: {sum(_identical)}/{len(_identical)} greedy outputs identical to b10621's")
    assert share == 1.0
