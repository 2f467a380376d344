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


def test_prefill_chunks_align_to_ubatch_fit_the_budget_and_interleave_with_decode():
    s = Scheduler(n_slots=2, n_batch=6, ubatch=3)
    a = Sequence(0, [1, 2])
    s.add(a)
    step = run_step(s)
    assert [(c.start, c.end) for c in step.prefill] == [(0, 2)] and step.decode == []
    b = Sequence(1, list(range(10)))
    s.add(b)
    step = run_step(s)  # a decodes (1 token of the budget of 6), b prefills one aligned chunk of 3 (not 5)
    assert step.decode == [a] and [(c.seq.rid, c.start, c.end) for c in step.prefill] == [(1, 0, 3)]
    step = run_step(s)
    assert step.decode == [a] and [(c.start, c.end, c.completes_prompt) for c in step.prefill] == [(3, 6, False)]
    step = run_step(s)  # 5 tokens of budget: the chunk of 3 and the last one fit
    assert [(c.start, c.end, c.completes_prompt) for c in step.prefill] == [(6, 9, False), (9, 10, True)]
    step = run_step(s)
    assert step.decode == [a, b] and step.prefill == []


def test_a_reused_prefix_resumes_on_the_same_chunk_boundaries():
    s = Scheduler(n_slots=1, n_batch=100, ubatch=4)
    a = Sequence(0, list(range(11)), n_prefilled=8)  # 8 positions restored from the prompt cache
    s.add(a)
    assert [(c.start, c.end) for c in run_step(s).prefill] == [(8, 11)]


def test_a_big_budget_takes_several_aligned_chunks_in_one_step():
    s = Scheduler(n_slots=1, n_batch=100, ubatch=4)
    s.add(Sequence(0, list(range(10))))
    assert [(c.start, c.end) for c in run_step(s).prefill] == [(0, 4), (4, 8), (8, 10)]


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


def test_a_request_with_children_waits_until_all_fit_and_only_it_prefills():
    s = Scheduler(n_slots=3)
    busy = Sequence(0, [1, 2])
    s.add(busy)
    run_step(s)
    parent = Sequence(1, [5, 6, 7])
    parent.children = [Sequence(2, [5, 6, 7], held=True), Sequence(3, [5, 6, 7], held=True)]
    s.add(parent)
    step = run_step(s)
    assert parent.slot is None and step.decode == [busy]  # two slots free, three needed: it waits
    s.free(busy)
    step = run_step(s)
    assert [c.seq for c in step.prefill] == [parent]  # the children hold slots but do not prefill
    assert sorted(x.slot for x in (parent, *parent.children)) == [0, 1, 2]
    assert all(c.n_prefilled == 0 and c not in step.decode for c in parent.children)


def test_children_of_a_cancelled_waiting_request_go_on_alone():
    s = Scheduler(n_slots=1)
    s.add(Sequence(0, [1]))
    run_step(s)
    parent = Sequence(1, [5])
    child = Sequence(2, [5], held=True)
    parent.children = [child]
    s.add(parent)
    s.free(parent)
    assert list(s.waiting) == [child] and not child.held


def test_a_requested_slot_is_waited_for_without_holding_up_others():
    s = Scheduler(n_slots=2)
    a = Sequence(0, [1], want_slot=1)
    s.add(a)
    run_step(s)
    assert a.slot == 1
    b = Sequence(1, [1], want_slot=1)  # its slot is busy: it waits ...
    c = Sequence(2, [1])  # ... and the request behind it takes the free one
    s.add(b)
    s.add(c)
    run_step(s)
    assert (b.slot, c.slot) == (None, 0)
    s.free(a)
    run_step(s)
    assert b.slot == 1


def test_an_images_span_is_its_own_chunk():
    """Positions 3..6 stand for an image (cuts at its bounds): the text before it, its rows and the text after
    run as separate chunks, as mtmd decodes an image apart from the text batches around it."""
    s = Scheduler(n_slots=1, n_batch=100, ubatch=8)
    s.add(Sequence(0, [1, 2, 3, -9, -9, -9, -9, 4, 5, 6, 7, 8], cuts=(3, 7)))
    assert [(c.start, c.end) for c in run_step(s).prefill] == [(0, 3), (3, 7), (7, 8), (8, 12)]
