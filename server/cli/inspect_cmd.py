"""`mlxcel inspect MODEL [--json]`: what a GGUF file, an MLX checkpoint directory or a store name holds
(architecture, dimensions, tensor types and sizes, tokenizer, chat template) and what mlxcel does with it
(server/models/inspect.py), read without loading the weights. Where b10621's --check-tensors and
--list-devices answer about one start, this answers about a file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .. import blas

PROG = "mlxcel inspect"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=PROG, description="what a model holds and what mlxcel does with it")
    p.add_argument("model", help="a GGUF file, an MLX checkpoint directory, or a name `mlxcel list` shows")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    args = p.parse_args(argv)
    blas.activate()  # before the importer's modules import mlx
    from ..models.inspect import inspect  # deferred: gguf's reader and the importer's tables (mlx)

    try:
        report = inspect(_located(args.model))
    except (ValueError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**dataclasses.asdict(report), "bytes": report.nbytes}))
    else:
        print(render(report), end="")
    return 0


def _located(spec: str) -> Path:
    """A path as given; a store name (bundled or downloaded) as the checkpoint it names (a bundled model is
    fetched and converted first, as -m would)."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    # deferred: the store's modules, for a name only
    from ..models.bundled import BUNDLED_ENCODERS, BUNDLED_MODELS
    from ..models.hub import list_snapshots, snapshot_dir

    if spec in BUNDLED_MODELS:
        return BUNDLED_MODELS[spec].materialize()
    if spec in BUNDLED_ENCODERS:
        return BUNDLED_ENCODERS[spec]()
    if spec in list_snapshots():
        return snapshot_dir(spec)
    raise ValueError(f"'{spec}' is not a file, a directory nor a store name (mlxcel list shows the names)")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _count(n: int) -> str:
    for unit, scale in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def render(report) -> str:
    rows = [f"{report.path} ({report.kind})", "", f"{'architecture':18s}{report.architecture}"]
    rows += [f"{what:18s}{value}" for what, value in report.facts]
    rows.append(
        f"{'tensors':18s}{sum(t.count for t in report.tensors)}: {_count(report.n_params)} parameters, "
        f"{_size(report.nbytes)}"
    )
    rows += [f"  {t.dtype:16s}{t.count:5d} tensors {_size(t.nbytes):>12s}" for t in report.tensors]
    rows.append("tokenizer")
    rows += [f"  {what:16s}{value}" for what, value in report.tokenizer]
    if report.template:
        first = report.template.strip().splitlines()[0][:60]
        rows.append(f"{'chat template':18s}{len(report.template)} characters: {first!r}...")
    else:
        rows.append(f"{'chat template':18s}none (chat requests use chatml, as b10621's do)")
    rows += ["", f"{'mlxcel':18s}{report.verdict}"]
    return "\n".join(rows) + "\n"
