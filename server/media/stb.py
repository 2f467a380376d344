"""Image bytes to RGB pixels with stb_image, as b10621's mtmd decodes them (JPEG, PNG, BMP, GIF, TGA, PSD, HDR,
PNM): server/native/image_decode.c, compiled on first use into the cache (keyed by its sources' hash).

JPEG has no one right answer (stb's integer IDCT, fixed-point colour conversion and chroma upsampler differ from
libjpeg's by a step here and there), so the pixels a projector sees are b10621's only through stb's own code.
Without a C compiler every format but PNG (server/media/png.py, lossless, exact in pure Python) is refused.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from functools import cache

import numpy as np

from ..cachedir import NoCompiler, shared_object

_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "native")
_SOURCES = ("image_decode.c", "stb_image.h")
_FLAGS = ("-O2", "-shared", "-fPIC")


class ImageDecodeUnavailable(OSError):
    """No decoder could be built (no C compiler): only PNG is read."""


def _build() -> str:
    try:
        return shared_object("image_decode", _DIR, ("image_decode.c",), ("stb_image.h",), _FLAGS, ("-lm",))
    except NoCompiler as exc:
        raise ImageDecodeUnavailable(f"{exc}: stb_image is not built") from None


@cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(_build())
    except (OSError, subprocess.SubprocessError) as exc:
        raise ImageDecodeUnavailable(str(exc)) from None
    lib.mlxcel_image_decode.restype = ctypes.POINTER(ctypes.c_ubyte)
    lib.mlxcel_image_decode.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.mlxcel_image_free.argtypes = [ctypes.POINTER(ctypes.c_ubyte)]
    return lib


def decode_rgb(data: bytes) -> np.ndarray | None:
    """(height, width, 3) uint8 as stbi_load_from_memory(..., 3) gives them; None when stb cannot read the bytes."""
    lib = _library()
    width, height = ctypes.c_int(0), ctypes.c_int(0)
    ptr = lib.mlxcel_image_decode(data, len(data), ctypes.byref(width), ctypes.byref(height))
    if not ptr:
        return None
    try:
        n = width.value * height.value * 3
        return np.ctypeslib.as_array(ptr, shape=(n,)).copy().reshape(height.value, width.value, 3)
    finally:
        lib.mlxcel_image_free(ptr)
