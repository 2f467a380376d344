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


def _debug_embeddings(log: str) -> dict:
    """The last MTMD_DEBUG_EMBEDDINGS block b10621 printed (clip.cpp: token 0's first and last 16 values, stats)."""
    import re

    log = re.sub(r"\d+\.\d{2}\.\d{3}\.\d{3} [IWED] ", "", log)  # (each value is a log call of its own)
    block = log.rsplit("=== MTMD_DEBUG_EMBEDDINGS ===", 1)[1].split("=== END MTMD_DEBUG_EMBEDDINGS ===", 1)[0]
    first = re.search(r"Token 0 \(first 16 values\): ([^\n]*)", block).group(1).split()
    last = re.search(r"Token 0 \(last 16 values\): +([^\n]*)", block).group(1).split()
    stats = dict(re.findall(r"(mean|std|min|max|sum)=(-?[0-9.]+)", block))
    shape = re.search(r"Shape: \[(\d+), (\d+)\]", block).groups()
    return {
        "first": [float(x) for x in first],
        "last": [float(x) for x in last],
        "stats": {k: float(v) for k, v in stats.items()},
        "shape": tuple(int(x) for x in shape),
    }


def _printed(reference_binary, gguf, mmproj, image: bytes) -> dict:
    """b10621's MTMD_DEBUG_EMBEDDINGS print for one image (mtmd prints at verbosity 4)."""
    server = reference_server(reference_binary, gguf, ["--mmproj", str(mmproj), "-np", "1", "-lv", "4"])
    server.env["MTMD_DEBUG_EMBEDDINGS"] = "1"
    try:
        server.start(300)
        uri = "data:image/png;base64," + base64.b64encode(image).decode()
        _chat(server.base_url, [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "Hi"}])
        return _debug_embeddings(server.log_path.read_text(errors="replace"))
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def printed_and_encoded(reference_binary, twin_f32):
    """b10621's print of the projector's output for one PNG (MTMD_DEBUG_EMBEDDINGS), and mlxcel's encoding of it."""
    from fixtures.llava_twin import llava_mmproj, png
    from server.media.png import decode_rgb
    from server.models.clip_llava import LlavaEncoder

    want = _printed(reference_binary, twin_f32.gguf, llava_mmproj(), png(seed=11))
    return want, LlavaEncoder.from_gguf(llava_mmproj()).encode(decode_rgb(png(seed=11)))  # the bytes b10621 read


def _gap(want: dict, got) -> float:
    import numpy as np

    return float(
        max(np.abs(got[0, :16] - np.array(want["first"])).max(), np.abs(got[0, -16:] - np.array(want["last"])).max())
    )


def test_mlxcels_llava_encoder_follows_b10621s_graph(printed_and_encoded):
    """server/models/clip_llava.py against b10621's own print of the projector's output: the shape, and the first
    token's first and last 16 values within 1e-3 (another image moves them by ~0.65: the graph, its quirks, the
    pixels and the weights' layout are b10621's)."""
    from fixtures.llava_twin import N_IMAGE_TOKENS, N_TEXT_EMBD

    want, got = printed_and_encoded
    assert want["shape"] == (N_TEXT_EMBD, N_IMAGE_TOKENS) and got.shape == (N_IMAGE_TOKENS, N_TEXT_EMBD)
    assert _gap(want, got) <= 1e-3, _gap(want, got)


def test_mlxcels_llava_encoder_gives_b10621s_printed_values(printed_and_encoded):
    """The same values to b10621's printed 6 decimals, and the output's statistics: the bar the image traces need.
    It holds through ggml's own sums (server/models/ggml_ops.py): numpy's float32 forms are ~2.5e-4 apart after two
    blocks, as 1e-6 differences flip F16 roundings in the quick-GELU table."""
    want, got = printed_and_encoded
    assert _gap(want, got) <= 2e-6, _gap(want, got)
    stats = {"mean": got.mean(), "std": got.std(), "min": got.min(), "max": got.max(), "sum": got.sum()}
    for key, value in want["stats"].items():
        assert abs(stats[key] - value) <= 2e-6 + 1e-5 * abs(value), (key, stats[key], value)


@pytest.fixture(scope="module")
def gemma3_printed_and_encoded(reference_binary):
    """b10621's print of the Gemma 3 twin's projector output for one PNG, and mlxcel's encoding of it."""
    from fixtures.families import family_twin
    from fixtures.gemma3_vision_twin import gemma3_mmproj, png
    from server.media.png import decode_rgb
    from server.models.projectors import load_projector_gguf

    want = _printed(reference_binary, family_twin("gemma3").gguf, gemma3_mmproj(), png(seed=11))
    return want, load_projector_gguf(gemma3_mmproj()).encode(decode_rgb(png(seed=11)))


def test_mlxcels_gemma3_encoder_gives_b10621s_printed_values(gemma3_printed_and_encoded):
    """SigLIP, the 2x2 pool, RMSNorm x soft_emb_norm and the F16 projection (server/models/clip_gemma3.py): the
    shape, token 0's first and last 16 values to b10621's printed 6 decimals, and the statistics."""
    from fixtures.gemma3_vision_twin import N_IMAGE_TOKENS

    want, got = gemma3_printed_and_encoded
    assert want["shape"] == (got.shape[1], N_IMAGE_TOKENS) and got.shape[0] == N_IMAGE_TOKENS
    assert [f"{v:.6f}" for v in got[0, :16]] == [f"{v:.6f}" for v in want["first"]]
    assert [f"{v:.6f}" for v in got[0, -16:]] == [f"{v:.6f}" for v in want["last"]]
    stats = {"mean": got.mean(), "std": got.std(), "min": got.min(), "max": got.max(), "sum": got.sum()}
    for key, value in want["stats"].items():
        assert abs(stats[key] - value) <= 2e-6 + 1e-5 * abs(value), (key, stats[key], value)


def test_mlxcels_audio_encoder_gives_b10621s_printed_values(reference_binary, twin_f32):
    """The Qwen2-Audio twin's projector output for the sdist's test-2.mp3 (one 30-second chunk, 750 tokens) against
    b10621's MTMD_DEBUG_EMBEDDINGS print: the shape, the first token's first and last 16 values to the print's 6
    decimals, the output's statistics. Through mlxcel's own decode (miniaudio), mel (the whisper preprocessor) and
    tower (server/models/whisper_audio.py)."""
    import numpy as np

    from fixtures.audio_twin import N_AUDIO_TOKENS, audio_mmproj
    from oracle.processes import MEDIA_MARKER
    from oracle.reference import source_tree
    from server.api.media_input import decode_audio
    from server.models.whisper_audio import Qwen2AudioEncoder

    clip = (source_tree() / "tools" / "mtmd" / "test-2.mp3").read_bytes()
    server = reference_server(
        reference_binary, twin_f32.gguf, ["--mmproj", str(audio_mmproj()), "-np", "1", "-lv", "4"]
    )
    server.env["MTMD_DEBUG_EMBEDDINGS"] = "1"
    try:
        server.start(300)
        body = {"prompt": {"prompt_string": "Hi " + MEDIA_MARKER, "multimodal_data": [base64.b64encode(clip).decode()]}}
        loopback.post(server.base_url + "/completion", json={**body, "n_predict": 1}, timeout=300)
        want = _debug_embeddings(server.log_path.read_text(errors="replace"))
    finally:
        server.cleanup()
    encoder = Qwen2AudioEncoder.from_gguf(audio_mmproj())
    chunks = decode_audio(clip, encoder.args.n_mel)
    got = encoder.encode(chunks[0])
    assert len(chunks) == 1 and want["shape"] == (encoder.n_embd, N_AUDIO_TOKENS) == got.shape[::-1]
    assert _gap(want, got) <= 2e-6, _gap(want, got)
    stats = {"mean": got.mean(), "min": got.min(), "max": got.max()}  # (b10621's std: its own float sums)
    for key, value in stats.items():
        assert abs(value - want["stats"][key]) <= 2e-6 + 1e-5 * abs(value), (key, value, want["stats"][key])
    assert float(np.abs(got).max()) > 0.1  # (not a vacuous zero output)
