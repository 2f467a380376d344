"""draft-mtp in process (issue 34): Qwen3.5's MTP block (server/models/mtp_head.py) and its drafter
(server/engine/mtp_drafter.py) on the family twin (fixtures/qwen35_twin.py), and the recurrent states a verify
pass keeps so that a rejected draft's positions are forgotten (server/models/qwen35.py StepStatesDeltaNet).
conformance/test_mtp_drafter.py holds the draft counts to b10621's."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from server.backends import BackendRefusal, load_backend
from server.engine.drafting import load_mtp
from server.engine.speculative import DraftConfig
from server.engine.types import SamplingParams
from server.models.architectures import read_config
from server.models.kv_numerics import KVNumerics
from server.models.mtp_head import MTPHead, MTPRefusal
from server.models.store import converted_gguf
from tests.engines import drafted_as_plain, engine_factory

PROMPT = [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]


@pytest.fixture(scope="module")
def qwen35():
    from fixtures.families import family_twin

    return family_twin("qwen3.5")


def test_the_block_is_the_same_from_the_gguf_and_from_the_hf_checkpoint(qwen35):
    """HF's (1 + w) norms get their 1 at load; the GGUF's were stored with it: the same float32 values."""
    heads = []
    for checkpoint in (Path(qwen35.mlx_dir), converted_gguf(qwen35.gguf)):
        heads.append(dict(_flat(MTPHead.load(checkpoint, read_config(checkpoint)).parameters())))
    assert sorted(heads[0]) == sorted(heads[1])
    assert [k for k in heads[0] if not mx.array_equal(heads[0][k], heads[1][k]).item()] == []


def _flat(params):
    from mlx.utils import tree_flatten

    return tree_flatten(params)


def test_a_checkpoint_without_the_block_is_refused(twin_f32):
    with pytest.raises(MTPRefusal, match="^the model has no MTP layers$"):
        MTPHead.load(Path(twin_f32.mlx_dir), read_config(Path(twin_f32.mlx_dir)))
    target = load_backend(Path(twin_f32.mlx_dir))
    with pytest.raises(BackendRefusal, match="^context type MTP requested but model doesn't contain MTP layers$"):
        load_mtp(DraftConfig("", kind="draft-mtp"), target)


@pytest.mark.parametrize("source", ["gguf", "mlx"])
def test_a_verify_pass_forgets_its_rejected_rows(qwen35, source):
    """After a 4-row verify trimmed to 2 of its rows, the recurrent layers hold the state they had after those 2
    rows (the same as decoding them one by one) and the next step's logits are a plain decode's."""
    checkpoint = converted_gguf(qwen35.gguf) if source == "gguf" else Path(qwen35.mlx_dir)
    backend = load_backend(checkpoint, kv=KVNumerics("f32", "f32", False))
    assert backend.capabilities.draft_rewind and not backend.capabilities.rewind
    drafted, plain = backend.new_cache(), backend.new_cache()
    for c in (drafted, plain):
        backend.prefill(c, PROMPT)
    backend.verify(drafted, [11, 22, 33, 44])
    backend.trim(drafted, len(PROMPT) + 2)
    for t in (11, 22):
        backend.decode(plain, t)
    states = [(a, b) for a, b in zip(drafted, plain, strict=True) if type(a).__name__ == "ArraysCache"]
    assert len(states) == 3
    for a, b in states:
        assert mx.array_equal(a[1], b[1]).item() and mx.array_equal(a[0], b[0]).item()  # (the DeltaNet rows alone)
    want, got = (np.array(backend.decode(c, 55)) for c in (plain, drafted))
    np.testing.assert_allclose(got, want, atol=1e-4)  # (the attention layer's keys came from the 4-row pass)
    assert got.argmax() == want.argmax()
    with pytest.raises(ValueError, match="was not kept"):
        backend.trim(drafted, len(PROMPT))  # (a state before the last verify is gone)


async def test_output_is_plain_decodings_greedy_and_seeded(qwen35):
    with engine_factory(Path(qwen35.mlx_dir)) as (make, tok):
        plain = make()
        drafted = make(draft=DraftConfig("", n_max=3, kind="draft-mtp"))
        drafted_n, accepted = await drafted_as_plain(
            plain,
            drafted,
            tok,
            [
                ("The quick brown fox jumps over the lazy dog. The quick brown fox", SamplingParams(temperature=0.0)),
                ("Once upon a time, in a small village,", SamplingParams(temperature=0.0)),
                ("def fibonacci(n):", SamplingParams(temperature=0.8, seed=42)),
            ],
        )
        assert 0 < accepted < drafted_n  # (drafts taken and refused: both paths ran)
