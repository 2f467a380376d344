"""server/media/png.py: PNG pixels as stb_image gives them with 3 channels asked, from PNGs written here with
every row filter, colour type, bit depth and Adam7 interlacing (the encoder below applies the filters as the PNG
specification defines them, so the decoder's inverse is checked, not assumed)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from server.media.png import ADAM7, PNGError, decode_rgb


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _filter(line: bytes, prev: bytes, kind: int, bpp: int) -> bytes:
    out = bytearray()
    for i, x in enumerate(line):
        left = line[i - bpp] if i >= bpp else 0
        up, up_left = prev[i], prev[i - bpp] if i >= bpp else 0
        pred = [0, left, up, (left + up) // 2, _paeth(left, up, up_left)][kind]
        out.append((x - pred) & 0xFF)
    return bytes(out)


def _pack(samples: np.ndarray, depth: int) -> list[bytes]:
    h, w, c = samples.shape
    if depth == 16:
        return [samples[y].astype(">u2").tobytes() for y in range(h)]
    if depth == 8:
        return [samples[y].astype(np.uint8).tobytes() for y in range(h)]
    bits = ((samples.reshape(h, w * c)[..., None] >> np.arange(depth - 1, -1, -1)) & 1).astype(np.uint8)
    return [np.packbits(bits[y].reshape(-1)).tobytes() for y in range(h)]


def _png(samples: np.ndarray, colour: int, depth: int, interlace: bool = False, palette=None, filters=(0, 1, 2, 3, 4)):
    h, w, c = samples.shape
    bpp = max(1, c * depth // 8)
    raw = bytearray()
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    n = 0
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        lines = _pack(sub, depth)
        prev = bytes(len(lines[0]))
        for line in lines:
            kind = filters[n % len(filters)]
            n += 1
            raw += bytes([kind]) + _filter(line, prev, kind, bpp)
            prev = line

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, int(interlace)))
    if palette is not None:
        out += chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    return out + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


RNG = np.random.default_rng(5)


@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("filters", [(0,), (1,), (2,), (3,), (4,), (0, 1, 2, 3, 4)])
def test_rgb_8_bit_under_every_filter_reads_its_pixels(filters, interlace):
    pixels = RNG.integers(0, 256, (13, 11, 3))
    assert np.array_equal(decode_rgb(_png(pixels, 2, 8, interlace, filters=filters)), pixels)


def test_alpha_is_dropped_not_composited():
    pixels = RNG.integers(0, 256, (5, 7, 4))
    assert np.array_equal(decode_rgb(_png(pixels, 6, 8)), pixels[..., :3])


@pytest.mark.parametrize("colour", [0, 4])
def test_grey_fills_the_three_channels(colour):
    pixels = RNG.integers(0, 256, (6, 9, 1 if colour == 0 else 2))
    want = np.repeat(pixels[..., :1], 3, axis=-1)
    assert np.array_equal(decode_rgb(_png(pixels, colour, 8, filters=(4,))), want)


def test_16_bit_samples_keep_their_high_byte():
    pixels = RNG.integers(0, 65536, (4, 5, 3))
    assert np.array_equal(decode_rgb(_png(pixels, 2, 16, filters=(1, 4))), pixels >> 8)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_low_bit_grey_scales_to_the_full_byte(depth):
    pixels = RNG.integers(0, 1 << depth, (7, 10, 1))
    want = np.repeat(pixels * (255 // ((1 << depth) - 1)), 3, axis=-1)
    assert np.array_equal(decode_rgb(_png(pixels, 0, depth, interlace=True)), want)


def test_palette_entries_are_looked_up():
    palette = RNG.integers(0, 256, (16, 3))
    index = RNG.integers(0, 16, (6, 6, 1))
    got = decode_rgb(_png(index, 3, 4, palette=palette, filters=(2,)))
    assert np.array_equal(got, palette[index[..., 0]])


def test_the_llava_twins_image_reads_as_its_pixels():
    from fixtures.llava_twin import png, png_pixels

    assert np.array_equal(decode_rgb(png(seed=3)), png_pixels(seed=3))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GIF89a", "not a PNG"),
        (b"\x89PNG\r\n\x1a\n", "PNG without IEND"),
        (_png(np.zeros((2, 2, 3), int), 2, 8)[:-30], "truncated PNG chunk"),
    ],
)
def test_what_is_not_a_readable_png_says_why_in_one_line(data, why):
    with pytest.raises(PNGError, match=why):
        decode_rgb(data)
