"""A sliding-window model's prompt batches, differential: b10621 ends them where it takes context checkpoints
(before the user message, 4 positions before the end), none with --swa-full or -ctxcp 0; mlxcel computes the
same chunks from the same flags (server/engine/checkpoints.py). A one-row batch sums as vec_dot, so a chunk
placed otherwise moves the answer by ~5e-3 on the Gemma 3 twin at b10621's defaults.

Server state: a fresh pair per command line, one slot, the gemma3 family twin's F32 GGUF on both; one cold chat
request each, compared token for token and within 1e-3 on every top-5 logprob (measured ~7e-6)."""

from __future__ import annotations

import pytest

from oracle import loopback
from oracle.processes import mlxcel_server, reference_server, start_together

pytestmark = pytest.mark.reference


@pytest.mark.parametrize("flags", [[], ["--swa-full"], ["-ctxcp", "0"], ["-cms", "0"]], ids=str)
def test_a_chat_prompt_is_computed_in_b10621s_batches(reference_binary, flags):
    from fixtures.families import family_twin

    gguf = family_twin("gemma3").gguf
    ref, mine = (
        reference_server(reference_binary, gguf, ["-np", "1", *flags]),
        mlxcel_server(str(gguf), ["-np", "1", *flags]),
    )
    try:
        start_together(ref, mine)
        body = {
            "messages": [{"role": "user", "content": "Hi there"}],
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 5,
        }
        want, got = (
            loopback.post(s.base_url + "/v1/chat/completions", json=body, timeout=120).json() for s in (ref, mine)
        )
    finally:
        ref.cleanup()
        mine.cleanup()
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    rows = zip(want["choices"][0]["logprobs"]["content"], got["choices"][0]["logprobs"]["content"], strict=True)
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for a, b in rows
        for x, y in zip(a["top_logprobs"], b["top_logprobs"], strict=True)
    )
    assert worst <= 1e-3, worst
