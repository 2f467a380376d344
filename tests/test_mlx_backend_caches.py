"""The MLX backend on architectures whose caches are not plain KV caches (tiny random mlx-lm models, no weights
on disk): a sliding-window model (gemma3_text: RotatingKVCache layers among KVCache ones) and a state-space
model (mamba: ArraysCache). What each kind allows is declared at load and held to: a whole-state snapshot
resumes exactly, a snapshot before the cache's end is refused (never a silently corrupt cache), the engine
plans around it, and a cache kind the backend does not know is refused at load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models import gemma3_text, mamba

from server.backends import BackendRefusal
from server.backends.mlx_backend import MLXBackend
from server.engine.engine import Engine, EngineConfig
from server.engine.types import FinalEvent, GenerationRequest, TokenEvent
from server.models.loader import LoadedModel

VOCAB = 97


def _gemma(window: int = 8) -> LoadedModel:
    args = gemma3_text.ModelArgs(
        model_type="gemma3_text", hidden_size=32, num_hidden_layers=3, intermediate_size=64,
        num_attention_heads=2, head_dim=16, num_key_value_heads=1, vocab_size=VOCAB, sliding_window=window,
        sliding_window_pattern=3, query_pre_attn_scalar=16,
    )  # fmt: skip
    mx.random.seed(0)
    model = gemma3_text.Model(args)
    mx.eval(model.parameters())
    return LoadedModel(model, {"vocab_size": VOCAB, "max_position_embeddings": 256}, Path("gemma"), False)


def _mamba() -> LoadedModel:
    args = mamba.ModelArgs(
        model_type="mamba", vocab_size=VOCAB, hidden_size=32, intermediate_size=64, state_size=8,
        num_hidden_layers=2, conv_kernel=4, use_bias=False, use_conv_bias=True, time_step_rank=4,
    )  # fmt: skip
    mx.random.seed(0)
    model = mamba.Model(args)
    mx.eval(model.parameters())
    return LoadedModel(model, {"vocab_size": VOCAB, "max_position_embeddings": 256}, Path("mamba"), False)


PROMPT = [5, 17, 3, 44, 12, 9, 60, 2, 31, 8, 70, 11]  # longer than the 8-position window


@pytest.mark.parametrize("make", [_gemma, _mamba], ids=["sliding-window", "state-space"])
def test_caches_kept_whole_declare_no_rewind_and_resume_exactly_at_their_end(make):
    backend = MLXBackend(make())
    caps = backend.capabilities
    assert not caps.rewind and caps.batch_rows == 1 and not caps.turn_keys
    cache = backend.new_cache()
    backend.prefill(cache, PROMPT)
    snap, _ = backend.snapshot(cache, len(PROMPT))
    after = backend.decode(cache, 7)
    resumed = backend.restore(snap, len(PROMPT))
    assert backend.length(resumed) == len(PROMPT)
    assert mx.array_equal(backend.decode(resumed, 7), after).item()  # a whole state resumes bitwise
    with pytest.raises(ValueError, match="do not rewind"):
        backend.snapshot(cache, 4)  # a sliding window or a state holds nothing of position 4 alone
    with pytest.raises(ValueError, match="do not rewind"):
        backend.restore(snap, 4)


def test_a_sliding_window_model_decodes_as_a_cold_run_after_a_prompt_cache_hit():
    backend = MLXBackend(_gemma())
    engine = Engine(Path("gemma"), EngineConfig(n_ctx=64, n_slots=1), open_backend=lambda _a: backend)
    engine.start()
    assert engine.ready.wait(30) and engine.load_error is None

    async def run(prompt):
        tokens, final = [], None
        async for event in engine.submit(GenerationRequest(prompt_tokens=tuple(prompt), n_predict=5)):
            if isinstance(event, TokenEvent):
                tokens.append(event.token)
            elif isinstance(event, FinalEvent):
                final = event
        return tokens, final

    try:
        first, _ = asyncio.run(run(PROMPT))
        # the same prompt again: the slot holds the prompt and 4 generated tokens, more than the prompt, and a
        # whole-state cache cannot go back to the prompt's end: nothing reused, computed cold
        again, final = asyncio.run(run(PROMPT))
        assert again == first and final.n_cached == 0
        # the prompt extended by exactly what the slot holds: resumed at the cache's end
        held = PROMPT + first[:-1]
        _, final = asyncio.run(run(held + [3]))
        assert final.n_cached == len(held)
    finally:
        engine.stop(wait=10)


def test_an_unknown_cache_kind_is_refused_at_load():
    loaded = _gemma()

    class OwnCache:  # a kind the backend has no rules for
        offset = 0

    loaded.model.make_cache = lambda: [OwnCache() for _ in range(3)]
    with pytest.raises(BackendRefusal, match="cache kind OwnCache is not supported"):
        MLXBackend(loaded)
