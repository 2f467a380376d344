"""Every normalization hides what it names and nothing else: for each rule, a difference inside what it masks
passes, and a planted difference next to it (a count, a flag, a value beyond the tolerance, an escape, a float's
spelling) fails."""

from __future__ import annotations

import pytest

from oracle.diff import diff_exchanges
from oracle.exchange import Exchange
from oracle.normalize import PROB_TOLERANCE, REGISTRY

JSON = {"content-type": "application/json; charset=utf-8"}
TEXT = {"content-type": "text/plain; version=0.0.4"}


def _probs(lp: float, p: float, top: float) -> bytes:
    return (
        b'{"completion_probabilities":[{"id":5,"token":"a","bytes":[97],"logprob":%r,"prob":%r,'
        b'"top_logprobs":[{"id":5,"token":"a","bytes":[97],"logprob":%r}]}]}' % (lp, p, top)
    )


def _chat(lp: float, top: float, token: bytes = b"a") -> bytes:
    return (
        b'{"choices":[{"logprobs":{"content":[{"id":5,"token":"%s","logprob":%r,"top_logprobs":'
        b'[{"id":5,"token":"a","logprob":%r}]}]}}]}' % (token, lp, top)
    )


def _args(binary: bytes, port: bytes, flash: bytes = b"off") -> bytes:
    return (
        b'{"data":[{"id":"m","status":{"value":"loaded","args":["%s","--host","127.0.0.1","--port","%s",'
        b'"--flash-attn","%s"]}}]}' % (binary, port, flash)
    )


# rule: (the reference's body, a body that differs only where the rule masks, a body with a planted difference
# the rule must not hide, the content type)
PLANTED: dict[str, tuple[bytes, bytes, bytes, dict]] = {
    "clocks": (
        b'{"timings":{"cache_n":4,"prompt_n":1,"prompt_ms":1.5,"predicted_per_second":9.5}}',
        b'{"timings":{"cache_n":4,"prompt_n":1,"prompt_ms":7.25,"predicted_per_second":3.5}}',
        b'{"timings":{"cache_n":0,"prompt_n":1,"prompt_ms":1.5,"predicted_per_second":9.5}}',
        JSON,
    ),
    "id_slot": (
        b'{"id_slot":1,"tokens_cached":5}',
        b'{"id_slot":0,"tokens_cached":5}',
        b'{"id_slot":1,"tokens_cached":4}',
        JSON,
    ),
    "progress_time": (
        b'{"prompt_progress":{"total":5,"cache":0,"processed":5,"time_ms":3}}',
        b'{"prompt_progress":{"total":5,"cache":0,"processed":5,"time_ms":9}}',
        b'{"prompt_progress":{"total":5,"cache":1,"processed":5,"time_ms":3}}',
        JSON,
    ),
    "created": (b'{"created":1,"object":"x"}', b'{"created":2,"object":"x"}', b'{"created":1,"object":"y"}', JSON),
    "models_created": (
        b'{"data":[{"id":"a","created":1}]}',
        b'{"data":[{"id":"a","created":2}]}',
        b'{"data":[{"id":"b","created":1}]}',
        JSON,
    ),
    "router_args": (
        _args(b"/ref/llama-server", b"5417"),
        _args(b"/usr/bin/python", b"0"),
        _args(b"/ref/llama-server", b"5417", b"on"),
        JSON,
    ),
    "completion_id": (
        b'{"id":"chatcmpl-a","model":"m"}',
        b'{"id":"chatcmpl-b","model":"m"}',
        b'{"id":"chatcmpl-a","model":"n"}',
        JSON,
    ),
    "system_fingerprint": (
        b'{"system_fingerprint":"b1","n":1}',
        b'{"system_fingerprint":"b2","n":1}',
        b'{"system_fingerprint":"b1","n":2}',
        JSON,
    ),
    "model_path": (
        b'{"model_path":"/a.gguf","n_ctx":8}',
        b'{"model_path":"/b","n_ctx":8}',
        b'{"model_path":"/a.gguf","n_ctx":9}',
        JSON,
    ),
    "probs": (
        _probs(-0.5, 0.6, -0.5),
        _probs(-0.5 + PROB_TOLERANCE / 2, 0.6 - PROB_TOLERANCE / 2, -0.5),
        _probs(-0.5 - 2 * PROB_TOLERANCE, 0.6, -0.5),
        JSON,
    ),
    "build_info": (
        b'{"build_info":"b1-x","n":1}',
        b'{"build_info":"b2-y","n":1}',
        b'{"build_info":"b1-x","n":2}',
        JSON,
    ),
    "chat_probs": (
        _chat(-0.25, -0.25),
        _chat(-0.25 + PROB_TOLERANCE / 2, -0.25),
        _chat(-0.25, -0.25 + 2 * PROB_TOLERANCE),
        JSON,
    ),
    "responses_ids": (
        b'{"id":"r","output":[{"id":"msg_a","n":1}],"timings":{"prompt_n":3,"prompt_ms":1.5}}',
        b'{"id":"r","output":[{"id":"msg_b","n":1}],"timings":{"prompt_n":3,"prompt_ms":2.5}}',
        b'{"id":"r","output":[{"id":"msg_a","n":1}],"timings":{"prompt_n":4,"prompt_ms":1.5}}',
        JSON,
    ),
    "tool_call_ids": (
        b'{"content":[{"id":"t1","name":"f"}]}',
        b'{"content":[{"id":"t2","name":"f"}]}',
        b'{"content":[{"id":"t1","name":"g"}]}',
        JSON,
    ),
    "verbose_echo": (
        b'{"__verbose":{"id_slot":1,"timings":{"cache_n":2,"predicted_ms":1.5}}}',
        b'{"__verbose":{"id_slot":0,"timings":{"cache_n":2,"predicted_ms":4.5}}}',
        b'{"__verbose":{"id_slot":1,"timings":{"cache_n":0,"predicted_ms":1.5}}}',
        JSON,
    ),
    "embedding_values": (
        b'{"data":[{"embedding":[0.5,0.25]}]}',
        b'{"data":[{"embedding":[0.5001,0.25]}]}',
        b'{"data":[{"embedding":[0.5,0.25,0.0]}]}',
        JSON,
    ),
    "rank_pooled_embedding": (
        b'[{"embedding":[[1.0,0.0]]}]',
        b'[{"embedding":[[1.0,null]]}]',
        b'[{"embedding":[[1.0,0.0,0.0]]}]',
        JSON,
    ),
    "embedding_base64": (
        b'{"data":[{"embedding":"AAAA"}],"n":1}',
        b'{"data":[{"embedding":"AAAB"}],"n":1}',
        b'{"data":[{"embedding":"AAAA"}],"n":2}',
        JSON,
    ),
    "rerank_scores": (
        b'{"results":[{"index":0,"relevance_score":0.5}]}',
        b'{"results":[{"index":0,"relevance_score":0.6}]}',
        b'{"results":[{"index":1,"relevance_score":0.5}]}',
        JSON,
    ),
    "template_date": (
        b'{"__verbose":{"prompt":"Current date: 2026-11-30\\nhi"}}',
        b'{"__verbose":{"prompt":"Current date: 2026-12-01\\nhi"}}',
        b'{"__verbose":{"prompt":"Current date: 2026-11-30\\nho"}}',
        JSON,
    ),
    "stream_lookup_clocks": (
        b'[{"id":"s","total_bytes":10,"started_at":1,"completed_at":2,"frames":3}]',
        b'[{"id":"s","total_bytes":12,"started_at":5,"completed_at":6,"frames":3}]',
        b'[{"id":"s","total_bytes":10,"started_at":1,"completed_at":2,"frames":4}]',
        JSON,
    ),
    "vertex_predictions": (
        b'{"predictions":[{"id_slot":0,"timings":{"predicted_n":4,"predicted_ms":1.5}}]}',
        b'{"predictions":[{"id_slot":1,"timings":{"predicted_n":4,"predicted_ms":2.5}}]}',
        b'{"predictions":[{"id_slot":0,"timings":{"predicted_n":5,"predicted_ms":1.5}}]}',
        JSON,
    ),
    "slot_file_bytes": (
        b'{"id_slot":0,"n_saved":5,"n_written":900,"timings":{"save_ms":1.5}}',
        b'{"id_slot":0,"n_saved":5,"n_written":20,"timings":{"save_ms":0.5}}',
        b'{"id_slot":0,"n_saved":4,"n_written":900,"timings":{"save_ms":1.5}}',
        JSON,
    ),
    "metrics_clocks": (
        b"# x\nllamacpp:prompt_seconds_total 1.5\nllamacpp:prompt_tokens_total 7\n",
        b"# x\nllamacpp:prompt_seconds_total 2.5\nllamacpp:prompt_tokens_total 7\n",
        b"# x\nllamacpp:prompt_seconds_total 1.5\nllamacpp:prompt_tokens_total 8\n",
        TEXT,
    ),
    "mlxcel_metric_families": (
        b"llamacpp:n 1\n",
        b"llamacpp:n 1\n# HELP mlxcel:a b\n# TYPE mlxcel:a gauge\nmlxcel:a 1\n",
        b"llamacpp:n 2\n# HELP mlxcel:a b\n# TYPE mlxcel:a gauge\nmlxcel:a 1\n",
        TEXT,
    ),
    "ui_build_ids": (
        b'<script src="_app/immutable/a.cNdTyngK.js"></script>',
        b'<script src="_app/immutable/a.B_4lH60N.js"></script>',
        b'<script src="_app/immutable/b.cNdTyngK.js"></script>',
        {"content-type": "text/html"},
    ),
}


def _diff(ref: bytes, got: bytes, headers: dict, names: tuple[str, ...]):
    return diff_exchanges(Exchange(200, dict(headers), ref), Exchange(200, dict(headers), got), names)


def test_every_normalization_has_a_planted_difference():
    assert sorted(PLANTED) == sorted(REGISTRY)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_rule_hides_what_it_names_and_nothing_next_to_it(name):
    ref, masked_only, planted, headers = PLANTED[name]
    assert not _diff(ref, masked_only, headers, ()).identical  # the difference is real without the rule
    report = _diff(ref, masked_only, headers, (name,))
    assert report.identical, report.to_dict()
    assert report.normalizations_fired == [name]
    assert not _diff(ref, planted, headers, (name,)).identical


def test_probability_values_beyond_the_tolerance_fail_with_the_kind_tolerance():
    report = _diff(_probs(-0.5, 0.6, -0.5), _probs(-0.5, 0.6 + 2 * PROB_TOLERANCE, -0.5), JSON, ("probs",))
    assert [(d.path, d.kind) for d in report.divergences] == [("$.completion_probabilities[0].prob", "tolerance")]
    report = _diff(_chat(-0.25, -0.25), _chat(-0.25, -0.25, b"b"), JSON, ("chat_probs",))  # text stays exact
    assert [(d.path, d.kind) for d in report.divergences] == [("$.choices[0].logprobs.content[0].token", "value")]


def test_unmasked_bytes_next_to_a_masked_field_are_compared_byte_for_byte():
    """Masking one value no longer turns the comparison into one of re-serialized JSON."""
    ref = b'{"content":"caf\\u00e9 a\\/b","n":1.0,"timings":{"cache_n":1,"prompt_ms":1.5}}'
    assert _diff(ref, ref.replace(b"1.5", b"2.75"), JSON, ("clocks",)).identical
    for spelling in (b'"caf\xc3\xa9 a\\/b"', b'"caf\\u00e9 a/b"'):  # the same string, escaped otherwise
        other = ref.replace(b'"caf\\u00e9 a\\/b"', spelling).replace(b"1.5", b"2.75")
        report = _diff(ref, other, JSON, ("clocks",))
        assert not report.bytes_identical and [(d.path, d.kind) for d in report.divergences] == [("$", "bytes")]
    for a, b in ((b"1e-05", b"1e-5"), (b"2.5", b"2.50")):  # the same number, spelt otherwise
        one = b'{"x":%s,"timings":{"prompt_ms":1.5}}' % a
        two = b'{"x":%s,"timings":{"prompt_ms":3.5}}' % b
        assert not _diff(one, two, JSON, ("clocks",)).bytes_identical
    spaced = b'{"content":"caf\\u00e9 a\\/b", "n":1.0,"timings":{"cache_n":1,"prompt_ms":2.75}}'
    assert not _diff(ref, spaced, JSON, ("clocks",)).bytes_identical
