"""b10621's prompt reuse (server/engine/prompt_cache.py): n_past to the token, the slot a request takes, the
host-memory prompt cache's save/load/limits; and where a hit resumes to stay bitwise a cold run
(server/engine/provenance.py)."""

from __future__ import annotations

from server.engine.prompt_cache import PromptCache, Slot, State, choose_slot, plan_reuse, reuse_chunks
from server.engine.provenance import DECODE, FEW, GEMM, Provenance, exact_start


def _slot(tokens, t_last=-1, processing=False) -> Slot:
    return Slot(State(tuple(tokens), "snap", len(tokens)), t_last, processing)


def test_n_past_is_the_common_prefix_to_the_token_less_one_for_a_whole_prompt():
    assert plan_reuse((1, 2, 3, 4, 5), [1, 2, 3, 9]).n == 3
    assert plan_reuse(tuple(range(9)) + (50, 51), list(range(9))).n == 8  # a repeated 9-token prompt: 8
    assert plan_reuse(tuple(range(9)), list(range(9))).n == 8
    assert plan_reuse((), [1, 2]).n == 0 and plan_reuse((7,), [1, 2]).n == 0


def test_chunk_reuse_follows_b10621s_walk_past_the_common_prefix():
    """server-context.cpp's n_cache_reuse loop: from the common prefix on, a cached run of >= min_chunk tokens
    that continues the prompt is taken (both heads move on), a shorter one skips one cached token."""
    S, M1, M2, M3 = [1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23, 24], [30, 31]
    assert reuse_chunks(S + M1 + M2, S + M2 + M3, 3, 4) == [(7, 3, 5)]  # M2 moved back by len(M1)
    assert reuse_chunks(S + M1 + M2, S + M2 + M3, 3, 6) == []  # shorter than the minimum
    assert reuse_chunks(S + M1 + M2 + M3, S + M2[:2] + M3, 3, 2) == [(7, 3, 2), (12, 5, 2)]
    assert reuse_chunks([5, 5, 5], [9, 5, 5], 0, 2) == []  # the prompt's head (9) is never found
    reuse = plan_reuse(tuple(S + M1 + M2), S + M2, 4)  # all of it cached: the last chunk gives one back
    assert (reuse.prefix, reuse.chunks, reuse.n) == (3, [(7, 3, 4)], 7)


def test_a_request_takes_the_most_similar_idle_slot_above_the_threshold_else_the_least_recently_used():
    p = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    slots = [_slot([1, 2, 9], 5), _slot([1, 2, 3, 4, 5, 0], 3), _slot([], 1), _slot([1, 2, 3, 4, 5, 6, 7], 9, True)]
    assert choose_slot(slots, p, None, 0.1) == (1, False)  # 5/10 beats 2/10; the busy one is skipped
    assert choose_slot(slots, p, None, 0.5) == (2, True)  # nothing above 0.5: LRU (t_last 1), cache updated
    assert choose_slot(slots, p, None, 0.0) == (2, True)  # similarity off
    fresh = [_slot([]) for _ in range(4)]
    assert choose_slot(fresh, p, None, 0.1) == (3, True)  # all -1: the last slot (upstream's <=)
    assert choose_slot([_slot([], 0, True)], p, None, 0.1) == (None, False)
    # the chosen slot would keep under half its tokens: its state goes to the prompt cache first
    big = [_slot([1, 2, 3] + [0] * 10)]
    assert choose_slot(big, [1, 2, 3, 4], None, 0.1) == (0, True)
    assert choose_slot([_slot([1, 2, 3, 4, 0])], [1, 2, 3, 4], None, 0.1) == (0, False)
    assert choose_slot(slots, p, 0, 0.5) == (0, True)  # a requested slot below the threshold
    assert choose_slot(slots, p, 0, 0.1) == (0, False)  # at 2/10 it keeps 2 of its 3 tokens


def test_the_prompt_cache_saves_what_it_lacks_and_loads_what_keeps_and_covers_more():
    pc = PromptCache(0, 0)
    assert pc.save(State((1, 2, 3, 4), "a", 4))
    assert not pc.save(State((1, 2), "x", 2))  # all of it is held already
    assert pc.save(State((1, 2, 3, 4, 5, 6), "b", 6)) and [s.snapshot for s in pc.states] == ["b"]  # a dropped
    pc.save(State((7, 8, 9, 10), "c", 4))
    held = State((1, 2, 0, 0, 0, 0, 0, 0), "own", 8)
    assert pc.load(held, [7, 8, 9, 11]).snapshot == "c" and [s.snapshot for s in pc.states] == ["b"]  # taken out
    assert pc.load(State((1, 2, 3, 4, 5, 6), "own", 6), [1, 2, 3, 9]) is None  # the slot's own is as good
    assert pc.load(State(), [1, 2, 3, 9]).snapshot == "b"  # an empty slot: any state that keeps a quarter
    pc.save(State((5,) * 8 + (1,), "d", 9))
    assert pc.load(State(), [5, 5, 9]) is None  # keeps 2/9 < 1/4: large prompts are not trashed
    assert pc.load(State(), [5, 5, 9], key=(0.5,)) is None  # computed with other adapter scales


def test_the_prompt_cache_drops_its_oldest_states_over_its_limits():
    pc = PromptCache(10, 0)
    pc.save(State((1,), "a", 4))
    pc.save(State((2,), "b", 4))
    pc.save(State((3,), "c", 4))  # makes room: a goes
    assert [s.snapshot for s in pc.states] == ["b", "c"]
    assert not pc.save(State((4,), "huge", 11))
    tokens = PromptCache(0, 5)  # --cache-ram -1: the context's tokens bound it
    tokens.save(State((1, 1, 1), "a", 3))
    tokens.save(State((2, 2, 2), "b", 3))
    tokens.update()
    assert [s.snapshot for s in tokens.states] == ["b"]


def test_a_hit_resumes_where_a_cold_run_computes_the_same_numbers():
    """Held positions made by the kinds a cold run uses are kept; the first recomputed chunk is of the kind the
    cold run's is (more than 16 rows: the BLAS's GEMM), so a hit may recompute a few positions before n_past."""
    made = Provenance()
    made.add(0, 300, GEMM)
    assert exact_start(made, 300, 137, 512, 16) == 137  # 163 rows recomputed, GEMM as cold
    assert exact_start(made, 300, 299, 512, 16) == 283  # 1 row would take the few-row kernels: 17 rows
    assert exact_start(made, 12, 11, 512, 16) == 0  # a cold 12-token prompt runs few-row: held GEMM rows differ
    long = Provenance([(0, 512, GEMM), (512, 700, GEMM)])
    assert exact_start(long, 700, 600, 512, 16) == 600 and exact_start(long, 700, 514, 512, 16) == 514
    assert exact_start(long, 700, 699, 512, 16) == 683
    short = Provenance([(0, 9, FEW), (9, 20, DECODE)])
    assert exact_start(short, 9, 8, 512, 16) == 8  # a repeated 9-token prompt: few-row as cold
    assert exact_start(short, 40, 19, 512, 16) == 0  # generated positions came from decode steps
    assert exact_start(None, 40, 19, 512, 16) == 0  # after a context shift or moved chunks: all recomputed


def test_a_state_counts_the_bytes_b10621s_state_seq_size_gives_it():
    from server.backends.state_size import state_bytes

    layers = [(192, 192)] * 30  # SmolLM2-135M: 3 KV heads of 64
    # per token: pos, n_seq_id, seq id (12) + 30 layers x 192 keys and 192 values x 2 bytes (f16)
    assert state_bytes(18, layers, "f16", "f16", 1) - state_bytes(17, layers, "f16", "f16", 1) == 12 + 30 * 768
    # the f16 cache is about half the f32 one (b10621's default against mlxcel's float32 buffers)
    assert 0.49 < state_bytes(100, layers, "f16", "f16", 1) / state_bytes(100, layers, "f32", "f32", 1) < 0.51
    # stream count, cell count per stream; an empty sequence writes nothing else
    assert state_bytes(0, layers, "f16", "f16", 4) == 4 + 4 * 4
    assert state_bytes(1, layers, "f16", "bf16", 1) == 8 + 12 + 8 + 30 * (12 + 384 + 12 + 384)
