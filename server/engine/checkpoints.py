"""Where b10621 ends a prompt's batches on a model whose memory cannot be rolled back to any position (a
sliding-window cache): it processes a prompt in batches that end where it wants a context checkpoint
(server-context.cpp, the prompt loop), and llama_decode splits each batch into ubatches from its start.

Pure: the positions one slot's prompt is computed up to, chunk by chunk, from where its cache resumes. They matter
because the sums depend on a chunk's rows: one row is a vec_dot, two or more a tinyBLAS product; under 64 rows
flash attention runs query by query, from 64 in tiles. A batch ends:
- before an image (decoded on its own), and after it;
- before a user message starts (the template's message delimiters) when it is the last user message, when no
  checkpoint exists yet, or when the last checkpoint lies more than min_step positions back;
- 4 + n_ubatch and 4 positions before the prompt's end (the checkpoints taken near its end);
- after n_batch positions.
A checkpoint is taken before a batch that starts a user message or ends near the prompt's end, once the memory holds
something, never in a batch that decoded an image, spaced min_step apart (but the last user message's and those
near the end). The checkpoints b10621 keeps from earlier requests are not modelled: `checkpoints` starts empty
(a cold prompt's batches are b10621's; a resumed one's may differ).
"""

from __future__ import annotations


def prompt_batches(
    n: int,
    start: int,
    user_starts: frozenset[int],
    last_user: int,
    media: dict[int, int],
    n_batch: int,
    n_ubatch: int,
    min_step: int = 8192,
) -> list[int]:
    """The ends of the chunks (ubatches) positions start..n are computed in, in order."""
    ends: list[int] = []
    checkpoints: list[int] = []
    pos, holds = start, start > 0
    offsets = (min(n_batch, 4 + n_ubatch), min(n_batch, 4))
    while pos < n:
        decoded_image = False
        while pos in media:  # an image's rows, on their own (their embedding batches split into ubatches)
            end = media[pos]
            ends.extend(range(pos + n_ubatch, end, n_ubatch))
            ends.append(end)
            pos, holds, decoded_image = end, True, True
        if pos >= n:
            break
        first = pos
        while pos < n and pos - first < n_batch and pos not in media:
            pos += 1
            if pos in user_starts and (pos == last_user or not checkpoints or pos > checkpoints[-1] + min_step):
                break
            if n - pos in offsets:
                break
        ends.extend(range(first + n_ubatch, pos, n_ubatch))
        ends.append(pos)
        near_end = n < pos + n_ubatch
        take = (pos == n or first in user_starts or near_end) and holds and not decoded_image
        if take and (not checkpoints or first == last_user or near_end or first > checkpoints[-1] + min_step):
            checkpoints.append(first)
        holds = True
    return ends
