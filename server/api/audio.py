"""POST /v1/audio/transcriptions and /audio/transcriptions: b10621's post_transcriptions_oai.

Upstream's route is a translation layer over /v1/chat/completions for a model that takes audio; its first
act is the capability check, before the body is read. Without an audio projector every request gets that
refusal, in upstream's words and status, whatever its form carries. With one (Qwen2-Audio's, --mmproj) mlxcel
does not translate the form yet (issue 33): it says so in one line and points at the chat route's input_audio
parts, which are served. The clip checks (magic-byte container, header bounds) live in server/media/audio.py.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import ErrorKind, UpstreamError

router = APIRouter()

NO_AUDIO = "The current model does not support audio input."
NOT_YET = (
    "mlxcel: the transcription routes are not served yet with an audio model (issue 33); send the clip as an "
    "input_audio part to /v1/chat/completions, which is served"
)


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions(request: Request):
    projector = request.app.state.mlxcel.settings.projector
    if getattr(projector, "modality", None) != "audio":
        raise UpstreamError(NO_AUDIO, ErrorKind.NOT_SUPPORTED)
    raise UpstreamError(NOT_YET, ErrorKind.NOT_SUPPORTED)
