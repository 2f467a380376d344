"""Issue 33's vision twins, proven on b10621 first (docs/media-plan.md): the reference loads the LLaVA twin's
projector (fixtures/llava_twin.py, written as its legacy converter writes one) beside the SmolLM2 F32 twin and
answers a chat request with an image, counting the image as its 16 tokens. mlxcel still refuses --mmproj; this
is the twin the differential image cases will run on."""

from __future__ import annotations

import base64

import pytest

from oracle import loopback
from oracle.processes import reference_server

pytestmark = pytest.mark.reference


def _chat(base: str, parts: list[dict]) -> dict:
    body = {
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
    }
    r = loopback.post(base + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text[:400]
    return r.json()


def test_b10621_serves_the_llava_twin_and_counts_an_image_as_its_tokens(reference_binary, twin_f32):
    from fixtures.llava_twin import N_IMAGE_TOKENS, llava_mmproj, png

    server = reference_server(reference_binary, twin_f32.gguf, ["--mmproj", str(llava_mmproj()), "-np", "1"])
    try:
        server.start(300)
        props = loopback.get(server.base_url + "/props", timeout=30).json()
        assert props["modalities"]["vision"] is True, props.get("modalities")
        uri = "data:image/png;base64," + base64.b64encode(png()).decode()
        text = {"type": "text", "text": "What is in this picture?"}
        plain = _chat(server.base_url, [text])
        seen = _chat(server.base_url, [{"type": "image_url", "image_url": {"url": uri}}, text])
        other = _chat(
            server.base_url,
            [
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(seed=8)).decode()},
                },
                text,
            ],
        )
        extra = seen["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"]
        assert extra == N_IMAGE_TOKENS, (extra, seen["usage"], plain["usage"])  # (no begin/end text for LLaVA)
        assert other["usage"]["prompt_tokens"] == seen["usage"]["prompt_tokens"]

        # the image reaches the answer: another picture, another first-token logprob (the twin's scale at work)
        def first(r: dict) -> float:
            return r["choices"][0]["logprobs"]["content"][0]["logprob"]

        assert abs(first(seen) - first(other)) > 1e-3, (first(seen), first(other), first(plain))
    finally:
        server.cleanup()
