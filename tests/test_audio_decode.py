"""server/media/miniaudio.py against b10621's own decode_audio_from_buf (mtmd-helper.cpp with the sdist's
miniaudio, compiled by tests/mtmd_audio.py): byte-identical samples at the whisper preprocessor's 16 kHz for the
sdist's test-2.mp3 and for WAVs and FLACs made here (16-bit at the target rate, stereo 44.1 kHz, 8 kHz, 24-bit,
8-bit, float, a data chunk longer than the file), and the same refusals (garbage, an empty clip)."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest

from server.media import miniaudio

RATE = 16000  # the whisper preprocessor's


@pytest.fixture(scope="module")
def mtmd():
    from conftest import require
    from oracle.reference import ReferenceBuildError, source_tree
    from server.cachedir import cache_root
    from tests import mtmd_audio

    try:
        source = source_tree()
    except ReferenceBuildError as exc:
        require(False, f"needs the reference sdist's sources: {exc}")
    return mtmd_audio.program(source, cache_root() / "native"), source


@pytest.fixture(scope="module")
def decoder():
    try:
        miniaudio._library()
    except miniaudio.AudioDecodeUnavailable as exc:
        pytest.skip(str(exc))


def _tone(rate: int, seconds: float, channels: int, seed: int) -> np.ndarray:
    """A chirp with noise in [-1, 1), (frames, channels): content at every frequency the resampler filters."""
    t = np.arange(int(rate * seconds)) / rate
    rng = np.random.default_rng(seed)
    cols = [
        0.6 * np.sin(2 * np.pi * (200 + 3000 * c + 4000 * t) * t) + 0.3 * rng.uniform(-1, 1, t.size)
        for c in range(channels)
    ]
    return np.clip(np.stack(cols, axis=1), -1, 0.999)


def _wav(samples: np.ndarray, rate: int, width: int) -> bytes:
    """PCM WAV at 1, 2 or 3 bytes a sample (the wave module's own header)."""
    if width == 1:
        data = (samples * 128 + 128).astype(np.uint8).tobytes()
    else:
        ints = (samples * (1 << (8 * width - 1))).astype("<i4")
        data = ints.astype("<i2").tobytes() if width == 2 else ints.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data)
    return buf.getvalue()


def _float_wav(samples: np.ndarray, rate: int) -> bytes:
    """IEEE float WAV (format 3, 32-bit), with the fact chunk a non-PCM WAV carries."""
    channels = samples.shape[1]
    data = samples.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHHH", 3, channels, rate, rate * channels * 4, channels * 4, 32, 0)
    fact = struct.pack("<I", samples.shape[0])
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<I", 4) + fact
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _crc(data: bytes, poly: int, width: int) -> int:
    """FLAC's CRCs (MSB first, zero initial value): CRC-8 (poly 0x07) of a frame header, CRC-16 (0x8005) of a frame."""
    top, mask, crc = 1 << (width - 1), (1 << width) - 1, 0
    for byte in data:
        crc ^= byte << (width - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
    return crc


def _flac(samples: np.ndarray, rate: int, bits: int, block: int = 4096) -> bytes:
    """A FLAC stream with VERBATIM subframes (independent channels, fixed blocking, byte-aligned at 16 or 24
    bits), written here: the container, CRCs and all, without an encoder."""
    frames, channels = samples.shape
    ints = (samples * (1 << (bits - 1))).astype(np.int64)
    info = struct.pack(">HH", block, block) + b"\0" * 6
    packed = (rate << 44) | ((channels - 1) << 41) | ((bits - 1) << 36) | frames
    info += packed.to_bytes(8, "big") + b"\0" * 16  # (an MD5 of zeros: unknown)
    out = [b"fLaC", bytes([0x80]) + len(info).to_bytes(3, "big"), info]
    size_code = {16: 0b100, 24: 0b110}[bits]
    for index, start in enumerate(range(0, frames, block)):
        assert index < 128  # (the frame number's UTF-8 coding, one byte)
        chunk = ints[start : start + block]
        head = bytes([0xFF, 0xF8, 0x70, ((channels - 1) << 4) | (size_code << 1), index])
        head += (len(chunk) - 1).to_bytes(2, "big")
        head += bytes([_crc(head, 0x07, 8)])
        body = b"".join(
            b"\x02" + b"".join(int(v & ((1 << bits) - 1)).to_bytes(bits // 8, "big") for v in chunk[:, c])
            for c in range(channels)
        )
        frame = head + body
        out.append(frame + _crc(frame, 0x8005, 16).to_bytes(2, "big"))
    return b"".join(out)


def _same(mtmd, data: bytes, rate: int = RATE) -> np.ndarray:
    from tests import mtmd_audio

    want = mtmd_audio.decode(mtmd[0], data, rate)
    assert want is not None, "b10621 refuses the clip"
    got = miniaudio.decode(data, rate)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), np.flatnonzero(got != want)[:5]
    return got


reference = pytest.mark.reference  # (the sdist's sources: every comparison; the refusals alone run without)


@reference
@pytest.mark.parametrize("rate", [RATE, 24000])
def test_mp3_is_b10621s(mtmd, rate):
    data = (mtmd[1] / "tools" / "mtmd" / "test-2.mp3").read_bytes()
    got = _same(mtmd, data, rate)
    assert got.size > rate * 10 and np.abs(got).max() > 0.05  # (speech, not silence)


WAVS = {
    "s16-16k-mono": lambda: _wav(_tone(16000, 1.3, 1, 1), 16000, 2),
    "s16-44k1-stereo": lambda: _wav(_tone(44100, 1.1, 2, 2), 44100, 2),
    "s16-8k-mono": lambda: _wav(_tone(8000, 0.9, 1, 3), 8000, 2),
    "s16-48k-6ch": lambda: _wav(_tone(48000, 0.5, 6, 4), 48000, 2),
    "s24-22k05-mono": lambda: _wav(_tone(22050, 0.7, 1, 5), 22050, 3),
    "u8-11k025-stereo": lambda: _wav(_tone(11025, 0.6, 2, 6), 11025, 1),
    "f32-16k-stereo": lambda: _float_wav(_tone(16000, 0.8, 2, 7), 16000),
    "f32-32k-mono": lambda: _float_wav(_tone(32000, 0.8, 1, 8), 32000),
    "s16-1-frame": lambda: _wav(_tone(44100, 1 / 44100, 1, 9), 44100, 2),
}


@reference
@pytest.mark.parametrize("name", sorted(WAVS))
def test_wav_is_b10621s(mtmd, name):
    data = WAVS[name]()
    got = _same(mtmd, data)
    if name == "s16-16k-mono":  # no conversion at all: the samples over 32768
        ints = np.frombuffer(data[44:], "<i2")
        assert np.array_equal(got, ints.astype(np.float32) / 32768)


@reference
def test_wav_with_a_data_chunk_longer_than_the_file_is_b10621s(mtmd):
    """A header that claims twice the samples present: dr_wav clamps the chunk to the bytes there (0.5 s)."""
    data = _wav(_tone(44100, 0.5, 1, 10), 44100, 2)
    data = data[:40] + struct.pack("<I", 44100 * 2) + data[44:]
    assert _same(mtmd, data).size == RATE // 2


@reference
@pytest.mark.parametrize("name", ["s16-16k-mono", "s16-44k1-stereo", "s24-48k-mono"])
def test_flac_is_b10621s(mtmd, name):
    rate, channels, bits = {
        "s16-16k-mono": (16000, 1, 16),
        "s16-44k1-stereo": (44100, 2, 16),
        "s24-48k-mono": (48000, 1, 24),
    }[name]
    samples = _tone(rate, 0.6, channels, 11)
    got = _same(mtmd, _flac(samples, rate, bits))
    if rate == RATE:  # (the stream is read as written: its own CRCs pass)
        ints = (samples[:, 0] * (1 << (bits - 1))).astype(np.int64)
        assert np.array_equal(got, (ints / (1 << (bits - 1))).astype(np.float32))


GARBAGE = {
    "noise": bytes(np.random.default_rng(12).integers(0, 256, 4096, dtype=np.uint8)),
    "text": b"not audio at all, " * 20,
    "riff-header-only": b"RIFF\x24\x00\x00\x00WAVE",
    "id3-then-noise": b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 4,
    "flac-marker-then-noise": b"fLaC" + bytes(np.random.default_rng(13).integers(0, 256, 512, dtype=np.uint8)),
    "empty-wav": _wav(np.zeros((0, 1)), 16000, 2),
    "empty": b"",
}


@reference
@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_fails_in_both(mtmd, name):
    from tests import mtmd_audio

    assert mtmd_audio.decode(mtmd[0], GARBAGE[name], RATE) is None
    with pytest.raises(miniaudio.AudioDecodeError):
        miniaudio.decode(GARBAGE[name], RATE)


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_is_refused(decoder, name):
    """(mlxcel alone, without the sdist: a ValueError a route answers with a 400)"""
    with pytest.raises(ValueError):
        miniaudio.decode(GARBAGE[name], RATE)
