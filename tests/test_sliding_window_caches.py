"""Sliding-window caches where caches are touched (issue 29, point 6), on the Gemma 3 family twin: five of its six
layers attend through a 32-position window, and prompts here run past it. Every layer keeps a plain KVCache, the
window applied by the mask (server/models/gemma3_window.py), as b10621's SWA cells keep positions in order: a later
prompt reuses the cached prefix it shares, however short, rows decode together, and each case asks for the cold
run's tokens."""

from __future__ import annotations

import asyncio

import pytest

from fixtures.families import family_twin
from server.engine.engine import Engine
from server.engine.types import FinalEvent, GenerationRequest, TokenEvent
from tests.engines import engine_factory

pytestmark = pytest.mark.heavy  # builds the Gemma 3 twin and runs engines on it: nox -s tests, not unit

LONG = "The quick brown fox jumps over the lazy dog while the small cat sleeps in the warm afternoon sun. " * 2


@pytest.fixture(scope="module")
def gemma3_dir():
    return family_twin("gemma3").mlx_dir


@pytest.fixture
def make_engine(gemma3_dir):
    with engine_factory(gemma3_dir) as made:
        yield made


async def _run(engine: Engine, tokens: tuple[int, ...], n: int, **kw) -> tuple[list[int], FinalEvent]:
    out, final = [], None
    async for ev in engine.submit(GenerationRequest(tokens, n_predict=n, ignore_eos=True, **kw)):
        if isinstance(ev, TokenEvent):
            out.append(ev.token)
        elif isinstance(ev, FinalEvent):
            final = ev
    assert final is not None
    return out, final


async def test_a_shared_prefix_past_the_window_gives_the_cold_runs_tokens(make_engine):
    make, tok = make_engine
    first, second = tok.tokenize(LONG + "One", True, True), tok.tokenize(LONG + "Two more words", True, True)
    assert len(second) > 40  # past the 32-position window
    cold, _ = await _run(make(n_slots=1, cache_ram_mib=0), tuple(second), 12)
    warm = make(n_slots=1)
    await _run(warm, tuple(first), 4)
    again, final = await _run(warm, tuple(second), 12)
    assert again == cold
    assert 0 < final.n_cached < len(first)  # cut back to the shared prefix, past the window, and reused


async def test_a_continued_conversation_resumes_the_whole_cache_and_matches_cold(make_engine):
    make, tok = make_engine
    engine = make(n_slots=1)
    prompt = tuple(tok.tokenize(LONG, True, True))
    answer, _ = await _run(engine, prompt, 8)
    follow = prompt + tuple(answer) + tuple(tok.tokenize(" And then", False, False))
    resumed, final = await _run(engine, follow, 16)
    cold, _ = await _run(make(n_slots=1, cache_ram_mib=0), follow, 16)
    assert resumed == cold
    assert final.n_cached >= len(prompt)  # the cached sequence was extended, not recomputed


async def test_rows_decoded_together_match_each_alone(make_engine):
    make, tok = make_engine
    engine = make(n_slots=3, cache_ram_mib=0)
    prompts = [tuple(tok.tokenize(p, True, True)) for p in (LONG, LONG[:60], "Hello there")]
    solo = [(await _run(engine, p, 40))[0] for p in prompts]
    together = await asyncio.gather(*(_run(engine, p, 40) for p in prompts))
    assert [t for t, _ in together] == solo
