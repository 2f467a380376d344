"""mlxcel-oracle: reference | run | diff | trace | record | bind | verify | report."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .corpus import CORPUS_DIR, REPO_ROOT, load_case, load_corpus
from .diff import diff_exchanges
from .evidence import evidence_dir, load_records, verify
from .exchange import OracleRequest, send
from .processes import NoiseFloorPair, Pair
from .reference import ReferenceBuildError, build_reference
from .transcripts import RECORD_ENV


def _manifest_entries() -> dict[str, list[dict]]:
    from compat.schema import MANIFEST_DIR, load_json, shard_files

    return {p.stem: load_json(p)["entries"] for p in shard_files(MANIFEST_DIR)}


def cmd_reference(_: argparse.Namespace) -> int:
    print(build_reference())
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    path = Path(args.request)
    data = json.loads(path.read_text(encoding="utf-8"))
    if "request" in data:  # a corpus case
        case = load_case(path)
        request, names, twin = case.request, case.normalize, args.twin or case.twin
    else:
        request, names, twin = OracleRequest.from_dict(data), (), args.twin or "q4_1"
    with Pair(twin) as pair:
        ref, mine = send(pair.reference.base_url, request), send(pair.mlxcel.base_url, request)
    report = diff_exchanges(ref, mine, names)
    if args.json:
        print(json.dumps(report.to_dict()["divergences"], ensure_ascii=False, indent=2))
    else:
        print(
            f"{request.method} {request.path} on the {twin} twins: {len(report.divergences)} difference(s); "
            f"bytes {'identical' if report.bytes_identical else 'differ'}; normalizations fired: "
            f"{', '.join(report.normalizations_fired) or 'none'}"
        )
        for d in report.divergences:
            print("  " + d.describe())
    return 0 if report.identical else 1


def _run_corpus(live: bool, only: str | None = None, missing: bool = False) -> tuple[int, int]:
    from .corpus import TRANSCRIPT_DIR
    from .runner import run_case

    cases = [
        c
        for c in load_corpus()
        if (only is None or c.name == only) and not (missing and (TRANSCRIPT_DIR / f"{c.name}.json").is_file())
    ]
    failed = 0
    from .corpus import SHARED, server_states

    pairs = [
        (key, [c for c in group if c.twin == t])
        for key, group in server_states(cases)
        for t in sorted({c.twin for c in group})
    ]  # the shared state: one pair per twin
    for key, mine in pairs:
        from .processes import server_pair, shared_args

        twin, extra = mine[0].twin, mine[0].args if key != SHARED else shared_args()
        if live:
            with Pair(twin, extra, store=mine[0].store) as pair:
                results = [run_case(c, pair.mlxcel.base_url, pair.reference.base_url, key == SHARED) for c in mine]
        else:
            with server_pair(twin, extra, with_reference=False, store=mine[0].store)[1] as srv:
                results = [run_case(c, srv.base_url, None, key == SHARED) for c in mine]
        for r in results:
            ok, why = r.meets_expectation()
            failed += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} {r.case.name} [{r.source}] "
                f"{'identical' if r.report.identical else f'{len(r.report.divergences)} diff(s)'}"
                + ("" if ok else f": {why}")
            )
    return len(cases), failed


def cmd_run(args: argparse.Namespace) -> int:
    n, failed = _run_corpus(live=not args.offline, only=args.case)
    rc = cmd_report(args)
    print(f"{n} cases, {failed} not as expected")
    return 1 if failed or rc else 0


def cmd_record(args: argparse.Namespace) -> int:
    os.environ[RECORD_ENV] = "1"
    n, _failed = _run_corpus(live=True, only=args.case, missing=args.missing)
    print(f"recorded {n} reference transcripts under fixtures/transcripts/")
    return 0


def cmd_bind(_: argparse.Namespace) -> int:
    from .live import BINDING, bind

    print(f"{BINDING.relative_to(REPO_ROOT)}: bound to {bind(build_reference())}")
    return 0


def cmd_verify(_: argparse.Namespace) -> int:
    entries = [e for es in _manifest_entries().values() for e in es]
    from .rotation import read_rotated

    records = load_records()
    rotated = read_rotated(evidence_dir())
    failures = verify(entries, records, rotated)
    for f in failures:
        print(f, file=sys.stderr)
    live = sum(r.get("reference_source") == "live" for r in records)
    backed = {eid for r in records for eid in r["entries"]}
    waiting = sum(1 for e in entries if e.get("test") in rotated and e["id"] not in backed)
    print(
        f"verify: {len(records)} evidence records ({live} against the live reference, {len(records) - live} "
        "against its bound recordings)"
        + (f"; {waiting} entries of rotated-out tests checked in another landing" if waiting else "")
        + "; "
        + ("ok" if not failures else f"{len(failures)} entr{'y' if len(failures) == 1 else 'ies'} not backed")
    )
    return 1 if failures else 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import build_report, write_report

    report = build_report(_manifest_entries(), load_records())
    md, js = write_report(report, Path(getattr(args, "out", None) or evidence_dir().parent))
    print(f"report: {md} and {js}")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from .trace import trace

    prompts = args.prompt or [
        "The capital of France is",
        "Once upon a time, in a small village,",
        "def fibonacci(n):",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "List three colors:\n1.",
    ]
    worst, disagreements = 0.0, 0
    out = []
    config = "b10621's defaults" if args.defaults or args.twin != "f32" else "f32 KV, -fa off"
    pair_kind = NoiseFloorPair if args.noise_floor else Pair
    if args.noise_floor:
        config += "; mlxcel against mlxcel with MLXCEL_CPU_KERNELS=0 in the reference's place"
    with pair_kind(args.twin, tuple(args.server_arg or ()), pinned=not args.defaults) as pair:
        for p in prompts:
            t = trace(
                pair.reference.base_url, pair.mlxcel.base_url, p, args.twin, args.n_predict, threshold=args.threshold
            )
            worst, disagreements = max(worst, t.max_abs_delta_logprob), disagreements + t.disagreements_at_decided
            out.append(t.to_dict())
            first = t.first_divergence
            print(
                f"{p[:40]!r}: {t.positions} positions, {t.decided} decided, {t.disagreements_at_decided} "
                f"disagreements at decided positions, max |delta logprob| {t.max_abs_delta_logprob:.3g}"
                + (f", first divergence at {first['position']} (gap {first['gap']:.3g})" if first else "")
            )
    print(
        f"trace ({args.twin}, {config}): {len(prompts)} prompts x {args.n_predict} tokens, {disagreements} disagreements "
        f"at decided positions, max |delta logprob| {worst:.3g}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if disagreements else 0


def cmd_models(args) -> int:
    from fixtures.families import QUANT_TYPES

    from .models import F32_FORMATS, run

    out = run(args.format or [*F32_FORMATS, *QUANT_TYPES], args.family, Path(args.out) if args.out else None)
    print(out)
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # its options are oracle/bench.py's own
        from .bench import main as bench_main

        bench_main(argv[1:])
        return
    p = argparse.ArgumentParser(prog="mlxcel-oracle", description="the differential oracle against b10621")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("bench", help="speed side by side with the reference (see `mlxcel-oracle bench --help`)")
    sub.add_parser("reference", help="build (once) and print the reference llama-server path").set_defaults(
        func=cmd_reference
    )
    d = sub.add_parser("diff", help="send one request (or corpus case) to both servers and diff the responses")
    d.add_argument("request", help="a corpus case, or a JSON file {method, path, body}")
    d.add_argument("--twin", choices=["q4_1", "f32"], default=None)
    d.add_argument("--json", action="store_true", help="print the differences as JSON")
    d.set_defaults(func=cmd_diff)
    r = sub.add_parser("run", help=f"run the corpus ({CORPUS_DIR.relative_to(REPO_ROOT)}), write evidence and a report")
    r.add_argument("--offline", action="store_true", help="use recorded transcripts instead of the binary")
    r.add_argument("--case", default=None, help="run this one case (its server pair started for it)")
    r.add_argument("--out", help="where report.md / report.json go (default: .oracle/)")
    r.set_defaults(func=cmd_run)
    rec = sub.add_parser("record", help="re-record every case's reference transcript (or one case's)")
    rec.add_argument("--case", default=None, help="record this one case")
    rec.add_argument("--missing", action="store_true", help="record only the cases without a transcript")
    rec.set_defaults(func=cmd_record)
    sub.add_parser(
        "bind",
        help="bind the committed transcripts to the reference binary built here (after a "
        "full live run found no drift): replays then stand for it (oracle/live.py)",
    ).set_defaults(func=cmd_bind)
    sub.add_parser(
        "verify", help="gate: supported entries need identical evidence, by_design ones a difference"
    ).set_defaults(func=cmd_verify)
    rep = sub.add_parser("report", help="write the Markdown and JSON report from the evidence")
    rep.add_argument("--out")
    rep.set_defaults(func=cmd_report)
    t = sub.add_parser("trace", help="logit traces along the reference's greedy path")
    t.add_argument("--twin", choices=["q4_1", "f32"], default="f32")
    t.add_argument("--prompt", action="append")
    t.add_argument("--n-predict", type=int, default=64)
    t.add_argument("--threshold", type=float, default=None)
    t.add_argument("--json", help="write the per-position traces here")
    t.add_argument(
        "--defaults",
        action="store_true",
        help="both servers at b10621's defaults (f16 KV, -fa auto) "
        "on the F32 twin too, not the pinned f32 configuration",
    )
    t.add_argument(
        "--noise-floor",
        action="store_true",
        help="no reference: a second mlxcel whose float32 sums "
        "run in another order (its kernels off, OpenBLAS) stands in for it, to measure how far two "
        "float32-close implementations part in that configuration",
    )
    t.add_argument(
        "--server-arg",
        action="append",
        help="a flag both servers get (repeat for each word), e.g. --server-arg=--rope-scaling --server-arg=yarn",
    )
    t.set_defaults(func=cmd_trace)
    m = sub.add_parser("models", help="every family twin x format on both servers: reports/models/<date>-<commit>.json")
    m.add_argument("--format", action="append", help="F32 GGUF, F32 MLX or a llama-quantize type (repeatable)")
    m.add_argument("--family", action="append", help="one family (repeatable; default: all)")
    m.add_argument("--out", help="the JSON's path")
    m.set_defaults(func=cmd_models)
    args = p.parse_args(argv)
    try:
        sys.exit(args.func(args))
    except ReferenceBuildError as exc:
        print(f"mlxcel-oracle: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # python -m oracle.cli
    main()
