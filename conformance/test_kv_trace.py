"""Default-configuration parity (issue 27 point 2): logit traces (oracle/trace.py) with both servers on the same
command line, on the F32 twin, at b10621's defaults (f16 KV cache, -fa auto) and pinned to the f32 cache
(-fa off -ctk f32 -ctv f32, the tight configuration).

Measured (3 prompts x 24 tokens here; `mlxcel-oracle trace --twin f32 [--defaults]` for 5 x 32): at defaults
0 disagreements at decided positions, max |delta logprob| ~3e-5 (the issue's target 1e-3); pinned ~3e-5 (1e-4).
Over an f16 cache an f16 rounding flips on a one-ulp float32 difference and the flash-attention sums kept in f16
carry it on, so defaults are close only because the float32 model's native steps sum in ggml-cpu's order
(server/native/ggml_order.c, decode_step.py): with $MLXCEL_GGML_ORDER=0, or against mlxcel with its float32 sums
in another order (`mlxcel-oracle trace --twin f32 --defaults --noise-floor`), they part by ~3.5e-3..5e-3. Each
run writes an evidence record for the KV numerics' entries (by_design: the traces are not bitwise equal).
"""

from __future__ import annotations

import pytest

from oracle.evidence import write_record
from oracle.processes import F32_NUMERICS, Pair
from oracle.trace import trace

pytestmark = pytest.mark.reference

PROMPTS = [
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.mark.parametrize("pinned,bound", [(False, 1e-3), (True, 1e-4)], ids=["defaults", "f32-kv"])
def test_f32_twin_traces_agree_at_decided_positions(reference_binary, pinned, bound):
    with Pair("f32", (), reference_binary, pinned=pinned) as pair:
        traces = [trace(pair.reference.base_url, pair.mlxcel.base_url, p, "f32", 24) for p in PROMPTS]
    worst = max(t.max_abs_delta_logprob for t in traces)
    flags = " ".join(F32_NUMERICS) if pinned else "(b10621's defaults)"
    write_record(
        {  # the evidence behind the KV numerics' entries (mlxcel-oracle verify): equal only if bitwise
            "case": f"kv-trace-{'f32-kv' if pinned else 'defaults'}-f32",
            "entries": ["--flash-attn", "--cache-type-k", "--cache-type-v"],
            "twin": "f32",
            "request": {"method": "TRACE", "path": flags, "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": worst == 0.0 and not any(t.disagreements_at_decided for t in traces),
            "bytes_identical": False,
            "normalizations_fired": [],
            "divergences": [
                {"path": f"$trace[{i}].logprob", "kind": "value", "max_abs_delta": t.max_abs_delta_logprob}
                for i, t in enumerate(traces)
                if t.max_abs_delta_logprob or t.disagreements_at_decided
            ],
            "reproduce": f"mlxcel-oracle trace --twin f32{'' if pinned else ' --defaults'}",
        }
    )
    assert sum(t.decided for t in traces) >= 30  # the rule decides most positions
    assert [t.disagreements_at_decided for t in traces] == [0] * len(PROMPTS)
    assert max(t.max_abs_delta_logprob for t in traces) <= bound
