"""The pure scheduler: slot admission, chunked prefill interleaved with decode, no-cont-batching."""

from __future__ import annotations

from server.engine.scheduler import Scheduler, Sequence


def run_step(sched: Scheduler):
    step = sched.schedule()
    for chunk in step.prefill:
        sched.prefilled(chunk)
    for seq in step.decode:
        seq.n_decoded += 1
    return step


def test_requests_take_the_lowest_free_slot():
    s = Scheduler(n_slots=3)
    a, b, c = (Sequence(i, [1, 2]) for i in range(3))
    for q in (a, b, c):
        s.add(q)
    run_step(s)
    assert (a.slot, b.slot, c.slot) == (0, 1, 2)
    s.free(b)
    d = Sequence(3, [1])
    s.add(d)
    run_step(s)
    assert d.slot == 1


def test_waiting_requests_queue_until_a_slot_frees():
    s = Scheduler(n_slots=1)
    a, b = Sequence(0, [1]), Sequence(1, [1])
    s.add(a)
    s.add(b)
    run_step(s)
    assert a.slot == 0 and b.slot is None and list(s.waiting) == [b]
    s.free(a)
    run_step(s)
    assert b.slot == 0


def test_prefill_is_chunked_to_the_token_budget_and_interleaved_with_decode():
    s = Scheduler(n_slots=2, n_batch=4)
    a = Sequence(0, [1, 2])
    s.add(a)
    step = run_step(s)
    assert [(c.start, c.end) for c in step.prefill] == [(0, 2)] and step.decode == []
    b = Sequence(1, list(range(7)))
    s.add(b)
    step = run_step(s)  # a decodes (1 token of budget), b prefills 3
    assert step.decode == [a] and [(c.seq.rid, c.start, c.end) for c in step.prefill] == [(1, 0, 3)]
    step = run_step(s)
    assert step.decode == [a] and [(c.start, c.end, c.completes_prompt) for c in step.prefill] == [(3, 6, False)]
    step = run_step(s)
    assert [(c.start, c.end, c.completes_prompt) for c in step.prefill] == [(6, 7, True)]
    step = run_step(s)
    assert step.decode == [a, b] and step.prefill == []


def test_without_continuous_batching_a_new_prompt_waits_for_the_decoders():
    s = Scheduler(n_slots=2, n_batch=8, cont_batching=False)
    a = Sequence(0, [1, 2])
    s.add(a)
    run_step(s)
    b = Sequence(1, [1, 2, 3])
    s.add(b)
    step = run_step(s)
    assert step.decode == [a] and step.prefill == [] and b.slot is None
    s.free(a)
    step = run_step(s)
    assert b.slot == 0 and [(c.start, c.end) for c in step.prefill] == [(0, 3)] and step.decode == []


def test_cancelled_sequences_are_reported_for_finishing():
    s = Scheduler(n_slots=1)
    a, b = Sequence(0, [1]), Sequence(1, [1])
    s.add(a)
    s.add(b)
    run_step(s)
    a.cancelled = b.cancelled = True
    assert s.cancelled() == [a, b]
    for q in s.cancelled():
        s.free(q)
    assert s.idle()
