"""POST /v1/audio/transcriptions and /audio/transcriptions: b10621's post_transcriptions_oai.

Upstream's route is a translation layer over /v1/chat/completions for a model that takes audio; its first
act is the capability check, before the body is read: without an audio projector every request gets that
refusal, in upstream's words and status, whatever its form carries. With one (Qwen2-Audio's, --mmproj) the form
is translated as convert_transcriptions_to_chatcmpl translates it: the multipart text fields become the JSON body
(strings; a repeated field an array), the `file` part the one media file, the user message the prompt (or the
ASR preset's "Transcribe audio to text"), " (language: X)" where given, then the media marker; the answer is
transcript.text.done with token usage; streamed, each piece a transcript.text.delta, then the done event and
[DONE]. The clip checks (magic-byte container, header bounds) live in server/media/audio.py.
"""

from __future__ import annotations

import dataclasses
import json
from email import policy
from email.parser import BytesParser

from fastapi import APIRouter, Request

from ..build import media_marker
from ..chat.params import chat_request
from ..errors import ErrorKind, UpstreamError
from ..media import audio as clips
from .chat import CHAT_FIELDS, _usage, chat_settings, chat_shape, final_update, message_states
from .native import complete

router = APIRouter()

NO_AUDIO = "The current model does not support audio input."
NO_FILE = "No input file found for transcription"
ONLY_JSON = "Only 'json' response_format is supported for transcription"
ASR_USER = "Transcribe audio to text"  # common_chat_get_asr_prompt's preset (LFM2's templates aside)


def _bad(message: str) -> UpstreamError:
    return UpstreamError(message, ErrorKind.INVALID_REQUEST)


def _payload(part) -> bytes:
    data = part.get_payload(decode=True)
    return data if isinstance(data, bytes) else b""


def parse_form(content_type: str, body: bytes) -> tuple[dict, dict[str, bytes]]:
    """httplib's multipart form as b10621's server_http reads it: the text fields (no filename) as a JSON object
    of strings, a repeated name an array; the file parts (with a filename) by name, the last one kept."""
    message = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    fields: dict = {}
    files: dict[str, bytes] = {}
    parts = list(message.iter_parts()) if message.is_multipart() else []
    named = [(str(p.get_param("name", "", header="content-disposition")), _payload(p)) for p in parts]
    try:
        clips.check_form(named)
    except clips.ClipRefused as exc:
        raise _bad(str(exc)) from None
    for part, (name, payload) in zip(parts, named, strict=True):
        if part.get_filename() is not None:
            files[name] = payload
            continue
        text = payload.decode("utf-8", "replace")
        if name in fields:
            fields[name] = (fields[name] if isinstance(fields[name], list) else [fields[name]]) + [text]
        else:
            fields[name] = text
    return fields, files


def _asr_prompt(template: str) -> tuple[str, str]:
    """common_chat_get_asr_prompt: (system, user); LFM2's templates (their tool list markers) ask "Perform ASR."."""
    if "<|tool_list_start|>" in template and "<|tool_list_end|>" in template:
        return "Perform ASR.", ""
    return "", ASR_USER


def chat_body(fields: dict, template: str) -> dict:
    """convert_transcriptions_to_chatcmpl: the chat body for the form's fields."""
    text = lambda key, default="": v if isinstance(v := fields.get(key), str) else default  # (json_value's)
    if text("response_format", "json") != "json":
        raise _bad(ONLY_JSON)
    system, user = _asr_prompt(template)
    prompt = text("prompt") or user
    if text("language"):
        prompt += f" (language: {text('language')})"
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": f"{prompt}{media_marker()}"}
    ]
    body = {**fields, "messages": messages, "stream": text("stream", "false") == "true"}
    try:
        if "max_tokens" in fields:
            body["max_tokens"] = int(fields["max_tokens"])
        if "temperature" in fields:
            body["temperature"] = float(fields["temperature"])
    except (TypeError, ValueError):
        raise _bad("invalid number in the transcription form") from None
    return body


def _asr_shape(state, info):
    """The chat answer reshaped as b10621's to_json_oaicompat_asr."""
    shape, state_of = chat_shape(state, verbose=False, include_usage=False, info=info), message_states(info)

    def final(state, t) -> dict:
        msg, usage = final_update(state_of, t)[1], _usage(t.final)
        return {
            "type": "transcript.text.done",
            "text": msg.content,
            "usage": {
                "type": "tokens",
                "input_tokens": usage["prompt_tokens"],
                "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
                "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            },
        }

    def delta(text: str) -> dict:  # a partial result's to_json_oaicompat_asr: the piece as generated
        return {"type": "transcript.text.delta", "delta": text}

    return dataclasses.replace(
        shape,
        final=final,
        stream_partial=lambda state, t, event, entry: [delta(event.text.decode("utf-8", "replace"))],
        stream_progress=lambda state, t, event: [delta("")],
        stream_final=lambda state, t: [final(state, t)],
        done=b"data: [DONE]\n\n",
    )


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions(request: Request):
    state = request.app.state.mlxcel
    settings = chat_settings(state)
    if getattr(state.settings.projector, "modality", None) != "audio" or not settings.allow_audio:
        raise UpstreamError(NO_AUDIO, ErrorKind.NOT_SUPPORTED)
    raw = await request.body()
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        fields, files = parse_form(content_type, raw)
    else:
        try:
            fields, files = json.loads(raw or b"null"), {}
        except ValueError as exc:
            raise _bad(str(exc)) from None
        if not isinstance(fields, dict):
            raise _bad("request body must be a JSON object")
    if "file" not in files:
        raise _bad(NO_FILE)
    body = chat_body(fields, settings.template)
    native, info = chat_request(body, settings)
    shape = _asr_shape(state, info)
    return await complete(state, native, shape, CHAT_FIELDS, route="/v1/audio/transcriptions", files=[files["file"]])
