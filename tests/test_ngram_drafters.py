"""The stateful n-gram drafters' pieces (server/engine/ngram_drafters.py): the unordered_map order ngram-cache's
ties follow, checked against the C++ library itself; the lookup cache file reader; ngram-map's and ngram-mod's
rules on small histories (their end-to-end counts are b10621's: conformance/test_ngram_drafters.py)."""

from __future__ import annotations

import random
import struct
import subprocess

import pytest

from server.cachedir import cache_root
from server.engine.ngram_drafters import (
    LookupCacheError,
    MapParams,
    ModParams,
    NgramMap,
    NgramMod,
    StdIntMap,
    cache_draft,
    cache_update,
    load_lookup_cache,
)
from tests.mtmd_resize import build_program

ORDER_PROGRAM = r"""
#include <unordered_map>
#include <cstdio>
#include <cstdint>
int main() {
    int n;
    while (scanf("%d", &n) == 1) {
        std::unordered_map<int32_t, int32_t> m;
        for (int i = 0; i < n; i++) { int k; scanf("%d", &k); m.emplace(k, 1); }
        std::unordered_map<int32_t, int32_t> copy = m;
        for (auto & p : copy) printf("%d ", p.first);
        printf("\n");
    }
}
"""


def test_std_int_map_iterates_as_the_c_plus_plus_library_does():
    """200 insertion sequences (small and large keys, up to 300 keys: several rehashes), the library's iteration
    order of a copy (what ngram-cache's drafts walk) against StdIntMap's."""
    exe = build_program("umap-order", ORDER_PROGRAM, cache_root() / "native" / "tests", ["-O1"])
    rng = random.Random(5)
    runs = [[rng.randrange(100 if t % 2 else 200000) for _ in range(rng.randrange(1, 300))] for t in range(200)]
    text = "".join(f"{len(keys)} {' '.join(map(str, keys))}\n" for keys in runs)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout.splitlines()
    for keys, line in zip(runs, out, strict=True):
        m = StdIntMap()
        for k in keys:
            m.emplace(k, 1)
        assert [k for k, _ in m.copy().items()] == [int(x) for x in line.split()]


def test_a_tie_goes_to_the_first_token_in_that_order():
    """Two next tokens seen once each after a 2-gram: 50% passes the lax bound (2 samples, 50%), and the draft is
    the one the map iterates first (13 buckets: 27 and 14 share bucket 1, the later placed before)."""
    cache: dict = {}
    cache_update(cache, [4, 5, 27, 4, 5, 14])
    part = cache[(4, 5, -1, -1)]
    assert [k for k, _ in part.items()] == [14, 27]
    assert cache_draft([9, 4, 5], cache, {}, {})[:1] == [14]


def _record(key: tuple[int, ...], pairs: list[tuple[int, int]]) -> bytes:
    return struct.pack("<4ii", *key, len(pairs)) + b"".join(struct.pack("<ii", t, c) for t, c in pairs)


def test_a_lookup_cache_reads_as_common_ngram_cache_load(tmp_path):
    data = _record((1, 2, -1, -1), [(3, 4), (5, 1), (3, 9)]) + _record((1, 2, -1, -1), [(7, 7)]) + b"\x01\x02"
    path = tmp_path / "c.bin"
    path.write_bytes(data)
    table = load_lookup_cache(path)
    assert list(table) == [(1, 2, -1, -1)]  # (the first record of an n-gram kept; a short tail ignored)
    assert dict(table[(1, 2, -1, -1)].items()) == {3: 4, 5: 1}  # (the first count of a token kept)
    for bad in (
        _record((1, 2, -1, -1), [(3, 0)]),
        _record((1, -1, -1, -1), [(3, 1)])[:-4],
        struct.pack("<4ii", 1, 2, 3, 4, 0),
    ):
        path.write_bytes(bad)
        with pytest.raises(LookupCacheError):
            load_lookup_cache(path)


def test_ngram_map_k_drafts_no_longer_than_its_keys_last_acceptance():
    """b10621's map-k: min_hits is not read, and a key's draft is cut to what the target took of its last one."""
    drafter = NgramMap(MapParams(size_n=2, size_m=3, min_hits=5), key_only=True)
    state = drafter.new_state(0)
    history = [0, 1, 2, 3, 4, 5, 9, 9, 9, 9, 9, 1]  # (position 0 is never matched: b10621's 0 means none)
    drafter.begin(state, history)
    assert drafter.propose(state, history, 2, 0) == [3, 4, 5]
    drafter.accept(state, 1)
    assert drafter.propose(state, [*history, 2, 3, 4, 8, 8, 8, 1], 2, 0) == [3]


def test_ngram_map_k4v_waits_for_a_dominant_continuation():
    """k4v drafts only when the most seen m-gram after the key is at least twice the others together."""
    drafter = NgramMap(MapParams(size_n=1, size_m=1, min_hits=1), key_only=False)
    state = drafter.new_state(None)
    history = [7, 1, 2, 0, 1, 3, 0, 0, 0, 0]
    drafter.begin(state, history)
    assert drafter.propose(state, history, 1, 0) == []  # (2 and 3 once each after 1)


def test_ngram_mod_needs_n_min_hits_and_clears_its_table_on_a_low_acceptance_streak():
    drafter = NgramMod(ModParams(n_match=2, n_min=3, n_max=4))
    state = drafter.new_state(0)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    drafter.begin(state, prompt)
    assert drafter.propose(state, prompt[:-1], 2, 0) == [3, 4, 5, 6]
    assert drafter.propose(state, [9, 9, 9], 9, 0) == []  # (no successor of 9 9: fewer than n_min)
    drafter.propose(state, prompt[:-1], 2, 0)
    for _ in range(5):
        drafter.accept(state, 0)
    assert drafter.entries == {} and drafter.propose(state, prompt[:-1], 2, 0) == []
