"""oracle/bench_table.py: docs/cpu-speed.md's table from a bench run's JSON, ratios inside the noise as parity."""

from __future__ import annotations

import json

import pytest

from oracle import bench_table


def _run(reference: dict, mlxcel: dict) -> dict:
    """A bench JSON with one twin: every repetition's figures per server."""
    reps = len(next(iter(reference.values())))
    return {
        "commit": "abc123",
        "date": "2026-12-03T17:00:00Z",
        "cpu": "AMD EPYC",
        "cores": 2,
        "mlxcel_blas": "/x/libscipy_openblas.so | Sandybridge",
        "repetitions": reps,
        "twins": {
            "f32": {
                "samples": {
                    "reference": [{k: v[i] for k, v in reference.items()} for i in range(reps)],
                    "mlxcel": [{k: v[i] for k, v in mlxcel.items()} for i in range(reps)],
                }
            }
        },
    }


def test_overlapping_repetitions_are_parity_and_separated_ones_a_win_or_a_loss():
    c = bench_table.compare("decode_tps_1", [40, 44, 48], [46, 50, 52])  # medians 44 vs 50: 1.14x, ranges overlap
    assert c.ratio == pytest.approx(50 / 44) and (c.low, c.high) == (pytest.approx(46 / 48), pytest.approx(52 / 40))
    assert c.verdict == "parity"
    assert bench_table.compare("decode_tps_1", [40, 41, 42], [50, 51, 52]).verdict == "mlxcel better"
    assert bench_table.compare("prompt_tps_512", [50, 51, 52], [40, 41, 42]).verdict == "reference better"


def test_lower_is_better_figures_invert_the_ratio_and_rss_is_one_reading():
    faster = bench_table.compare("ttft_s", [0.10, 0.11, 0.12], [0.05, 0.05, 0.06])  # mlxcel takes half the time
    assert faster.ratio == pytest.approx(2.2) and faster.verdict == "mlxcel better"
    rss = bench_table.compare("peak_rss_mib", [2300, 2300], [1700, 1700])
    assert rss.ratio == pytest.approx(2300 / 1700) and rss.verdict == "one reading"


def test_the_table_from_json_and_the_marked_block_rewritten(tmp_path):
    run = _run(
        {"decode_tps_1": [40, 44, 48], "prompt_tps_512": [500, 510, 520], "peak_rss_mib": [2300] * 3},
        {"decode_tps_1": [46, 50, 52], "prompt_tps_512": [650, 660, 700], "peak_rss_mib": [1700] * 3},
    )
    block = bench_table.table(run)
    rows = {line.split(" |")[0]: line for line in block.splitlines() if line.startswith("| ")}
    assert rows["| decode, 1 stream, greedy (tokens/s)"].endswith("| 44 | 50 | 1.14 (0.96-1.30) **=** |")
    assert rows["| prompt, 512 tokens"].endswith("| 510 | 660 | 1.29 (1.25-1.40) **+** |")
    assert "(one reading)" in rows["| peak RSS (MiB)"]
    assert "| aggregate, 4 streams" not in block  # a figure the run lacks is left out
    assert "at abc123" in block and "3 repetitions" in block and "libscipy_openblas.so" in block
    assert "1 parity, 1 mlxcel better, 0 reference better" in block

    source = tmp_path / "run.json"
    source.write_text(json.dumps(run))
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{bench_table.BEGIN}\nold table\n{bench_table.END}\nafter\n")
    bench_table.main([str(source), "--doc", str(doc)])
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{bench_table.END}\nafter\n")
    assert "old table" not in text and block in text
    bench_table.main([str(source), "--doc", str(doc)])  # idempotent: the same block again
    assert doc.read_text() == text


def test_a_document_without_the_markers_is_an_error(tmp_path):
    source, doc = tmp_path / "run.json", tmp_path / "doc.md"
    source.write_text(json.dumps(_run({"decode_tps_1": [1.0]}, {"decode_tps_1": [1.0]})))
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit):
        bench_table.main([str(source), "--doc", str(doc)])
    assert doc.read_text() == "no markers\n"


def test_the_matrix_table_puts_each_figure_beside_its_bound():
    """oracle/bench_matrix_table.py: a row per twin, format and figure, the band's verdict, mlx_lm.server's median
    and mlxcel's ratio over it (its error where a figure timed out, empty in a run without it), and the bound the run
    measured (decode: bandwidth over the bytes a token reads; prompt: GEMM peak over 2 FLOPs a parameter)."""
    from oracle import bench_matrix, bench_matrix_table

    sizes = {"bytes_per_token": 800e6, "matmul_params": 1.2e9}
    bounds = bench_matrix.bounds(sizes, bandwidth_gbs=32.0, gflops=300.0)
    assert bounds == {"decode_tps_1": 40.0, "prompt_tps": 125.0}
    samples = {
        "reference": [{"decode_tps_1": r, "prompt_tps_512": 80.0, "peak_rss_mib": 3000.0} for r in (16.0, 17.0)],
        "mlxcel": [{"decode_tps_1": m, "prompt_tps_512": 79.0, "peak_rss_mib": 1700.0} for m in (24.0, 25.0)],
    }
    run = {
        "commit": "abc123",
        "date": "2026-12-05T13:00:00Z",
        "cores": 2,
        "cpu": "Xeon",
        "machine": {"stream_bandwidth_gbs": 32.0, "gemm_gflops": 300.0},
        "repetitions": 2,
        "n_predict": 32,
        "cells": [{"shape": "llama-3.2-1b", "format": "Q4_K_M", "samples": samples, "bounds": bounds}],
    }
    # a run before the anchor: its columns empty
    text = bench_matrix_table.table(run)
    assert (
        "| llama-3.2-1b | Q4_K_M | decode, 1 stream (tokens/s) | 16.5 | 24.5 | 1.48 (1.41-1.56) **+** |  |  | 40 |"
        in text
    )
    assert (
        "| llama-3.2-1b | Q4_K_M | prompt, 512 tokens (tokens/s) | 80 | 79 | 0.99 (0.99-0.99) **-** |  |  | 125 |"
        in text
    )
    assert "peak RSS (MiB) | 3000 | 1700 | 1.76 **(one reading)** |  |  |  |" in text
    assert text.endswith("Verdicts: 0 parity, 1 mlxcel better, 1 reference better.")
    # with mlx_lm.server: its median and mlxcel over it; a figure that timed out shows the error
    samples["mlx_lm_server"] = [{"decode_tps_1": a, "peak_rss_mib": 2000.0} for a in (5.0, 6.0)]
    run["cells"][0]["mlx_lm_server_errors"] = ["prompt_tps_512: timed out after 180 s"]
    text = bench_matrix_table.table(run)
    assert "| 16.5 | 24.5 | 1.48 (1.41-1.56) **+** | 5.5 | 4.45 (4.00-5.00) **+** | 40 |" in text
    assert "| 80 | 79 | 0.99 (0.99-0.99) **-** | timed out after 180 s |  | 125 |" in text
    assert "peak RSS (MiB) | 3000 | 1700 | 1.76 **(one reading)** | 2000 | 1.18 **(one reading)** |  |" in text
    assert text.endswith(
        "Verdicts: 0 parity, 1 mlxcel better, 1 reference better. "
        "Against mlx_lm.server: 0 parity, 1 mlxcel better, 0 mlx_lm.server better."
    )


def test_a_later_matrix_run_replaces_its_cells_and_says_so():
    """bench_matrix_table.merge: a cell re-measured in a later run replaces the same twin and format's; the table
    names that run under its rows, and keeps the first run's other cells."""
    from oracle import bench_matrix_table

    def run(commit: str, decode: float, shapes: tuple[str, ...]) -> dict:
        samples = {"reference": [{"decode_tps_1": 10.0}], "mlxcel": [{"decode_tps_1": decode}]}
        cells = [{"shape": s, "format": "Q4_K_M", "samples": samples, "bounds": {"decode_tps_1": 40.0}} for s in shapes]
        machine = {"stream_bandwidth_gbs": 31.0, "gemm_gflops": 300.0}
        return {"commit": commit, "date": "2026-12-05T16:00:00Z", "machine": machine, "repetitions": 1,
                "n_predict": 32, "cells": cells}  # fmt: skip

    merged = bench_matrix_table.merge(
        [run("aaa", 12.0, ("llama-3.2-1b", "gemma-3-1b")), run("bbb", 20.0, ("gemma-3-1b",))]
    )
    assert [(c["shape"], c["samples"]["mlxcel"][0]["decode_tps_1"]) for c in merged["cells"]] == [
        ("llama-3.2-1b", 12.0),
        ("gemma-3-1b", 20.0),
    ]
    text = bench_matrix_table.table(merged)
    assert "| gemma-3-1b | Q4_K_M | decode, 1 stream (tokens/s) | 10 | 20 | 2.00 (2.00-2.00) **+** |" in text
    assert "The gemma-3-1b Q4_K_M rows are from a later run, 2026-12-05 16:00 UTC at bbb" in text
    assert "llama-3.2-1b Q4_K_M rows are from" not in text


def test_an_anchor_figure_past_its_time_gives_up_the_ones_that_hold_its_work():
    """oracle/bench.py: a figure of mlx_lm.server that times out takes the costlier ones with it (not tried), and
    the repetitions' errors are kept once each, named by their figure."""
    from oracle.bench import _costlier, anchor_summary

    keys = ["ttft_s", "decode_tps_1", "aggregate_tps_8", "aggregate_tps_16", "prompt_tps_512", "prompt_tps_2048"]
    assert _costlier("ttft_s", keys) == keys[1:]
    assert _costlier("decode_tps_1", keys) == ["aggregate_tps_8", "aggregate_tps_16"]
    assert _costlier("aggregate_tps_8", keys) == ["aggregate_tps_16"]
    assert _costlier("prompt_tps_512", keys) == ["prompt_tps_2048"]
    assert _costlier("prompt_tps_2048", keys) == []
    runs = [
        {"decode_tps_1": 2.0, "prompt_tps_512_error": "timed out after 180 s"},
        {"decode_tps_1": 4.0, "prompt_tps_512_error": "timed out after 180 s"},
    ]
    summary, errors = anchor_summary(runs)
    assert summary == {"decode_tps_1": {"min": 2.0, "median": 3.0, "max": 4.0}}
    assert errors == ["prompt_tps_512: timed out after 180 s"]


def test_a_drafters_acceptance_from_its_later_repetitions_is_kept_and_the_table_marks_none(tmp_path):
    """A drafter that learns across requests drafts from the second repetition on: its acceptance is summarized
    over those repetitions, not dropped with the first's keys; a drafter that never drafted shows '-'."""
    from oracle import bench, bench_spec_table

    plain = [{"decode_tps_1": 40.0}, {"decode_tps_1": 42.0}, {"decode_tps_1": 41.0}]
    learnt = [
        {"decode_tps_1": 40.0},
        {"decode_tps_1": 120.0, "draft_acceptance": 1.0},
        {"decode_tps_1": 118.0, "draft_acceptance": 0.9},
    ]
    never = [{"decode_tps_1": 41.0}] * 3
    out = bench.summarize_speculative(
        {
            ("reference", "plain"): plain,
            ("mlxcel", "plain"): plain,
            ("reference", "draft"): learnt,
            ("mlxcel", "draft"): never,
        }
    )
    assert out["reference"]["draft_acceptance_draft"] == {"min": 0.9, "median": 0.95, "max": 1.0}
    assert out["reference"]["speedup"] == pytest.approx(118.0 / 41.0)
    assert "draft_acceptance_draft" not in out["mlxcel"]
    runs = []
    for name in ("a", "b"):  # the table reads several runs (a repetitive-text one, a free-text one)
        runs.append(tmp_path / f"{name}.json")
        runs[-1].write_text(json.dumps({"twins": {"f32": {"speculative": {"ngram-mod": {"prompts": name, **out}}}}}))
    rows = bench_spec_table.table(*runs).splitlines()
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| ngram-mod (f32, a)", "| ngram-mod (f32, b)"]
    assert rows[2].endswith("| 2.88 | 41.0 | 41.0 | 1.00 | - |")
