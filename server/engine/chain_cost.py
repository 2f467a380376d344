"""mlxcel's sampler chain alone, in microseconds per token on random logits: what `mlxcel-oracle bench`
reports beside the servers' figures (it runs `python -m server.engine.chain_cost [N_VOCAB]` as a process and
reads the JSON this prints: the oracle imports nothing from server/)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from .sampling import Chain
from .types import SamplingParams

CHAINS = {
    "greedy": SamplingParams(temperature=0.0),
    "default_chain": SamplingParams(seed=1),
    "topk_topp_temp": SamplingParams(seed=1, temperature=0.7, top_k=40, top_p=0.9, min_p=0.0),
    "penalties_dry": SamplingParams(seed=1, repeat_penalty=1.1, frequency_penalty=0.1, dry_multiplier=0.8),
}


def chain_cost_us(n_vocab: int = 49152, steps: int = 200) -> dict[str, float]:
    """Each chain's microseconds per token, drawing from `steps` random logits of the fixture's vocabulary."""
    rng = np.random.default_rng(0)
    logits = [rng.standard_normal(n_vocab).astype(np.float32) * 3 for _ in range(steps)]
    out = {}
    for name, params in CHAINS.items():
        chain = Chain(params, n_vocab)
        start = time.perf_counter()
        for x in logits:
            chain.accept(chain.sample(x))
        out[f"chain_us_per_token_{name}"] = (time.perf_counter() - start) / steps * 1e6
    return out


if __name__ == "__main__":
    print(json.dumps(chain_cost_us(*(int(a) for a in sys.argv[1:2]))))
