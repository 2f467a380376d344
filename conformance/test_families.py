"""Model families (issue 29): each family twin (fixtures/families.py) served by b10621 and by mlxcel on the same
F32 GGUF and the same command line (the pinned f32 configuration), and mlxcel on the family's MLX checkpoint.

Per pair: the reference loads and answers the GGUF (the proof that the twin is what the converter writes);
/tokenize with special tokens, /apply-template on the family's real template, a 64-token greedy completion and
logit traces (oracle/trace.py: 0 disagreements at decided positions, max |delta logprob| <= 1e-4) agree.
One server pair per family and format.
"""

from __future__ import annotations

import httpx
import pytest

from fixtures.families import FAMILIES
from oracle.processes import Pair
from oracle.trace import trace

pytestmark = pytest.mark.reference

PROMPTS = ["Once upon a time, in a small village,", "def fibonacci(n):"]
TEXTS = ["Hello world", " multiple   spaces\n\ttabs", "ünïcödé 🦙 123456", "<|im_start|>user<|im_end|>"]
CONVERSATION = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]
}
TRACE_BOUND = 1e-4  # issue 29: F32 with f32 KV


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=300)


def _greedy(base: str, prompt: str) -> list[int]:
    body = {"prompt": prompt, "n_predict": 64, "temperature": 0, "ignore_eos": True, "return_tokens": True}
    r = _post(base, "/completion", body)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


@pytest.mark.parametrize("fmt", ["gguf", "mlx"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_twin_agrees_with_the_reference(reference_binary, family, fmt):
    kind = f"f32_family_{family}" + ("_mlx" if fmt == "mlx" else "")
    with Pair(kind, (), reference_binary) as pair:
        ref, mine = pair.reference.base_url, pair.mlxcel.base_url
        for text in TEXTS:
            body = {"content": text, "add_special": True, "parse_special": True}
            want = _post(ref, "/tokenize", body).json()
            assert _post(mine, "/tokenize", body).json() == want, text
        want = _post(ref, "/apply-template", CONVERSATION)
        assert want.status_code == 200, want.text
        assert _post(mine, "/apply-template", CONVERSATION).json() == want.json()
        greedy = [(_greedy(ref, p), _greedy(mine, p)) for p in PROMPTS]
        traces = [trace(ref, mine, p, "f32", 32) for p in PROMPTS]
    for theirs, ours in greedy:
        assert len(set(theirs)) > 1  # not a path of one repeated token
        assert ours == theirs
    assert sum(t.decided for t in traces) >= 32, [t.decided for t in traces]
    assert [t.disagreements_at_decided for t in traces] == [0] * len(PROMPTS)
    assert max(t.max_abs_delta_logprob for t in traces) <= TRACE_BOUND, [t.max_abs_delta_logprob for t in traces]
