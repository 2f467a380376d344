"""What the embedding and rerank routes share: the encoder's checks of each input, and the worker call.

Each input is checked as b10621 checks a task before and when its slot runs it: its token ids in the
vocabulary (400), then its length within one ubatch (500) and within the context (400).
"""

from __future__ import annotations

import asyncio

import numpy as np

from ..errors import INPUT_OVER_CONTEXT, INPUT_TOO_LARGE, INVALID_TOKENS, ErrorKind, UpstreamError


def check_inputs(state, prompts: list[list[int]]) -> None:
    worker, enc = state.engine, state.settings.encoder
    n_vocab = state.tokenizer.vocab_size
    for tokens in prompts:
        if any(not 0 <= t < n_vocab for t in tokens):
            raise UpstreamError(INVALID_TOKENS, ErrorKind.INVALID_REQUEST)
    n_ctx = min(worker.info.n_ctx, worker.n_ctx_train)  # positions past the trained ones have no embedding
    for tokens in prompts:
        if len(tokens) > enc.n_ubatch:
            raise UpstreamError(INPUT_TOO_LARGE.format(n=len(tokens), n_ubatch=enc.n_ubatch), ErrorKind.SERVER)
        if len(tokens) > n_ctx:
            raise UpstreamError(
                INPUT_OVER_CONTEXT.format(n=len(tokens), n_ctx=n_ctx),
                ErrorKind.EXCEED_CONTEXT_SIZE,
                n_prompt_tokens=len(tokens),
                n_ctx=n_ctx,
            )


async def encode(state, prompts: list[list[int]]) -> list[np.ndarray]:
    check_inputs(state, prompts)
    return await asyncio.wrap_future(state.engine.submit(prompts))
