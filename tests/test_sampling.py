"""The sampler chain's pieces against facts of b10621 and the C++ standard library (the oracle's seeded
grid, conformance cases post-completion.seeded-*, compares whole token streams with the reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from server.engine.rng import MT19937, canonical_double, canonical_float, discrete
from server.engine.samplers import Candidates, MinP, TopK, TopP, temp_impl
from server.engine.samplers_draw import Infill, InfillVocab
from server.engine.sampling import Chain, draws_the_argmax
from server.engine.types import SamplingParams


def test_mt19937_is_the_standard_engine():
    rng = MT19937(5489)  # the default seed: the standard fixes its 10000th output
    out = [rng.next_u32() for _ in range(10000)]
    assert out[0] == 3499211612 and out[-1] == 4123659995


def test_canonical_draws_consume_what_libstdcxx_consumes():
    a, b = MT19937(7), MT19937(7)
    x = canonical_double(a)
    lo, hi = b.next_u32(), b.next_u32()
    assert x == (lo + hi * 2.0**32) / 2.0**64  # two words, the first one low
    c, d = MT19937(7), MT19937(7)
    assert canonical_float(c) == np.float32(d.next_u32()) / np.float32(2.0**32)
    e = MT19937(7)
    assert discrete(np.array([1.0], np.float32), e) == 0 and e.next_u32() == MT19937(7).next_u32()  # no draw


def test_temperature_zero_keeps_the_first_best_only():
    cur = Candidates.from_logits(np.array([1.0, 3.0, 3.0, 2.0], np.float32))
    temp_impl(cur, np.float32(0))
    assert list(np.isfinite(cur.logits)) == [False, True, False, False]


def test_top_k_sorts_and_top_p_min_p_cut_as_upstream():
    cur = Candidates.from_logits(np.log(np.array([0.1, 0.4, 0.2, 0.3], np.float32)))
    TopK(3).apply(cur)
    assert list(cur.ids) == [1, 3, 2] and cur.sorted
    TopP(np.float32(0.6), 0).apply(cur)
    assert list(cur.ids) == [1, 3]  # 0.4/0.9 + 0.3/0.9 >= 0.6
    cur = Candidates.from_logits(np.log(np.array([0.1, 0.4, 0.2, 0.3], np.float32)))
    MinP(np.float32(0.6), 0).apply(cur)  # at least 0.6 of the best (0.4): 0.4 and 0.3
    assert list(cur.ids) == [1, 3]
    assert not cur.sorted  # the unsorted path keeps vocabulary order


def test_penalties_see_the_prompt_and_greedy_follows_them():
    logits = np.zeros(10, np.float32)
    logits[4], logits[5] = 2.0, 1.9
    chain = Chain(SamplingParams(temperature=0, repeat_penalty=1.5, seed=3), 10)
    assert chain.sample(logits) == 4
    chain.accept(4)  # 2.0 / 1.5 < 1.9: the repeated token loses
    assert chain.sample(logits) == 5


def test_the_same_seed_draws_the_same_stream():
    logits = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    runs = []
    for _ in range(2):
        chain = Chain(SamplingParams(seed=1234, temperature=1.2, top_k=0, top_p=1.0, min_p=0.0), 1000)
        toks = []
        for _ in range(16):
            toks.append(chain.sample(logits))
            chain.accept(toks[-1])
        runs.append(toks)
    assert runs[0] == runs[1] and len(set(runs[0])) > 4


def test_command_line_sampling_defaults_parse_and_refuse_as_b10621():
    import pytest

    from server.cli.args import build_parser
    from server.cli.startup import sampling_defaults

    args = build_parser("t").parse_args(
        ["--temp", "-1", "--samplers", "top_k;Temp;bogus", "-l", "15043+1", "-l", "13-2.5", "-s", "-2", "--top-k", "7"]
    )
    got = sampling_defaults(args)
    assert got["temperature"] == 0 and got["samplers"] == ["top_k", "temperature"] and got["seed"] == 4294967294
    assert got["logit_bias"] == [(15043, 1.0), (13, -2.5)] and got["top_k"] == 7
    for bad in (["--repeat-penalty", "0"], ["--repeat-last-n", "-1"], ["-l", "15043*1"]):
        with pytest.raises(ValueError):
            sampling_defaults(build_parser("t").parse_args(bad))


def test_dry_penalizes_the_tokens_that_would_extend_a_repeat():
    from server.engine.samplers import Dry

    a, b, c, y = 1, 2, 3, 4  # upstream's own example: a b c c b c y a b c
    dry = Dry(np.float32(1), np.float32(2), 1, 64, {})
    for t in (a, b, c, c, b, c, y, a, b, c):
        dry.accept(t)
    cur = Candidates.from_logits(np.zeros(6, np.float32))
    dry.apply(cur)
    # repeat counts 0 0 3 1 0 2: c would make 4 (penalty 2^(3-1)), y 3 (2^(2-1)), b 2 (2^0)
    assert list(cur.logits) == [0, 0, -1, -4, -2, 0]
    breaker = Dry(np.float32(1), np.float32(2), 1, 64, {c: [()]})  # c is a one-token breaker
    for t in (a, b, c, c, b, c, y, a, b, c):
        breaker.accept(t)
    cur = Candidates.from_logits(np.zeros(6, np.float32))
    breaker.apply(cur)
    assert not cur.logits.any()  # the repeat starts after the last c: nothing long enough to penalize


def test_dry_breakers_from_the_vocabulary():
    from server.api.dry import processed_breakers

    class Tok:
        vocab_size = 4
        pieces = [b"a", b"x\n", b"Q", b":"]

        def piece(self, i, special=True):
            return self.pieces[i]

        def tokenize(self, text, add_special, parse_special):
            return [self.pieces.index(ch.encode()) for ch in text]

    got = dict(processed_breakers(Tok(), ["\n", "Q:"]))
    assert got == {1: ((),), 2: ((3,),)}  # "x\\n" holds "\\n"; "Q" starts "Q:", whose rest is ":"


# --- greedy requests skip the chain (sampling.draws_the_argmax) ----------------------------------------------

_ORDERS = [
    SamplingParams().samplers,
    ("top_k", "temperature"),
    ("temperature",),
    ("min_p", "top_p", "temperature", "typ_p", "xtc"),
    ("top_k", "penalties", "dry", "temperature"),
]


@settings(max_examples=150, deadline=None)
@given(
    order=st.sampled_from(_ORDERS),
    top_k=st.integers(-1, 60),
    top_p=st.floats(0.05, 1.0),
    min_p=st.floats(0.0, 0.9),
    temperature=st.sampled_from([0.0, -1.0, 0.5]),
    typical_p=st.sampled_from([1.0, 0.5]),
    repeat_penalty=st.sampled_from([1.0, 1.3]),
    xtc=st.sampled_from([0.0, 0.9]),
    bans=st.lists(st.integers(0, 199), max_size=5),
    tied=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_where_the_chain_draws_the_argmax_the_shortcut_draws_the_same(
    order, top_k, top_p, min_p, temperature, typical_p, repeat_penalty, xtc, bans, tied, seed
):
    params = SamplingParams(
        seed=seed,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        typical_p=typical_p,
        repeat_penalty=repeat_penalty,
        xtc_probability=xtc,
        xtc_threshold=0.05,
        samplers=order,
        logit_bias=tuple((t, -float("inf")) for t in bans),
    )
    rng = np.random.default_rng(seed)
    logits = (rng.integers(-3, 4, 200) if tied else rng.standard_normal(200) * 4).astype(np.float32)
    chain = Chain(params, 200)
    for t in rng.integers(0, 200, 10):  # a history, for the penalties
        chain.accept(int(t))
    drawn = chain.sample(logits.copy())
    banned = draws_the_argmax(params)
    off = {"penalties": repeat_penalty == 1.0, "typ_p": typical_p == 1.0, "xtc": xtc == 0.0, "dry": True}
    before = order[: order.index("temperature")]
    assert (banned is not None) == (temperature <= 0 and all(off.get(name, True) for name in before))
    if banned is not None:
        masked = logits.copy()
        masked[list(banned)] = -np.inf
        assert drawn == int(np.argmax(masked))


def test_what_keeps_a_request_on_the_chain():
    assert draws_the_argmax(SamplingParams(temperature=0.0)) == ()
    assert draws_the_argmax(SamplingParams(temperature=0.0, logit_bias=((5, -float("inf")), (2, -float("inf"))))) == (
        2,
        5,
    )
    for params in (
        SamplingParams(),
        SamplingParams(temperature=0.0, logit_bias=((5, 1.5),)),
        SamplingParams(temperature=0.0, dynatemp_range=0.5),
        SamplingParams(temperature=0.0, mirostat=2),
        SamplingParams(temperature=0.0, samplers=("top_k",)),
        SamplingParams(temperature=0.0, samplers=("top_k", "temperature", "adaptive_p")),
    ):
        assert draws_the_argmax(params) is None, params


# the infill sampler (llama_sampler_infill_apply) on hand-made candidates: token -> piece, 14 and 16 EOG
_PIECES = {
    10: b" the",
    11: b" th",
    12: b" a",
    13: b" an",
    15: b" b",
    20: b"x",
    21: b"y",
    22: b"z",
    23: b"w",
    24: b"v",
    14: b"",
    16: b"",
}
_VOCAB = InfillVocab(frozenset({14, 16}), lambda t: _PIECES.get(t, b""), 14)


def _infill(probs: dict[int, float]) -> Candidates:
    ids = np.array(list(probs), np.int32)
    cur = Candidates(ids, np.log(np.array(list(probs.values()), np.float32)), np.zeros(len(ids), np.float32))
    Infill(_VOCAB).apply(cur)
    return cur


def test_infill_merges_prefixes_then_applies_both_thresholds():
    cur = _infill({12: 0.21, 10: 0.30, 13: 0.04, 11: 0.25, 15: 0.19, 14: 0.01})
    # " th" joins " the" (0.55), " an" joins " a" (0.25); " b" (0.19) fails 0.2; " a" (0.25 / 0.81) fails 1/3
    assert cur.ids.tolist() == [10, 14]
    assert cur.logits[0] == np.float32(np.log(np.float32(0.30)))  # the survivor keeps its own logit
    p55 = np.float32(np.float32(0.30) + np.float32(0.25))
    assert abs(cur.p[0] / cur.p[1] - p55 / np.float32(0.01)) < 1e-3 and abs(cur.p.sum() - 1) < 1e-6


def test_infill_keeps_only_the_eog_tokens_when_they_are_likely_enough():
    cur = _infill({20: 0.6, 21: 0.3, 16: 0.05, 14: 0.05})  # 3 * 0.1 * 4 > 0.9
    assert sorted(cur.ids.tolist()) == [14, 16] and np.allclose(cur.p, 0.5)
    # below it the text stays (0.3 / 0.902 then fails 1/3), and so do the EOG tokens, whatever their share
    assert _infill({20: 0.6, 21: 0.3, 16: 0.001, 14: 0.001}).ids.tolist() == [20, 16, 14]


def test_infill_falls_back_to_the_end_token_when_no_text_token_reaches_the_threshold():
    cur = _infill({20: 0.19, 21: 0.19, 22: 0.19, 23: 0.19, 24: 0.19, 16: 0.001})
    assert cur.ids.tolist() == [14] and cur.logits.tolist() == [1.0]
    params = SamplingParams(seed=3, samplers=("top_k", "infill", "temperature"), top_k=40)
    chain = Chain(params, 30, _VOCAB)
    logits = np.full(30, -np.inf, np.float32)
    logits[[20, 21, 22, 23, 24, 25]] = 0  # 1/6 each: none reaches 0.2
    assert chain.sample(logits) == 14


def _combine_as_written(pieces: list[bytes], p: list[float], alive: list[bool]) -> tuple[list, list[bool]]:
    """b10621's double loop over every pair, literally."""
    p = [np.float32(x) for x in p]
    for i0 in range(len(p)):
        for i1 in range(len(p)):
            if not alive[i0]:
                break
            if i0 == i1 or not alive[i1]:
                continue
            if pieces[i0] and pieces[i1].startswith(pieces[i0]):
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] = np.float32(p[dst] + p[src])
                p[src], alive[src] = np.float32(0), False
    return p, alive


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text("ab ", max_size=3), st.floats(0.015625, 1.0, width=32)), min_size=1, max_size=12))
def test_infill_prefix_merge_matches_the_pairwise_loop(rows):
    pieces = [t.encode() for t, _ in rows]
    p = np.array([x for _, x in rows], np.float32)
    cur = Candidates(np.arange(len(rows), dtype=np.int32), np.zeros(len(rows), np.float32), p.copy())
    Infill(InfillVocab(frozenset(), lambda t: pieces[t], None))._combine(cur)
    want, alive = _combine_as_written(pieces, p.tolist(), [True] * len(rows))
    assert cur.p.tolist() == [float(x) for x in want]
    assert (cur.logits != -np.inf).tolist() == alive
