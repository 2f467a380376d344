"""One rank of `python -m oracle.bench_ranks --pipeline` (started with MLX_RANK and MLX_HOSTFILE): decode steps of
B rows through a pipeline split of a Qwen2-shaped model of random weights (hidden 1024, 8 layers, MLP 4096: enough
work a stage for the overlap to show), mlx-lm's pipelined forward (the stages in turn, then an all_gather) against
micro_batches.MicroBatched (one micro-batch a stage, the stages working at once); rank 0 writes the JSON."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .. import blas

STEPS, REPS, ROWS = 24, 5, (2, 8)


class _Stage:
    """What MicroBatched reads of a backend: the model, and merged batches."""

    def __init__(self, model: Any):
        self.model = model

    def _settle(self) -> None:
        pass

    def batch_merge(self, caches: list) -> list:
        from mlx_lm.models import cache as mlx_cache  # deferred: after blas.activate()

        return [mlx_cache.BatchKVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))]


def _model(ranks: Any) -> Any:
    import mlx.core as mx  # deferred: after blas.activate()
    from mlx_lm.models import qwen2  # deferred: as mlx

    mx.random.seed(0)
    args = qwen2.ModelArgs(
        model_type="qwen2",
        hidden_size=1024,
        num_hidden_layers=8,
        intermediate_size=4096,
        num_attention_heads=16,
        num_key_value_heads=4,
        rms_norm_eps=1e-6,
        vocab_size=8192,
        rope_theta=1e6,
        tie_word_embeddings=True,
    )
    model = qwen2.Model(args)
    mx.eval(model.parameters())
    model.model.pipeline(ranks.group)
    return model


def _step_seconds(model: Any, ranks: Any, rows: int, micro: bool) -> float:
    """One decode step of `rows` rows, averaged over STEPS, after a 4-token prompt a row."""
    import mlx.core as mx  # deferred: after blas.activate()
    from mlx_lm.models import cache as mlx_cache  # deferred: as mlx

    from .micro_batches import MicroBatched  # deferred: as mlx

    caches = []
    for i in range(rows):
        c = mlx_cache.make_prompt_cache(model)
        mx.eval(model(mx.array([[1 + i, 2, 3, 4]]), cache=c))
        caches.append(c)
    stage: Any = MicroBatched(_Stage(model), ranks) if micro else _Stage(model)
    batch = stage.batch_merge(caches)
    start = time.perf_counter()
    for _ in range(STEPS):
        if micro:
            mx.eval(stage.decode_rows(batch, [5] * rows))
        else:
            mx.eval(model(mx.array([[5]] * rows), cache=batch))
    return (time.perf_counter() - start) / STEPS


def probe(out: str) -> None:
    blas.activate()
    from .distributed import world  # deferred: it imports mlx

    ranks = world()
    assert ranks is not None, "started without MLX_RANK / MLX_HOSTFILE"
    model = _model(ranks)
    figures: dict[str, Any] = {"ranks": ranks.size, "steps": STEPS, "reps": REPS, "model": "qwen2 1024x8, MLP 4096"}
    for rows in ROWS:
        a, b = [], []
        for _ in range(REPS):  # alternating, so drift hits both
            a.append(_step_seconds(model, ranks, rows, micro=False))
            b.append(_step_seconds(model, ranks, rows, micro=True))
        figures[f"rows{rows}"] = {
            "in_turn_step_ms": [round(x * 1e3, 2) for x in a],
            "micro_batched_step_ms": [round(x * 1e3, 2) for x in b],
            "speedup_median": round(statistics.median(a) / statistics.median(b), 3),
        }
    if ranks.rank == 0:
        Path(out).write_text(json.dumps(figures))


if __name__ == "__main__":
    probe(sys.argv[1])
