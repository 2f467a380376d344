"""Audio, differential (issue 33's audio family): b10621 and mlxcel on the same command line,
`-m SmolLM2 F32 twin --mmproj mmproj-qwen2audio-twin-f32.gguf` (b10621's defaults otherwise), the same requests.

Server state: one slot, every request with cache_prompt off (a cold prompt each). A clip is decoded by miniaudio to
16 kHz mono (server/media/miniaudio.py), cut into 30-second log-mel chunks by the whisper preprocessor
(server/media/mel.py), each chunk 750 audio tokens from the Whisper tower and Qwen2-Audio's projector
(server/models/whisper_audio.py), between `<|audio_bos|>` and `<|audio_eos|>`. Measured: the projector's output
equals b10621's MTMD_DEBUG_EMBEDDINGS print to its 6 decimals; the answers' top-5 logprobs ~5e-7 apart (bound
1e-3), the same tokens and counts; two clips move the first logprob apart (the cases are not vacuous).
"""

from __future__ import annotations

import base64

import pytest

from oracle import loopback
from oracle.evidence import live_record
from oracle.logprobs import top_logprob_gap
from oracle.processes import MEDIA_MARKER, mlxcel_server, reference_server, started

pytestmark = pytest.mark.reference

LOGPROB_BOUND = 1e-3
PROMPT = f"<|im_start|>user\n{MEDIA_MARKER}What is in this clip?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def pair(reference_binary, twin_f32):
    from fixtures.audio_twin import audio_mmproj

    args = ["--mmproj", str(audio_mmproj()), "-np", "1"]
    with started(reference_server(reference_binary, twin_f32.gguf, args), mlxcel_server(str(twin_f32.gguf), args)) as u:
        yield u


def _mp3() -> bytes:
    from oracle.reference import source_tree

    return (source_tree() / "tools" / "mtmd" / "test-2.mp3").read_bytes()


def _complete(pair, clip: bytes) -> dict:
    body = {
        "prompt": {"prompt_string": PROMPT, "multimodal_data": [base64.b64encode(clip).decode()]},
        "n_predict": 6,
        "temperature": 0,
        "n_probs": 5,
        "cache_prompt": False,
    }
    want, got = (loopback.post(b + "/completion", json=body, timeout=300).json() for b in pair)
    assert "error" not in want and "error" not in got, (want, got)
    assert got["content"] == want["content"] and got["tokens_evaluated"] == want["tokens_evaluated"]
    assert top_logprob_gap(want["completion_probabilities"], got["completion_probabilities"]) <= LOGPROB_BOUND
    return want


def test_props_report_audio(pair):
    want, got = (loopback.get(b + "/props", timeout=30).json() for b in pair)
    assert got["modalities"] == want["modalities"] == {"vision": False, "video": False, "audio": True}


def test_a_wav_and_the_sdists_mp3_answer_as_b10621(pair):
    from fixtures.audio_twin import N_AUDIO_TOKENS, tone_wav

    a = _complete(pair, tone_wav(seed=5))
    b = _complete(pair, _mp3())
    assert a["completion_probabilities"][0]["logprob"] != b["completion_probabilities"][0]["logprob"]  # (the clip
    # moves the answer: the case is not vacuous)
    assert a["tokens_evaluated"] > N_AUDIO_TOKENS  # (its tokens, the markers' text and the prompt)


def test_chat_input_audio_answers_as_b10621(pair):
    clip = base64.b64encode(_mp3()).decode()
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": clip, "format": "mp3"}},
                    {"type": "text", "text": "What is in this clip?"},
                ],
            }
        ],
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
        "cache_prompt": False,
    }
    want, got = (loopback.post(b + "/v1/chat/completions", json=body, timeout=300).json() for b in pair)
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert got["usage"] == want["usage"]
    assert top_logprob_gap(want["choices"][0]["logprobs"]["content"], got["choices"][0]["logprobs"]["content"]) <= 1e-3


@pytest.mark.parametrize("case", ["png-to-an-audio-model", "image-part-to-an-audio-model", "not-audio-bytes"])
def test_refusals_are_b10621s(pair, case):
    from fixtures.llava_twin import png

    if case == "image-part-to-an-audio-model":
        uri = "data:image/png;base64," + base64.b64encode(png()).decode()
        path = "/v1/chat/completions"
        body: dict = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}]}]}
    else:
        data = png() if case == "png-to-an-audio-model" else b"RIFF\x00\x00\x00\x00WAVEjunk" + bytes(64)
        path = "/completion"
        body = {"prompt": {"prompt_string": PROMPT, "multimodal_data": [base64.b64encode(data).decode()]}}
    want, got = (loopback.post(b + path, json=body, timeout=120) for b in pair)
    assert (got.status_code, got.json()) == (want.status_code, want.json())
    assert want.status_code >= 400  # (a refusal: each case fails on both, in the same words)


def _record(case: str, path: str, identical: bool) -> None:
    """The evidence behind the transcription routes' entries (mlxcel-oracle verify): a served transcription
    compared, not only the refusal both give a text model."""
    entries = ["POST /v1/audio/transcriptions", "POST /audio/transcriptions"]
    divergences = [] if identical else [{"path": "$", "kind": "value"}]
    live_record(
        case,
        entries,
        "f32",
        path,
        identical,
        divergences,
        f"pytest conformance/test_audio_chat.py -k {case.replace('-', '_')}",
    )


def test_a_transcription_answers_as_b10621(pair):
    """The transcription route with the audio model loaded: the multipart form translated into a chat request
    (the ASR preset prompt, the language hint, max_tokens and temperature from strings) and answered as
    transcript.text.done: the whole body equal to b10621's (text and token usage; no ids or clocks in it)."""
    files = {"file": ("clip.mp3", _mp3(), "audio/mpeg")}
    form = {"max_tokens": "6", "temperature": "0", "language": "en"}
    want, got = (loopback.post(b + "/v1/audio/transcriptions", files=files, data=form, timeout=300) for b in pair)
    assert want.status_code == got.status_code == 200
    _record("transcription-qwen2audio-mp3", "/v1/audio/transcriptions", got.json() == want.json())
    assert got.json() == want.json()
    assert want.json()["type"] == "transcript.text.done" and want.json()["usage"]["input_tokens"] > 750


@pytest.mark.parametrize("case", ["json-body-without-a-file", "response-format-text"])
def test_transcription_refusals_are_b10621s(pair, case):
    if case == "json-body-without-a-file":
        kw: dict = {"json": {"max_tokens": "6"}}
    else:
        kw = {"files": {"file": ("clip.mp3", _mp3(), "audio/mpeg")}, "data": {"response_format": "text"}}
    want, got = (loopback.post(b + "/audio/transcriptions", timeout=120, **kw) for b in pair)
    assert want.status_code >= 400 and (got.status_code, got.json()) == (want.status_code, want.json())


def test_a_streamed_transcription_answers_as_b10621(pair):
    """stream=true: each generated piece a transcript.text.delta event, then transcript.text.done, then [DONE]:
    the same events in the same order as b10621's."""
    files = {"file": ("clip.mp3", _mp3(), "audio/mpeg")}
    form = {"max_tokens": "6", "temperature": "0", "stream": "true"}
    want, got = (loopback.post(b + "/v1/audio/transcriptions", files=files, data=form, timeout=300) for b in pair)
    events = [[line for line in r.text.split("\n") if line.startswith("data: ")] for r in (want, got)]
    assert want.status_code == got.status_code == 200
    _record("transcription-qwen2audio-mp3-stream", "/v1/audio/transcriptions", events[1] == events[0])
    assert events[1] == events[0]
    assert events[0][-1] == "data: [DONE]" and len(events[0]) >= 3  # (deltas, the done event, [DONE])


def test_models_and_counted_tokens_include_the_audio_as_b10621(pair):
    """/v1/models reports the model multimodal; the count route decodes the clips and counts each 30-second chunk's
    750 tokens: a 31-second WAV is two chunks (b10621's preprocessor pads 30 s of silence and keeps the full
    chunks), here beside test-2.mp3 (one)."""
    from fixtures.audio_twin import N_AUDIO_TOKENS, tone_wav

    want, got = (loopback.get(b + "/v1/models", timeout=30).json() for b in pair)
    assert got["models"][0]["capabilities"] == want["models"][0]["capabilities"]
    clips = [base64.b64encode(tone_wav(seconds=31.0)).decode(), base64.b64encode(_mp3()).decode()]
    content = [{"type": "input_audio", "input_audio": {"data": c, "format": "wav"}} for c in clips]
    body = {"messages": [{"role": "user", "content": [*content, {"type": "text", "text": "Both?"}]}]}
    want, got = (loopback.post(b + "/v1/chat/completions/input_tokens", json=body, timeout=120) for b in pair)
    assert want.status_code == got.status_code == 200 and got.json() == want.json()
    assert want.json()["input_tokens"] > 3 * N_AUDIO_TOKENS
