"""Image resizing as b10621's mtmd does it (tools/mtmd/mtmd-image.cpp): its port of Pillow's separable
resampler, and the aspect-keeping resize onto a padded canvas its fixed-size preprocessors use.

The resampler is integer arithmetic once its weights are made: per output pixel, weights computed in double
from the filter, normalized by their sum, turned into 22-bit fixed point (rounded half away from zero,
truncated); each pass sums u8 x weight from 2^21 and shifts right by 22, clipped to 0..255; the horizontal
pass first, through a u8 image, then the vertical one; an axis whose size does not change is not resampled.
So numpy reproduces it bit for bit (int64 sums: the C int32 ones never wrap for u8 input).
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np

PRECISION_BITS = 32 - 8 - 2


class Resize(Enum):
    BILINEAR = 1.0  # (the value: the filter's support)
    BICUBIC = 2.0
    LANCZOS = 3.0


def _filter(algo: Resize, x: float) -> float:
    if algo is Resize.LANCZOS:
        if -3.0 <= x < 3.0:
            return _sinc(x) * _sinc(x / 3.0)
        return 0.0
    x = abs(x)
    if algo is Resize.BILINEAR:
        return 1.0 - x if x < 1.0 else 0.0
    a = -0.5
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _sinc(v: float) -> float:
    if v == 0.0:
        return 1.0
    pi_v = v * 3.141592653589793238462643383279502884
    return math.sin(pi_v) / pi_v


def _weights(algo: Resize, in_size: int, out_size: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """precompute_weights(): each output pixel's (first input, count) and its fixed-point weights (out x ksize)."""
    scale = filterscale = in_size / out_size
    filterscale = max(filterscale, 1.0)
    support = algo.value * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds, pre = [], np.zeros((out_size, ksize), np.float64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        ss = 1.0 / filterscale
        xmin = max(int(center - support + 0.5), 0)  # (int): toward zero, as the C cast
        xmax = min(int(center + support + 0.5), in_size) - xmin
        ws = [_filter(algo, (x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in ws:  # (summed in order, as the C loop)
            ww += w
        for x, w in enumerate(ws):
            pre[xx, x] = w / ww if ww != 0.0 else w
        bounds.append((xmin, xmax))
    fxp = math.ldexp(1.0, PRECISION_BITS)
    rounded = pre * fxp + np.where(pre < 0, -0.5, 0.5)
    return bounds, np.trunc(rounded).astype(np.int64)


def _pass(src: np.ndarray, bounds: list[tuple[int, int]], weights: np.ndarray) -> np.ndarray:
    """One axis resampled: src (n_in, rest...) u8 along axis 0 -> (n_out, rest...) u8."""
    out = np.empty((len(bounds), *src.shape[1:]), np.uint8)
    wide = src.astype(np.int64)
    for i, (lo, n) in enumerate(bounds):
        acc = np.full(src.shape[1:], 1 << (PRECISION_BITS - 1), np.int64)
        for j in range(n):
            acc += wide[lo + j] * weights[i, j]
        out[i] = np.clip(acc >> PRECISION_BITS, 0, 255)
    return out


def resize(rgb: np.ndarray, width: int, height: int, algo: Resize) -> np.ndarray:
    """resize_pillow(): (H, W, 3) u8 to (height, width, 3) u8."""
    h, w = rgb.shape[:2]
    out = rgb
    if width != w:
        bounds, weights = _weights(algo, w, width)
        out = _pass(out.transpose(1, 0, 2), bounds, weights).transpose(1, 0, 2)
    if height != h:
        bounds, weights = _weights(algo, h, height)
        out = _pass(out, bounds, weights)
    return np.ascontiguousarray(out)


def resize_padded(rgb: np.ndarray, size: int, algo: Resize, pad: tuple[int, int, int]) -> np.ndarray:
    """img_tool::resize() to size x size with PAD_CEIL: the aspect kept (float32 scale, sides rounded up), the
    result centred on a canvas of the pad colour; an image already that size is copied as it is."""
    h, w = rgb.shape[:2]
    if (w, h) == (size, size):
        return rgb.copy()
    scale = min(np.float32(size) / np.float32(w), np.float32(size) / np.float32(h))
    new_w = min(int(math.ceil(np.float32(w) * scale)), size)
    new_h = min(int(math.ceil(np.float32(h) * scale)), size)
    inner = resize(rgb, new_w, new_h, algo)
    canvas = np.empty((size, size, 3), np.uint8)
    canvas[:, :] = np.array(pad, np.uint8)
    x0, y0 = (size - new_w) // 2, (size - new_h) // 2
    canvas[y0 : y0 + new_h, x0 : x0 + new_w] = inner
    return canvas
