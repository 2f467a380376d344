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
