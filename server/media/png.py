"""PNG pixels as b10621's mtmd reads them (stb_image, asked for 3 channels), in pure Python.

PNG is lossless, so any correct decoder gives stb_image's pixels; what stb adds is the conversion to RGB: grey
replicated to the three channels, alpha dropped (not composited), 16-bit samples cut to their high byte, palette
entries looked up. Interlaced (Adam7) images are read too. JPEG and the other formats stb reads need its own
decoder (its integer IDCT and colour conversion differ from libjpeg's): not here (docs/media-plan.md, 2).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples a pixel
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


class PNGError(ValueError):
    """Not a PNG this reads (the message says why, in one line)."""


def is_png(data: bytes) -> bool:
    return data[:8] == SIGNATURE


def _chunks(data: bytes):
    at = 8
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if len(body) != length:
            raise PNGError("truncated PNG chunk")
        yield kind, body
        at += 12 + length
        if kind == b"IEND":
            return
    raise PNGError("PNG without IEND")


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(raw: bytes, width: int, height: int, bpp: int, row_bytes: int) -> np.ndarray:
    """The scanlines' bytes with each row's filter (0-4) undone."""
    out = np.zeros((height, row_bytes), dtype=np.uint8)
    prev = np.zeros(row_bytes, dtype=np.int32)
    at = 0
    for y in range(height):
        kind = raw[at]
        line = np.frombuffer(raw, dtype=np.uint8, count=row_bytes, offset=at + 1).astype(np.int32)
        at += 1 + row_bytes
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 0xFF
        elif kind in (1, 3, 4):
            cur = line.copy()
            for i in range(row_bytes):  # (each byte depends on the one bpp before it)
                left = int(cur[i - bpp]) if i >= bpp else 0
                up, up_left = int(prev[i]), int(prev[i - bpp]) if i >= bpp else 0
                pred = left if kind == 1 else (left + up) // 2 if kind == 3 else _paeth(left, up, up_left)
                cur[i] = (cur[i] + pred) & 0xFF
        else:
            raise PNGError(f"PNG row filter {kind} is not one of 0-4")
        out[y] = cur
        prev = cur
    return out


def _samples(rows: np.ndarray, width: int, depth: int, channels: int) -> np.ndarray:
    """Unpacked samples (height x width x channels), at their own bit depth."""
    if depth == 8:
        return rows[:, : width * channels].reshape(rows.shape[0], width, channels).astype(np.uint16)
    if depth == 16:
        pairs = rows[:, : width * channels * 2].reshape(rows.shape[0], width * channels, 2).astype(np.uint16)
        return ((pairs[..., 0] << 8) | pairs[..., 1]).reshape(rows.shape[0], width, channels)
    bits = np.unpackbits(rows, axis=1)[:, : width * channels * depth]
    weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint16)
    values = (bits.reshape(rows.shape[0], width * channels, depth) * weights).sum(axis=-1).astype(np.uint16)
    return values.reshape(rows.shape[0], width, channels)


def _read(data: bytes) -> tuple[tuple, bytes, np.ndarray | None]:
    """IHDR's fields, the image data (IDAT chunks joined) and the palette, if any."""
    if not is_png(data):
        raise PNGError("not a PNG")
    header, idat, palette = None, bytearray(), None
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat += body
    if header is None:
        raise PNGError("PNG without IHDR")
    return header, bytes(idat), palette


def decode_rgb(data: bytes) -> np.ndarray:
    """The image as height x width x 3 uint8, as stbi_load_from_memory(..., 3) returns it."""
    header, idat, palette = _read(data)
    width, height, depth, colour, _, _, interlace = header
    if colour not in CHANNELS or depth not in (1, 2, 4, 8, 16):
        raise PNGError(f"PNG colour type {colour} at bit depth {depth} is not a valid combination")
    channels = CHANNELS[colour]
    try:
        raw = zlib.decompress(idat)
    except zlib.error as exc:
        raise PNGError(f"corrupt PNG image data ({exc})") from None
    bpp = max(1, channels * depth // 8)
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    samples = np.zeros((height, width, channels), dtype=np.uint16)
    at = 0
    for x0, y0, dx, dy in passes:
        w, h = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if w <= 0 or h <= 0:
            continue
        row_bytes = (w * channels * depth + 7) // 8
        size = h * (1 + row_bytes)
        if at + size > len(raw):
            raise PNGError("PNG image data ends early")
        rows = _unfilter(raw[at : at + size], w, h, bpp, row_bytes)
        samples[y0::dy, x0::dx] = _samples(rows, w, depth, channels)
        at += size
    return _to_rgb(samples, colour, depth, palette)


def _to_rgb(samples: np.ndarray, colour: int, depth: int, palette: np.ndarray | None) -> np.ndarray:
    if colour == 3:
        if palette is None:
            raise PNGError("indexed PNG without a palette")
        index = samples[..., 0].astype(np.intp)
        if index.max(initial=0) >= len(palette):
            raise PNGError("PNG palette index out of range")
        return palette[index]
    if depth == 16:
        eight = (samples >> 8).astype(np.uint8)  # stb's 16-bit to 8: the high byte
    elif depth < 8:  # grey at 1, 2 or 4 bits: scaled to 0-255 as stb scales them
        eight = (samples * (255 // ((1 << depth) - 1))).astype(np.uint8)
    else:
        eight = samples.astype(np.uint8)
    grey = colour in (0, 4)
    rgb = np.repeat(eight[..., :1], 3, axis=-1) if grey else eight[..., :3]
    return np.ascontiguousarray(rgb)
