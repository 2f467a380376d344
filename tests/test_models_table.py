"""docs/models.md's table (oracle/models_table.py): a row is green only when everything issue 29 asks holds."""

from __future__ import annotations

import copy

from oracle.models_table import BEGIN, END, green, render

TRACE = {"rule": "f32", "decided": 40, "positions": 64, "disagreements_at_decided": 0, "max_abs_delta_logprob": 3e-5}
F32_ROW = {
    "family": "qwen3",
    "format": "F32 GGUF",
    "gguf_mib": 158.0,
    "loads": True,
    "resident_mib": {"reference": 300.0, "mlxcel": 700.0},
    "tokenize_identical": 4,
    "tokenize_cases": 4,
    "apply_template_identical": True,
    "greedy64_identical": 2,
    "greedy64_cases": 2,
    "trace": TRACE,
    "trace_defaults": {**TRACE, "max_abs_delta_logprob": 4e-4},
    "vocab": "qwen2",
    "vocab_pairs": {"pairs": 40, "passing": 40},
}


def _with(**changes):
    row = copy.deepcopy(F32_ROW)
    for key, value in changes.items():
        row[key] = value
    return row


def test_a_row_is_green_only_when_every_figure_holds():
    assert green(F32_ROW)
    assert not green(_with(apply_template_identical=False))
    assert not green(_with(tokenize_identical=3))
    assert not green(_with(greedy64_identical=1))
    assert not green(_with(trace={**TRACE, "max_abs_delta_logprob": 2e-4}))
    assert not green(_with(trace={**TRACE, "disagreements_at_decided": 1}))
    assert not green(_with(trace={**TRACE, "decided": 0}))  # nothing decided is no evidence
    assert not green(_with(trace_defaults={**TRACE, "max_abs_delta_logprob": 2e-3}))
    assert not green({"family": "x", "format": "Q2_K", "gguf_mib": 1.0, "loads": False, "error": "refused"})


def test_a_quantized_row_needs_no_greedy_identity_but_its_decided_agreement(tmp_path):
    row = _with(format="Q4_K_M", trace={**TRACE, "rule": "q4_1", "max_abs_delta_logprob": 0.3})
    del row["greedy64_identical"], row["greedy64_cases"], row["trace_defaults"]
    assert green(row)
    assert not green({**row, "trace": {**row["trace"], "disagreements_at_decided": 2}})


def test_render_rewrites_only_the_block_between_the_markers(tmp_path):
    doc = tmp_path / "models.md"
    doc.write_text(f"intro\n{BEGIN}\nold\n{END}\noutro\n", encoding="utf-8")
    report = tmp_path / "r.json"
    import json

    report.write_text(json.dumps({"date": "2026-12-04", "commit": "abc", "rows": [F32_ROW]}), encoding="utf-8")
    render(report, doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith(f"{END}\noutro\n") and "old" not in text
    assert "| qwen3 | F32 GGUF | yes | 40/40 (qwen2) |" in text and "| green |" in text
