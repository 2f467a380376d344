"""Long prompts at b10621's defaults: parity at the configuration users run, past the short prompts the traces use.

Both servers on the same command line (b10621's defaults: f16 KV cache, -fa auto, which is on for its CPU backend),
one slot, the same ~600-token prompt, greedy, top-5 logprobs. Two of b10621's kernels only run on such prompts:
- a ubatch of 64 rows or more takes flash attention's tiled path (ggml_compute_forward_flash_attn_ext_tiled: the
  query in f32, keys in 64-cell tiles, a tile's online softmax through ggml_v_expf): server/native/attention_ggml.c
  tiled_rows;
- a one-row decode step over 512 cells or more (n_kv pads to 256: past 256 positions) splits its keys into as many
  parts as b10621 has generation threads (-t; default the physical cores) and combines the parts' sums in order:
  flash_split_row, the part count from server/cpu_threads.py.
Measured before both (the one-chunk sums row by row, one part): max |delta logprob| 1.2e-2 .. 8.3e-2 on these
prompts; after: ~1e-5 (the same bound as the traces: 1e-3). The sliding-window and capped-score families (Gemma 3,
Gemma 2) go through the same tiles with their masks.
"""

from __future__ import annotations

import pytest

from oracle import loopback
from oracle.logprobs import top_logprob_gap
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

LOGPROB_BOUND = 1e-3
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches in the park".split()
PROMPT = " ".join(WORDS[i % len(WORDS)] + str(i % 7) for i in range(300))


def _gguf(family: str):
    if family == "smollm2":
        from fixtures.twins import twin

        return twin("f32").gguf
    from fixtures.families import family_twin

    return family_twin(family).gguf


@pytest.mark.parametrize(
    "family,args",
    # (Llama 3 at -t 3 only: SmolLM2 is the llama graph at the default -t; measured at both, ~1e-5)
    [("smollm2", []), ("gemma3", []), ("gemma2", []), ("llama3", ["-t", "3"])],
    ids=["smollm2", "gemma3-sliding", "gemma2-capped", "llama3-t3"],
)
def test_a_long_prompt_answers_as_b10621_at_its_defaults(reference_binary, family, args):
    gguf = _gguf(family)
    flags = ["-np", "1", *args]
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "n_probs": 5, "cache_prompt": False}
    with started(reference_server(reference_binary, gguf, flags), mlxcel_server(str(gguf), flags)) as urls:
        want, got = (loopback.post(u + "/completion", json=body, timeout=600).json() for u in urls)
    assert got["content"] == want["content"]
    assert got["tokens_evaluated"] == want["tokens_evaluated"]
    # the state the case needs: ubatches of >= 64 rows (512 + the rest), decode steps past 256 cells
    assert want["tokens_evaluated"] - 512 >= 64
    assert top_logprob_gap(want["completion_probabilities"], got["completion_probabilities"]) <= LOGPROB_BOUND
