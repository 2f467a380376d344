"""An engine on a checkpoint (or on the fake backend with the checkpoint's tokenizer), started and stopped around a
test module (shared by the in-process tests)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from server.backends.fake import FakeBackend
from server.engine.engine import Engine, EngineConfig
from server.engine.types import FinalEvent, GenerationRequest, SamplingParams, TokenEvent
from server.models.tokenizer import ModelTokenizer


@contextmanager
def running_engine(
    checkpoint: Path, fake: FakeBackend | None = None, **config
) -> Iterator[tuple[Engine, ModelTokenizer]]:
    """fake: run on that fake backend (the checkpoint's tokenizer, no weights loaded)."""
    tok = ModelTokenizer(checkpoint)
    engine = Engine(
        checkpoint,
        EngineConfig(**config),
        eog_ids=tok.eog_ids,
        piece=tok.piece,
        open_backend=None if fake is None else lambda _adapters: fake,
    )
    engine.start()
    engine.ready.wait(120)
    assert engine.load_error is None
    try:
        yield engine, tok
    finally:
        engine.stop(wait=60)  # joined: the engine frees its weights as its thread ends


@contextmanager
def engine_factory(checkpoint: Path) -> Iterator[tuple[Callable[..., Engine], ModelTokenizer]]:
    """make(**config) -> a started engine on the checkpoint; every engine made is stopped (joined, its weights
    freed) on leaving."""
    tok = ModelTokenizer(checkpoint)
    engines: list[Engine] = []

    def make(**config) -> Engine:
        e = Engine(checkpoint, EngineConfig(**config), eog_ids=tok.eog_ids, piece=tok.piece)
        e.start()
        e.ready.wait(180)
        assert e.load_error is None, e.load_error
        engines.append(e)
        return e

    try:
        yield make, tok
    finally:
        for e in engines:
            e.stop(wait=60)


async def tokens_and_final(engine: Engine, request: GenerationRequest) -> tuple[list[int], FinalEvent]:
    """A request's generated tokens, in order, and its final event."""
    tokens, final = [], None
    async for ev in engine.submit(request):
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token)
        elif isinstance(ev, FinalEvent):
            final = ev
    assert final is not None
    return tokens, final


async def drafted_as_plain(
    plain: Engine, drafted: Engine, tok: ModelTokenizer, cases: list[tuple[str, SamplingParams]], n_predict: int = 40
) -> tuple[int, int]:
    """Each (prompt, sampling) answered by both engines: the drafting one's tokens must be the plain one's, with
    drafts made on every prompt. Returns the drafted and accepted totals."""
    drafted_n = accepted = 0
    for prompt, sampling in cases:
        request = GenerationRequest(tuple(tok.tokenize(prompt, True, True)), n_predict=n_predict, sampling=sampling)
        want, _ = await tokens_and_final(plain, request)
        got, final = await tokens_and_final(drafted, request)
        assert got == want, prompt
        assert final.n_draft > 0, prompt
        drafted_n += final.n_draft
        accepted += final.n_draft_accepted
    return drafted_n, accepted
