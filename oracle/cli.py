"""mlxcel-oracle: reference | diff."""

from __future__ import annotations

import argparse
import json
import sys

from .diff import diff_exchanges
from .exchange import OracleRequest, send
from .normalize import NATIVE_COMPLETION
from .processes import F32_NUMERICS, mlxcel_server, reference_server
from .reference import ReferenceBuildError, build_reference

# Both servers get the same flags; the alias keeps the reported model name identical.
COMMON_ARGS = ("--alias", "smollm2-135m-instruct")


def run_pair(request: OracleRequest, twin_kind: str):
    """Start both servers on a twin, send `request` to each, return (reference, mlxcel) exchanges."""
    from fixtures.twins import twin

    binary = build_reference()
    t = twin(twin_kind)
    ref_args = [*COMMON_ARGS, *(F32_NUMERICS if twin_kind == "f32" else ())]
    with reference_server(binary, t.gguf, ref_args) as ref, mlxcel_server(t.mlx_model, list(COMMON_ARGS)) as mine:
        return send(ref.base_url, request), send(mine.base_url, request)


def cmd_reference(_: argparse.Namespace) -> int:
    try:
        print(build_reference())
    except ReferenceBuildError as exc:
        print(f"mlxcel-oracle: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    request = OracleRequest.from_file(args.request)
    try:
        ref, mine = run_pair(request, args.twin)
    except ReferenceBuildError as exc:
        print(f"mlxcel-oracle: {exc}", file=sys.stderr)
        return 2
    divergences = diff_exchanges(ref, mine, NATIVE_COMPLETION if request.path in ("/completion", "/completions") else ())
    if args.json:
        print(json.dumps([d.__dict__ for d in divergences], ensure_ascii=False, indent=2))
    else:
        print(f"{request.method} {request.path} on the {args.twin} twins: "
              f"{len(divergences)} difference(s)")
        for d in divergences:
            print("  " + d.describe())
    return 1 if divergences else 0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mlxcel-oracle", description="the differential oracle against b10621")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("reference", help="build (once) and print the reference llama-server path").set_defaults(
        func=cmd_reference)
    d = sub.add_parser("diff", help="send one request to both servers and diff the responses")
    d.add_argument("request", help="JSON file: {method, path, body}")
    d.add_argument("--twin", choices=["q4_1", "f32"], default="q4_1")
    d.add_argument("--json", action="store_true", help="print the differences as JSON")
    d.set_defaults(func=cmd_diff)
    args = p.parse_args(argv)
    sys.exit(args.func(args))
