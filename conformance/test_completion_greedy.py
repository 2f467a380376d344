"""Greedy /completion on the F32 twins: the same token ids from b10621 and mlxcel."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.reference

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "List three colors:\n1.",
]


def _complete(server, prompt: str) -> dict:
    body = {"prompt": prompt, "n_predict": 32, "temperature": 0, "return_tokens": True}
    r = httpx.post(server.base_url + "/completion", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tokens_identical_on_f32_twins(reference_f32, mlxcel_f32, prompt):
    ref, mine = _complete(reference_f32, prompt), _complete(mlxcel_f32, prompt)
    assert mine["tokens"] == ref["tokens"]
    assert mine["content"] == ref["content"]
    for key in ("tokens_predicted", "tokens_evaluated", "stop_type", "truncated", "has_new_line", "prompt",
                "tokens_cached", "stop", "stopping_word", "model"):
        assert mine[key] == ref[key], key
