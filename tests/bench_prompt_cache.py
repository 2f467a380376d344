"""The cost of keeping a prompt-cache hit bitwise a cold run (docs/prompt-cache.md): the prompt positions a hit
recomputes between provenance.exact_start and b10621's n_past, timed against resuming at n_past and a cold run.

    python -m tests.bench_prompt_cache   (medians of 5; the bundled twins, mlxcel's native steps)

It times mlxcel's backend in process, so it lives beside the tests, not in oracle/ (which drives servers only
as processes and imports nothing from server/).
"""

from __future__ import annotations

import statistics
import time

WORDS = [504, 3458, 282, 4649, 314, 7042, 30, 198, 2988, 216, 33, 34, 35, 1350, 2211, 17, 940, 11]


def _timed(runner, snap, start: int, tokens: list[int], reps: int) -> float:
    import mlx.core as mx

    out = []
    for _ in range(reps):
        cache = runner.restore(snap, start) if start else runner.new_cache()
        t0 = time.perf_counter()
        mx.eval(runner.prefill(cache, tokens[start:]))
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


def main(reps: int = 5) -> None:
    from server import blas

    blas.activate()
    from fixtures.twins import twin
    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    for kind in ("f32", "q4_1"):
        r = open_backend(load_checkpoint(twin(kind).mlx_dir))
        base = (WORDS * 20)[:300]
        cache = r.new_cache()
        logits = r.prefill(cache, base)
        gen = []
        for _ in range(64):
            gen.append(r.greedy(logits))
            logits = r.decode(cache, gen[-1])
        follow = base + gen[:-1] + WORDS[:17] + WORDS[:3]  # the next turn: 20 new tokens
        snap, _ = r.snapshot(cache, 363)
        print(
            f"{kind}: a {len(follow)}-token prompt continuing 300 + 64 generated: at n_past 363 (20 rows) "
            f"{_timed(r, snap, 363, follow, reps):.0f} ms, exact from 300 (83 rows) "
            f"{_timed(r, snap, 300, follow, reps):.0f} ms, cold {_timed(r, snap, 0, follow, 3):.0f} ms",
            flush=True,
        )
        c2 = r.new_cache()
        r.prefill(c2, base)
        s2, _ = r.snapshot(c2, 300)
        print(
            f"{kind}: a repeated 300-token prompt: at n_past 299 (1 row) {_timed(r, s2, 299, base, reps):.0f} ms, "
            f"exact from 283 (17 rows) {_timed(r, s2, 283, base, reps):.0f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
