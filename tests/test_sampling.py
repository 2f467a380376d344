"""The sampler chain's pieces against facts of b10621 and the C++ standard library (the oracle's seeded
grid, conformance cases post-completion.seeded-*, compares whole token streams with the reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from server.engine.rng import MT19937, canonical_double, canonical_float, discrete
from server.engine.sampling import Candidates, Chain, MinP, TopK, TopP, draws_the_argmax, temp_impl
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
    from server.cli.main import sampling_defaults

    args = build_parser("t").parse_args(["--temp", "-1", "--samplers", "top_k;Temp;bogus", "-l", "15043+1",
                                         "-l", "13-2.5", "-s", "-2", "--top-k", "7"])
    got = sampling_defaults(args)
    assert got["temperature"] == 0 and got["samplers"] == ["top_k", "temperature"] and got["seed"] == 4294967294
    assert got["logit_bias"] == [(15043, 1.0), (13, -2.5)] and got["top_k"] == 7
    for bad in (["--repeat-penalty", "0"], ["--repeat-last-n", "-1"], ["-l", "15043*1"]):
        with pytest.raises(ValueError):
            sampling_defaults(build_parser("t").parse_args(bad))


def test_dry_penalizes_the_tokens_that_would_extend_a_repeat():
    from server.engine.sampling import Dry

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

_ORDERS = [SamplingParams().samplers, ("top_k", "temperature"), ("temperature",),
           ("min_p", "top_p", "temperature", "typ_p", "xtc"), ("top_k", "penalties", "dry", "temperature")]


@settings(max_examples=150, deadline=None)
@given(order=st.sampled_from(_ORDERS), top_k=st.integers(-1, 60), top_p=st.floats(0.05, 1.0),
       min_p=st.floats(0.0, 0.9), temperature=st.sampled_from([0.0, -1.0, 0.5]),
       typical_p=st.sampled_from([1.0, 0.5]), repeat_penalty=st.sampled_from([1.0, 1.3]),
       xtc=st.sampled_from([0.0, 0.9]), bans=st.lists(st.integers(0, 199), max_size=5),
       tied=st.booleans(), seed=st.integers(0, 2**31))
def test_where_the_chain_draws_the_argmax_the_shortcut_draws_the_same(order, top_k, top_p, min_p, temperature,
                                                                      typical_p, repeat_penalty, xtc, bans,
                                                                      tied, seed):
    params = SamplingParams(seed=seed, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                            typical_p=typical_p, repeat_penalty=repeat_penalty, xtc_probability=xtc,
                            xtc_threshold=0.05, samplers=order,
                            logit_bias=tuple((t, -float("inf")) for t in bans))
    rng = np.random.default_rng(seed)
    logits = (rng.integers(-3, 4, 200) if tied else rng.standard_normal(200) * 4).astype(np.float32)
    chain = Chain(params, 200)
    for t in rng.integers(0, 200, 10):  # a history, for the penalties
        chain.accept(int(t))
    drawn = chain.sample(logits.copy())
    banned = draws_the_argmax(params)
    off = {"penalties": repeat_penalty == 1.0, "typ_p": typical_p == 1.0, "xtc": xtc == 0.0, "dry": True}
    before = order[:order.index("temperature")]
    assert (banned is not None) == (temperature <= 0 and all(off.get(name, True) for name in before))
    if banned is not None:
        masked = logits.copy()
        masked[list(banned)] = -np.inf
        assert drawn == int(np.argmax(masked))


def test_what_keeps_a_request_on_the_chain():
    assert draws_the_argmax(SamplingParams(temperature=0.0)) == ()
    assert draws_the_argmax(SamplingParams(temperature=0.0, logit_bias=((5, -float("inf")), (2, -float("inf"))))) \
        == (2, 5)
    for params in (SamplingParams(), SamplingParams(temperature=0.0, logit_bias=((5, 1.5),)),
                   SamplingParams(temperature=0.0, dynatemp_range=0.5), SamplingParams(temperature=0.0, mirostat=2),
                   SamplingParams(temperature=0.0, samplers=("top_k",)),
                   SamplingParams(temperature=0.0, samplers=("top_k", "temperature", "adaptive_p"))):
        assert draws_the_argmax(params) is None, params
