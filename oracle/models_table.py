"""`python -m oracle.models_table reports/models/X.json`: docs/models.md's family x format table, generated from an
`mlxcel-oracle models` run. The block between the markers is rewritten; the rest of the document is left alone.

A row is green when both servers load the file, every /tokenize case and the template agree, every F32 greedy
completion is identical, and the traces meet issue 29's bounds: 0 disagreements at decided positions, and on F32
max |delta logprob| <= 1e-4 with the f32 KV cache and <= 1e-3 at b10621's defaults.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BEGIN, END = "<!-- models-table:begin (python -m oracle.models_table) -->", "<!-- models-table:end -->"
DOC = Path("docs/models.md")
PINNED_BOUND, DEFAULTS_BOUND = 1e-4, 1e-3


def green(row: dict) -> bool:
    if not row.get("loads"):
        return False
    ok = row["tokenize_identical"] == row["tokenize_cases"] and row["apply_template_identical"]
    trace = row["trace"]
    ok = ok and trace["disagreements_at_decided"] == 0 and trace["decided"] > 0
    if "greedy64_cases" in row:
        ok = ok and row["greedy64_identical"] == row["greedy64_cases"]
        ok = ok and trace["max_abs_delta_logprob"] <= PINNED_BOUND
        defaults = row.get("trace_defaults")
        ok = ok and defaults is not None and defaults["disagreements_at_decided"] == 0
        ok = ok and defaults["max_abs_delta_logprob"] <= DEFAULTS_BOUND
    return ok


def _trace_cell(trace: dict | None) -> str:
    if trace is None:
        return "-"
    return f"{trace['disagreements_at_decided']}/{trace['decided']} decided, max Δ {trace['max_abs_delta_logprob']:.1e}"


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def table(report: dict) -> str:
    head = (
        "| family | format | loads | tokenizer pairs | /tokenize, template | greedy 64 | trace (rule) | "
        "trace at defaults | file MiB | resident MiB: b10621 / mlxcel (x file) | row |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in report["rows"]:
        pairs = row.get("vocab_pairs", {})
        pairs_cell = f"{pairs.get('passing', 0)}/{pairs.get('pairs', 0)} ({row.get('vocab', '?')})"
        if not row.get("loads"):
            lines.append(
                f"| {row['family']} | {row['format']} | no: {row.get('error', '')} | {pairs_cell} | | | | | "
                f"{row['gguf_mib']:.0f} | | red |"
            )
            continue
        tok = f"{row['tokenize_identical']}/{row['tokenize_cases']}, {'same' if row['apply_template_identical'] else 'differs'}"
        greedy = f"{row['greedy64_identical']}/{row['greedy64_cases']}" if "greedy64_cases" in row else "-"
        rss = row.get("resident_mib") or {}
        ratio = (rss.get("mlxcel") or 0) / row["gguf_mib"] if row["gguf_mib"] else 0
        lines.append(
            f"| {row['family']} | {row['format']} | yes | {pairs_cell} | {tok} | {greedy} | "
            f"{_trace_cell(row['trace'])} ({row['trace']['rule']}) | {_trace_cell(row.get('trace_defaults'))} | "
            f"{row['gguf_mib']:.0f} | {_mib(rss.get('reference'))} / {_mib(rss.get('mlxcel'))} ({ratio:.1f}x) | "
            f"{'green' if green(row) else 'red'} |"
        )
    source = f"From `{report.get('source', '')}` (commit {report['commit']}, {report['date']}).\n\n"
    return source + head + "\n".join(lines) + "\n"


def render(report_path: Path, doc: Path = DOC) -> None:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    report["source"] = str(report_path)
    text = doc.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + table(report) + text[end:], encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m oracle.models_table")
    p.add_argument("report", type=Path)
    p.add_argument("--doc", type=Path, default=DOC)
    args = p.parse_args()
    render(args.report, args.doc)


if __name__ == "__main__":
    main()
