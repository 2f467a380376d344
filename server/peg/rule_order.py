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

# the first entries of libstdc++'s __prime_list (to 2^24: a vocabulary's token_to_id), read from GCC 12's
# libstdc++.so
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
    4703,
    5087,
    5503,
    5953,
    6427,
    6949,
    7517,
    8123,
    8783,
    9497,
    10273,
    11113,
    12011,
    12983,
    14033,
    15173,
    16411,
    17749,
    19183,
    20753,
    22447,
    24281,
    26267,
    28411,
    30727,
    33223,
    35933,
    38873,
    42043,
    45481,
    49201,
    53201,
    57557,
    62233,
    67307,
    72817,
    78779,
    85229,
    92203,
    99733,
    107897,
    116731,
    126271,
    136607,
    147793,
    159871,
    172933,
    187091,
    202409,
    218971,
    236897,
    256279,
    277261,
    299951,
    324503,
    351061,
    379787,
    410857,
    444487,
    480881,
    520241,
    562841,
    608903,
    658753,
    712697,
    771049,
    834181,
    902483,
    976369,
    1056323,
    1142821,
    1236397,
    1337629,
    1447153,
    1565659,
    1693859,
    1832561,
    1982627,
    2144977,
    2320627,
    2510653,
    2716249,
    2938679,
    3179303,
    3439651,
    3721303,
    4026031,
    4355707,
    4712381,
    5098259,
    5515729,
    5967347,
    6456007,
    6984629,
    7556579,
    8175383,
    8844859,
    9569143,
    10352717,
    11200489,
    12117689,
    13109983,
    14183539,
    15345007,
    16601593,
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


class _Order:
    """The node list as runs of buckets: the bucket made non-empty last comes first, and in a bucket's run
    the node linked last comes first (so both are kept in arrival order and read backwards)."""

    def __init__(self, bucket_count: int):
        self.bucket_count = bucket_count
        self.buckets: list[int] = []
        self.runs: dict[int, list[tuple[str, int]]] = {}

    def link(self, key: str, code: int) -> None:
        bucket = code % self.bucket_count
        run = self.runs.get(bucket)
        if run is None:
            self.buckets.append(bucket)
            self.runs[bucket] = run = []
        run.append((key, code))

    def nodes(self) -> list[tuple[str, int]]:
        return [node for b in reversed(self.buckets) for node in reversed(self.runs[b])]


def unordered_map_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a map into which the distinct `keys` were inserted in this order."""
    bucket_count, next_resize, size = 1, 0, 0
    order = _Order(bucket_count)
    for key in keys:
        wanted = size + 1
        if wanted > next_resize:
            # no buckets allocated yet (next_resize == 0): start from at least 11
            min_buckets = max(wanted, 0 if next_resize else 11)
            if min_buckets >= bucket_count:
                bucket_count = _next_bucket_count(max(min_buckets + 1, bucket_count * 2))
                next_resize = bucket_count  # max_load_factor is 1
                rehashed = _Order(bucket_count)  # the old list relinked node by node, in its order
                for old_key, code in order.nodes():
                    rehashed.link(old_key, code)
                order = rehashed
            else:
                next_resize = bucket_count
        order.link(key, string_hash(key))
        size += 1
    return [key for key, _ in order.nodes()]
