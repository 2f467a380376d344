"""draft-eagle3 (server/engine/eagle3_drafter.py, server/models/eagle3_head.py): the native steps' captured layer
inputs are the model's own, the head loads from the converter's GGUF (and refuses what it cannot run, in one
line), the drafter's deferred boundary follows b10621's process/draft/accept, and the output is plain
decoding's whatever the head drafts."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from server.backends import open_backend
from server.engine.eagle3_drafter import Eagle3Drafter, Eagle3State
from server.engine.speculative import DraftConfig
from server.engine.types import SamplingParams
from server.models.eagle3_head import Eagle3Head, HeadCache, HeadRefusal
from server.models.kv_numerics import KVNumerics
from server.models.loader import load_checkpoint
from server.models.tokenizer import ModelTokenizer
from tests.engines import drafted_as_plain, engine_factory

LAYERS = (2, 15, 27)


@pytest.fixture(scope="module")
def head_gguf():
    from fixtures.eagle3_twin import eagle3_twin

    return eagle3_twin()


def _layer_inputs(model, tokens: list[int]) -> np.ndarray:
    """The inputs of LAYERS for every position, through mlx-lm's own layers (rows x 3 hidden)."""
    h = model.model.embed_tokens(mx.array([tokens]))
    out = []
    for i, layer in enumerate(model.model.layers):
        if i in LAYERS:
            out.append(h)
        h = layer(h, "causal" if len(tokens) > 1 else None, None)
    mx.eval(out)
    return np.concatenate([np.array(x[0], np.float32) for x in out], -1)


def test_the_native_passes_capture_each_rows_layer_inputs(twin_f32):
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    tok = ModelTokenizer(twin_f32.mlx_dir)
    ids = tok.tokenize("The quick brown fox jumps over the lazy dog", True, True)
    cache = runner.new_cache()
    runner.prefill(cache, ids[:6])
    assert cache.passes is None  # (nothing kept before the capture is asked for)
    runner.capture(LAYERS)
    cache = runner.new_cache()
    runner.prefill(cache, ids[:6])
    runner.decode(cache, ids[6])
    runner.verify(cache, ids[7:])
    passes = runner.take_passes(cache)
    assert [(p.first, p.tokens) for p in passes] == [(0, ids[:6]), (6, [ids[6]]), (7, ids[7:])]
    got = np.concatenate([p.features for p in passes])
    want = _layer_inputs(runner.model, ids)
    assert got.shape == (len(ids), 3 * runner.hidden_size)
    # mlxcel's passes sum in ggml's order, mlx-lm's in its own: the same states up to rounding
    assert np.allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    assert not np.array_equal(got[:, :576], got[:, -576:])  # (three different layers, not one copied thrice)
    assert runner.take_passes(cache) == []  # taken once


def test_the_head_loads_from_the_converters_gguf(head_gguf, twin_f32):
    head = Eagle3Head.load(head_gguf, 49152)
    assert head.target_layers == LAYERS and head.target_width == head.width == 576
    assert (head.n_head, head.n_kv, head.head_dim) == (9, 3, 64)
    assert head.d2t is not None and len(head.d2t) == 2048 and np.all(np.diff(head.d2t) > 0) and head.ordered
    with pytest.raises(HeadRefusal, match="is no EAGLE-3 head"):
        Eagle3Head.load(twin_f32.gguf, 49152)
    with pytest.raises(HeadRefusal, match="outside the target's vocabulary"):
        Eagle3Head.load(head_gguf, 1000)


def _toy_head(d2t: list[int]) -> Eagle3Head:
    ids = np.array(d2t)
    return Eagle3Head((0, 1, 2), 4, 4, 1, 1, 4, 1e-5, 1e4, False, {}, ids, 32, ordered=bool(np.all(np.diff(ids) > 0)))


def test_the_draft_sampler_picks_as_over_the_targets_vocabulary():
    from server.engine.speculative import top_choice

    logits = np.array([[1.0, 2.0, 2.0, 0.5]], np.float32)  # (a tie: the first of equals in the target's order)
    ordered = Eagle3Drafter(_toy_head([3, 7, 9, 20]), None, KVNumerics())  # type: ignore[arg-type]
    assert ordered._pick(logits) == top_choice(ordered.head.target_logits(logits)[0]) and ordered._pick(logits)[0] == 7
    shuffled = Eagle3Drafter(_toy_head([9, 7, 3, 20]), None, KVNumerics())  # type: ignore[arg-type]
    assert not shuffled.head.ordered and shuffled._pick(logits)[0] == 3  # (id 3 before 7 in the target's order)


def test_a_head_cache_forgets_from_a_position_on():
    cache = HeadCache()
    k = mx.zeros((1, 3, 4, 64))
    cache.keys, cache.values, cache.positions = k, k, [5, 6, 7, 8]
    cache.trim(7)
    assert cache.positions == [5, 6] and cache.keys.shape[2] == 2 and cache.pos_max == 6
    cache.trim(0)
    assert cache.positions == [] and cache.keys is None and cache.pos_max == -1


class _Recorder(Eagle3Drafter):
    """The drafter with the head's decoder calls recorded (tokens, first position) and a fixed top token."""

    def __init__(self):
        super().__init__(head=None, embed=None, numerics=KVNumerics(), n_max=3)  # type: ignore[arg-type]
        self.calls: list[tuple[list[int], int]] = []

    def _decode(self, st, tokens, g, first):
        self.calls.append((list(tokens), first))
        st.cache.positions = [p for p in st.cache.positions if p < first] + list(range(first, first + len(tokens)))
        st.cache.keys = st.cache.values = mx.zeros((1, 1, len(st.cache.positions), 1))
        logits = np.zeros((len(tokens), 10), np.float32)
        logits[:, 7] = 5.0
        return logits, g


class _Head:
    d2t, ordered = np.arange(10), True  # (draft ids the target's)

    @staticmethod
    def encode(features):
        return mx.array(features)


def _pass(first, tokens):
    from server.backends.base import TargetPass

    rows = np.arange(first, first + len(tokens), dtype=np.float32)  # (row i's g: first + i)
    return TargetPass(first, tokens, np.repeat(rows[:, None], 2, 1))


def test_the_deferred_boundary_is_b10621s():
    d = _Recorder()
    d.head = _Head()  # type: ignore[assignment]
    st = Eagle3State()
    # a prompt in two chunks: each writes its pairs but the last; the second's first token bridges the first's
    d.process(st, [_pass(0, [10, 11, 12]), _pass(3, [13, 14])])
    assert d.calls == [([11, 12], 0), ([13, 14], 2)]
    assert st.pending_pos == 4
    # the draft: seeded with the sampled token at the pending position, each draft token at the next
    draft = d.propose(st, [10, 11, 12, 13, 14], 15, 3)
    assert draft == [7, 7, 7] and d.calls[2:] == [([15], 4), ([7], 5), ([7], 6)]
    assert st.cache.pos_max == 4  # (trimmed to the target's length after the draft)
    # the verify pass of [15, 7, 7, 7] at 5..8: pairs 5..7 written, no bridge (4 is held); one draft accepted
    d.process(st, [_pass(5, [15, 7, 7, 7])])
    assert d.calls[5] == ([7, 7, 7], 5)
    d.accept(st, 1)
    assert st.pending_pos == 6 and float(np.array(st.pending_g)[0]) == 6.0  # (verify row 1)
    assert st.cache.pos_max == 6  # (the target's next position is 7)
    # a pass without a draft next: 6 is held (a rejected draft token's pair), so no bridge, as in b10621
    d.process(st, [_pass(7, [9])])
    assert len(d.calls) == 6 and st.pending_pos == 7
    # after a prompt the pending position is not held: a plain decode pass bridges it
    fresh = Eagle3State()
    d.process(fresh, [_pass(0, [10, 11, 12]), _pass(3, [13])])
    assert d.calls[6:] == [([11, 12], 0), ([13], 2)] and fresh.pending_pos == 3


@pytest.mark.heavy
async def test_output_is_plain_decodings_greedy_and_seeded(twin_f32, head_gguf):
    with engine_factory(twin_f32.mlx_dir) as (make, tok):
        plain = make()
        drafted = make(draft=DraftConfig(str(head_gguf), n_max=4, kind="draft-eagle3"))
        _, accepted = await drafted_as_plain(
            plain,
            drafted,
            tok,
            [
                ("Count: 1, 2, 3, 4, 5,", SamplingParams(temperature=0.0)),
                ("The history of the Roman Empire begins with", SamplingParams(temperature=0.0)),
                ("def add(a, b):", SamplingParams(temperature=0.8, seed=42)),
            ],
        )
        assert accepted > 0  # (the fitted head agrees with the target sometimes: the accept path ran)
