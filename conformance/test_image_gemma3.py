"""Gemma 3 images, differential (issue 33's second family): b10621 and mlxcel on the same command line,
`-m gemma3.F32.gguf --mmproj mmproj-gemma3-twin-f32.gguf` plus the projector's tuning flags (TUNING: inert on a
fixed-size tower in b10621, shown against b10621 without them), b10621's defaults otherwise, the same requests.

Server state: one slot, the gemma3 family twin's F32 GGUF and the Gemma 3 vision twin's projector
(fixtures/gemma3_vision_twin.py); every request with cache_prompt off, so each is a cold prompt.

An image here is `<start_of_image>`, 9 tokens decoded non-causally (each sees the whole image: decoded causally
instead, the first logprobs move by more than 1), `<end_of_image>`. Through /completion's multimodal_data the
answers are b10621's: the same tokens, the top-5 logprobs within 1e-3 (measured ~1e-5), the same counts.
"""

from __future__ import annotations

import base64

import pytest

from oracle import loopback
from oracle.logprobs import top_logprob_gap
from oracle.processes import MEDIA_MARKER, mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

LOGPROB_BOUND = 1e-3
PROMPT = f"<start_of_turn>user\n{MEDIA_MARKER}Describe this picture in detail.<end_of_turn>\n<start_of_turn>model\n"


@pytest.fixture(scope="module")
def pair(reference_binary):
    from fixtures.families import family_twin
    from fixtures.gemma3_vision_twin import gemma3_mmproj

    gguf = family_twin("gemma3").gguf
    args = ["--mmproj", str(gemma3_mmproj()), "-np", "1", *TUNING]
    with started(reference_server(reference_binary, gguf, args), mlxcel_server(str(gguf), args)) as urls:
        yield urls


# the projector's placement and sizing flags: for dynamic-resolution towers (which mlxcel refuses at startup) and
# batching ones; a fixed-size SigLIP tower on the CPU takes none of them (clip.cpp set_limit_image_tokens,
# clip_support_batch false, no GPU)
TUNING = [
    "--image-min-tokens",
    "64",
    "--image-max-tokens",
    "256",
    "--mtmd-batch-max-tokens",
    "8",
    "--no-mmproj-offload",
    "-mmdev",
    "none",
]


def _complete(pair, image: bytes, prompt: str = PROMPT) -> tuple[dict, dict]:
    body = {
        "prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(image).decode()]},
        "n_predict": 8,
        "temperature": 0,
        "n_probs": 5,
        "cache_prompt": False,
    }
    want, got = (loopback.post(b + "/completion", json=body, timeout=300).json() for b in pair)
    assert "error" not in want and "error" not in got, (want, got)
    assert got["content"] == want["content"]
    assert got["tokens_evaluated"] == want["tokens_evaluated"]
    worst = top_logprob_gap(want["completion_probabilities"], got["completion_probabilities"])
    assert worst <= LOGPROB_BOUND, worst
    return want, got


def test_props_report_vision(pair):
    want, got = (loopback.get(b + "/props", timeout=30).json() for b in pair)
    assert got["modalities"]["vision"] is want["modalities"]["vision"] is True


def test_an_image_of_the_towers_size_answers_as_b10621(pair):
    from fixtures.gemma3_vision_twin import N_IMAGE_TOKENS, png

    a, _ = _complete(pair, png(seed=11))
    b, _ = _complete(pair, png(seed=12))
    assert a["completion_probabilities"][0]["logprob"] != b["completion_probabilities"][0]["logprob"]
    plain = loopback.post(
        pair[0] + "/completion", json={"prompt": PROMPT.replace(MEDIA_MARKER, ""), "n_predict": 0}, timeout=60
    ).json()
    assert a["tokens_evaluated"] - plain["tokens_evaluated"] > N_IMAGE_TOKENS  # (its tokens and the text around)


def test_a_wide_image_is_resized_bilinearly_on_black_as_b10621_does(pair):
    from fixtures.gemma3_vision_twin import png

    _complete(pair, png(seed=5, width=64, height=30))


def test_a_jpeg_answers_as_b10621(pair):
    from oracle.reference import source_tree

    _complete(pair, (source_tree() / "tools" / "mtmd" / "test-1.jpeg").read_bytes())


def _chat(pair, messages: list[dict]) -> None:
    body = {
        "messages": messages,
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
        "cache_prompt": False,
    }
    want, got = (loopback.post(b + "/v1/chat/completions", json=body, timeout=300).json() for b in pair)
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert got["usage"] == want["usage"]
    pairs = zip(want["choices"][0]["logprobs"]["content"], got["choices"][0]["logprobs"]["content"], strict=True)
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for a, b in pairs
        for x, y in zip(a["top_logprobs"], b["top_logprobs"], strict=True)
    )
    assert worst <= LOGPROB_BOUND, worst


def test_chat_batches_the_prompt_as_b10621_does_on_a_sliding_window_model(pair):
    """b10621's chat path ends a sliding-window model's prompt batches where it takes context checkpoints: before
    the user message (here after a one-row batch holding BOS) and 4 positions before the end; mlxcel computes the
    same chunks (engine/checkpoints.py). Summed in one chunk instead, the answers were 5e-3 to 8e-3 apart."""
    from fixtures.gemma3_vision_twin import png

    _chat(pair, [{"role": "user", "content": "Hi there"}])
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(seed=11)).decode()},
    }
    _chat(pair, [{"role": "user", "content": [image, {"type": "text", "text": "Describe this picture in detail."}]}])


def test_an_image_of_gemma3s_real_token_count_answers_as_b10621(reference_binary):
    """Gemma 3's own image size in tokens (256): the same tower over 256-pixel images, 1024 patches pooled to 256
    tokens. b10621 attends in 64-row tiles there, in the tower (1024 rows, no mask) and in the text model (256
    image rows decoded non-causally, then the text): server/native/attention_ggml.c tiled_rows. Measured ~8e-6;
    with the rows summed one by one as a one-chunk pass the tiled path's answers were 1e-2 apart (text alone)."""
    from fixtures.families import family_twin
    from fixtures.gemma3_vision_twin import gemma3_mmproj, png

    gguf = family_twin("gemma3").gguf
    args = ["--mmproj", str(gemma3_mmproj(256)), "-np", "1"]
    with started(reference_server(reference_binary, gguf, args), mlxcel_server(str(gguf), args)) as urls:
        want, _ = _complete(urls, png(seed=11, width=256, height=256))
        _complete(urls, png(seed=12, width=640, height=488))
    plain = len(PROMPT.replace(MEDIA_MARKER, ""))  # (characters: an upper bound on the text's tokens)
    assert want["tokens_evaluated"] >= 256 + 2 and want["tokens_evaluated"] < 256 + plain


@pytest.fixture(scope="module")
def integrated(reference_binary):
    """mlxcel on the integrated checkpoint (fixtures/gemma3_vision_twin.py gemma3_mlx_dir: one directory, the
    text model, tower and projector as HF's Gemma3ForConditionalGeneration holds them), against b10621 on the GGUF
    and the projector its converter writes from the same values; both fresh, one slot."""
    from fixtures.families import family_twin
    from fixtures.gemma3_vision_twin import gemma3_mlx_dir, gemma3_mmproj

    ref = reference_server(reference_binary, family_twin("gemma3").gguf, ["--mmproj", str(gemma3_mmproj()), "-np", "1"])
    with started(ref, mlxcel_server(str(gemma3_mlx_dir()), ["-np", "1"])) as urls:
        yield urls


def test_an_integrated_gemma3_checkpoint_answers_as_the_gguf_pair_on_b10621(integrated):
    """The second family served from one MLX/HF directory: its tower read from the checkpoint's safetensors as the
    converter would write it (soft_emb_norm + 1, the projection F16, the merge from image_seq_length), the text
    model from its language_model.* weights; chat (the template's own image turn) and /completion agree."""
    from fixtures.gemma3_vision_twin import png

    props = loopback.get(integrated[1] + "/props", timeout=30).json()
    assert props["modalities"]["vision"] is True
    a, _ = _complete(integrated, png(seed=11))
    b, _ = _complete(integrated, png(seed=12, width=64, height=30))
    assert a["completion_probabilities"][0]["logprob"] != b["completion_probabilities"][0]["logprob"]
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(seed=5)).decode()},
    }
    _chat(integrated, [{"role": "user", "content": [image, {"type": "text", "text": "Describe this picture."}]}])


def test_the_projectors_tuning_flags_leave_a_fixed_size_image_as_b10621_leaves_it(pair, integrated):
    """b10621 with TUNING (pair) answers an image exactly as b10621 without them (integrated's reference: the same
    GGUF and projector), so the flags are inert there for this tower, as they are in mlxcel (whose answer with
    them is b10621's: _complete)."""
    from fixtures.gemma3_vision_twin import N_IMAGE_TOKENS, png

    body = {
        "prompt": {"prompt_string": PROMPT, "multimodal_data": [base64.b64encode(png(seed=11)).decode()]},
        "n_predict": 8,
        "temperature": 0,
        "n_probs": 5,
        "cache_prompt": False,
    }
    tuned, plain = (loopback.post(u + "/completion", json=body, timeout=300).json() for u in (pair[0], integrated[0]))
    assert tuned["completion_probabilities"] == plain["completion_probabilities"]
    assert tuned["tokens_evaluated"] == plain["tokens_evaluated"] > N_IMAGE_TOKENS
    _complete(pair, png(seed=11))
