"""Gemma 2's sliding window (server/models/gemma2_swa.py): mlx-lm's Gemma 2 up to the window, b10621's window past
it (conformance/test_families.py holds the 32-position twin to the reference), the same logits whether a
sequence is read in one pass or token by token through its plain caches (the window is the mask's)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models import gemma2
from mlx_lm.models.cache import KVCache

from server.models import gemma2_swa
from server.models.architectures import model_classes

CONFIG = dict(
    model_type="gemma2",
    hidden_size=64,
    num_hidden_layers=4,
    intermediate_size=128,
    num_attention_heads=2,
    head_dim=32,
    rms_norm_eps=1e-6,
    vocab_size=97,
    num_key_value_heads=1,
    query_pre_attn_scalar=32,
)
WINDOW = 4


def _models() -> tuple[gemma2_swa.Model, gemma2.Model]:
    mx.random.seed(0)
    ours = gemma2_swa.Model(gemma2_swa.ModelArgs(**CONFIG, sliding_window=WINDOW))
    plain = gemma2.Model(gemma2.ModelArgs(**CONFIG))
    plain.update(ours.parameters())
    return ours, plain


def test_gemma2_checkpoints_get_the_windowed_model():
    assert model_classes({"model_type": "gemma2"}) == (gemma2_swa.Model, gemma2_swa.ModelArgs)


def test_every_layer_keeps_a_plain_cache_and_the_even_ones_slide_by_their_mask():
    ours, _ = _models()
    assert [type(c) for c in ours.make_cache()] == [KVCache] * 4
    assert [gemma2_swa.is_sliding(i, ours.args) for i in range(4)] == [True, False, True, False]


def test_the_window_changes_nothing_before_it_and_the_answer_after_it():
    ours, plain = _models()
    tokens = mx.array([[5, 17, 3, 88, 41, 9, 60, 2, 33, 71]])
    a, b = ours(tokens), plain(tokens)
    assert mx.allclose(a[:, :WINDOW], b[:, :WINDOW], atol=1e-5).item()
    assert not mx.allclose(a[:, WINDOW:], b[:, WINDOW:], atol=1e-3).item()


def test_one_pass_and_token_by_token_give_the_same_logits():
    ours, _ = _models()
    tokens = mx.array([[5, 17, 3, 88, 41, 9, 60, 2, 33, 71]])
    whole = ours(tokens, cache=ours.make_cache())
    cache = ours.make_cache()
    prefix = ours(tokens[:, :3], cache=cache)
    steps = [ours(tokens[:, i : i + 1], cache=cache) for i in range(3, tokens.shape[1])]
    stepped = mx.concatenate([prefix, *steps], axis=1)
    assert mx.allclose(whole, stepped, atol=1e-4).item()
