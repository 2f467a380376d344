"""A damaged GGUF passed with -m (or to `mlxcel convert`) is one line naming the file and b10621's words for
the problem, never a traceback from gguf's reader (server/models/gguf_check.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.damaged_gguf import damaged_dir
from server.models.bundled import source_gguf
from server.models.gguf_check import DamagedGGUF, check_gguf

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "startup"
# damaged copy -> the startup case whose recording holds what b10621 printed for it
CASES = {
    "truncated.gguf": "gguf-truncated",
    "truncated-header.gguf": "gguf-truncated-header",
    "old-format.gguf": "gguf-old-format",
    "newer-version.gguf": "gguf-newer-version",
    "empty.gguf": "gguf-empty",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_problem_is_named_in_b10621s_words(name):
    """The problem mlxcel names is a line b10621 printed for the same file (its recorded startup)."""
    with pytest.raises(DamagedGGUF) as caught:
        check_gguf(damaged_dir() / name)
    said = json.loads((TRANSCRIPTS / f"{CASES[name]}.json").read_text())["reference"]["said"]
    assert any(line.endswith(f": {caught.value.problem}") for line in said.splitlines()), (caught.value.problem, said)
    assert str(caught.value) == f"failed to load model '{damaged_dir() / name}': {caught.value.problem}"


def test_the_bundled_gguf_passes_and_every_cut_of_it_is_named(tmp_path):
    src = source_gguf()
    check_gguf(src)
    data = src.read_bytes()[:2_000_000]
    problems = set()
    for cut in (0, 3, 4, 7, 16, 23, 24, 30, 1000, 20_000, 1_785_000, 1_786_000, 2_000_000):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        with pytest.raises(DamagedGGUF) as caught:
            check_gguf(tmp_path / "cut.gguf")
        problems.add(caught.value.problem)
    assert problems == {
        "failed to read magic",
        "failed to read header",
        "failed to read key-value pairs",
        "string length 20 exceeds remaining file size 18 bytes",
        "failed to read tensor info",
        "tensor 'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete",
    }


def test_a_directory_and_a_missing_file(tmp_path):
    with pytest.raises(DamagedGGUF, match="failed to read magic"):
        check_gguf(tmp_path)
    with pytest.raises(DamagedGGUF, match=r"failed to open GGUF file '.*none\.gguf' \(No such file or directory\)"):
        check_gguf(tmp_path / "none.gguf")


def test_convert_says_it_in_one_line(tmp_path):
    src = damaged_dir() / "truncated-header.gguf"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from server.cli.main import mlxcel_main; mlxcel_main()",
            "convert",
            str(src),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"mlxcel convert: error: failed to load model '{src}': string length 20 exceeds remaining file size 18 bytes\n"
    )
