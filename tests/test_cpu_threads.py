"""-t / -tb, -C / -Cr / --cpu-strict, --prio and --poll (server/cpu_threads.py): parsed as b10621's handlers parse
them, the batch role inheriting generation's values as postprocess_cpu_params does, and mlxcel's pool sized by
them: a decode step's jobs run on -t's threads, a prompt's on -tb's, with the same numbers whatever the count."""

from __future__ import annotations

import pytest

from server import blas
from server.cli.args import build_parser
from server.cpu_threads import GGML_MAX_N_THREADS, CpuParams, ThreadConfig, apply, parse_cpu_mask, parse_cpu_range


def _mask(text: str, parse=parse_cpu_mask) -> list[int]:
    mask = [False] * GGML_MAX_N_THREADS
    parse(text, mask)
    return [i for i, on in enumerate(mask) if on]


def test_masks_and_ranges_read_as_b10621_reads_them():
    assert _mask("3") == [0, 1]
    assert _mask("0x5") == [0, 2]
    assert _mask("F0") == [4, 5, 6, 7]
    assert _mask("0-3", parse_cpu_range) == [0, 1, 2, 3]
    assert _mask("-1", parse_cpu_range) == [0, 1]
    assert _mask("510-", parse_cpu_range) == [510, 511]
    for bad, parse in (("0xg", parse_cpu_mask), ("12", parse_cpu_range), ("0-512", parse_cpu_range)):
        with pytest.raises(ValueError):
            _mask(bad, parse)


def _config(*argv: str) -> ThreadConfig:
    return ThreadConfig.from_args(build_parser("mlxcel-server").parse_args(list(argv)))


def test_the_batch_role_takes_generations_values_where_it_has_none():
    c = _config("-t", "3", "-C", "3", "-Cr", "4-5", "--cpu-strict", "1", "--prio", "1", "--poll", "0")
    assert c.decode.threads == c.batch.threads == 3
    assert [i for i, on in enumerate(c.decode.mask or ()) if on] == [0, 1, 4, 5]  # -C and -Cr ORed
    assert c.batch.placement() == c.decode.placement() and c.decode.strict == 1 and c.decode.poll == 0
    assert c.refusal() is None
    assert _config("-tb", "2").batch.threads == 2 and _config("-tb", "2").decode.threads == -1
    assert _config().decode == CpuParams() and _config().refusal() is None


def test_one_pool_is_placed_once_a_batch_form_alone_places_it_two_different_ones_are_refused():
    alone = _config("-Cb", "3", "--prio-batch", "1")
    assert alone.refusal() is None and alone.pool().prio == 1 and alone.pool().mask == alone.batch.mask
    assert _config("-C", "1", "-Cb", "1").refusal() is None
    refused = _config("-C", "1", "-Cb", "3").refusal()
    assert refused is not None and refused.startswith("error: --cpu-mask-batch")
    assert _config("--poll", "10", "--poll-batch", "20").refusal() is not None


@pytest.mark.heavy  # loads the F32 twin
def test_generation_runs_on_t_threads_prompts_on_tb_and_the_numbers_do_not_change(twin_f32):
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.loader import load_checkpoint

    native = blas.STATE.native
    runner = open_backend(load_checkpoint(twin_f32.mlx_dir))
    tokens = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 5

    def run() -> list:
        cache = runner.new_cache()
        out = [runner.prefill(cache, tokens)] + [runner.decode(cache, t) for t in tokens[:4]]
        mx.eval(out)
        return out

    before = run()
    try:
        n = apply(_config("-t", "1", "-tb", "2", "--poll", "0"))
        assert n >= 2 and native.mlxcel_pool_width() == 1  # this thread decodes: -t's one thread
        after = run()
    finally:
        apply(_config())  # every thread again, the default spin
    assert native.mlxcel_pool_width() == native.mlxcel_threads()
    for a, b in zip(before, after, strict=True):
        assert mx.array_equal(a, b).item()


def _allowed_cpus() -> list[set[int]]:
    """Each thread of this process's CPUs (Cpus_allowed_list)."""
    import os

    from server.cpu_threads import _cpulist

    out = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status", encoding="ascii") as f:
            line = next(x for x in f if x.startswith("Cpus_allowed_list:"))
        out.append(_cpulist(line.split(":", 1)[1]))
    return out


def test_numa_places_the_pools_workers_as_ggml_places_its_threads():
    from server.cpu_threads import apply_numa, numa_nodes

    native = blas.STATE.native
    assert apply_numa("distribute", [{0, 1}]) == []  # one node: nothing to place, as ggml_is_numa() says
    assert numa_nodes()  # the kernel's nodes (one at least)
    n = native.mlxcel_threads()
    everything = set(range(GGML_MAX_N_THREADS)) & set().union(*numa_nodes())
    try:
        placed = apply_numa("distribute", [{0}, {1}])  # two one-CPU nodes: worker i on node i % 2
        assert placed == [{w % 2} for w in range(1, n)]
        assert {1} in _allowed_cpus()  # worker 1 now runs on CPU 1 only
    finally:
        apply_numa("numactl", [everything, set()])  # (numactl's CPUs: the process's, every one here)
    assert {1} not in _allowed_cpus() or everything == {1}


def test_b10621s_default_generation_threads_are_the_distinct_sibling_sets(tmp_path):
    from server.cpu_threads import physical_cores

    for cpu, siblings in enumerate(["3", "3", "c", "c", "10"]):  # two cores of two threads, one of one
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings").write_text(siblings + "\n")
    (tmp_path / "cpu6" / "topology").mkdir(parents=True)  # (cpu5 missing: the count stops there)
    (tmp_path / "cpu6" / "topology" / "thread_siblings").write_text("40\n")
    assert physical_cores(str(tmp_path)) == 3
    assert physical_cores(str(tmp_path / "none")) >= 1  # nothing readable: the logical count


def test_t_sets_the_parts_a_one_row_step_splits_its_keys_into_past_256_cells(twin_f32):
    """b10621's flash attention splits a one-row step's keys over its -t threads once n_kv reaches 512 (past 256
    positions): the decode numbers then depend on -t as b10621's do (the oracle: conformance/test_long_prompts.py);
    below 256 positions they do not."""
    import mlx.core as mx

    from server.backends import open_backend
    from server.models.kv_numerics import KVNumerics
    from server.models.loader import load_checkpoint

    runner = open_backend(load_checkpoint(twin_f32.mlx_dir), kv=KVNumerics.from_flags(None, None, None))
    tokens = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 40

    def step(n: int, threads: str) -> mx.array:
        apply(_config("-t", threads))
        cache = runner.new_cache()
        runner.prefill(cache, tokens[:n])
        out = runner.decode(cache, tokens[n])
        mx.eval(out)
        return out

    try:
        assert mx.array_equal(step(200, "1"), step(200, "3")).item()
        assert not mx.array_equal(step(300, "1"), step(300, "3")).item()
        assert mx.array_equal(step(300, "3"), step(300, "3")).item()
    finally:
        apply(_config())


def test_a_draft_models_steps_run_on_td_threads():
    """-td / -tbd (b10621's draft threadpools, the target's counts where not given): the calling thread's jobs take
    -td's count while it runs the draft model (server/engine/speculative.py Drafter.propose), -t's otherwise;
    without a draft model they configure nothing, as in b10621."""
    from server.cpu_threads import draft_steps

    native = blas.STATE.native
    if native is None or not hasattr(native, "mlxcel_pool_draft"):
        pytest.skip("mlxcel's kernels are not loaded")
    assert _config("-td", "1").draft == (0, 0)  # (no draft model)
    assert _config("-md", "d", "-td", "0").draft == (-1, 0)  # (<= 0: every thread, as hardware_concurrency)
    try:
        n = apply(_config("-md", "d", "-t", "2", "-td", "1", "-tbd", "2"))
        assert n >= 2 and native.mlxcel_pool_width() == 2
        with draft_steps():
            assert native.mlxcel_pool_width() == 1
            with draft_steps():  # (nested: the outer phase comes back)
                assert native.mlxcel_pool_width() == 1
            assert native.mlxcel_pool_width() == 1
        assert native.mlxcel_pool_width() == 2
        apply(_config("-md", "d", "-t", "1"))  # -td not given: the draft's steps on the target's -t
        with draft_steps():
            assert native.mlxcel_pool_width() == 1
    finally:
        apply(_config())
    assert native.mlxcel_pool_width() == native.mlxcel_threads()
