"""A prompt-cache hit is bitwise a cold run where it resumes at provenance.exact_start; resuming at b10621's
n_past itself differs where the recomputed rows change kernels (measured ~2e-5 in the logits: docs/prompt-cache.md).
Both twins, both paths (mlxcel's native prompt and decode steps, and MLX's own layers over the same BLAS)."""

from __future__ import annotations

import pytest

from server import blas
from server.engine.provenance import DECODE, Provenance, chunk_kind, exact_start

pytestmark = pytest.mark.heavy  # loads both twins' weights

UB = 512
WORDS = [504, 3458, 282, 4649, 314, 7042, 30, 198, 2988, 216, 33, 34, 35, 1350, 2211, 17, 940, 11]


def _cold(runner, tokens, few):
    """tokens fed as the engine feeds a prompt (chunks ending on multiples of UB); the cache, the logits and
    how each position was made."""
    cache, made, logits = runner.new_cache(), Provenance(), None
    pos = 0
    while pos < len(tokens):
        end = min(len(tokens), (pos // UB + 1) * UB)
        logits = runner.prefill(cache, tokens[pos:end])
        made.add(pos, end, chunk_kind(end - pos, few))
        pos = end
    return cache, logits, made


def _hit(runner, donor, n, prompt):
    snap, _ = runner.snapshot(donor, n)
    cache = runner.restore(snap, n) if n else runner.new_cache()
    return runner.prefill(cache, prompt[n:])  # the prompts here fit in one ubatch


@pytest.mark.parametrize("kind", ["f32", "q4_1"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx"])
def test_a_hit_at_exact_start_is_bitwise_the_cold_run(kind, native, request):
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.decode_step import MAX_ROWS
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(request.getfixturevalue(f"twin_{kind}").mlx_dir))
    if not native:
        runner.native_decode = runner.native_prefill = False
    elif type(runner).__name__ != "NativeBackend":
        pytest.skip("mlxcel's CPU kernels are not loaded here")
    # the engine's kinds (Engine._few_rows): a float32 model's native steps sum in ggml's order, where one row
    # (vec_dot) and two or more (tinyBLAS) differ; else mlxcel's few-row kernels up to MAX_ROWS, then the GEMM
    ggml = native and getattr(getattr(runner, "_step", None), "ggml_order", False)
    few = 1 if ggml else MAX_ROWS
    p40 = (WORDS * 3)[:40]
    donor, cold40, made = _cold(runner, p40, few)
    # a repeated 40-token prompt: b10621 reuses 39; one row recomputed would take another product than the cold
    # run's 40-row chunk: the hit resumes at 23 (17 rows), in ggml's order at 38 (2 rows)
    start = exact_start(made, 40, 39, UB, few)
    assert start == (38 if ggml else 23)
    assert mx.array_equal(_hit(runner, donor, start, p40), cold40).item()
    # what exact_start avoids: one row recomputed differs from the cold chunk's row, except where every product
    # sums a row alone (a GGUF's quantized weights on int8_dot.c's integer panels, with AVX-512 VNNI)
    invariant = kind == "q4_1" and blas.STATE.native is not None and blas.STATE.native.mlxcel_int8_vnni()
    assert mx.array_equal(_hit(runner, donor, 39, p40), cold40).item() == bool(invariant)
    # a repeated 9-token prompt: few-row rows both ways, n_past itself (in ggml's order two rows recomputed)
    p9 = WORDS[:9]
    donor9, cold9, made9 = _cold(runner, p9, few)
    start9 = exact_start(made9, 9, 8, UB, few)
    assert start9 == (7 if ggml else 8)
    assert mx.array_equal(_hit(runner, donor9, start9, p9), cold9).item()
    # a prompt continuing a generation: decode steps made the generated positions, a cold run prefills them
    gen = []
    cache20, logits, made20 = _cold(runner, p40[:20], few)
    for _ in range(6):
        gen.append(runner.greedy(logits))
        logits = runner.decode(cache20, gen[-1])
    made20.add(20, 25, DECODE)
    follow = p40[:20] + gen[:5] + WORDS[:5]
    _, cold_follow, _ = _cold(runner, follow, few)
    start = exact_start(made20, len(follow), 25, UB, few)
    assert start == (20 if ggml else 13)  # the decoded positions (and the rows before them that make 17)
    assert mx.array_equal(_hit(runner, cache20, start, follow), cold_follow).item()
