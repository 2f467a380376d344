"""Logit traces: the reference's greedy path with its top-k log-probabilities, scored teacher-forced on
mlxcel along the same tokens, compared at decided positions.

A position is decided when the reference's top-1 minus top-2 log-probability gap exceeds a threshold
(2.0 nats on the Q4_1 twins, 0.5 on F32). Reported: disagreements at decided positions, the first
divergence (any position whose argmax differs) with its gap, and max |delta logprob| of the path token
over agreeing positions.

Both servers get the same command line: on the F32 twin the pinned f32 configuration (-fa off -ctk f32 -ctv
f32, oracle/processes.py F32_NUMERICS) unless `mlxcel-oracle trace --defaults`, which leaves b10621's defaults
(f16 KV, -fa auto) on both, as on the Q4_1 twin. mlxcel scores a path as a generation computes it: the prompt
prefilled, then one decode step per token (server/backends/mlx_backend.py score). Measured (5 default prompts x 32
tokens, issue 27): F32 twin at defaults 0 disagreements at decided positions, max |delta logprob| 3.5e-3;
pinned f32 ~2e-5; conformance/test_kv_trace.py asserts these on a smaller set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import loopback

THRESHOLDS = {"q4_1": 2.0, "f32": 0.5}


@dataclass
class Trace:
    prompt: str
    tokens: list[int]
    positions: int
    decided: int
    disagreements_at_decided: int
    first_divergence: dict | None
    max_abs_delta_logprob: float
    threshold: float
    per_position: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def reference_path(base_url: str, prompt: str, n_predict: int, n_probs: int) -> tuple[list[int], list[dict]]:
    body = {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": 0,
        "n_probs": n_probs,
        "return_tokens": True,
        "ignore_eos": True,
    }
    r = loopback.post(base_url + "/completion", json=body, timeout=600)
    r.raise_for_status()
    data = r.json()
    return data["tokens"], data["completion_probabilities"]


def mlxcel_scores(base_url: str, prompt: str, tokens: list[int], n_probs: int) -> list[dict]:
    r = loopback.post(
        base_url + "/mlxcel/score", json={"prompt": prompt, "tokens": tokens, "n_probs": n_probs}, timeout=600
    )
    r.raise_for_status()
    return r.json()["positions"]


def compare(prompt: str, tokens: list[int], ref: list[dict], mine: list[dict], threshold: float) -> Trace:
    decided = disagreements = 0
    first = None
    max_delta = 0.0
    rows = []
    for i, (tok, r, m) in enumerate(zip(tokens, ref, mine, strict=False)):
        top = r["top_logprobs"]
        gap = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
        is_decided = gap > threshold
        mine_top1 = m["top_logprobs"][0]["id"]
        agree = mine_top1 == top[0]["id"]
        delta = abs(m["logprob"] - r["logprob"])
        decided += is_decided
        if not agree:
            disagreements += is_decided
            if first is None:
                first = {"position": i, "reference": top[0]["id"], "mlxcel": mine_top1, "gap": gap}
        else:
            max_delta = max(max_delta, delta)
        rows.append(
            {"position": i, "token": tok, "gap": gap, "decided": is_decided, "agree": agree, "delta_logprob": delta}
        )
    return Trace(prompt, tokens, len(rows), decided, disagreements, first, max_delta, threshold, rows)


def trace(
    ref_url: str,
    mlxcel_url: str,
    prompt: str,
    twin: str,
    n_predict: int = 64,
    n_probs: int = 5,
    threshold: float | None = None,
) -> Trace:
    tokens, probs = reference_path(ref_url, prompt, n_predict, n_probs)
    mine = mlxcel_scores(mlxcel_url, prompt, tokens, n_probs)
    return compare(prompt, tokens, probs, mine, THRESHOLDS[twin] if threshold is None else threshold)
