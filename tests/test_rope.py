"""--rope-freq-base / --rope-freq-scale / --rope-scale / --rope-scaling as llama_context resolves them, applied to
the model's ropes before the native steps read them. Against b10621's logits: fixtures/requests/*rope*."""

from __future__ import annotations

import argparse

import mlx.nn as nn
import numpy as np
import pytest

from server.cli.startup import rope_overrides
from server.models.loader import load_checkpoint, override_rope


def _args(base=None, scales=(), scaling=None):
    return argparse.Namespace(rope_freq_base=base, rope_scale_args=list(scales), rope_scaling=scaling)


def test_the_overrides_resolve_as_b10621_resolves_them():
    assert rope_overrides(_args()) == (None, None)
    assert rope_overrides(_args("0")) == (None, None)  # 0: the model's
    assert rope_overrides(_args("50000")) == (50000.0, None)
    # --rope-scale N and --rope-freq-scale N write one field: the last one wins
    assert rope_overrides(
        _args(scales=[("--rope-scale", "--rope-scale", "4"), ("--rope-freq-scale", "--rope-freq-scale", "0.75")])
    ) == (None, 0.75)
    assert rope_overrides(
        _args(scales=[("--rope-freq-scale", "--rope-freq-scale", "0.75"), ("--rope-scale", "--rope-scale", "4")])
    ) == (None, 0.25)
    assert rope_overrides(_args(scales=[("--rope-freq-scale", "x", "0.5")], scaling="none")) == (None, 1.0)


def test_the_checkpoints_own_base_is_bitwise_no_override_and_another_is_not(twin_f32):
    import json

    from server.backends import open_backend
    from server.models.tokenizer import ModelTokenizer

    own = json.loads((twin_f32.mlx_dir / "config.json").read_text())["rope_theta"]
    tokens = ModelTokenizer(twin_f32.mlx_dir).tokenize("Once upon a time, in a small village by the sea,", True, True)

    def logits(rope):
        runner = open_backend(load_checkpoint(twin_f32.mlx_dir, rope=rope))
        return np.array(runner.prefill(runner.new_cache(), tokens))

    plain = logits((None, None))
    assert np.array_equal(logits((own, None)), plain)
    assert np.array_equal(logits((None, 1.0)), plain)
    assert np.abs(logits((own / 2, 0.5)) - plain).max() > 1e-3


def test_an_override_no_rope_takes_is_refused():
    class YarnRoPE(nn.Module):  # a scaled variant: its frequencies are its own
        def __init__(self):
            super().__init__()

    model = nn.Sequential(YarnRoPE())
    with pytest.raises(ValueError, match=r"the model's rope \(YarnRoPE\) takes no override"):
        override_rope(model, 50000.0, None)
    assert override_rope(model, None, None) == 0
    plain = nn.Sequential(nn.RoPE(8), nn.RoPE(8))
    assert override_rope(plain, 5000.0, 0.5) == 2
    assert [(r.base, r.scale) for r in plain.layers] == [(5000.0, 0.5), (5000.0, 0.5)]
