"""Iteration order of a libstdc++ (GCC 12) std::unordered_map<std::string, ...>, the container of
b10621's common_peg_arena::rules_.

build_grammar() hands rules to the grammar builder in that order, and the builder gives a clashing
rule name a numeric suffix depending on which came first, so the order is part of the output.
The order follows from std::hash<std::string> (_Hash_bytes, a MurmurHash2 variant), the prime
rehash policy and the way new nodes are linked in (at the start of their bucket's run, or at the
head of the list when the bucket is empty).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907

# the first entries of libstdc++'s __prime_list, read from GCC 12's libstdc++.so
_PRIMES = [
    2,
    3,
    5,
    7,
    11,
    13,
    17,
    19,
    23,
    29,
    31,
    37,
    41,
    43,
    47,
    53,
    59,
    61,
    67,
    71,
    73,
    79,
    83,
    89,
    97,
    103,
    109,
    113,
    127,
    137,
    139,
    149,
    157,
    167,
    179,
    193,
    199,
    211,
    227,
    241,
    257,
    277,
    293,
    313,
    337,
    359,
    383,
    409,
    439,
    467,
    503,
    541,
    577,
    619,
    661,
    709,
    761,
    823,
    887,
    953,
    1031,
    1109,
    1193,
    1289,
    1381,
    1493,
    1613,
    1741,
    1879,
    2029,
    2179,
    2357,
    2549,
    2753,
    2971,
    3209,
    3469,
    3739,
    4027,
    4349,
]
_FAST_BUCKETS = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13]


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def string_hash(key: str) -> int:
    """std::hash<std::string> of the key's UTF-8 bytes on a 64-bit libstdc++."""
    data = key.encode("utf-8")
    aligned = len(data) & ~7
    h = (_SEED ^ (len(data) * _MUL)) & _MASK
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i : i + 8], "little")
        h ^= (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        h = (h * _MUL) & _MASK
    if len(data) & 7:
        h ^= int.from_bytes(data[aligned:], "little")
        h = (h * _MUL) & _MASK
    h = (_shift_mix(h) * _MUL) & _MASK
    return _shift_mix(h)


def _next_bucket_count(n: int) -> int:
    if n < len(_FAST_BUCKETS):
        return _FAST_BUCKETS[n]
    index = bisect_left(_PRIMES, n, lo=6)
    if index == len(_PRIMES):
        raise ValueError(f"too many rules to reproduce libstdc++'s order: {n} buckets")
    return _PRIMES[index]


def _link(order: list[tuple[str, int]], key: str, code: int, bucket_count: int) -> None:
    bucket = code % bucket_count
    for i, (_, other) in enumerate(order):
        if other % bucket_count == bucket:
            order.insert(i, (key, code))
            return
    order.insert(0, (key, code))


def unordered_map_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a map into which the distinct `keys` were inserted in this order."""
    bucket_count, next_resize = 1, 0
    order: list[tuple[str, int]] = []
    for key in keys:
        wanted = len(order) + 1
        if wanted > next_resize:
            # no buckets allocated yet (next_resize == 0): start from at least 11
            min_buckets = max(wanted, 0 if next_resize else 11)
            if min_buckets >= bucket_count:
                bucket_count = _next_bucket_count(max(min_buckets + 1, bucket_count * 2))
                next_resize = bucket_count  # max_load_factor is 1
                rehashed: list[tuple[str, int]] = []
                for old_key, code in order:
                    _link(rehashed, old_key, code, bucket_count)
                order = rehashed
            else:
                next_resize = bucket_count
        _link(order, key, string_hash(key), bucket_count)
    return [key for key, _ in order]
