"""Images in chat, differential (issue 33): b10621 and mlxcel on the same command line, the user's
`-m twin.gguf --mmproj mmproj-model-f32.gguf` (b10621's defaults otherwise: F16 KV cache, flash attention auto),
the same requests.

Server state: one slot, the LLaVA twin's projector (fixtures/llava_twin.py) beside the SmolLM2 F32 twin's GGUF,
--media-path at a directory holding a PNG and the sdist's test-1.jpeg; cases run in order on the one pair (the
prompt-cache case relies on the slot holding the previous request's prompt, as it does on both).

Each answer: the same tokens, every top-5 logprob within 1e-3 (measured: ~6e-6, the text path's own), the same
prompt token count (an image counts as its 16 tokens). The images move the answer (another image, another
first-token logprob), so agreement here is the image path's, not the text's.
"""

from __future__ import annotations

import base64
import shutil

import pytest

from oracle import loopback
from oracle.processes import mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

LOGPROB_BOUND = 1e-3
MEDIA: dict = {}  # the pair's --media-path (one directory, both servers)


@pytest.fixture(scope="module")
def pair(reference_binary, twin_f32, tmp_path_factory):
    from fixtures.llava_twin import llava_mmproj, png
    from oracle.reference import source_tree

    media = MEDIA["root"] = tmp_path_factory.mktemp("media")
    (media / "wide.png").write_bytes(png(40, 24, seed=5))
    shutil.copyfile(source_tree() / "tools" / "mtmd" / "test-1.jpeg", media / "test-1.jpeg")
    args = ["--mmproj", str(llava_mmproj()), "-np", "1", "--media-path", str(media)]
    with started(
        reference_server(reference_binary, twin_f32.gguf, args), mlxcel_server(str(twin_f32.gguf), args)
    ) as urls:
        yield urls


def _png_uri(**kw) -> str:
    from fixtures.llava_twin import png

    return "data:image/png;base64," + base64.b64encode(png(**kw)).decode()


def _image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _ask(base: str, parts: list[dict], **extra) -> tuple[int, dict]:
    body = {
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
        **extra,
    }
    r = loopback.post(base + "/v1/chat/completions", json=body, timeout=300)
    return r.status_code, r.json()


def _compare(pair, parts: list[dict]) -> tuple[dict, dict]:
    (s1, want), (s2, got) = (_ask(base, parts) for base in pair)
    assert s1 == 200, want
    assert s2 == 200, got
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert got["usage"] == want["usage"]
    worst = 0.0
    for a, b in zip(want["choices"][0]["logprobs"]["content"], got["choices"][0]["logprobs"]["content"], strict=True):
        assert a["token"] == b["token"]
        assert [t["token"] for t in a["top_logprobs"]] == [t["token"] for t in b["top_logprobs"]]
        worst = max(
            worst,
            *(abs(x["logprob"] - y["logprob"]) for x, y in zip(a["top_logprobs"], b["top_logprobs"], strict=True)),
        )
    assert worst <= LOGPROB_BOUND, worst
    return want, got


def _first_logprob(answer: dict) -> float:
    return answer["choices"][0]["logprobs"]["content"][0]["logprob"]


def test_props_and_models_report_vision(pair):
    ref, mine = pair
    want, got = (loopback.get(b + "/props", timeout=30).json() for b in pair)
    assert got["modalities"]["vision"] is want["modalities"]["vision"] is True
    assert got["modalities"]["audio"] is want["modalities"]["audio"] is False
    # b10621's build decodes video (MTMD_VIDEO, through ffmpeg) wherever it has vision; mlxcel decodes no video
    # and says so (the divergence in the manifest's /props entry)
    assert (want["modalities"]["video"], got["modalities"]["video"]) == (True, False)
    want, got = (loopback.get(b + "/v1/models", timeout=30).json() for b in pair)
    assert got["models"][0]["capabilities"] == want["models"][0]["capabilities"] == ["completion", "multimodal"]


def test_an_image_of_the_towers_size_answers_as_b10621(pair):
    a, _ = _compare(pair, [_image(_png_uri(seed=3)), _text("What is in this picture?")])
    b, _ = _compare(pair, [_image(_png_uri(seed=9)), _text("What is in this picture?")])
    assert abs(_first_logprob(a) - _first_logprob(b)) > 1e-2  # (the image reaches the answer)


def test_a_wide_image_is_resized_and_padded_as_b10621_does(pair):
    """40x24 PNG from --media-path: bicubic to 32x20 on a (122, 116, 104) canvas, then the tower."""
    _compare(pair, [_text("Describe"), _image("file://wide.png"), _text("briefly.")])


def test_a_jpeg_is_decoded_and_downscaled_as_b10621_does(pair):
    """The sdist's test-1.jpeg (640x488): stb_image's decode, then the resampler's downscale."""
    _compare(pair, [_image("file://test-1.jpeg"), _text("What is in this picture?")])


def test_two_images_in_one_message(pair):
    _compare(pair, [_image(_png_uri(seed=3)), _text("and"), _image(_png_uri(seed=9)), _text("differ how?")])


def test_a_repeated_image_prompt_reuses_the_cache_as_b10621(pair):
    """The same image prompt twice: the second reuses the slot's cache on both (the image span compared by its
    bytes' hash), the same count cached, the same answer. Its logprobs: mlxcel's hit is bitwise its cold run (the
    positions it recomputes take the cold run's chunk shapes, docs/prompt-cache.md), b10621's recomputes its last
    prompt token alone and drifts from its own cold run by ~1e-3, so the hit is held to the cold answer."""
    parts = [_image(_png_uri(seed=4)), _text("Again?")]
    cold, mine_cold = _compare(pair, parts)
    (s1, want), (s2, got) = (_ask(base, parts) for base in pair)
    assert s1 == s2 == 200
    assert got["usage"] == want["usage"]
    assert want["usage"]["prompt_tokens_details"]["cached_tokens"] > 16  # (the image's span reused)
    assert got["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
    assert got["choices"][0]["logprobs"] == mine_cold["choices"][0]["logprobs"]


@pytest.mark.parametrize(
    "url",
    [
        "data:text/plain;base64,aGVsbG8=",  # not an image URI
        "data:image/png,abc",  # not base64
        "data:image/png;base64," + base64.b64encode(b"not an image at all").decode(),  # no decoder reads it
        "file://../escape.png",  # outside --media-path
        "file://missing.png",
    ],
)
def test_bad_images_are_refused_in_b10621s_words(pair, url):
    (s1, want), (s2, got) = (_ask(base, [_image(url), _text("Hi")]) for base in pair)
    assert s1 >= 400, want
    assert (s2, got["error"]["type"]) == (s1, want["error"]["type"])
    assert got["error"]["message"].startswith(want["error"]["message"].split(" (")[0]), (got, want)


def test_an_image_on_the_responses_route_answers_as_b10621(pair):
    body = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": _png_uri(seed=3)},
                    {"type": "input_text", "text": "What is in this picture?"},
                ],
            }
        ],
        "max_output_tokens": 8,
        "temperature": 0,
    }
    want, got = (loopback.post(b + "/v1/responses", json=body, timeout=300) for b in pair)
    assert want.status_code == got.status_code == 200, (want.text[:300], got.text[:300])
    assert got.json()["output"][0]["content"][0]["text"] == want.json()["output"][0]["content"][0]["text"]
    assert got.json()["usage"] == want.json()["usage"]


def test_an_image_on_the_anthropic_route_answers_as_b10621(pair):
    from fixtures.llava_twin import png

    image = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(seed=9)).decode()}
    body = {
        "model": "x",
        "max_tokens": 8,
        "temperature": 0,
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": image}, {"type": "text", "text": "Describe it."}]}
        ],
    }
    want, got = (loopback.post(b + "/v1/messages", json=body, timeout=300) for b in pair)
    assert want.status_code == got.status_code == 200, (want.text[:300], got.text[:300])
    assert got.json()["content"] == want.json()["content"]
    assert got.json()["usage"] == want.json()["usage"]


def test_completion_takes_multimodal_data_as_b10621(pair):
    """/completion's {"prompt_string", "multimodal_data"}: the marker in the string, the image as base64."""
    from fixtures.llava_twin import png
    from oracle.processes import MEDIA_MARKER

    body = {
        "prompt": {
            "prompt_string": f"<|im_start|>user\n{MEDIA_MARKER}Describe it.<|im_end|>\n<|im_start|>assistant\n",
            "multimodal_data": [base64.b64encode(png(seed=3)).decode()],
        },
        "n_predict": 8,
        "temperature": 0,
        "n_probs": 3,
    }
    want, got = (loopback.post(b + "/completion", json=body, timeout=300).json() for b in pair)
    assert got["content"] == want["content"]
    assert got["tokens_evaluated"] == want["tokens_evaluated"]
    for a, b in zip(want["completion_probabilities"], got["completion_probabilities"], strict=True):
        assert a["id"] == b["id"] and abs(a["logprob"] - b["logprob"]) <= LOGPROB_BOUND


def test_v1_completions_with_a_token_prompt_is_refused_as_b10621_does(pair):
    """With a projector loaded, b10621 takes an OpenAI-shaped route's prompt through mtmd's tokenizer, which reads
    a string only: an array of ids is refused (its JSON type error)."""
    body = {"prompt": [1, 2, 3], "max_tokens": 2}
    want, got = (loopback.post(b + "/v1/completions", json=body, timeout=300) for b in pair)
    assert (got.status_code, got.json()["error"]["type"]) == (want.status_code, want.json()["error"]["type"])
    assert want.status_code == 400


@pytest.fixture(scope="module")
def integrated(reference_binary, twin_f32):
    """mlxcel on the integrated checkpoint (fixtures/llava_twin.py llava_mlx_dir: one directory, text model and
    tower, as mlx-lm and HF lay out LLaVA), against b10621 on the GGUF and its projector (the same values); both
    fresh, one slot."""
    from fixtures.llava_twin import llava_mlx_dir, llava_mmproj

    ref = reference_server(reference_binary, twin_f32.gguf, ["--mmproj", str(llava_mmproj()), "-np", "1"])
    with started(ref, mlxcel_server(str(llava_mlx_dir()), ["-np", "1"])) as urls:
        yield urls


def test_an_integrated_llava_checkpoint_answers_as_the_gguf_pair_on_b10621(integrated):
    props = loopback.get(integrated[1] + "/props", timeout=30).json()
    assert props["modalities"]["vision"] is True
    _compare(integrated, [_image(_png_uri(seed=3)), _text("What is in this picture?")])
    _compare(integrated, [_text("Describe"), _image(_png_uri(seed=5, width=40, height=24)), _text("briefly.")])


def test_counted_input_tokens_include_the_images_as_b10621(pair):
    """The count routes read and decode the images and count their tokens (process_mtmd_prompt as a placeholder)."""
    from fixtures.llava_twin import png

    chat = {
        "messages": [{"role": "user", "content": [_image(_png_uri(seed=3)), _text("and"), _image("file://wide.png")]}]
    }
    image = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(seed=9)).decode()}
    anthropic = {
        "model": "x",
        "messages": [{"role": "user", "content": [{"type": "image", "source": image}, {"type": "text", "text": "Hi"}]}],
    }
    for route, body in (("/v1/chat/completions/input_tokens", chat), ("/v1/messages/count_tokens", anthropic)):
        want, got = (loopback.post(b + route, json=body, timeout=120) for b in pair)
        assert want.status_code == got.status_code == 200, (route, want.text[:300], got.text[:300])
        assert got.json() == want.json(), route
        assert want.json()["input_tokens"] > 16


def test_a_symlink_out_of_the_media_path_is_read_by_b10621_and_refused_by_mlxcel(pair, tmp_path):
    """The divergence --media-path records (by_design): b10621 checks the path's spelling only and reads a file a
    symlink in the root points outside it; mlxcel resolves the path and refuses it (an evidence record pins it)."""
    import os

    from fixtures.llava_twin import png
    from oracle.evidence import divergence_record

    outside = tmp_path / "outside.png"
    outside.write_bytes(png(seed=3))
    link = MEDIA["root"] / "link.png"
    if not os.path.lexists(link):
        os.symlink(outside, link)
    (s1, want), (s2, got) = (_ask(base, [_image("file://link.png"), _text("Hi")]) for base in pair)
    assert s1 == 200 and "choices" in want, want
    assert s2 == 400 and got["error"]["message"] == "file path escapes the --media-path root: link.png", got
    divergence_record(
        "media-path-symlink-escape",
        ["--media-path"],
        "f32-gguf+llava",
        "/v1/chat/completions (file://link.png)",
        [{"path": "$.status", "kind": "value", "reference": s1, "mlxcel": s2}],
        "pytest conformance/test_image_chat.py -k symlink",
    )


def test_a_prompt_cut_between_two_cached_images_is_answered_where_b10621_fails(pair):
    """Server state: the pair's one slot, its cache holding an earlier test's prompt (no image at this position).

    [C, D, text] then [C, text]: the cached prompt is kept up to the end of C, which is where D begins.
    b10621's server_tokens::keep_first takes a cut between two image spans for a cut inside one
    (tokens[n - 1] and tokens[n] both media, n - 1 not a chunk's start) and fails the request with a 500 "got
    exception: Chunk not found"; mlxcel keeps C's span and answers, as b10621 answers the same prompt cold.
    Evidence of --mmproj's by_design divergence (case image-cut-between-cached-images)."""
    from oracle.evidence import divergence_record

    c, d = _image(_png_uri(seed=21)), _image(_png_uri(seed=22))
    for base in pair:
        assert _ask(base, [c, d, _text("Both?")])[0] == 200
    (s1, want), (s2, got) = (_ask(base, [c, _text("One?")]) for base in pair)
    assert (s1, want["error"]["message"]) == (500, "got exception: Chunk not found"), want
    assert s2 == 200, got
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] > 16  # (C's span reused)
    (s1, cold), (s2, mine_cold) = (_ask(base, [c, _text("One?")], cache_prompt=False) for base in pair)
    assert s1 == s2 == 200
    assert got["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
    assert got["choices"][0]["logprobs"] == mine_cold["choices"][0]["logprobs"]  # (a hit is bitwise its cold run)
    divergence_record(
        "image-cut-between-cached-images",
        ["--mmproj"],
        "f32",
        "/v1/chat/completions",
        [{"path": "$.status", "kind": "value", "reference": 500, "mlxcel": 200}],
        "pytest conformance/test_image_chat.py -k cut_between_two_cached_images",
    )


def test_images_past_the_context_are_refused_in_b10621s_words(reference_binary, twin_f32):
    """Server state: a fresh pair with -c 256 (one slot). Fifteen images of 16 tokens and the text are 271 tokens:
    refused before any decoding with b10621's 400 exceed_context_size_error, its counts (the images' tokens
    counted), the same body."""
    from fixtures.llava_twin import llava_mmproj

    args = ["--mmproj", str(llava_mmproj()), "-np", "1", "-c", "256"]
    with started(
        reference_server(reference_binary, twin_f32.gguf, args), mlxcel_server(str(twin_f32.gguf), args)
    ) as urls:
        parts = [_image(_png_uri(seed=s)) for s in range(15)] + [_text("hi")]
        (s1, want), (s2, got) = (_ask(base, parts) for base in urls)
    assert s1 == 400 and want["error"]["type"] == "exceed_context_size_error", want
    assert (s2, got) == (s1, want)
    assert want["error"]["n_prompt_tokens"] > 15 * 16
