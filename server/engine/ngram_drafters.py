"""b10621's stateful n-gram drafters, ported exactly (common/ngram-map.cpp, common/ngram-mod.cpp,
common/ngram-cache.cpp and their impls in common/speculative.cpp): ngram-map-k, ngram-map-k4v, ngram-mod and
ngram-cache.

Each keeps state per slot across requests, as b10621's one common_speculative keeps it per sequence id
(ngram-mod's table is one for every slot). A drafter sees the slot's text tokens (`history`, b10621's
get_text_tokens) and the token sampled last (`last`, not yet in the cache); `begin` sees the prompt once a request's
prompt is processed; `accept` hears how many of its own draft's tokens the target took. The quirks are b10621's
and kept on purpose (they decide the draft and accepted counts its `timings` report): ngram-map-k ignores min_hits
and drafts no longer than its key's last acceptance; ngram-map-k4v counts its previous match position again;
ngram-mod's table keeps no keys (a collision returns another n-gram's successor); ngram-cache learns only from
each round's new tokens and breaks ties in libstdc++'s unordered_map order (`StdIntMap`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

MASK32, MASK64 = (1 << 32) - 1, (1 << 64) - 1


# ----- ngram-map-k, ngram-map-k4v (common/ngram-map.cpp) ------------------------------------------------------------

MAP_LCG = 2654435761  # LCG_FACTOR
KEY_MAP_SIZE = 262144  # COMMON_NGRAM_HASH_MAP_SIZE
MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES
MAX_VALUE_COUNT = 16380  # COMMON_NGRAM_MAX_VALUE_COUNT


@dataclass(frozen=True)
class MapParams:
    """--spec-ngram-map-k[4v]-size-n / -size-m / -min-hits (common_params_speculative_ngram_map)."""

    size_n: int = 12
    size_m: int = 48
    min_hits: int = 1


def map_hash(tokens: list[int], start: int, n: int) -> int:
    """common_ngram_map_hash: a 32-bit LCG over the n tokens from start."""
    h = 0
    for t in tokens[start : start + n]:
        h = (h * MAP_LCG + t) & MASK32
    return h


@dataclass
class MapValue:
    value_idx: int = 0  # where the m-gram starts in the history (0: an empty slot)
    value_num: int = 0
    n_accepted: int = -1


@dataclass
class MapKey:
    key_idx: int
    stat_idx: int = 0
    key_num: int = 0
    values: list[MapValue] = field(default_factory=list)


@dataclass
class MapState:
    """common_ngram_map: one slot's keys and its hash index (a sparse key_map: 0 entries left out)."""

    keys: list[MapKey] = field(default_factory=list)
    key_map: dict[int, int] = field(default_factory=dict)
    key_map_last_idx: int = 0
    size_last_begin: int = 0
    idx_last_check: int = 0
    last_draft_created: bool = False
    last_draft_key_idx: int = 0
    last_draft_value_idx: int = 0


class NgramMap:
    """ngram-map-k (key_only) or ngram-map-k4v: a key of n tokens (ending with the token sampled last) looked up in
    the slot's history; the m tokens after its match are the draft, as long as the key's last acceptance allows
    (k4v: when one of the key's up to 4 m-grams dominates, 2 to 1, and the key was seen min_hits times)."""

    def __init__(self, params: MapParams, key_only: bool):
        self.p, self.key_only = params, key_only
        self.name = "ngram-map-k" if key_only else "ngram-map-k4v"
        self._slots: dict[int, MapState] = {}

    @property
    def n_max(self) -> int:
        return self.p.size_m

    def new_state(self, slot: int | None) -> MapState:
        if slot is None:
            return MapState()
        return self._slots.setdefault(slot, MapState())

    def begin(self, s: MapState, prompt: list[int]) -> None:
        """common_ngram_map_begin: forget what lies past the new prompt where it is shorter than the history was."""
        n, m, size_begin = self.p.size_n, self.p.size_m, len(prompt)
        cleanup = s.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - n - m if size_begin > n + m else 0
        if size_begin < s.idx_last_check:
            s.key_map = {h: idx for h, idx in s.key_map.items() if idx < cleanup}
            s.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            self._prune_keys(s, cleanup)
        s.idx_last_check = s.size_last_begin = size_begin

    def _prune_keys(self, s: MapState, cleanup: int) -> None:
        for i in range(len(s.keys) - 1, -1, -1):
            key = s.keys[i]
            if key.key_idx >= cleanup:
                del s.keys[i]
                continue
            if self.key_only:
                continue
            for j in range(MAX_VALUES - 1, -1, -1):
                if key.values[j].value_idx != 0 and key.values[j].value_idx >= cleanup:
                    last = key.values[MAX_VALUES - 1]
                    key.values[j : MAX_VALUES - 1] = key.values[j + 1 :]
                    # (the last slot emptied; its n_accepted stays what the moved-from slot held)
                    key.values[MAX_VALUES - 1] = MapValue(0, 0, last.n_accepted)
            if key.values[0].value_idx == 0:
                del s.keys[i]

    def propose(self, s: MapState, inp: list[int], last: int, _n_max: int) -> list[int]:
        """common_ngram_map_draft."""
        s.last_draft_created, s.last_draft_key_idx, s.last_draft_value_idx = False, 0, 0
        n, m, cur_len = self.p.size_n, self.p.size_m, len(inp)
        if cur_len < 2 * n + m:
            return []
        if s.idx_last_check > cur_len:  # (b10621 aborts here, after a context shift: mlxcel starts the map over)
            self.begin(s, inp)
        s.idx_last_check = cur_len
        key = [*inp[cur_len - n + 1 :], last]
        match_pos = self._find(s, inp, key, cur_len)
        self._index(s, inp, cur_len)
        if match_pos == 0:
            return []
        offset = next(
            (i for i, k in enumerate(s.keys) if inp[k.key_idx : k.key_idx + n] == key),
            len(s.keys),
        )
        if offset == len(s.keys):
            s.keys.append(MapKey(match_pos, 0, 0, [MapValue(0, 0, m) for _ in range(MAX_VALUES)]))
        cur = s.keys[offset]
        cur.key_num = min(cur.key_num + 1, MAX_VALUE_COUNT)
        slot = 0
        if not self.key_only:
            if cur.key_num < self.p.min_hits:
                return []
            self._count_values(cur, inp, key, match_pos)
            slot = self._dominant(cur)
            if slot < 0:
                return []
        n_draft = min(m, cur.values[slot].n_accepted)
        s.last_draft_created, s.last_draft_key_idx, s.last_draft_value_idx = True, offset, slot
        return inp[match_pos + n : match_pos + n + max(n_draft, 0)]

    def _find(self, s: MapState, inp: list[int], key: list[int], cur_len: int) -> int:
        n, m = self.p.size_n, self.p.size_m
        idx = s.key_map.get(map_hash(key, 0, n) % KEY_MAP_SIZE, 0)
        if idx != 0 and idx < cur_len - n - m - 1 and inp[idx : idx + n] == key:
            return idx
        if s.size_last_begin > n + m + 1:
            for j in range(s.size_last_begin - n - m - 1, s.key_map_last_idx, -1):
                if inp[j : j + n] == key:
                    return j
        for j in range(cur_len - n - m - 1, max(s.size_last_begin, s.key_map_last_idx), -1):
            if inp[j : j + n] == key:
                return j
        return 0

    def _index(self, s: MapState, inp: list[int], cur_len: int) -> None:
        """The new positions' hashes into key_map (the first writer keeps a slot), in the search's order."""
        n, m = self.p.size_n, self.p.size_m
        ranges = []
        if s.size_last_begin > n + m + 1:
            ranges.append(range(s.size_last_begin - n - m - 1, s.key_map_last_idx, -1))
        ranges.append(range(cur_len - n - m - 1, max(s.size_last_begin, s.key_map_last_idx), -1))
        for r in ranges:
            for j in r:
                s.key_map.setdefault(map_hash(inp, j, n) % KEY_MAP_SIZE, j)
        s.key_map_last_idx = max((cur_len - n - m - 1) & MASK32, s.key_map_last_idx)

    def _count_values(self, cur: MapKey, inp: list[int], key: list[int], match_pos: int) -> None:
        """The m-grams after each occurrence of the key from stat_idx to match_pos (both counted: b10621's)."""
        n, m = self.p.size_n, self.p.size_m
        for i in range(cur.stat_idx, match_pos + 1):
            if inp[i : i + n] != key:
                continue
            start = i + n
            for v in cur.values:
                if v.value_idx == 0:
                    v.value_idx, v.value_num, v.n_accepted = start, 0, m
                elif inp[start : start + m] != inp[v.value_idx : v.value_idx + m]:
                    continue
                v.value_num = min(v.value_num + 1, MAX_VALUE_COUNT)
                break
        cur.stat_idx = match_pos

    @staticmethod
    def _dominant(cur: MapKey) -> int:
        """The most seen m-gram's slot (the first of equals), or -1 where it is not twice the others together."""
        best, slot = 0, 0
        for v, value in enumerate(cur.values):
            if value.value_num > best:
                best, slot = value.value_num, v
        others = sum(value.value_num for v, value in enumerate(cur.values) if v != slot)
        return -1 if others > 0 and best < 2 * others else slot

    def accept(self, s: MapState, n_accepted: int) -> None:
        if s.last_draft_created:
            s.keys[s.last_draft_key_idx].values[s.last_draft_value_idx].n_accepted = n_accepted


# ----- ngram-mod (common/ngram-mod.cpp) -------------------------------------------------------------------------------

MOD_LCG = 6364136223846793005
MOD_SIZE = 4 * 1024 * 1024
MOD_OCCUPANCY_RESET = 0.25  # begin(): the table is cleared past this share of used entries
MOD_LOW_ACCEPT, MOD_LOW_STREAK = 0.25, 5  # accept(): so many drafts in a row under this share clear it too
MOD_CHUNK = 32  # draft(): the history is added once this many tokens are new


@dataclass(frozen=True)
class ModParams:
    """--spec-ngram-mod-n-match / -n-min / -n-max (common_params_speculative_ngram_mod)."""

    n_match: int = 24
    n_min: int = 48
    n_max: int = 64


@dataclass
class ModSlot:
    i_last: int = 0  # where the slot's history was added up to
    n_draft_last: int = 0  # its last draft's length, before the round's bound cut it
    n_low: int = 0  # drafts in a row accepted under MOD_LOW_ACCEPT (kept across requests, as b10621's)


class NgramMod:
    """One table for every slot: the hash of n_match tokens -> the token that followed them (the last writer
    wins, no key kept). A draft is the chain of successors from the last n_match tokens, n_min to n_max long."""

    name = "ngram-mod"

    def __init__(self, params: ModParams):
        self.p = params
        self.entries: dict[int, int] = {}  # (the 4M-entry table, sparse: EMPTY entries left out)
        self._slots: dict[int, ModSlot] = {}

    @property
    def n_max(self) -> int:
        return max(0, self.p.n_max)

    def new_state(self, slot: int | None) -> ModSlot:
        return ModSlot() if slot is None else self._slots.setdefault(slot, ModSlot())

    def _idx(self, tokens: list[int], start: int) -> int:
        res = 0
        for t in tokens[start : start + self.p.n_match]:
            res = (res * MOD_LCG + t) & MASK64
        return res % MOD_SIZE

    def _add(self, tokens: list[int], start: int) -> None:
        self.entries[self._idx(tokens, start)] = tokens[start + self.p.n_match]

    def begin(self, s: ModSlot, prompt: list[int]) -> None:
        s.i_last, s.n_draft_last = 0, 0
        n = self.p.n_match
        if len(prompt) < n:
            return
        for i in range(len(prompt) - n):
            self._add(prompt, i)
        s.i_last = len(prompt) - n
        if len(self.entries) / MOD_SIZE > MOD_OCCUPANCY_RESET:
            self.entries.clear()

    def propose(self, s: ModSlot, inp: list[int], last: int, _n_max: int) -> list[int]:
        s.n_draft_last = 0
        n, cur_len = self.p.n_match, len(inp)
        if cur_len < n:
            return []
        if s.i_last + MOD_CHUNK < cur_len:
            for i in range(s.i_last, cur_len - n):
                self._add(inp, i)
            s.i_last = cur_len - n
        window = [*inp[cur_len - n + 1 :], last]
        for i in range(self.p.n_max):
            token = self.entries.get(self._idx(window, i))
            if token is None:
                if i < self.p.n_min:
                    return []
                break
            window.append(token)
        draft = window[n:]
        s.n_draft_last = len(draft)
        return draft

    def accept(self, s: ModSlot, n_accepted: int) -> None:
        if s.n_draft_last <= 0:
            return
        if n_accepted / s.n_draft_last < MOD_LOW_ACCEPT:
            s.n_low += 1
            if s.n_low >= MOD_LOW_STREAK:
                self.entries.clear()
                s.n_low, s.i_last = 0, 0
        else:
            s.n_low = 0


# ----- ngram-cache (common/ngram-cache.cpp) ---------------------------------------------------------------------------

# libstdc++'s bucket counts for an insert-only unordered_map (max load factor 1): 13 at the first insert, then the
# next of its primes at least twice the last, reached at bucket-count + 1 elements
_BUCKETS = (
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061, 712697,
    1447153, 2938679, 5967347, 12117689, 24607243, 49969847, 101473717,
)  # fmt: skip


class StdIntMap:
    """std::unordered_map<llama_token, int32_t> as libstdc++ 12 orders it (insert-only, identity hash): a key
    goes before its bucket's first node, or first of all in an empty bucket; a rehash re-places the nodes in
    their order. ngram-cache's drafts take the first of equal counts in this order."""

    __slots__ = ("counts", "order", "n_buckets")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.order: list[int] = []
        self.n_buckets = 1

    def copy(self) -> StdIntMap:
        out = StdIntMap()
        out.counts, out.order, out.n_buckets = dict(self.counts), list(self.order), self.n_buckets
        return out

    @staticmethod
    def _place(order: list[int], key: int, n_buckets: int) -> None:
        bucket = key % n_buckets
        at = next((i for i, k in enumerate(order) if k % n_buckets == bucket), 0)
        order.insert(at, key)

    def emplace(self, key: int, count: int) -> None:
        """Insert where absent (a present key keeps its count)."""
        if key in self.counts:
            return
        if len(self.counts) + 1 > (self.n_buckets if self.n_buckets > 1 else 0):
            self.n_buckets = next(b for b in _BUCKETS if b >= 2 * self.n_buckets)
            old, self.order = self.order, []
            for k in old:
                self._place(self.order, k, self.n_buckets)
        self._place(self.order, key, self.n_buckets)
        self.counts[key] = count

    def add(self, key: int) -> None:
        if key in self.counts:
            self.counts[key] += 1
        else:
            self.emplace(key, 1)

    def items(self) -> Iterator[tuple[int, int]]:
        return ((k, self.counts[k]) for k in self.order)


NgramTable = dict[tuple[int, ...], StdIntMap]  # common_ngram_cache: an n-gram (4 slots, -1 padded) -> its part

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2  # LLAMA_NGRAM_MIN / _MAX / _STATIC
CACHE_N_DRAFT = 8  # the server's ngram-cache drafts at most 8 (common_speculative_init)
LAX_SAMPLES, LAX_PERCENT = (2, 2, 1, 1), (66, 50, 50, 50)
STRICT_SAMPLES, STRICT_PERCENT = (4, 3, 2, 2), (75, 66, 66, 66)


def ngram_key(tokens: list[int]) -> tuple[int, ...]:
    return (*tokens, *(-1,) * (NGRAM_MAX - len(tokens)))


def cache_update(cache: NgramTable, tokens: list[int]) -> None:
    """common_ngram_cache_update(cache, 1, 4, tokens, len(tokens)): every 1- to 4-gram of these tokens alone."""
    for k in range(NGRAM_MIN, NGRAM_MAX + 1):
        for i in range(k, len(tokens)):
            key = ngram_key(tokens[i - k : i])
            part = cache.get(key)
            if part is None:
                part = cache[key] = StdIntMap()
            part.add(tokens[i])


def _i32(x: int) -> int:
    """An int32 product as b10621's build wraps it."""
    x &= MASK32
    return x - (1 << 32) if x >= 1 << 31 else x


def _try_primary(
    cache: NgramTable, ngrams: list[tuple], static: StdIntMap | None, samples: tuple, percent: tuple
) -> int:
    for i in range(len(ngrams) - 1, -1, -1):
        part = cache.get(ngrams[i])
        if part is None:
            continue
        max_p = max_s = total = 0
        best = -1
        for token, count in part.items():
            count_s = 100 * static.counts[token] if static is not None and token in static.counts else 1
            if _i32(count * count_s) > _i32(max_p * max_s):
                best, max_p, max_s = token, count, count_s
            total += count
        if total < samples[i] or 100 * max_p < percent[i] * total:
            continue
        return best
    return -1


def _try_static(part: StdIntMap | None) -> int:
    if part is None:
        return -1
    best, max_s, total = -1, 0, 0
    for token, count in part.items():
        if count > max_s:
            best, max_s = token, count
        total += count
    if total < LAX_SAMPLES[NGRAM_STATIC - 1] or 100 * max_s < LAX_PERCENT[NGRAM_STATIC - 1] * total:
        return -1
    return best


def cache_draft(inp: list[int], context: NgramTable, dynamic: NgramTable, static: NgramTable) -> list[int]:
    """common_ngram_cache_draft over inp (the history and the token sampled last): up to 8 tokens."""
    if len(inp) < NGRAM_STATIC:
        return []
    seq = list(inp)
    while len(seq) - len(inp) < CACHE_N_DRAFT:
        part_static = static.get(ngram_key(seq[-NGRAM_STATIC:]))
        ngrams = [ngram_key(seq[-k:]) for k in range(NGRAM_MIN, NGRAM_MAX + 1)]
        token = _try_primary(context, ngrams, part_static, LAX_SAMPLES, LAX_PERCENT)
        if token < 0:
            token = _try_primary(dynamic, ngrams, part_static, STRICT_SAMPLES, STRICT_PERCENT)
        if token < 0:
            token = _try_static(part_static)
        if token < 0:
            break
        seq.append(token)
    return seq[len(inp) :]


class LookupCacheError(ValueError):
    """A lookup cache file b10621 cannot read (it aborts; mlxcel refuses to start)."""


def load_lookup_cache(path: Path) -> NgramTable:
    """common_ngram_cache_load: records of an n-gram (4 int32), a token count and (token, count) int32 pairs, native
    (little-endian) order, no header; the first record of an n-gram and of a token kept; a tail shorter than an
    n-gram ignored."""
    data = path.read_bytes()
    out: NgramTable = {}
    pos = 0
    while len(data) - pos >= 16:
        key = struct.unpack_from("<4i", data, pos)
        pos += 16
        if len(data) - pos < 4:
            raise LookupCacheError("a record ends before its token count")
        (n,) = struct.unpack_from("<i", data, pos)
        pos += 4
        if n <= 0 or len(data) - pos < 8 * n:
            raise LookupCacheError("a record's token count is not positive or its tokens are cut short")
        pairs = struct.unpack_from(f"<{2 * n}i", data, pos)
        pos += 8 * n
        if any(c <= 0 for c in pairs[1::2]):
            raise LookupCacheError("a record holds a count that is not positive")
        if key in out:
            continue
        part = out[key] = StdIntMap()
        for token, count in zip(pairs[::2], pairs[1::2], strict=True):
            part.emplace(token, count)
    return out


@dataclass(frozen=True)
class CacheParams:
    """-lcs / -lcd: the static and dynamic lookup cache files ("" for none); the server reads them, never writes."""

    static: str = ""
    dynamic: str = ""
    # the files' tables as the start-up read them (checking that they can be read): not read twice
    loaded: tuple[NgramTable, NgramTable] | None = field(default=None, compare=False, repr=False)


@dataclass
class CacheSlot:
    cache_size: int = 0  # history tokens (and the last sampled one) the context cache has seen
    context: NgramTable = field(default_factory=dict)


class NgramCache:
    """The slot's context n-gram cache (1- to 4-grams, learnt from each round's new tokens only), then the
    dynamic file's, then the static file's 2-grams: up to 8 tokens. Nothing is ever reset."""

    name = "ngram-cache"
    n_max = CACHE_N_DRAFT

    def __init__(self, params: CacheParams):
        if params.loaded is not None:
            self.static, self.dynamic = params.loaded
        else:
            self.static = load_lookup_cache(Path(params.static)) if params.static else {}
            self.dynamic = load_lookup_cache(Path(params.dynamic)) if params.dynamic else {}
        self._slots: dict[int, CacheSlot] = {}

    def new_state(self, slot: int | None) -> CacheSlot:
        return CacheSlot() if slot is None else self._slots.setdefault(slot, CacheSlot())

    def begin(self, s: CacheSlot, prompt: list[int]) -> None:
        pass

    def propose(self, s: CacheSlot, inp: list[int], last: int, _n_max: int) -> list[int]:
        if s.cache_size < len(inp) + 1:
            cache_update(s.context, [*inp[s.cache_size :], last])
            s.cache_size = len(inp) + 1
        return cache_draft([*inp, last], s.context, self.dynamic, self.static)

    def accept(self, s: CacheSlot, n_accepted: int) -> None:
        pass


@dataclass(frozen=True)
class NgramDrafters:
    """The stateful n-gram drafters --spec-type turns on, with their tuning (None: off)."""

    map_k: MapParams | None = None
    map_k4v: MapParams | None = None
    mod: ModParams | None = None
    cache: CacheParams | None = None
