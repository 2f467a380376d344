"""Speculative decoding (server/engine/speculative.py): a draft model proposes, the target verifies, and the
output is the plain decoding's, token for token, whatever the draft proposes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from server.backends import open_backend
from server.engine.engine import EngineConfig
from server.engine.ngram_drafters import CacheParams, MapParams, ModParams, NgramDrafters
from server.engine.speculative import DraftConfig, NgramSimple, Speculator, draft_max, top_choice, vocab_mismatch
from server.engine.types import GenerationRequest, SamplingParams
from server.models.loader import load_checkpoint
from server.models.tokenizer import ModelTokenizer
from tests.engines import engine_factory, tokens_and_final

pytestmark = pytest.mark.heavy  # in-process engine runs on the real twins: nox -s tests, not unit

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "List three colors:"]


@pytest.fixture  # engines stopped after each test: each holds its own weights
def make_engine(twin_f32):
    with engine_factory(twin_f32.mlx_dir) as made:
        yield made


@pytest.mark.parametrize("repeat", [1, 5], ids=["8-rows", "41-rows-one-pass"])
def test_a_verify_pass_gives_each_row_bitwise_the_decode_steps_logits(twin_f32, repeat):
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    tok = ModelTokenizer(twin_f32.mlx_dir)
    prompt = tok.tokenize("The quick brown fox", True, True)
    more = tok.tokenize(" jumps over the lazy dog and runs" * repeat + " away" * (repeat > 1), False, False)
    assert len(more) <= runner.step.max_rows  # (the native step takes the whole draft in one pass)
    plain = runner.new_cache()
    runner.prefill(plain, prompt)
    stepped = [np.array(runner.decode(plain, t)) for t in more]
    spec = runner.new_cache()
    runner.prefill(spec, prompt)
    rows = np.array(runner.verify(spec, more))
    assert rows.shape == (len(more), runner.n_vocab)
    for i, row in enumerate(stepped):
        assert np.array_equal(rows[i], row[0]), f"row {i} differs"
    # a rejected tail is forgotten: the next write lands where the trim left the cache
    runner.trim(spec, len(prompt) + 3)
    again = np.array(runner.decode(spec, more[3]))
    assert np.array_equal(again[0], stepped[3][0])
    assert all(c.offset == len(prompt) + 4 for c in spec)


def test_without_the_native_step_a_verify_pass_runs_through_mlx(twin_f32):
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    runner.native_decode = runner.native_prefill = (
        False  # as under an engaged LoRA adapter or a steering vector: MLX's forward pass
    )
    tok = ModelTokenizer(twin_f32.mlx_dir)
    prompt, more = tok.tokenize("One, two, three,", True, True), tok.tokenize(" four, five, six", False, False)
    plain = runner.new_cache()
    runner.prefill(plain, prompt)
    stepped = np.concatenate([np.array(runner.decode(plain, t)) for t in more])
    spec = runner.new_cache()
    runner.prefill(spec, prompt)
    rows = np.array(runner.verify(spec, more))
    assert np.abs(rows - stepped).max() < 1e-3
    assert (rows.argmax(-1) == stepped.argmax(-1)).all()


def test_the_drafter_picks_the_top_logit_with_its_top_10_probability():
    logits = np.full(50, -10.0, np.float32)
    logits[7] = 3.0
    logits[8] = 3.0 - np.log(3.0)
    token, p = top_choice(logits)
    assert token == 7
    rest = 8 * np.exp(-13.0)  # the other eight of the ten best
    assert p == pytest.approx(1.0 / (1.0 + 1.0 / 3.0 + rest), rel=1e-6)


def test_draft_max_is_b10621s_bound():
    assert draft_max(n_ctx=100, n_tokens=10, n_predict=-1, n_decoded=3) == 88
    assert draft_max(n_ctx=100, n_tokens=10, n_predict=8, n_decoded=3) == 4  # one under the 5 left
    assert draft_max(n_ctx=100, n_tokens=10, n_predict=4, n_decoded=4) == 88  # none left: the context bounds
    assert draft_max(n_ctx=20, n_tokens=18, n_predict=-1, n_decoded=3) == 0


def test_a_different_vocabulary_is_reported(twin_f32, twin_f32_minilm):
    target = ModelTokenizer(twin_f32.mlx_dir)
    assert vocab_mismatch(target, ModelTokenizer(twin_f32.mlx_dir)) is None
    assert vocab_mismatch(target, ModelTokenizer(twin_f32_minilm.mlx_dir)) is not None


_PLAIN_RUNS: dict[tuple, list[int]] = {}  # plain decoding's answer per request: the same for every n_max


@pytest.mark.parametrize("n_max", [1, 8])  # (the shortest draft and a long one)
async def test_greedy_output_is_token_identical_with_a_quantized_draft(make_engine, twin_q4_1, n_max):
    make, tok = make_engine
    drafted, plain = make(draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=n_max)), None
    for prompt in PROMPTS:  # (the module rotates by thirds in CI: oracle/rotation.py)
        request = GenerationRequest(tuple(tok.tokenize(prompt, True, True)), n_predict=40, ignore_eos=True)
        if request.prompt_tokens not in _PLAIN_RUNS:
            plain = plain or make()
            _PLAIN_RUNS[request.prompt_tokens], _ = await tokens_and_final(plain, request)
        want = _PLAIN_RUNS[request.prompt_tokens]
        got, final = await tokens_and_final(drafted, request)
        assert got == want, prompt
        assert final.n_decoded == 40
        assert final.n_draft > 0 and 0 < final.n_draft_accepted <= final.n_draft


async def test_seeded_sampling_output_is_identical_too(make_engine, twin_q4_1):
    make, tok = make_engine
    plain = make()
    drafted = make(draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=4))
    sampling = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=1234)
    request = GenerationRequest(tuple(tok.tokenize(PROMPTS[1], True, True)), n_predict=48, sampling=sampling)
    want, _ = await tokens_and_final(plain, request)
    got, final = await tokens_and_final(drafted, request)
    assert got == want
    assert final.n_draft > 0


async def test_the_draft_never_crosses_the_token_budget_or_the_context(make_engine, twin_q4_1):
    make, tok = make_engine
    drafted = make(n_ctx=64, draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=8))
    prompt = tuple(tok.tokenize(PROMPTS[0], True, True))
    tokens, final = await tokens_and_final(drafted, GenerationRequest(prompt, n_predict=7, ignore_eos=True))
    assert len(tokens) == final.n_decoded == 7
    tokens, final = await tokens_and_final(drafted, GenerationRequest(prompt, ignore_eos=True))
    assert final.stop_type == "limit" and final.truncated
    assert final.n_tokens_cached + 1 == 64


async def test_drafting_goes_on_after_a_context_shift_and_the_output_stays_plain_decodings(make_engine, twin_q4_1):
    """After a shift the draft cache keeps its common prefix with the shifted tokens (n_keep) and is fed the
    rest, as b10621's draft context follows the target's prompt: drafts go on, the tokens stay the plain ones."""
    make, tok = make_engine
    prompt = tuple(tok.tokenize(PROMPTS[1], True, True))
    plain = make(n_ctx=64, ctx_shift=True)
    drafted = make(n_ctx=64, ctx_shift=True, draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=3))
    request = GenerationRequest(prompt, n_predict=120, ignore_eos=True)  # shifted twice
    want, plain_final = await tokens_and_final(plain, request)
    got, final = await tokens_and_final(drafted, request)
    assert got == want and final.truncated and plain_final.truncated
    before = GenerationRequest(prompt, n_predict=64 - len(prompt) - 2, ignore_eos=True)  # ends before any shift
    _, unshifted = await tokens_and_final(drafted, before)
    assert not unshifted.truncated
    # drafts accepted after the shifts too (measured: 86 against 42 before any shift)
    assert final.n_draft_accepted > unshifted.n_draft_accepted + 20, (
        final.n_draft_accepted,
        unshifted.n_draft_accepted,
    )


async def test_a_draft_of_the_target_itself_is_always_accepted(make_engine, twin_f32):
    make, tok = make_engine
    drafted = make(draft=DraftConfig(str(twin_f32.mlx_dir), n_max=3))
    request = GenerationRequest(tuple(tok.tokenize(PROMPTS[2], True, True)), n_predict=25, ignore_eos=True)
    _, final = await tokens_and_final(drafted, request)
    assert final.n_draft_accepted == final.n_draft > 0


async def test_n_min_drops_short_drafts_and_p_min_stops_them(make_engine, twin_q4_1):
    make, tok = make_engine
    none = make(draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=3, n_min=4))
    request = GenerationRequest(tuple(tok.tokenize(PROMPTS[3], True, True)), n_predict=12, ignore_eos=True)
    _, final = await tokens_and_final(none, request)
    assert final.n_draft == 0
    sure = make(draft=DraftConfig(str(twin_q4_1.mlx_dir), n_max=3, p_min=1.01))
    _, final = await tokens_and_final(sure, request)
    assert final.n_draft == 0


def test_ngram_simple_copies_what_followed_the_latest_earlier_occurrence():
    ngram = NgramSimple(size_n=2, size_m=3)
    history = [9, 1, 2, 5, 6, 7, 8, 1, 2, 4, 4, 4, 3, 1]
    # pattern: the last token of the history, then the sampled one: [1, 2]; its latest earlier occurrence
    # before the tail is at 7 (searched backwards from len - n - 1), followed by 4, 4, 4
    assert ngram.propose(None, history, 2, 0) == [4, 4, 4]
    assert ngram.propose(None, history, 3, 0) == []  # [1, 3] never occurred
    assert ngram.propose(None, history[:6], 2, 0) == []  # too short: needs more than n + m + 1 tokens
    assert NgramSimple(size_n=2, size_m=8).propose(None, [0, 1, 2, 7, 1, 3, 3, 3, 3, 3, 3, 3, 1], 2, 0) == [
        7,
        1,
        3,
        3,
        3,
        3,
        3,
        3,
    ]
    assert NgramSimple(size_n=2, size_m=8).propose(None, [1, 2, 7, 1, 3, 3, 3, 3, 3, 3, 3, 1], 2, 0) == []  # at 0
    # fewer than size_n tokens after the match: no draft
    assert NgramSimple(size_n=2, size_m=8).propose(None, [5] * 11 + [1, 2, 1], 2, 0) == []
    # an image's positions (negative placeholder ids) are never drafted: the draft ends before them
    assert NgramSimple(size_n=2, size_m=8).propose(None, [0, 1, 2, 7, 1, 3, -5, -5, 3, 3, 3, 3, 1], 2, 0) == [
        7,
        1,
        3,
    ]
    assert NgramSimple(size_n=2, size_m=8).propose(None, [0, 1, 2, 7, -5, 3, 3, 3, 3, 3, 3, 3, 1], 2, 0) == []


def test_the_speculator_takes_the_first_draft_in_priority_order_cut_to_the_bound():
    """common_speculative_draft and _accept: the first non-empty draft in priority order, cut to the round's bound;
    every drafter sees the prompt (begin), the one whose draft was verified alone hears the acceptance."""

    class Fixed:
        n_max = 4

        def __init__(self, draft):
            self.draft, self.heard = draft, []

        def new_state(self, slot):
            return slot

        def begin(self, state, prompt):
            self.heard.append(("begin", state, len(prompt)))

        def propose(self, *_):
            return list(self.draft)

        def accept(self, state, n):
            self.heard.append(("accept", state, n))

    sources = [Fixed([]), Fixed([1, 2, 3, 4]), Fixed([9])]
    spec = Speculator(sources)
    state = spec.new_state(3)
    spec.begin(state, [5, 6])
    assert spec.propose(state, [], 0, 2) == [1, 2]
    spec.accept(state, 1)
    assert spec.propose(spec.new_state(3), [], 0, 0) == [1, 2, 3, 4]
    assert [s.heard for s in sources] == [[("begin", 3, 2)], [("begin", 3, 2), ("accept", 3, 1)], [("begin", 3, 2)]]
    assert spec.n_max == 4


async def test_ngram_simple_output_is_token_identical_and_drafts_on_repetition(make_engine):
    make, tok = make_engine
    plain = make()
    drafted = make(ngram_simple=(3, 8))
    text = "Repeat after me exactly: red green blue yellow. red green blue yellow. red green blue yellow. red"
    request = GenerationRequest(tuple(tok.tokenize(text, True, True)), n_predict=40, ignore_eos=True)
    want, _ = await tokens_and_final(plain, request)
    got, final = await tokens_and_final(drafted, request)
    assert got == want
    assert final.n_draft > 0 and final.n_draft_accepted > 0


@pytest.mark.parametrize(
    "ngram",
    [
        NgramDrafters(map_k=MapParams(3, 8)),
        NgramDrafters(map_k4v=MapParams(3, 8, 2)),
        NgramDrafters(mod=ModParams(4, 2, 16)),
        NgramDrafters(cache=CacheParams()),
    ],
    ids=["map-k", "map-k4v", "mod", "cache"],
)
async def test_stateful_ngram_drafters_leave_the_output_plain_decodings(make_engine, ngram):
    """Seeded sampling (greedy is its special case, and the oracle's): every emitted token is the target sampler's
    draw (a draft token is taken where it equals it), so the tokens are plain decoding's; and they draft on
    repetition (and some are taken)."""
    make, tok = make_engine
    text = "Repeat after me exactly: red green blue yellow. red green blue yellow. red green blue yellow. red"
    request = GenerationRequest(
        tuple(tok.tokenize(text, True, True)),
        n_predict=40,
        ignore_eos=True,
        sampling=SamplingParams(temperature=0.8, seed=7),
    )
    want, _ = await tokens_and_final(make(), request)
    got, final = await tokens_and_final(make(ngram=ngram), request)
    assert got == want
    assert final.n_draft > 0 and final.n_draft_accepted > 0


def test_props_report_the_drafters_this_server_runs_and_nothing_without_them():
    """GET /props's mlxcel key: the resolved drafters in b10621's priority order, the draft model by its
    basename; absent without any, so the key set stays b10621's (get-props.speculative-types-f32 live)."""
    from server.api.props import speculative_props

    assert speculative_props(EngineConfig()) is None
    both = EngineConfig(draft=DraftConfig("/models/SmolLM2-draft/", n_max=5, n_min=1, p_min=0.5), ngram_simple=(3, 8))
    assert speculative_props(both) == {
        "types": ["ngram-simple", "draft-simple"],
        "ngram_simple": {"size_n": 3, "size_m": 8},
        "draft": {"model": "SmolLM2-draft", "n_max": 5, "n_min": 1, "p_min": 0.5},
    }
    ngram = EngineConfig(ngram=NgramDrafters(map_k4v=MapParams(4, 8, 2), mod=ModParams(), cache=CacheParams("s.bin")))
    assert speculative_props(ngram) == {
        "types": ["ngram-map-k4v", "ngram-mod", "ngram-cache"],
        "ngram_map_k4v": {"size_n": 4, "size_m": 8, "min_hits": 2},
        "ngram_mod": {"n_match": 24, "n_min": 48, "n_max": 64},
        "ngram_cache": {"static": "s.bin", "dynamic": ""},
    }
    # the lookup tables read at startup are the drafter's state, not options: /props shows the files only
    read = EngineConfig(ngram=NgramDrafters(cache=CacheParams("s.bin", loaded=({(1, 2, -1, -1): {}}, {}))))
    assert json.loads(json.dumps(speculative_props(read)))["ngram_cache"] == {"static": "s.bin", "dynamic": ""}


def test_the_drafts_cache_types_act_on_the_draft_model(twin_f32):
    """-ctkd / -ctvd (with -fa) give the draft model's cache its types: the draft's backend holds them, and its
    logits after a prompt are those of a q8_0 key cache, not the float cache's (the oracle case
    speculative-draft-kv-types compares the drafts' counts with b10621's)."""
    from server.engine.drafting import load_drafters
    from server.models.kv_numerics import KVNumerics

    tok = ModelTokenizer(twin_f32.mlx_dir)
    prompt = tok.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n", True, True)
    logits = {}
    for name, kv in (("typed", KVNumerics("q8_0", "bf16", False)), ("float", None)):
        spec = load_drafters(DraftConfig(str(twin_f32.mlx_dir), kv=kv), None, NgramDrafters())
        assert spec is not None
        runner = spec.sources[-1].runner
        assert runner.kv == kv
        logits[name] = np.array(runner.prefill(runner.new_cache(), prompt))
    assert not np.array_equal(logits["typed"], logits["float"])
    assert logits["typed"].argmax() == logits["float"].argmax()  # (the same model, a cache's rounding apart)
