"""`mlxcel-oracle diff` runs both servers and reports the native-key-set difference honestly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reference

REQUEST = Path(__file__).parent.parent / "fixtures" / "requests" / "post-completion.greedy-f32.json"


def test_diff_reports_what_mlxcel_lacks_and_nothing_it_matches(reference_binary, twin_f32, tmp_path):
    # backend_sampling is echoed but mlxcel draws with the CPU chain (by_design): the content differs, nothing else
    case = json.loads(REQUEST.read_text())
    case["request"]["body"] = {
        "prompt": "Once upon a time",
        "n_predict": 16,
        "temperature": 1.0,
        "seed": 7,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "backend_sampling": True,
    }
    req = tmp_path / "case.json"
    req.write_text(json.dumps(case))
    proc = subprocess.run(
        [sys.executable, "-c", "from oracle.cli import main; main()", "diff", str(req), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    divergences = json.loads(proc.stdout)
    assert ("$.content", "value") in [(d["path"], d["kind"]) for d in divergences]
    # values of what the draws changed; the keys, types and generation_settings (the switch echoed) agree
    assert all(d["kind"] == "value" and not d["path"].startswith("$.generation_settings") for d in divergences)
    assert proc.returncode == 1


def test_diff_exits_zero_when_responses_agree(reference_binary, twin_q4_1, tmp_path):
    req = tmp_path / "tok.json"
    req.write_text(json.dumps({"method": "POST", "path": "/tokenize", "body": {"content": "Hello <|im_end|>"}}))
    proc = subprocess.run(
        [sys.executable, "-c", "from oracle.cli import main; main()", "diff", str(req)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 difference(s)" in proc.stdout
