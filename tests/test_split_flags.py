"""--tp-size / --pp-size (mlxcel's own, docs/scaling-out.md) against the ranks launched, and the ranks' probe
figures in GET /metrics: the pure parts, without a launch (tests/test_serving_ranks.py serves them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from server.api.prometheus import render_ranks
from server.backends.distributed import split_of, split_refusal


@pytest.mark.parametrize(
    ("tp", "pp", "size", "why"),
    [
        (2, None, 1, "--tp-size 2: a model is split over the ranks mlx.launch starts"),
        (None, 3, 1, "--pp-size 3: a model is split over the ranks mlx.launch starts"),
        (0, None, 2, "--tp-size 0: a split is over 1 or more ranks"),
        (2, 2, 4, "--tp-size and --pp-size both above 1: one split at a time"),
        (None, 3, 2, "--pp-size 3: 2 ranks were launched: the split is over all of them"),
        (2, None, 3, "--tp-size 2: 3 ranks were launched: the split is over all of them"),
        (1, 1, 2, "--tp-size 1: 2 ranks were launched: the split is over all of them"),
    ],
)
def test_a_split_that_does_not_fit_the_launch_is_refused_with_why(tp, pp, size, why):
    assert (split_refusal(tp, pp, size) or "").startswith(why)


@pytest.mark.parametrize(
    ("tp", "pp", "size", "split"),
    [
        (None, None, 1, "tensor"),
        (1, None, 1, "tensor"),
        (None, None, 3, "tensor"),
        (3, None, 3, "tensor"),
        (None, 2, 2, "pipeline"),
        (1, 2, 2, "pipeline"),
    ],
)
def test_a_split_that_fits_serves_tensor_unless_pipeline_is_asked(tp, pp, size, split):
    assert split_refusal(tp, pp, size) is None
    assert split_of(pp) == split


def _serve_absent(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    """mlxcel-server on a model path that does not exist: what it says before any model would be read."""
    argv = [sys.executable, "-m", "server", "-m", str(tmp_path / "absent"), *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_one_process_given_a_split_exits_1_in_one_line(tmp_path):
    """Without mlx.launch, --pp-size 2 stops before any model is read (the path does not exist)."""
    r = _serve_absent(tmp_path, "--pp-size", "2")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[-1].endswith(
        "--pp-size 2: a model is split over the ranks mlx.launch starts (docs/scaling-out.md); this is one"
    ), r.stderr[-500:]
    assert "Traceback" not in r.stderr


def test_the_ranks_figures_name_each_rank_and_the_slowdown_against_the_fastest():
    text = render_ranks([0.010, 0.030, 0.015])
    assert 'mlxcel:rank_probe_seconds{rank="1"} 0.03' in text.splitlines()
    assert 'mlxcel:rank_slowdown{rank="0"} 1' in text.splitlines()
    assert 'mlxcel:rank_slowdown{rank="1"} 3' in text.splitlines()
    assert 'mlxcel:rank_slowdown{rank="2"} 1.5' in text.splitlines()
    assert render_ranks([]) == ""  # one process: nothing of mlxcel's ranks


def test_a_split_size_that_is_not_a_number_is_refused_as_a_bad_value(tmp_path):
    r = _serve_absent(tmp_path, "--tp-size", "two")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert 'error while handling argument "--tp-size": not a whole number: two' in r.stderr, r.stderr[-300:]
