"""A pipeline stage's batch held as micro-batches (server/backends/micro_batches.py), on one process: the rows'
bookkeeping (merge, keep, extend, extract) and the micro-batches' pass give each row what one merged batch gives
it. (Over ranks, with the stages sending to each other: tests/test_serving_ranks.py.)"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

from server.backends.micro_batches import MicroBatched
from server.backends.mlx_backend import MLXBackend
from server.models.loader import load_checkpoint

pytestmark = pytest.mark.heavy

PROMPTS = [[9707, 11, 1879], [785, 6722, 315, 9625, 374], [750, 75698], [576, 23, 88, 1234], [42, 43]]


@dataclass
class _Stages:
    """A stand-in for the launch: how many stages the grouping plans for; rank 0, so no message is sent (one
    process is the whole pipeline: every layer, then the head)."""

    size: int
    rank: int = 0
    group: object = None


@pytest.fixture(scope="module")
def backend():
    from fixtures.families import family_twin

    loaded = load_checkpoint(family_twin("qwen2.5").mlx_dir, kernels=False, transpose=False)
    return MLXBackend(loaded)


def _prefilled(backend, prompts):
    caches = []
    for p in prompts:
        c = backend.new_cache()
        backend.prefill(c, p)
        caches.append(c)
    return caches


def _rows(micro, stages, batch, tokens):
    micro._ranks = _Stages(1)  # the pass itself: one stage holding every layer
    try:
        return np.array(micro.decode_rows(batch, tokens))
    finally:
        micro._ranks = stages


def test_micro_batches_give_each_row_what_one_merged_batch_gives(backend):
    stages = _Stages(3)
    micro = MicroBatched(backend, stages)
    tokens = [11, 12, 13, 14, 15]
    batch = micro.batch_merge(_prefilled(backend, PROMPTS[:2]))
    assert len(batch) == 2  # (one micro-batch a row, up to one a stage)
    micro.batch_extend(batch, micro.batch_merge(_prefilled(backend, PROMPTS[2:])))
    assert len(batch) == 3 and sum(micro._sizes(batch)) == 5  # (the smallest neighbours merged)
    whole = backend.batch_merge(_prefilled(backend, PROMPTS))
    want = np.array(backend.decode_rows(whole, tokens))
    got = _rows(micro, stages, batch, tokens)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-4
    assert [int(r.argmax()) for r in got] == [int(r.argmax()) for r in want]

    # rows 1 and 3 leave: the others keep their places and their caches
    micro.batch_keep(batch, [0, 2, 4])
    backend.batch_keep(whole, [0, 2, 4])
    assert sum(micro._sizes(batch)) == 3
    got, want = _rows(micro, stages, batch, [21, 22, 23]), np.array(backend.decode_rows(whole, [21, 22, 23]))
    assert np.abs(got - want).max() < 1e-4

    # a row taken out is its own cache again, at its length
    alone = micro.batch_extract(batch, 2)
    ref = backend.batch_extract(whole, 2)
    assert alone.n == ref.n == len(PROMPTS[4]) + 2
    a, b = np.array(backend.decode(alone, 31)), np.array(backend.decode(ref, 31))
    assert np.abs(a - b).max() < 1e-4
    with pytest.raises(IndexError):
        micro.batch_extract(batch, 3)


def test_a_micro_batch_left_empty_goes(backend):
    stages = _Stages(2)
    micro = MicroBatched(backend, stages)
    batch = micro.batch_merge(_prefilled(backend, PROMPTS[:4]))
    assert micro._sizes(batch) == [2, 2]
    micro.batch_keep(batch, [2, 3])
    assert micro._sizes(batch) == [2]
    assert mx.array(_rows(micro, stages, batch, [5, 6])).shape[0] == 2
