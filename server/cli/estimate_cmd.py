"""`mlxcel estimate -m MODEL [llama-server's options] [--json]` and `mlxcel-server ... --estimate-memory`: the
resident memory the server this command line starts would take at its peak (server/backends/memory_estimate.py),
printed before a weight is loaded. Where b10621's `--fit on` adjusts unset sizes to the device's memory, mlxcel
says what the sizes given cost, and the user picks -c, -np and the cache types."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import blas
from .args import build_parser
from .local import Own, command_line

PROG = "mlxcel estimate"


OWN = (Own("json", ("--json",), value=False), Own("help", ("-h", "--help"), value=False))
USAGE = f"""usage: {PROG} -m MODEL [llama-server's options: -c, -np, -ctk, -ctv, -ub, ...] [--json]

The resident memory `mlxcel-server` takes with these options, at a full context: the runtime, the weights, the KV
cache and the compute buffers (and the load's own peak).
"""


def main(argv: list[str]) -> int:
    parsed = command_line(argv, OWN, PROG, USAGE)
    if isinstance(parsed, int):
        return parsed
    own, rest = parsed
    args = build_parser(PROG).parse_args(rest)
    return report(args, PROG, as_json=own["json"])


def report(args, prog: str, as_json: bool = False) -> int:
    """The estimate for a parsed command line, printed; the exit status."""
    if not args.model:
        print(f"{prog}: error: -m MODEL names the model to estimate", file=sys.stderr)
        return 2
    blas.activate()  # before mlx is imported
    # deferred: mlx and the model's modules, after blas.activate(); --help and a refusal never pay for them
    from ..backends.memory_estimate import Sizes, estimate
    from ..models.loader import read_config
    from ..models.store import ModelNotFound, resolve_model
    from .startup import AUTO_SLOTS, kv_numerics, slot_context, unified_kv

    try:
        checkpoint = resolve_model(args.model)
        config = read_config(checkpoint)
    except (ModelNotFound, RuntimeError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    unified = unified_kv(args)
    slots = args.parallel if args.parallel > 0 else AUTO_SLOTS
    cells = slot_context(args.ctx_size, 0 if unified else args.parallel) or int(
        config.get("max_position_embeddings", 0)
    )
    kv = kv_numerics(args)
    sizes = Sizes(cells, 1 if unified else slots, kv.k_type, kv.v_type, args.ubatch_size)
    from ..models.step_operands import ggml_order_on  # deferred: as above

    e = estimate(
        checkpoint,
        config,
        sizes,
        runtime_bytes(checkpoint),
        bool(blas.STATE.native) and ggml_order_on(blas.STATE.native),
    )
    if as_json:
        print(json.dumps({**e.__dict__, "loading": e.loading, "serving": e.serving, "peak": e.peak}))
        return 0
    streams = "1 unified stream" if unified else f"{slots} slot(s)"
    mib = lambda n: f"{n / 2**20:9.1f} MiB"
    rows = [
        f"{prog}: {args.model}: {cells} cells x {streams}, K {kv.k_type} / V {kv.v_type}, ubatch {args.ubatch_size}",
        f"  runtime     {mib(e.runtime)}  (the interpreter, the server's libraries, the tokenizer: measured here)",
        f"  weights     {mib(e.weights)}  (the checkpoint's tensors as loaded)",
        *(
            [f"  ggml order  {mib(e.ggml_order_copy)}  (float32 products summed as b10621 sums them: a 2nd copy)"]
            if e.ggml_order_copy
            else []
        ),
        f"  KV cache    {mib(e.kv)}  (a full context)",
        f"  KV growth   {mib(e.kv_growth)}  (the buffer the last growth replaced, kept in MLX's cache)",
        f"  compute     {mib(e.compute)}  (a prompt chunk's activations, a step's logits)",
        f"  loading     {mib(e.loading)}  (the weights read: the load's own peak)",
        f"  peak        {mib(e.peak)}",
    ]
    if args.spec_draft_model:
        rows.append("  (the draft model's weights and cache are not counted)")
    print("\n".join(rows))
    return 0


def runtime_bytes(checkpoint: Path) -> int:
    """This process's resident memory once it holds what a server holds before its model: the server's modules
    (imported here) and the model's tokenizer (loaded here). Linux's /proc; 0 where there is none."""
    # deferred: what the server imports is what is measured here
    import uvicorn  # noqa: F401  (the HTTP server)

    # deferred: as above
    from ..api import app  # noqa: F401  (the routes, FastAPI)
    from ..models.tokenizer import ModelTokenizer

    ModelTokenizer(checkpoint)
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
