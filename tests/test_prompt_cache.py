"""The prompt cache's policy: aligned longest-prefix reuse, at least one token left, LRU under a budget."""

from __future__ import annotations

from server.engine.prompt_cache import PromptCache


def test_reuse_is_the_common_prefix_rounded_down_to_a_chunk_and_leaves_one_token():
    pc = PromptCache(budget_bytes=None, align=4)
    pc.store(tuple(range(10)), "snap", 10)
    assert pc.lookup(list(range(7)) + [99]) == (4, "snap")
    assert pc.lookup(list(range(10))) == (8, "snap")  # identical prompt: the last token is re-evaluated
    assert pc.lookup(list(range(8)) + [99]) == (8, "snap")
    assert pc.lookup([99, 1, 2, 3, 4, 5]) == (0, None)


def test_the_longest_match_wins_and_prefix_entries_are_subsumed():
    pc = PromptCache(budget_bytes=None, align=2)
    pc.store((1, 2, 3, 4), "a", 4)
    pc.store((1, 2, 3, 4, 5, 6), "b", 6)
    assert [e.snapshot for e in pc.entries] == ["b"]
    pc.store((1, 2, 9, 9), "c", 4)
    assert pc.lookup([1, 2, 3, 4, 5, 6, 7]) == (6, "b")


def test_lru_eviction_under_the_byte_budget_and_zero_disables():
    pc = PromptCache(budget_bytes=10, align=1)
    pc.store((1, 1), "a", 4)
    pc.store((2, 2), "b", 4)
    pc.lookup([1, 1, 5])  # a is now the most recently used
    pc.store((3, 3), "c", 4)
    assert sorted(e.snapshot for e in pc.entries) == ["a", "c"] and pc.nbytes <= 10
    pc.store((4, 4), "huge", 11)
    assert "huge" not in [e.snapshot for e in pc.entries]
    off = PromptCache(budget_bytes=0, align=1)
    off.store((1, 2), "x", 1)
    assert off.entries == [] and off.lookup([1, 2, 3]) == (0, None)


def test_chunk_reuse_follows_b10621s_walk_past_the_common_prefix():
    """server-context.cpp's n_cache_reuse loop: from the common prefix on, a cached run of >= min_chunk tokens
    that continues the prompt is taken (both heads move on), a shorter one skips one cached token."""
    from server.engine.prompt_cache import reuse_chunks

    S, M1, M2, M3 = [1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23, 24], [30, 31]
    assert reuse_chunks(S + M1 + M2, S + M2 + M3, 3, 4) == [(7, 3, 5)]  # M2 moved back by len(M1)
    assert reuse_chunks(S + M1 + M2, S + M2 + M3, 3, 6) == []  # shorter than the minimum
    assert reuse_chunks(S + M1 + M2 + M3, S + M2[:2] + M3, 3, 2) == [(7, 3, 2), (12, 5, 2)]
    assert reuse_chunks([5, 5, 5], [9, 5, 5], 0, 2) == []  # the prompt's head (9) is never found


def test_chunk_lookup_takes_the_whole_common_prefix_and_the_entry_covering_most():
    from server.engine.prompt_cache import PromptCache

    pc = PromptCache(budget_bytes=None, align=4)
    pc.store(tuple(range(12)), "a", 12)
    pc.store((0, 1, 2, 50, 51, 52, 53, 54, 55), "b", 9)
    prompt = [0, 1, 2, 8, 9, 10, 11, 77]
    reuse = pc.lookup_chunks(prompt, 3)
    assert (reuse.snapshot, reuse.prefix, reuse.chunks, reuse.n) == ("a", 3, [(8, 3, 4)], 7)
    assert pc.lookup(prompt) == (0, None)  # (the aligned prefix alone: nothing)
    # all of the prompt cached: its last token is left to evaluate
    whole = pc.lookup_chunks([0, 1, 2, 8, 9, 10, 11], 3)
    assert whole.chunks == [(8, 3, 3)] and whole.n == 6
    assert pc.lookup_chunks([0, 1, 2, 3], 3).prefix == 3
    assert pc.lookup_chunks([99, 98], 1) is None
