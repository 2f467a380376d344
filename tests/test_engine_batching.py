"""The engine with several slots: continuous batching by event order, slot ownership under load, and
cancellation freeing a slot."""

from __future__ import annotations

import asyncio

import pytest

from server.engine.engine import Engine, EngineConfig
from server.engine.types import FinalEvent, GenerationRequest, TokenEvent
from server.models.tokenizer import ModelTokenizer

pytestmark = pytest.mark.heavy  # in-process engine runs on the real twins: nox -s tests, not unit

PROMPTS = ["The capital of France is", "Once upon a time", "def f(x):", "List three colors:", "Hello, my name"]


@pytest.fixture  # engines stopped after each test: each holds its own weights
def make_engine(twin_q4_1):
    tok = ModelTokenizer(twin_q4_1.mlx_dir)
    engines = []

    def make(**cfg) -> tuple[Engine, ModelTokenizer]:
        e = Engine(twin_q4_1.mlx_dir, EngineConfig(**cfg), eog_ids=tok.eog_ids, piece=tok.piece)
        e.start()
        e.ready.wait(120)
        engines.append(e)
        return e, tok

    yield make
    for e in engines:
        e.stop(wait=60)  # joined: its weights are freed before the next test loads its own


def _request(tok, prompt: str, n: int) -> GenerationRequest:
    return GenerationRequest(tuple(tok.tokenize(prompt, True, True)), n_predict=n, ignore_eos=True)


async def _collect(handle, log: list, name: str) -> list:
    events = []
    async for ev in handle:
        events.append(ev)
        log.append((name, ev))
    return events


async def test_a_request_arriving_mid_decode_gets_its_first_token_before_the_first_finishes(make_engine):
    engine, tok = make_engine(n_slots=2)
    log: list = []
    a = engine.submit(_request(tok, PROMPTS[0], 48))
    task_a = asyncio.create_task(_collect(a, log, "a"))
    while sum(1 for n, e in log if n == "a" and isinstance(e, TokenEvent)) < 4:
        await asyncio.sleep(0.01)
    b = engine.submit(_request(tok, PROMPTS[1], 4))
    await asyncio.gather(task_a, _collect(b, log, "b"))
    order = [(n, type(e).__name__) for n, e in log]
    assert order.index(("b", "TokenEvent")) < order.index(("a", "FinalEvent"))
    tokens_a_before_b = [i for i, o in enumerate(order) if o == ("a", "TokenEvent")]
    assert len(tokens_a_before_b) == 48  # a kept decoding while b joined


async def test_without_continuous_batching_the_newcomer_waits(make_engine):
    engine, tok = make_engine(n_slots=2, cont_batching=False)
    log: list = []
    a = engine.submit(_request(tok, PROMPTS[0], 24))
    task_a = asyncio.create_task(_collect(a, log, "a"))
    while not any(n == "a" and isinstance(e, TokenEvent) for n, e in log):
        await asyncio.sleep(0.01)
    b = engine.submit(_request(tok, PROMPTS[1], 2))
    await asyncio.gather(task_a, _collect(b, log, "b"))
    order = [(n, type(e).__name__) for n, e in log]
    assert order.index(("a", "FinalEvent")) < order.index(("b", "TokenEvent"))


async def test_five_requests_on_two_slots_all_finish_and_never_share_a_live_slot(make_engine):
    engine, tok = make_engine(n_slots=2)
    log: list = []
    handles = [engine.submit(_request(tok, p, 6 + 3 * i)) for i, p in enumerate(PROMPTS)]
    results = await asyncio.gather(*(_collect(h, log, str(i)) for i, h in enumerate(handles)))
    finals = [r[-1] for r in results]
    assert all(isinstance(f, FinalEvent) for f in finals)
    assert [f.n_decoded for f in finals] == [6 + 3 * i for i in range(5)]
    assert {f.id_slot for f in finals} <= {0, 1}
    # a request's lifetime is from its first event to its final one; overlapping lifetimes never share a slot
    span = {}
    for pos, (name, _) in enumerate(log):
        first, _last = span.get(name, (pos, pos))
        span[name] = (first, pos)
    for i in range(5):
        for j in range(i + 1, 5):
            (a0, a1), (b0, b1) = span[str(i)], span[str(j)]
            if a0 < b1 and b0 < a1:
                assert finals[i].id_slot != finals[j].id_slot, (i, j)


async def test_results_do_not_depend_on_what_else_is_in_flight(make_engine):
    engine, tok = make_engine(n_slots=3)
    solo = []
    for p in PROMPTS[:3]:
        events = await _collect(engine.submit(_request(tok, p, 10)), [], p)
        solo.append([e.token for e in events if isinstance(e, TokenEvent)])
    together = await asyncio.gather(*(_collect(engine.submit(_request(tok, p, 10)), [], p) for p in PROMPTS[:3]))
    assert [[e.token for e in ev if isinstance(e, TokenEvent)] for ev in together] == solo


async def test_cancelling_frees_the_slot_for_a_waiting_request(make_engine):
    engine, tok = make_engine(n_slots=1)
    log: list = []
    a = engine.submit(_request(tok, PROMPTS[0], 500))
    task_a = asyncio.create_task(_collect(a, log, "a"))
    b = engine.submit(_request(tok, PROMPTS[1], 3))
    task_b = asyncio.create_task(_collect(b, log, "b"))
    while sum(1 for n, e in log if n == "a") < 3:
        await asyncio.sleep(0.01)
    a.cancel()
    events_b = await asyncio.wait_for(task_b, 60)
    assert isinstance(events_b[-1], FinalEvent) and events_b[-1].n_decoded == 3
    task_a.cancel()
    assert sum(1 for n, e in log if n == "a" and isinstance(e, TokenEvent)) < 500


LONG = (
    "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm windowsill and "
    "the birds sing outside in the garden."
)


def _tok_request(tok, text: str, n: int, cache_prompt: bool = True) -> GenerationRequest:
    return GenerationRequest(
        tuple(tok.tokenize(text, True, True)), n_predict=n, ignore_eos=True, cache_prompt=cache_prompt
    )


async def _run(engine, req) -> tuple[list[int], FinalEvent]:
    events = await _collect(engine.submit(req), [], "x")
    return [e.token for e in events if isinstance(e, TokenEvent)], events[-1]


async def test_prompt_cache_hit_equals_cold_and_cache_prompt_false(make_engine):
    """A hit reuses b10621's n_past, the common prefix to the token (here not a multiple of the ubatch), and
    still gives the cold run's tokens."""
    from server.engine.prompt_cache import common_prefix

    cold_engine, tok = make_engine(n_slots=2, ubatch=8, cache_ram_mib=0)
    engine, _ = make_engine(n_slots=2, ubatch=8)
    first, second = LONG + " One", LONG + " Two more words"
    cold_tokens, cold_final = await _run(cold_engine, _tok_request(tok, second, 12))
    await _run(engine, _tok_request(tok, first, 4))  # its slot keeps the shared prefix
    hit_tokens, hit_final = await _run(engine, _tok_request(tok, second, 12))
    off_tokens, off_final = await _run(engine, _tok_request(tok, second, 12, cache_prompt=False))
    assert cold_final.n_cached == 0 and off_final.n_cached == 0
    n_past = common_prefix(tok.tokenize(first, True, True), tok.tokenize(second, True, True))
    assert hit_final.n_cached == n_past and n_past % 8 != 0
    assert hit_final.n_prompt_processed == hit_final.n_prompt - hit_final.n_cached
    assert hit_tokens == cold_tokens == off_tokens


async def test_concurrent_requests_of_different_lengths_match_their_solo_runs(make_engine):
    engine, tok = make_engine(n_slots=3, ubatch=8, n_batch=20, cache_ram_mib=0)
    prompts = [LONG, LONG[:40], "Hi there"]
    solo = [(await _run(engine, _tok_request(tok, p, 8)))[0] for p in prompts]
    together = await asyncio.gather(*(_run(engine, _tok_request(tok, p, 8)) for p in prompts))
    assert [t for t, _ in together] == solo


def _prefill_aligned(runner, cache, tokens, start=0, chunk=8):
    """tokens (from position start on) in chunks ending on multiples of chunk, as the engine feeds a prompt;
    the last chunk's logits."""
    out, pos = None, start
    while pos < start + len(tokens):
        end = min(start + len(tokens), (pos // chunk + 1) * chunk)
        out = runner.prefill(cache, tokens[pos - start : end - start])
        pos = end
    return out


def test_a_restored_prefix_gives_bit_identical_logits(twin_f32):
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))

    def aligned(cache, tokens, start=0):
        return _prefill_aligned(runner, cache, tokens, start)

    prompt = [504, 3458, 282, 4649, 314, 7042, 30, 198, 198, 504, 2988, 314, 216, 33, 34, 35, 504, 3458, 282, 4649]
    other = prompt[:16] + [1000, 1001, 1002, 1003]
    cold = aligned(runner.new_cache(), prompt)
    donor = runner.new_cache()
    aligned(donor, other)
    snap, nbytes = runner.snapshot(donor, 16)
    assert nbytes > 0
    hit = aligned(runner.restore(snap, 16), prompt[16:], start=16)
    assert mx.array_equal(cold, hit).item()


def test_a_hit_recomputing_in_a_shorter_first_chunk_gives_bit_identical_logits(twin_f32):
    """The engine's chunks end on multiples of --ubatch-size (512) and a hit resumes at 128 here: the
    hit's tail starts with a 384-row chunk where the cold run had those rows inside a 512-row one. OpenBLAS
    sums a row of the model's products alike in both, the attention's blocks sit at the same absolute
    positions: the logits are bitwise the cold run's."""
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    PREFILL_ALIGN = 128  # any resume point that leaves the first recomputed chunk more than 16 rows
    words = [504, 3458, 282, 4649, 314, 7042, 30, 198, 2988, 216, 33, 34, 35]
    prompt = (words * 60)[:700]
    other = prompt[:PREFILL_ALIGN] + [1000 + i for i in range(300)]

    def chunked(cache, tokens, start=0):
        return _prefill_aligned(runner, cache, tokens, start, chunk=512)

    cold = chunked(runner.new_cache(), prompt)  # [0, 512), [512, 700)
    donor = runner.new_cache()
    chunked(donor, other)
    snap, _ = runner.snapshot(donor, PREFILL_ALIGN)
    hit = chunked(runner.restore(snap, PREFILL_ALIGN), prompt[PREFILL_ALIGN:], start=PREFILL_ALIGN)
    assert mx.array_equal(cold, hit).item()  # [128, 512), [512, 700)


async def test_rows_decoded_in_one_pass_match_each_request_alone(make_engine):
    """Merged caches, rows leaving (different lengths) and a row joining mid-decode: every request's tokens
    are those it gets alone, and the rows really shared forward passes."""
    alone, tok = make_engine(n_slots=1)
    lengths = [24, 9, 17, 30, 12]
    expected = []
    for prompt, n in zip(PROMPTS, lengths, strict=False):
        events = await _collect(alone.submit(_request(tok, prompt, n)), [], "x")
        expected.append([e.token for e in events if isinstance(e, TokenEvent)])
    together, _ = make_engine(n_slots=5)
    calls = []
    decode_rows = together.backend.decode_rows
    together.backend.decode_rows = lambda batch, tokens: calls.append(len(tokens)) or decode_rows(batch, tokens)
    log: list = []
    first = [together.submit(_request(tok, p, n)) for p, n in zip(PROMPTS[:4], lengths[:4], strict=False)]
    tasks = [asyncio.create_task(_collect(h, log, str(i))) for i, h in enumerate(first)]
    while sum(1 for n, e in log if n == "0" and isinstance(e, TokenEvent)) < 6:
        await asyncio.sleep(0.01)
    late = together.submit(_request(tok, PROMPTS[4], lengths[4]))  # joins rows already merged
    results = await asyncio.gather(*tasks, _collect(late, log, "4"))
    got = [[e.token for e in events if isinstance(e, TokenEvent)] for events in results]
    assert got == expected
    assert max(calls) >= 4 and len(calls) >= 20


async def test_cache_reuse_moves_a_cached_chunk_and_a_later_hit_recomputes(make_engine):
    """n_cache_reuse (b10621's --cache-reuse): a middle part dropped from a cached prompt, the part after it is
    reused moved back (its keys turned), counted in n_cached. The run is not what a cold run computes: its slot
    state is marked so, and a later hit on it reports b10621's n_past but recomputes the prompt (the cold run's
    tokens)."""
    from server.engine.prompt_cache import plan_reuse

    engine, tok = make_engine(n_slots=1, ubatch=8)
    head, dropped = LONG, " Meanwhile, far away, a storm gathers over the hills."
    tail = " Tell me the rest of the story about the fox, the dog, the cat and the birds, please."
    first = list(tok.tokenize(head + dropped + tail, True, True))
    second = list(tok.tokenize(head + tail, True, True))
    gen, _ = await _run(engine, GenerationRequest(tuple(first), n_predict=2, ignore_eos=True))
    prefix = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    tokens, final = await _run(engine, GenerationRequest(tuple(second), n_predict=4, ignore_eos=True, n_cache_reuse=3))
    moved = plan_reuse(tuple(first + gen[:-1]), second, 3).n  # the prefix, then the tail moved
    assert final.n_cached == moved > prefix
    assert final.n_prompt_processed == len(second) - final.n_cached
    assert engine.states.slots[0].state.made is None  # not as a cold run makes it
    cold, _ = make_engine(n_slots=1, ubatch=8, cache_ram_mib=0)
    cold_tokens, _ = await _run(cold, GenerationRequest(tuple(second), n_predict=4, ignore_eos=True))
    plain = await _run(engine, GenerationRequest(tuple(second), n_predict=4, ignore_eos=True))
    assert plain[1].n_cached == len(second) - 1 and plain[0] == cold_tokens
    assert len(tokens) == 4
