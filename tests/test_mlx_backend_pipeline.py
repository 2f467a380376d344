"""The MLX backend's pipelined decode (mlx-lm's generate loop: step t+1 issued on the lazy greedy token t before
t is read back), on by default where MLX runs on a GPU and switched on here on the CPU: it must change nothing
but timing. Tokens and logits equal the synchronous backend's bitwise; a step issued ahead and not taken (a stop,
another token, a snapshot, a trim) is withdrawn so the cache holds exactly what it counts. Tiny random llama,
no weights on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_map
from mlx_lm.models import llama

from server.backends.mlx_backend import MLXBackend
from server.engine.engine import Engine, EngineConfig
from server.engine.types import FinalEvent, GenerationRequest, TokenEvent
from server.models.loader import LoadedModel

VOCAB = 101
PROMPT = [5, 17, 3, 44, 12, 9, 60, 2, 31, 8]


def _llama() -> LoadedModel:
    args = llama.ModelArgs(
        model_type="llama", hidden_size=48, num_hidden_layers=2, intermediate_size=96, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=VOCAB, tie_word_embeddings=True,
    )  # fmt: skip
    mx.random.seed(3)
    model = llama.Model(args)
    # weights scaled up so greedy decisions have clear gaps
    model.update(tree_map(lambda a: a * 4, model.parameters()))
    mx.eval(model.parameters())
    return LoadedModel(model, {"vocab_size": VOCAB, "max_position_embeddings": 512}, Path("llama"), False)


def _pair() -> tuple[MLXBackend, MLXBackend]:
    """The same weights twice: one backend pipelined, one synchronous."""
    loaded = _llama()
    ahead, sync = MLXBackend(loaded), MLXBackend(loaded)
    ahead.pipeline, sync.pipeline = True, False
    return ahead, sync


def _greedy_run(backend: MLXBackend, cache, n: int) -> tuple[list[int], list[mx.array]]:
    logits = backend.prefill(cache, PROMPT)
    tokens, rows = [], []
    for _ in range(n):
        token = backend.greedy(logits)
        tokens.append(token)
        logits = backend.decode(cache, token)
        rows.append(logits)
    return tokens, rows


def test_a_pipelined_decode_equals_the_synchronous_one_bitwise():
    ahead, sync = _pair()
    a_cache, s_cache = ahead.new_cache(), sync.new_cache()
    a_tokens, a_rows = _greedy_run(ahead, a_cache, 12)
    s_tokens, s_rows = _greedy_run(sync, s_cache, 12)
    assert a_tokens == s_tokens and len(set(a_tokens)) > 1
    assert all(mx.array_equal(a, s).item() for a, s in zip(a_rows, s_rows, strict=True))
    # the last greedy draw issued a step ahead: written in the cache, not counted
    ahead.greedy(a_rows[-1])
    assert ahead._pending is not None and a_cache[0].offset == a_cache.n + 1
    # another token than the one issued: the step is withdrawn and the new one computed as the synchronous
    # backend computes it
    other = (ahead._pending.token + 1) % VOCAB
    assert mx.array_equal(ahead.decode(a_cache, other), sync.decode(s_cache, other)).item()
    assert ahead.length(a_cache) == sync.length(s_cache) == a_cache[0].offset


@pytest.mark.parametrize("then", ["snapshot", "trim"])
def test_a_step_issued_ahead_is_withdrawn_before_the_cache_is_used_otherwise(then):
    ahead, sync = _pair()
    a_cache, s_cache = ahead.new_cache(), sync.new_cache()
    a_tokens, a_rows = _greedy_run(ahead, a_cache, 5)
    _greedy_run(sync, s_cache, 5)
    ahead.greedy(a_rows[-1])  # a generation's stop: the token drawn, the step issued, never taken
    assert ahead._pending is not None
    n = a_cache.n
    if then == "snapshot":
        snap, _ = ahead.snapshot(a_cache, n)
        expected, _ = sync.snapshot(s_cache, n)
        assert all(
            mx.array_equal(a, b).item() for (ak, av), (bk, bv) in zip(snap.kv(), expected.kv(), strict=True)
            for a, b in ((ak, bk), (av, bv))
        )  # fmt: skip
    else:
        ahead.trim(a_cache, n - 2)
        sync.trim(s_cache, n - 2)
    assert ahead._pending is None and a_cache[0].offset == a_cache.n == s_cache.n
    assert mx.array_equal(ahead.decode(a_cache, 7), sync.decode(s_cache, 7)).item()


def _engine_tokens(backend: MLXBackend, prompts: list[list[int]]) -> list[tuple[list[int], int]]:
    engine = Engine(Path("llama"), EngineConfig(n_ctx=128, n_slots=1), open_backend=lambda _a: backend)
    engine.start()
    assert engine.ready.wait(30) and engine.load_error is None

    async def run(prompt):
        tokens, final = [], None
        async for event in engine.submit(GenerationRequest(prompt_tokens=tuple(prompt), n_predict=8)):
            if isinstance(event, TokenEvent):
                tokens.append(event.token)
            elif isinstance(event, FinalEvent):
                final = event
        assert final is not None
        return tokens, final.n_cached

    try:
        return [asyncio.run(run(p)) for p in prompts]
    finally:
        engine.stop(wait=10)


def test_the_engine_serves_the_same_tokens_and_cache_hits_pipelined(monkeypatch):
    ahead, sync = _pair()
    issued = []
    issue = ahead._issue_ahead
    monkeypatch.setattr(ahead, "_issue_ahead", lambda cache, token: issued.append(1) or issue(cache, token))
    prompts = [PROMPT, PROMPT, PROMPT[:6] + [40, 41]]  # cold, a whole hit, a partial hit
    pipelined = _engine_tokens(ahead, prompts)
    assert pipelined == _engine_tokens(sync, prompts)
    assert pipelined[1][1] > 0 and pipelined[0][0] == pipelined[1][0]  # a hit equals the cold run
    assert len(issued) >= 3 * 6  # every greedy decode step after the first issued its successor
