"""b10621's random numbers: std::mt19937 and libstdc++'s distribution arithmetic (GCC 12), bit for bit.

Same seed, same draws: that is what lets a seeded request pick the same token as the reference.
"""

from __future__ import annotations

import math
import secrets

import numpy as np

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
_N, _M = 624, 397
_TWO32 = 4294967296.0


def rng_seed(seed: int) -> int:
    """get_rng_seed(): the default seed means a random one."""
    return secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else seed & 0xFFFFFFFF


class MT19937:
    """std::mt19937 (the 32-bit Mersenne Twister) with std::seed_seq-free integer seeding."""

    def __init__(self, seed: int):
        mt = [seed & 0xFFFFFFFF]
        for i in range(1, _N):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.mt, self.index = mt, _N

    def _twist(self) -> None:
        mt = self.mt
        for i in range(_N):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % _N] & 0x7FFFFFFF)
            mt[i] = mt[(i + _M) % _N] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self.index = 0

    def next_u32(self) -> int:
        if self.index >= _N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def canonical_double(rng: MT19937) -> float:
    """std::generate_canonical<double, 53>: two 32-bit draws, low word first, clamped below 1."""
    total = float(rng.next_u32())
    total += float(rng.next_u32()) * _TWO32
    r = total / (_TWO32 * _TWO32)
    return math.nextafter(1.0, 0.0) if r >= 1.0 else r


def canonical_float(rng: MT19937) -> np.float32:
    """std::generate_canonical<float, 24>: one draw, rounded to float, clamped below 1."""
    r = np.float32(rng.next_u32()) / np.float32(_TWO32)
    return np.nextafter(np.float32(1), np.float32(0)) if r >= np.float32(1) else r


def discrete(probs: np.ndarray, rng: MT19937) -> int:
    """std::discrete_distribution<int>(probs)(rng): cumulative doubles, lower_bound of one canonical draw.
    Fewer than two weights draw nothing and answer 0."""
    if len(probs) < 2:
        return 0
    p = probs.astype(np.float64)
    total = np.cumsum(p)[-1]
    cp = np.cumsum(p / total)
    cp[-1] = 1.0
    return int(np.searchsorted(cp, canonical_double(rng), side="left"))
