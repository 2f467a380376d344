"""Resumable streams (b10621's server-stream.cpp): a streaming request that carries X-Conversation-Id keeps a
server-side copy of its SSE bytes, keyed by that id, and is not cancelled when its client goes away. The
copy keeps the last 4 MiB (older bytes are dropped from the front), lives 300 s after the stream ends
(swept every 60 s), and is read back from any offset with GET /v1/stream, found with POST /v1/streams/lookup
and stopped with DELETE /v1/stream. One conversation id holds one live session: a new stream replaces and
cancels the previous one.

mlxcel also scopes sessions to the API key that created them (with --api-key): a request with another key
sees nothing, where b10621 lets any authenticated caller read any session whose id it knows.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..errors import NOT_FOUND_BODY, ErrorKind, error_body
from .jsonio import UpstreamJSON, loads

TTL_SECONDS = 300
MAX_BYTES = 4 * 1024 * 1024
GC_INTERVAL_SECONDS = 60
HEADER = "x-conversation-id"

# set per request by ConversationHeader: the conversation id and who asked (a fingerprint of the API key)
_CONVERSATION: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("conversation", default=("", ""))
router = APIRouter()


def _owner(headers) -> str:
    """A fingerprint of the request's API key (Authorization: Bearer or X-Api-Key), "" without one."""
    auth = headers.get("authorization", "")
    key = auth[7:] if auth.lower().startswith("bearer ") else headers.get("x-api-key", "")
    return hashlib.sha256(key.encode()).hexdigest() if key else ""


class ConversationHeader:
    """Pure ASGI middleware: the request's X-Conversation-Id and key fingerprint, for the streaming routes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            _CONVERSATION.set((headers.get(HEADER, ""), _owner(headers)))
        await self.app(scope, receive, send)


class StreamSession:
    def __init__(self, conversation_id: str, owner: str, cap: int = MAX_BYTES):
        self.conversation_id, self.owner, self.cap = conversation_id, owner, cap
        self.started_at = int(time.time())
        self.completed_at = 0
        self.buffer = bytearray()
        self.dropped = 0  # bytes evicted from the front
        self.done = False
        self.cancelled = False
        self.producer: asyncio.Task | None = None
        self._changed = asyncio.Event()

    @property
    def total(self) -> int:
        return self.dropped + len(self.buffer)

    def append(self, data: bytes) -> None:
        if self.done or not data:
            return
        if len(data) >= self.cap:  # one chunk over the cap: only its tail stays
            self.dropped += len(self.buffer) + len(data) - self.cap
            self.buffer = bytearray(data[len(data) - self.cap :])
        else:
            over = len(self.buffer) + len(data) - self.cap
            if over > 0:
                del self.buffer[:over]
                self.dropped += over
            self.buffer += data
        self._wake()

    def finalize(self) -> None:
        if not self.done:
            self.done, self.completed_at = True, int(time.time())
            self._wake()

    def cancel(self) -> None:
        self.cancelled = True
        if self.producer is not None:
            self.producer.cancel()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """The bytes from `offset` on, as they arrive, until the session ends (the caller checks the offset)."""
        while True:
            if offset < self.dropped:
                return  # the front moved past the reader: b10621's OFFSET_LOST ends the read
            if offset < self.total:
                chunk = bytes(self.buffer[offset - self.dropped :])
                offset += len(chunk)
                yield chunk
                continue
            if self.done:
                return
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    def lookup_json(self) -> dict:
        return {
            "conversation_id": self.conversation_id,
            "is_done": self.done,
            "total_bytes": self.total,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
        }


class SessionManager:
    def __init__(self):
        self.sessions: dict[str, StreamSession] = {}
        self._gc: asyncio.Task | None = None

    def create_or_replace(self, conversation_id: str, owner: str) -> StreamSession:
        fresh = StreamSession(conversation_id, owner)
        previous = self.sessions.get(conversation_id)
        self.sessions[conversation_id] = fresh
        if previous is not None:
            previous.cancel()
            previous.finalize()
        if self._gc is None or self._gc.done():
            self._gc = asyncio.get_running_loop().create_task(self._sweep())
        return fresh

    def get(self, conversation_id: str, owner: str) -> StreamSession | None:
        s = self.sessions.get(conversation_id)
        return s if s is not None and s.owner == owner else None

    def evict_and_cancel(self, conversation_id: str, owner: str) -> None:
        s = self.get(conversation_id, owner)
        if s is not None:
            del self.sessions[conversation_id]
            s.cancel()
            s.finalize()

    async def _sweep(self) -> None:
        while self.sessions:
            await asyncio.sleep(GC_INTERVAL_SECONDS)
            cutoff = time.time() - TTL_SECONDS
            for cid, s in list(self.sessions.items()):
                if s.completed_at and s.completed_at <= cutoff:
                    del self.sessions[cid]
                    s.finalize()


SESSIONS = SessionManager()


def attach(stream: AsyncIterator[bytes], make_response) -> StreamingResponse | None:
    """When the request named a conversation: run `stream` into a fresh session, independently of this
    connection (a disconnect does not cancel it), and answer with a reader of that session from offset 0.
    None without an X-Conversation-Id header: the caller streams as usual."""
    conversation_id, owner = _CONVERSATION.get()
    if not conversation_id:
        return None
    session = SESSIONS.create_or_replace(conversation_id, owner)

    async def produce() -> None:
        try:
            async for chunk in stream:
                session.append(chunk)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator's; its finally blocks cancel the engine requests still running
            session.finalize()

    session.producer = asyncio.get_running_loop().create_task(produce())
    return make_response(session.read_from(0))


def sse_response(frames: AsyncIterator[bytes]) -> StreamingResponse:
    # b10621's exact headers: no charset on text/event-stream, proxies told not to buffer
    return StreamingResponse(frames, headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})


def _error(status: int, message: str, kind: ErrorKind) -> UpstreamJSON:
    return UpstreamJSON(error_body(message, kind), status_code=status)


@router.get("/v1/stream")
async def get_stream(request: Request):
    conv_id = request.query_params.get("conv_id", "")
    if not conv_id:
        return _error(400, "Missing conversation id in path", ErrorKind.INVALID_REQUEST)
    session = SESSIONS.get(conv_id, _owner(request.headers))
    if session is None:  # b10621 answers "Stream not found or expired", which httplib's 404 page replaces
        return UpstreamJSON(NOT_FOUND_BODY, status_code=404)
    raw = request.query_params.get("from", "")
    start = 0
    if raw:
        digits = raw.lstrip(" \t\n\v\f\r").removeprefix("+")
        if not digits[:1].isdigit():  # std::stoull: leading digits, anything after them ignored
            return _error(400, "Invalid 'from' offset", ErrorKind.INVALID_REQUEST)
        start = int(digits[: len(digits) - len(digits.lstrip("0123456789"))]) % 2**64
    if start < session.dropped:
        return _error(400, "Stream offset lost, please restart", ErrorKind.INVALID_REQUEST)
    return sse_response(session.read_from(start))


@router.post("/v1/streams/lookup")
async def lookup_streams(request: Request):
    try:
        body = loads(await request.body())
    except Exception as exc:  # noqa: BLE001 - b10621 answers its own parse error, without a code
        return UpstreamJSON(
            {"error": {"message": f"invalid body: {exc}", "type": "invalid_request_error"}}, status_code=400
        )
    ids = body.get("conversation_ids") if isinstance(body, dict) else None
    requested = [v for v in ids if isinstance(v, str) and v] if isinstance(ids, list) else []
    owner = _owner(request.headers)
    found = [
        s
        for rid in requested
        for s in list(SESSIONS.sessions.values())
        if s.owner == owner and (s.conversation_id == rid or s.conversation_id.startswith(rid + "::"))
    ]
    return UpstreamJSON([s.lookup_json() for s in found])


@router.delete("/v1/stream")
async def delete_stream(request: Request):
    conv_id = request.query_params.get("conv_id", "")
    if not conv_id:
        return _error(400, "Missing conversation id in path", ErrorKind.INVALID_REQUEST)
    SESSIONS.evict_and_cancel(conv_id, _owner(request.headers))
    return Response(status_code=204, media_type="application/json")
