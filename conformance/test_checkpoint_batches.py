"""A sliding-window model's prompt batches, differential: b10621 ends them where it takes context checkpoints
(before the user message, 4 positions before the end), none with --swa-full or -ctxcp 0; mlxcel computes the
same chunks from the same flags (server/engine/checkpoints.py). A one-row batch sums as vec_dot, so a chunk
placed otherwise moves the answer by ~5e-3 on the Gemma 3 twin at b10621's defaults.

Server state: a fresh pair per command line, one slot, the gemma3 family twin's F32 GGUF on both; one cold chat
request each, compared token for token and within 1e-3 on every top-5 logprob (measured ~7e-6)."""

from __future__ import annotations

import pytest

from oracle import loopback
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference


@pytest.mark.parametrize("flags", [[], ["--swa-full"], ["-ctxcp", "0"], ["-cms", "0"]], ids=str)
def test_a_chat_prompt_is_computed_in_b10621s_batches(reference_binary, flags):
    from fixtures.families import family_twin

    gguf = family_twin("gemma3").gguf
    ref, mine = (
        reference_server(reference_binary, gguf, ["-np", "1", *flags]),
        mlxcel_server(str(gguf), ["-np", "1", *flags]),
    )
    body = {
        "messages": [{"role": "user", "content": "Hi there"}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    with started(ref, mine) as urls:
        want, got = (loopback.post(u + "/v1/chat/completions", json=body, timeout=120).json() for u in urls)
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    rows = zip(want["choices"][0]["logprobs"]["content"], got["choices"][0]["logprobs"]["content"], strict=True)
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for a, b in rows
        for x, y in zip(a["top_logprobs"], b["top_logprobs"], strict=True)
    )
    assert worst <= 1e-3, worst


def test_a_resumed_prompt_reuses_what_each_server_keeps(reference_binary):
    """The divergence -ctxcp and -cms record (by_design): on a second prompt sharing the first's prefix, b10621
    resumes from its last context checkpoint, mlxcel from its own prefix snapshot; the answer's tokens agree, the
    cached counts do not (an evidence record pins it)."""
    from fixtures.families import family_twin
    from oracle.evidence import divergence_record

    gguf = family_twin("gemma3").gguf
    ref, mine = reference_server(reference_binary, gguf, ["-np", "1"]), mlxcel_server(str(gguf), ["-np", "1"])
    answers = []
    with started(ref, mine) as urls:
        for content in ("Hi there, tell me a story about a cat.", "Hi there, tell me a story about a dog."):
            body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0}
            answers.append([loopback.post(u + "/v1/chat/completions", json=body, timeout=120).json() for u in urls])
    (cold_want, cold_got), (want, got) = answers
    assert cold_want["usage"] == cold_got["usage"] and cold_want["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in (want, got)]
    assert cached[0] > 0 and cached[1] > 0 and cached[0] != cached[1], cached  # (b10621: its checkpoint's count)
    divergence_record(
        "checkpoint-resumed-prompt-gemma3",
        ["--ctx-checkpoints", "--checkpoint-min-step"],
        "gemma3-gguf",
        "/v1/chat/completions (a second prompt)",
        [
            {
                "path": "$.usage.prompt_tokens_details.cached_tokens",
                "kind": "value",
                "reference": cached[0],
                "mlxcel": cached[1],
            }
        ],
        "pytest conformance/test_checkpoint_batches.py -k resumed",
    )
