"""engine/checkpoints.py: b10621's prompt batches on a sliding-window model (its context checkpoints), and
api/message_spans.py: the template's user-message starts in a prompt's tokens."""

from __future__ import annotations

from server.api.message_spans import user_starts
from server.engine.checkpoints import prompt_batches


def test_a_chat_prompts_batches_are_b10621s():
    # b10621's log for a 29-token Gemma chat prompt (user message from position 1): [0, 1), [1, 25), [25, 29)
    assert prompt_batches(29, 0, frozenset({1}), 1, {}, 2048, 512) == [1, 25, 29]
    # no messages: only the batch 4 positions before the end; a 5-token prompt starts with a one-row batch
    assert prompt_batches(53, 0, frozenset(), -1, {}, 2048, 512) == [49, 53]
    assert prompt_batches(5, 0, frozenset(), -1, {}, 2048, 512) == [1, 5]


def test_a_user_message_after_the_first_checkpoint_is_not_a_boundary_unless_it_is_the_last():
    # the first checkpoint is taken before the batch at 1 (the memory holds position 0 by then): a later user
    # start ends a batch only as the last one or past min_step
    assert prompt_batches(100, 0, frozenset({1, 40, 70}), 70, {}, 2048, 512) == [1, 40, 70, 96, 100]
    # (40 ends a batch only because no checkpoint exists while the batch from 1 fills)
    assert prompt_batches(100, 0, frozenset({1, 40, 60, 70}), 70, {}, 2048, 512) == [1, 40, 70, 96, 100]
    # past min_step from the last checkpoint (at 1), a user start ends a batch again
    assert prompt_batches(100, 0, frozenset({1, 40, 60, 70}), 70, {}, 2048, 512, min_step=30) == [
        1,
        40,
        60,
        70,
        96,
        100,
    ]


def test_long_prompts_end_batches_before_the_end_and_split_into_ubatches():
    assert prompt_batches(1200, 0, frozenset(), -1, {}, 2048, 512) == [512, 684, 1196, 1200]
    assert prompt_batches(700, 0, frozenset(), -1, {}, 256, 64)[:5] == [64, 128, 192, 256, 320]


def test_an_image_is_a_batch_of_its_own():
    assert prompt_batches(56, 0, frozenset({1}), 1, {6: 15}, 2048, 512) == [1, 6, 15, 52, 56]


def test_a_resumed_prompt_starts_where_its_cache_ends():
    assert prompt_batches(29, 10, frozenset({1}), 1, {}, 2048, 512) == [25, 29]


class _Tok:
    def tokenize(self, text, add_special, parse_special):
        return {"<u>": [7, 8], "<m>": [7, 9]}[text]


def test_user_starts_follow_the_delimiters_in_order_and_skip_images():
    class Image:
        start, n_tokens = 4, 3

    delims = [{"role": "assistant", "delimiter": "<m>"}, {"role": "user", "delimiter": "<u>"}]
    tokens = [1, 7, 8, 5, 7, 8, 0, 7, 9, 2, 7, 8, 3]
    assert user_starts(_Tok(), delims, tokens) == (frozenset({1, 4, 10}), 10)
    assert user_starts(_Tok(), delims, tokens, [Image()]) == (frozenset({1, 10}), 10)  # (the span at 4 is skipped)
    assert user_starts(_Tok(), None, tokens) == (frozenset(), -1)
