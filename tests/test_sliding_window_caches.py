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


def test_a_context_shift_turns_each_layer_by_its_own_rope(gemma3_dir):
    """b10621's K-shift turns a layer's keys with that layer's rope (build_rope_shift: get_rope_freq_base(il)):
    Gemma 3's sliding layers at their base (10000), its global ones at the model's (1e6). The shifted cache holds
    each layer's keys as its own rope turns them, and a sliding layer's turn is not a global one's."""
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    backend = open_backend(load_checkpoint(gemma3_dir))
    bases = [layer.self_attn.rope.base for layer in backend.model.layers]
    assert bases == [10000.0] * 5 + [1000000.0]
    cache = backend.new_cache()
    backend.prefill(cache, list(range(100, 130)))
    before = [mx.array(c.keys[..., :30, :]).astype(mx.float32) for c in cache]
    backend.shift(cache, 4, 6)
    for layer, (c, keys) in enumerate(zip(cache, before, strict=True)):
        rope = backend.model.layers[layer].self_attn.rope
        moved = keys[..., 10:30, :]
        b, h, t, d = moved.shape
        want = mx.fast.rope(
            moved.reshape(b * h * t, 1, d), rope.dims, traditional=False, base=rope.base, scale=rope.scale, offset=-6
        ).reshape(b, h, t, d)
        got = c.keys[..., 4:24, :].astype(mx.float32)
        assert mx.array_equal(got, want.astype(c.keys.dtype).astype(mx.float32)).item(), layer
        assert mx.array_equal(c.keys[..., :4, :], before[layer][..., :4, :].astype(c.keys.dtype)).item()
    other = backend._turn(before[0][..., 10:30, :], -6, 5)  # a global layer's turn of the same keys
    assert not mx.allclose(other, cache[0].keys[..., 4:24, :].astype(mx.float32), atol=1e-3).item()
