"""The native SSE stream's framing without a model: pings on silence, the error frame, the end."""

from __future__ import annotations

import asyncio

from server.api import native
from server.api.task_params import TaskParams
from server.engine.types import ErrorEvent, TokenEvent


class _SlowEvents:
    """Stands in for native._Merged: each event comes after a delay."""

    def __init__(self, events, delay):
        self.events, self.delay = list(events), delay

    async def next(self, timeout=None):
        try:
            return await asyncio.wait_for(self._next(), timeout)
        except asyncio.TimeoutError:
            self.delay = 0  # what was late arrives on the next wait
            raise

    async def _next(self):
        await asyncio.sleep(self.delay)
        return self.events.pop(0)

    def close(self):
        pass


async def _frames(events, ping_s, delay):
    task = native._Task(0, [1, 2], TaskParams(stream=True))
    first = (task, TokenEvent(7, b"a", 1))
    items = [(task, e) for e in events]
    return [f async for f in native._stream(None, [task], _SlowEvents(items, delay), first, ping_s)]


def test_silence_longer_than_the_interval_sends_a_comment_ping():
    frames = asyncio.run(_frames([ErrorEvent("boom")], ping_s=1, delay=1.5))
    assert frames[0].startswith(b'data: {"index":0,"content":"a"')
    assert frames[1] == b":\n\n"
    assert frames[2] == b'data: {"error":{"code":500,"message":"boom","type":"server_error"}}\n\n'
    assert len(frames) == 3  # an error ends the stream


def test_no_ping_when_disabled():
    frames = asyncio.run(_frames([ErrorEvent("boom")], ping_s=-1, delay=0.2))
    assert b":\n\n" not in frames
