"""POST /v1/audio/transcriptions and /audio/transcriptions: b10621's post_transcriptions_oai.

Upstream's route is a translation layer over /v1/chat/completions for a model that takes audio; its first
act is the capability check, before the body is read. mlxcel serves text models only (no audio tower), so
every request gets that refusal, in upstream's words and status, whatever its form carries. The clip checks
a served audio model would run first (magic-byte container, header bounds) live in server/media/audio.py.
"""

from __future__ import annotations

from fastapi import APIRouter

from ..errors import ErrorKind, UpstreamError

router = APIRouter()

NO_AUDIO = "The current model does not support audio input."


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions():
    raise UpstreamError(NO_AUDIO, ErrorKind.NOT_SUPPORTED)
