"""An uploaded audio clip's checks, before any decoder sees it: the container from its own magic bytes (wav,
mp3, flac: what b10621's mtmd decoder takes), and the geometry its header declares, bounded.

A header is read, never trusted: every length is checked against the bytes present, a WAV data chunk that
declares more than the file holds is clamped to what is there, and a FLAC file's metadata-block chain is
walked to its end before one field of it is used (a random body behind a genuine fLaC marker must not size
an allocation). The transcription route (server/api/audio.py) refuses before this for a model that takes
no audio, which is every model mlxcel serves today; a served audio model runs these first.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_PARTS = 32  # multipart parts per request
MAX_PART_BYTES = 25 << 20  # per part: the route's body limit
MAX_RATE = 192_000
MAX_CHANNELS = 8
MAX_SECONDS = 600

# MPEG audio: sample rates by version (2.5, reserved, 2, 1) and index
_MP3_RATES = {0: (11025, 12000, 8000), 2: (22050, 24000, 16000), 3: (44100, 48000, 32000)}


class ClipRefused(ValueError):
    """A clip refused on its content (a 400 naming the structural problem)."""


@dataclass(frozen=True)
class Geometry:
    container: str  # "wav", "mp3" or "flac"
    rate: int
    channels: int
    seconds: float | None  # None where the header does not state a length (mp3)


def sniff(data: bytes) -> str | None:
    """The container by its magic bytes, or None for anything else."""
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:3] == b"ID3" or _mp3_frame(data, 0) is not None:
        return "mp3"
    return None


def check_form(parts: list[tuple[str, bytes]]) -> None:
    """The multipart bounds: at most MAX_PARTS parts of at most MAX_PART_BYTES each."""
    if len(parts) > MAX_PARTS:
        raise ClipRefused(f"too many form parts ({len(parts)} > {MAX_PARTS})")
    for name, value in parts:
        if len(value) > MAX_PART_BYTES:
            raise ClipRefused(f"form part '{name}' exceeds {MAX_PART_BYTES} bytes")


def geometry(data: bytes) -> Geometry:
    """The clip's container and declared geometry, within the bounds; ClipRefused otherwise."""
    kind = sniff(data)
    if kind is None:
        raise ClipRefused("unsupported audio container (expected wav, mp3 or flac)")
    g = {"wav": _wav, "flac": _flac, "mp3": _mp3}[kind](data)
    if not 0 < g.rate <= MAX_RATE:
        raise ClipRefused(f"sample rate {g.rate} Hz is out of range (at most {MAX_RATE})")
    if not 0 < g.channels <= MAX_CHANNELS:
        raise ClipRefused(f"{g.channels} channels is out of range (at most {MAX_CHANNELS})")
    if g.seconds is not None and g.seconds > MAX_SECONDS:
        raise ClipRefused(f"the clip lasts {g.seconds:.1f} s, more than {MAX_SECONDS} s")
    return g


def _wav(data: bytes) -> Geometry:
    pos, fmt, n_data = 12, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if cid == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise ClipRefused("truncated WAV fmt chunk")
            fmt = struct.unpack_from("<HHIIHH", data, body)
        elif cid == b"data":
            n_data = min(size, len(data) - body)  # a chunk declaring more than is present: what is present
            break
        pos = body + size + (size & 1)
    if fmt is None:
        raise ClipRefused("WAV file has no fmt chunk")
    if n_data is None:
        raise ClipRefused("WAV file has no data chunk")
    _, channels, rate, _, block_align, _ = fmt
    if block_align == 0:
        raise ClipRefused("WAV block alignment is 0")
    seconds = n_data // block_align / rate if rate else 0.0
    return Geometry("wav", rate, channels, seconds)


def _flac(data: bytes) -> Geometry:
    pos, info, last = 4, None, False
    while not last:  # the whole metadata chain must be inside the file before any of it is used
        if pos + 4 > len(data):
            raise ClipRefused("truncated FLAC metadata")
        header = data[pos]
        last, kind = bool(header & 0x80), header & 0x7F
        size = int.from_bytes(data[pos + 1 : pos + 4], "big")
        if pos + 4 + size > len(data):
            raise ClipRefused("FLAC metadata block runs past the end of the file")
        if kind == 127:
            raise ClipRefused("invalid FLAC metadata block type")
        if pos == 4 and (kind != 0 or size != 34):
            raise ClipRefused("FLAC file does not start with STREAMINFO")
        if kind == 0:
            info = data[pos + 4 : pos + 4 + size]
        pos += 4 + size
    bits = int.from_bytes(info[10:18], "big")  # rate 20, channels-1 3, bits-1 5, samples 36
    rate, channels, samples = bits >> 44, ((bits >> 41) & 7) + 1, bits & ((1 << 36) - 1)
    return Geometry("flac", rate, channels, samples / rate if rate else 0.0)


def _mp3_frame(data: bytes, pos: int) -> tuple[int, int] | None:
    """(rate, channels) of an MPEG audio frame header at pos, or None."""
    if pos + 4 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (data[pos + 1] >> 3) & 3, (data[pos + 1] >> 1) & 3
    bitrate, rate_index = data[pos + 2] >> 4, (data[pos + 2] >> 2) & 3
    if version == 1 or layer == 0 or bitrate in (0, 15) or rate_index == 3:
        return None
    return _MP3_RATES[version][rate_index], 1 if data[pos + 3] >> 6 == 3 else 2


def _mp3(data: bytes) -> Geometry:
    pos = 0
    if data[:3] == b"ID3":
        if len(data) < 10:
            raise ClipRefused("truncated ID3 tag")
        size = 0
        for b in data[6:10]:  # synchsafe: 7 bits a byte
            if b & 0x80:
                raise ClipRefused("invalid ID3 tag size")
            size = size << 7 | b
        pos = 10 + size
    frame = _mp3_frame(data, pos)
    if frame is None:
        raise ClipRefused("no MPEG audio frame after the ID3 tag" if pos else "invalid MPEG audio frame header")
    return Geometry("mp3", frame[0], frame[1], None)
