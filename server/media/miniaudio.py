"""Audio bytes to mono float32 PCM with miniaudio, as b10621's mtmd decodes them (WAV, MP3, FLAC):
server/native/audio_decode.c, compiled on first use into the cache (keyed by its sources' hash).

mtmd-helper.cpp's audio_helpers::decode_audio_from_buf, call for call: miniaudio's decoder asked for f32, one
channel, the model's rate, so the channel mix, the format conversion and the resampler (linear, with its low-pass
filter) are miniaudio's own; the clip is as many samples as miniaudio's length estimate says, a short read
padded with zeros. MP3 has no one right answer (dr_mp3's synthesis), and a resampled clip none either, so the
samples an audio encoder sees are b10621's only through miniaudio's code. Without a C compiler no audio is read.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from functools import cache

import numpy as np

from ..cachedir import NoCompiler, shared_object

_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "native")
_SOURCES = ("audio_decode.c", "miniaudio.h")
# b10621 builds it inside mtmd-helper.cpp, as C++ at -O3 (Release): -O2 gives the same samples (no fast-math in
# either, no -march, and the compiler's own FP-contraction default in both) in about half the build time (~5 s);
# -DNDEBUG as in its Release build, so miniaudio's asserts are off there as here
_FLAGS = ("-O2", "-DNDEBUG", "-shared", "-fPIC")


class AudioDecodeUnavailable(OSError):
    """No decoder could be built (no C compiler): no audio is read."""


class AudioDecodeError(ValueError):
    """miniaudio cannot decode the bytes (b10621: "Unable to read WAV audio file from buffer")."""


def _build() -> str:
    try:
        return shared_object("audio_decode", _DIR, _SOURCES[:1], _SOURCES[1:], _FLAGS, ("-lm", "-lpthread"))
    except NoCompiler as exc:
        raise AudioDecodeUnavailable(f"{exc}: miniaudio is not built") from None


@cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(_build())
    except (OSError, subprocess.SubprocessError) as exc:
        raise AudioDecodeUnavailable(str(exc)) from None
    lib.mlxcel_audio_decode.restype = ctypes.c_long
    lib.mlxcel_audio_decode.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
    ]
    lib.mlxcel_audio_free.argtypes = [ctypes.POINTER(ctypes.c_float)]
    return lib


def decode(data: bytes, rate: int) -> np.ndarray:
    """Mono float32 samples at `rate` Hz, as decode_audio_from_buf(data, len, rate, pcm) fills them;
    AudioDecodeError where it returns false (or where the samples cannot be allocated)."""
    if not 0 < rate <= 0x7FFFFFFF:  # (b10621 asks for the model's rate, never 0: miniaudio's "the file's own")
        raise ValueError(f"invalid sample rate {rate}")
    lib = _library()
    out = ctypes.POINTER(ctypes.c_float)()
    n = lib.mlxcel_audio_decode(data, len(data), rate, ctypes.byref(out))
    if n == -2:
        raise AudioDecodeError("audio too long: its samples cannot be allocated")
    if n < 0:
        raise AudioDecodeError("miniaudio cannot decode the audio")
    try:
        return np.ctypeslib.as_array(out, shape=(n,)).copy()
    finally:
        lib.mlxcel_audio_free(out)
