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
