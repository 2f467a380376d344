"""The engine on the fake backend (server/backends/fake.py): scheduling, slots, the prompt cache, batching,
context shift, drafting and stop rules, with no weights. The fake counts up (after t comes t + 1) with noise
seeded by the whole history, so every token and every reuse decision is checkable."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from server.backends.fake import FAKE_CAPABILITIES, FakeBackend
from server.engine.engine import Engine, EngineConfig
from server.engine.types import ErrorEvent, FinalEvent, GenerationRequest, ScoreEvent, ScoreRequest, TokenEvent

EOS = 63


def _engine(backend: FakeBackend, **config) -> Engine:
    engine = Engine(
        Path("fake"),
        EngineConfig(**{"n_ctx": 64, **config}),
        eog_ids=frozenset({EOS}),
        piece=lambda t, _special: f"<{t}>".encode(),
        open_backend=lambda _adapters: backend,
    )
    engine.start()
    assert engine.ready.wait(10) and engine.load_error is None
    return engine


@pytest.fixture
def fake():
    backend = FakeBackend()
    engine = _engine(backend, n_slots=2)
    yield engine, backend
    engine.stop(wait=10)


async def _run(engine: Engine, *requests: GenerationRequest) -> list[tuple[list[int], FinalEvent]]:
    handles = [engine.submit(r) for r in requests]

    async def collect(handle):
        tokens, final = [], None
        async for event in handle:
            if isinstance(event, TokenEvent):
                tokens.append(event.token)
            elif isinstance(event, FinalEvent):
                final = event
            else:
                raise AssertionError(event)
        return tokens, final

    return list(await asyncio.gather(*(collect(h) for h in handles)))


def _greedy(prompt, n_predict=4, **kw) -> GenerationRequest:
    return GenerationRequest(prompt_tokens=tuple(prompt), n_predict=n_predict, **kw)


def test_greedy_decoding_follows_the_model_and_stops_at_the_budget(fake):
    engine, _ = fake
    [(tokens, final)] = asyncio.run(_run(engine, _greedy([5, 6, 7])))
    assert tokens == [8, 9, 10, 11]
    assert final.stop_type == "limit" and final.n_decoded == 4 and final.n_prompt == 3


def test_an_end_of_generation_token_stops_with_eos(fake):
    engine, _ = fake
    [(tokens, final)] = asyncio.run(_run(engine, _greedy([60], n_predict=10)))
    assert tokens == [61, 62, EOS] and final.stop_type == "eos"
    [(tokens, final)] = asyncio.run(_run(engine, _greedy([60], n_predict=5, ignore_eos=True)))
    assert EOS not in tokens and final.stop_type == "limit"  # the argmax with EOS banned: the noise's pick


def test_a_prompt_cache_hit_reuses_the_slot_and_gives_the_cold_runs_tokens(fake):
    engine, backend = fake
    prompt = list(range(1, 30))
    [(cold, first)] = asyncio.run(_run(engine, _greedy(prompt, id_slot=0)))
    backend.passes.clear()
    [(hit, second)] = asyncio.run(_run(engine, _greedy(prompt + [40, 41], id_slot=0)))
    assert first.n_cached == 0 and second.n_cached == len(prompt)  # b10621's n_past: the common prefix
    prefilled = sum(rows for kind, rows in backend.passes if kind == "prefill")
    assert prefilled < len(prompt)  # only the positions after the reuse point (and any recomputed) ran again
    again = FakeBackend()
    other = _engine(again, n_slots=1, cache_ram_mib=0)
    try:
        [(cold_too, _)] = asyncio.run(_run(other, _greedy(prompt + [40, 41])))
    finally:
        other.stop(wait=10)
    assert hit == cold_too  # bitwise the same history, so the same tokens


def test_a_backend_that_does_not_rewind_resumes_only_at_its_caches_end():
    backend = FakeBackend(capabilities=dataclasses.replace(FAKE_CAPABILITIES, rewind=False))
    engine = _engine(backend, n_slots=1)
    try:
        prompt = list(range(1, 20))
        asyncio.run(_run(engine, _greedy(prompt)))
        # a prompt sharing 10 tokens: reusing them would take the cache back from 22 positions to 10
        [(_, final)] = asyncio.run(_run(engine, _greedy(prompt[:10] + [50, 51])))
        assert final.n_cached == 0
    finally:
        engine.stop(wait=10)


def test_rows_decode_together_and_get_the_tokens_they_get_alone(fake):
    engine, backend = fake
    alone = [asyncio.run(_run(engine, _greedy(p, n_predict=6)))[0][0] for p in ([3, 4], [20, 21, 22])]
    backend.passes.clear()
    together = [
        tokens
        for tokens, _ in asyncio.run(_run(engine, _greedy([3, 4], n_predict=6), _greedy([20, 21, 22], n_predict=6)))
    ]
    assert together == alone
    assert ("decode_rows", 2) in backend.passes


def test_a_backend_without_batches_decodes_each_row_alone():
    backend = FakeBackend(capabilities=dataclasses.replace(FAKE_CAPABILITIES, batch_rows=1))
    engine = _engine(backend, n_slots=2)
    try:
        asyncio.run(_run(engine, _greedy([3, 4], n_predict=6), _greedy([20, 21], n_predict=6)))
    finally:
        engine.stop(wait=10)
    assert not any(kind == "decode_rows" for kind, _ in backend.passes)


@pytest.mark.parametrize("turn_keys", [True, False])
def test_a_full_context_shifts_only_where_keys_turn(turn_keys):
    backend = FakeBackend(capabilities=dataclasses.replace(FAKE_CAPABILITIES, turn_keys=turn_keys))
    engine = _engine(backend, n_slots=1, n_ctx=16, ctx_shift=True)
    try:
        [(tokens, final)] = asyncio.run(_run(engine, _greedy([1, 2, 3], n_predict=30)))
    finally:
        engine.stop(wait=10)
    if turn_keys:
        assert len(tokens) == 30 and final.truncated  # shifted past the 16-token context, as b10621 does
    else:
        assert len(tokens) < 16 and final.stop_type == "limit" and final.truncated  # stopped at the bound


def test_ngram_drafts_are_verified_and_change_no_token():
    plain_backend, drafting_backend = FakeBackend(n_vocab=13), FakeBackend(n_vocab=13)
    prompt = list(range(13)) * 3  # counting modulo 13 repeats the prompt: the n-gram drafter finds it
    outputs = []
    for backend, config in ((plain_backend, {}), (drafting_backend, {"ngram_simple": (2, 4)})):
        engine = _engine(backend, n_slots=1, **config)
        try:
            outputs.append(asyncio.run(_run(engine, _greedy(prompt, n_predict=12)))[0][0])
        finally:
            engine.stop(wait=10)
    assert outputs[0] == outputs[1]
    assert any(kind == "verify" for kind, _ in drafting_backend.passes)


def test_the_slot_registry_shows_what_a_slot_holds(fake):
    engine, _ = fake
    asyncio.run(_run(engine, _greedy([5, 6, 7], id_slot=1)))
    records = engine.slots()
    assert not records[1].is_processing and records[1].tokens == (5, 6, 7, 8, 9, 10)  # the last token is not fed
    assert records[0].tokens == ()


def test_scoring_reads_the_models_log_probabilities(fake):
    engine, _ = fake

    async def score():
        async for event in engine.submit(ScoreRequest((5, 6), (7, 8, 30), n_probs=2)):
            return event

    event = asyncio.run(score())
    assert isinstance(event, ScoreEvent)
    top = [p.top[0][0] for p in event.positions]
    assert top == [7, 8, 9]  # the counting rule's pick at each position
    assert event.positions[0].logprob > event.positions[2].logprob  # 30 is not what the model expects


def test_a_failing_backend_fails_the_request_not_the_server(fake):
    engine, backend = fake

    def broken(cache, token):
        raise RuntimeError("device lost")

    backend.decode = broken
    handle_events = asyncio.run(_collect_all(engine, _greedy([5], n_predict=3)))
    assert isinstance(handle_events[-1], ErrorEvent) and "device lost" in handle_events[-1].message
    del backend.decode  # the class's again
    [(tokens, _)] = asyncio.run(_run(engine, _greedy([5], n_predict=3)))
    assert tokens == [6, 7, 8]


async def _collect_all(engine, request):
    return [event async for event in engine.submit(request)]


def test_metrics_come_back_as_figures(fake):
    engine, _ = fake
    asyncio.run(_run(engine, _greedy([5, 6, 7])))
    snapshot = engine.metrics_snapshot()
    assert snapshot.counters.predict.count == 4 and snapshot.counters.prompt.count == 3
    assert snapshot.prompt_cache_entries is not None and snapshot.n_deferred == 0


def test_a_scrape_after_an_answer_sees_its_slot_released(fake, monkeypatch):
    """GET /metrics reads its figures between two engine steps (b10621's METRICS task): the step that published
    a request's last event has released its slot by then, however long the release takes (here 0.2 s, held
    after the final event went out), where a read from the HTTP thread could still count it as processing."""
    import time

    from server.engine.scheduler import Scheduler

    engine, _ = fake
    slow_free = Scheduler.free

    def free(self, seq):
        time.sleep(0.2)
        slow_free(self, seq)

    monkeypatch.setattr(Scheduler, "free", free)

    async def answer_then_scrape():
        await _run(engine, _greedy([5, 6, 7]))
        return await asyncio.wrap_future(engine.metrics_between_steps())

    snapshot = asyncio.run(answer_then_scrape())
    assert snapshot.n_processing == 0 and snapshot.counters.predict.count == 4


def test_a_scrape_while_asleep_answers_without_waking_or_failing(caplog):
    """A sleeping engine reads its figures between steps too, without loading the model again and without running
    a step over the freed model."""
    import logging
    import time

    backend = FakeBackend()
    engine = _engine(backend, n_slots=1, sleep_idle_seconds=0)
    try:
        deadline = time.monotonic() + 10
        while not engine.sleeping and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.sleeping
        with caplog.at_level(logging.ERROR, logger="mlxcel.engine"):
            for _ in range(3):
                snapshot = engine.metrics_between_steps().result(timeout=10)
        assert engine.sleeping and snapshot.n_processing == 0
        assert "engine step failed" not in caplog.text
    finally:
        engine.stop(wait=10)
