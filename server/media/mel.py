"""Mono 16 kHz float PCM to whisper log-mel chunks, as b10621's mtmd_audio_preprocessor_whisper makes them for
ULTRAVOX (and QWEN2A, VOXTRAL, GLMA, MERALION, MUSIC_FLAMINGO): server/native/audio_mel.c, compiled on first use
into the cache (keyed by its source's hash and the flags).

Each chunk is what mtmd hands the encoder as an audio bitmap: n_mel rows (the bitmap's height, mel bins low to
high) of 3000 columns (its width, frames 10 ms apart), float32, row-major. The audio is padded with 30 s of
silence before framing, so n samples give (n + 480000) // 160 + 1 frames and every full 3000 of them is a chunk
(the short remainder is dropped): under 30 s of audio makes one chunk, 30 s to 60 s two, and so on. The values
are b10621's bit for bit (same float/double steps, in the same order; no FMA contraction), given the same libm.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from functools import cache

import numpy as np

from ..cachedir import NoCompiler, shared_object

_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "native")
# no -ffast-math, no -march, and no contraction into FMAs (clang contracts by default on arm64): b10621's
# x86-64 build rounds every float and double operation on its own
_FLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-pthread")

# b10621's whisper preprocessing (clip.cpp's audio hparams for these projectors; the padding and the chunk
# length are constants in mtmd-audio.cpp, not the model's audio_chunk_len)
SAMPLE_RATE = 16000
N_FFT = 400
WINDOW_LEN = 400
HOP_LEN = 160
PAD_SECONDS = 30
FRAMES_PER_CHUNK = 3000
N_THREADS = 4  # (b10621's count; it splits the frames only, the values do not depend on it)


class MelUnavailable(OSError):
    """The log-mel code could not be built (no C compiler): audio input is refused."""


def _build() -> str:
    try:
        return shared_object("audio_mel", _DIR, ("audio_mel.c",), (), _FLAGS, ("-lm",))
    except NoCompiler as exc:
        raise MelUnavailable(f"{exc}: the whisper log-mel is not built") from None


@cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(_build())
    except (OSError, subprocess.SubprocessError) as exc:
        raise MelUnavailable(str(exc)) from None
    i64, c_int = ctypes.c_int64, ctypes.c_int
    lib.mlxcel_whisper_mel_chunks.restype = i64
    lib.mlxcel_whisper_mel_chunks.argtypes = [i64, c_int, c_int, c_int, c_int, c_int]
    lib.mlxcel_whisper_mel.restype = c_int
    lib.mlxcel_whisper_mel.argtypes = [
        ctypes.POINTER(ctypes.c_float),
        i64,
        *([c_int] * 8),
        ctypes.POINTER(ctypes.c_float),
    ]
    return lib


def n_chunks(n_samples: int) -> int:
    """How many chunks log_mel_chunks makes of n_samples (0 for none: b10621 refuses empty audio)."""
    if n_samples <= 0:
        return 0
    frames = (max(n_samples, N_FFT // 2 + 1) + SAMPLE_RATE * PAD_SECONDS) // HOP_LEN + 1
    return frames // FRAMES_PER_CHUNK


def log_mel_chunks(pcm: np.ndarray, n_mel: int, n_threads: int = N_THREADS) -> list[np.ndarray]:
    """The whisper log-mel chunks of mono float PCM at 16 kHz: each (n_mel, 3000) float32, mel-major (rows are
    mel bins, columns frames), as mtmd's audio bitmaps hold them. ValueError for empty audio (b10621: "Unable to
    preprocess audio")."""
    samples = np.ascontiguousarray(pcm, dtype=np.float32).reshape(-1)
    if samples.size == 0:
        raise ValueError("empty audio")
    if n_mel <= 0:
        raise ValueError(f"n_mel must be positive, not {n_mel}")
    lib = _library()
    count = lib.mlxcel_whisper_mel_chunks(samples.size, N_FFT, HOP_LEN, SAMPLE_RATE, PAD_SECONDS, FRAMES_PER_CHUNK)
    out = np.empty((count, n_mel, FRAMES_PER_CHUNK), np.float32)
    f32p = ctypes.POINTER(ctypes.c_float)
    rc = lib.mlxcel_whisper_mel(
        samples.ctypes.data_as(f32p),
        samples.size,
        n_mel,
        N_FFT,
        WINDOW_LEN,
        HOP_LEN,
        SAMPLE_RATE,
        PAD_SECONDS,
        FRAMES_PER_CHUNK,
        n_threads,
        out.ctypes.data_as(f32p),
    )
    if rc != 0:
        raise MemoryError(f"whisper log-mel of {samples.size} samples: out of memory")
    return list(out)
