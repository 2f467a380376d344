"""Images and audio in a request, as b10621 takes them: handle_media's URL kinds and sentences (http(s) under mlxcel's SSRF
policy, file:// under --media-path, data: URIs, bare base64), mtmd's decode (stb_image, 3 channels), and the
prompt's tokens with each image's span (mtmd_tokenize: the text split at the media markers, each piece tokenized
with special tokens parsed and none added, BOS before the first chunk, EOS after the last when the vocabulary
adds them)."""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import re
from dataclasses import dataclass

import numpy as np

from ..engine.types import MediaChunk, PromptTokens, placeholder_id
from ..errors import ErrorKind, UpstreamError
from ..media import mel, miniaudio, paths, png, stb, urls

FAILED_LOAD = "Failed to load image or audio file"  # process_mtmd_prompt, for bytes no decoder reads
FAILED_TOKENIZE = "Failed to tokenize prompt"  # mtmd_tokenize failed (markers and files do not pair up)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*")


@dataclass(frozen=True)
class MediaRef:
    """An image part's URL; data: URIs are taken for images only (handle_media's accept_base64_uri)."""

    url: str
    base64_uri: bool = True


def base64_decode(text: str) -> bytes:
    """server-common.cpp's base64_decode: the leading run of base64 characters (up to a '='), a last partial
    group giving its whole bytes; anything after is ignored."""
    run = _BASE64.match(text)
    body = run.group(0) if run else ""
    whole, rest = len(body) - len(body) % 4, len(body) % 4
    out = binascii.a2b_base64(body[:whole]) if whole else b""
    if rest >= 2:
        out += binascii.a2b_base64(body[whole:] + "=" * (4 - rest))
    return out


def _server(message: str) -> UpstreamError:  # std::runtime_error: ex_wrapper's 500
    return UpstreamError(message, ErrorKind.SERVER)


def _bad(message: str) -> UpstreamError:  # std::invalid_argument: a 400
    return UpstreamError(message, ErrorKind.INVALID_REQUEST)


def _data_uri(url: str) -> bytes:
    parts = url.split(",")
    if len(parts) != 2:
        raise _server("Invalid uri-encoded base64 value")
    if not parts[0].startswith("data:image/"):
        raise _server("Invalid uri format: " + parts[0])
    if not parts[0].endswith("base64"):
        raise _server("uri must be base64 encoded")
    return base64_decode(parts[1])


def read_media(ref: MediaRef, media_path: str) -> bytes:
    """handle_media(): the file's bytes (blocking: a fetch or a file read)."""
    url = ref.url
    if url.startswith("http"):
        try:
            return urls.fetch(url)
        except urls.MediaURLRefused as exc:
            raise _bad(str(exc)) from None
        except Exception:  # (a refused connection, a timeout: b10621 has one sentence for any failure)
            raise _server(urls.FAILED) from None
    if url.startswith(paths.FILE_URL):
        try:
            return paths.read(media_path, url, urls.MAX_BYTES)
        except paths.MediaPathRefused as exc:
            raise _bad(str(exc)) from None
    if ref.base64_uri and url.startswith("data:"):
        return _data_uri(url)
    data = base64_decode(url)
    if not data:
        raise _server("Invalid base64 value")
    return data


async def read_all(refs: tuple[MediaRef, ...], media_path: str) -> list[bytes]:
    return [await asyncio.to_thread(read_media, ref, media_path) for ref in refs]


def decode_image(data: bytes) -> np.ndarray:
    """The file's RGB pixels as mtmd reads them (stb_image; pure-Python PNG where no decoder could be built)."""
    try:
        rgb = stb.decode_rgb(data)
    except stb.ImageDecodeUnavailable:
        if not png.is_png(data):
            raise _bad(f"{FAILED_LOAD}: only PNG is read here (stb_image could not be built: no C compiler)") from None
        try:
            rgb = png.decode_rgb(data)
        except png.PNGError:
            rgb = None
    if rgb is None or rgb.size == 0:
        raise _bad(FAILED_LOAD)
    return rgb


SAMPLE_RATE = 16000  # the whisper preprocessor's (clip.cpp's audio_sample_rate)


def is_audio(data: bytes) -> bool:
    """mtmd-helper's is_audio_file: RIFF/WAVE, an ID3 tag or an MPEG sync word, fLaC (12 bytes at least)."""
    if len(data) < 12:
        return False
    return (
        (data[:4] == b"RIFF" and data[8:12] == b"WAVE")
        or data[:3] == b"ID3"
        or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0)
        or data[:4] == b"fLaC"
    )


def decode_audio(data: bytes, n_mel: int) -> list[np.ndarray]:
    """An audio file's 30-second log-mel chunks as mtmd makes them (miniaudio to 16 kHz mono float32, then the
    whisper preprocessor); b10621's sentence where the file is not audio or does not decode."""
    if not is_audio(data):
        raise _bad(FAILED_LOAD)
    try:
        pcm = miniaudio.decode(data, SAMPLE_RATE)
        return mel.log_mel_chunks(pcm, n_mel)
    except miniaudio.AudioDecodeError:
        raise _bad(FAILED_LOAD) from None
    except (miniaudio.AudioDecodeUnavailable, mel.MelUnavailable):
        raise _bad(f"{FAILED_LOAD}: audio is not read here (no C compiler to build miniaudio)") from None


def _payloads(data: bytes, encoder) -> list:
    """What the encoder takes for one file: an image's pixels, or an audio file's mel chunks (one span each)."""
    if getattr(encoder, "modality", "image") == "audio":
        if not is_audio(data):  # read as an image, which the audio model's mtmd_tokenize then fails
            decode_image(data)
            raise _bad(FAILED_TOKENIZE)
        return decode_audio(data, encoder.args.n_mel)
    if is_audio(data):  # (b10621 reads audio bytes as audio: a vision model has no audio encoder)
        raise _bad(FAILED_LOAD)
    return [decode_image(data)]


def _split(text: str, marker: str) -> list[str | None]:
    """The prompt's pieces in order, None where a marker stood."""
    out: list[str | None] = []
    for i, piece in enumerate(text.split(marker)):
        if i:
            out.append(None)
        if piece:
            out.append(piece)
    return out


def media_prompt(tokenizer, prompt: str, files: list[bytes], marker: str, encoder) -> PromptTokens:
    """mtmd_tokenize(): the prompt's ids with each file's spans (its begin text, then per image or 30-second audio
    chunk the encoder's n_tokens positions of its placeholder id, then its end text; each text tokenized on its
    own)."""
    n_tokens = encoder.n_tokens
    around = [
        tokenizer.tokenize(t, add_special=False, parse_special=True) if t else [] for t in (encoder.begin, encoder.end)
    ]
    decoded = [_payloads(data, encoder) for data in files]  # (every file is read before the markers are counted)
    pieces = _split(prompt, marker)
    if sum(p is None for p in pieces) != len(decoded):
        raise _bad(FAILED_TOKENIZE)
    ids: list[int] = []
    if tokenizer.add_bos and tokenizer.bos_id is not None:
        ids.append(tokenizer.bos_id)
    media: list[MediaChunk] = []
    taken = iter(zip(files, decoded, strict=True))
    for piece in pieces:
        if piece is None:
            data, payloads = next(taken)
            ids.extend(around[0])
            for payload in payloads:  # (an audio file's chunks share its id, as mtmd's do)
                chunk = MediaChunk(len(ids), n_tokens, hashlib.sha256(data).hexdigest(), payload, encoder.non_causal)
                media.append(chunk)
                ids.extend([placeholder_id(chunk.chunk_id)] * n_tokens)
            ids.extend(around[1])
        else:
            ids.extend(tokenizer.tokenize(piece, add_special=False, parse_special=True))
    if tokenizer.add_eos and tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
    return PromptTokens.with_media(ids, tuple(media))
