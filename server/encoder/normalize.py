"""b10621's common_embd_normalize, with its arithmetic: a double accumulator, a float scale, and a zero
vector left at zero (norm = sum > 0 ? 1/sum : 0)."""

from __future__ import annotations

import numpy as np

NONE, MAX_ABS_INT16, TAXICAB, EUCLIDEAN = -1, 0, 1, 2
INT16_RANGE = 32760.0


def embd_normalize(vector: np.ndarray, mode: int) -> np.ndarray:
    """`vector` (float32) scaled as --embd-normalize / embd_normalize `mode` asks: -1 none, 0 max-absolute into
    the int16 range, 1 taxicab, 2 euclidean, any other p > 2 (or p < -1) the p-norm."""
    x = np.asarray(vector, dtype=np.float32)
    if mode == NONE:
        total = 1.0
    elif mode == MAX_ABS_INT16:
        total = float(np.abs(x).max(initial=0.0)) / INT16_RANGE
    elif mode == EUCLIDEAN:  # each square is a float product, summed in double
        total = float(np.sqrt(np.sum((x * x).astype(np.float64))))
    else:  # std::pow(std::abs(float), int) in double
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            total = float(np.sum(np.abs(x.astype(np.float64)) ** mode) ** (1.0 / mode))
    scale = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
    return x * scale
