"""GET and POST /tools with --tools: b10621's built-in tools for the web UI's agent (server-tools.cpp's handlers).

GET lists the enabled tools (server/tools/builtin.py, in build_tools' order). POST {"tool", "params", "stream"}
calls one: the x-tool-cwd, x-tool-runtime and x-resp-type headers override what the params say of cwd, runtime
and resp_type; the answer is the tool's result (a failure is {"error": ...} with 200), or with stream true an
event stream of {"chunk"} then {"done": true[, "error"]} (exec_shell_command only). Errors as b10621's
handle_post renders them: format_error_response's object alone (no "error" wrapper), 400 for a body or parameter
nlohmann rejects, 500 for what a tool throws; an unknown tool or a stream it cannot give is cpp-httplib's 404 File
Not Found (the handler's own body does not survive its error handler)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from ..errors import NOT_FOUND_BODY, ErrorKind, error_body, type_error
from ..tools.builtin import Tool, ToolError, ToolJSONError
from .jsonio import UpstreamJSON

router = APIRouter()

HEADERS = (("x-tool-cwd", "cwd"), ("x-tool-runtime", "runtime"), ("x-resp-type", "resp_type"))


class _Refused(Exception):
    def __init__(self, message: str, kind: ErrorKind, status: int):
        super().__init__(message)
        self.kind, self.status = kind, status


def _error(message: str, kind: ErrorKind, status: int | None = None) -> Response:
    """handle_post's error: format_error_response's object, unwrapped; a 404 (an unknown tool, a stream it cannot
    give) leaves b10621 as cpp-httplib's File Not Found, its own body replaced."""
    if status == 404:
        return UpstreamJSON(NOT_FOUND_BODY, status_code=404)
    return UpstreamJSON(error_body(message, kind)["error"], status_code=status or kind.status)


def _tools(request: Request) -> list[Tool]:
    return request.app.state.tools


@router.get("/tools")
async def list_tools(request: Request) -> Response:
    return UpstreamJSON([t.to_json() for t in _tools(request)])


def _parse(raw: bytes) -> tuple[str, dict, bool]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _Refused(f"[json.exception.parse_error.101] parse error: {exc}", ErrorKind.INVALID_REQUEST, 400) from None
    if not isinstance(body, dict):
        raise _Refused(
            f"[json.exception.type_error.304] cannot use at() with {type(body).__name__}",
            ErrorKind.INVALID_REQUEST,
            400,
        )
    if "tool" not in body:
        raise _Refused("[json.exception.out_of_range.403] key 'tool' not found", ErrorKind.INVALID_REQUEST, 400)
    name, params, stream = body["tool"], body.get("params", {}), body.get("stream", False)
    if not isinstance(name, str):
        raise _Refused(type_error("string", name), ErrorKind.INVALID_REQUEST, 400)
    if not isinstance(stream, bool):
        raise _Refused(type_error("boolean", stream), ErrorKind.INVALID_REQUEST, 400)
    return name, params if isinstance(params, dict) else {}, stream


def _find(tools: list[Tool], name: str, stream: bool) -> Tool:
    for tool in tools:
        if tool.name == name:
            if stream and not tool.support_stream:
                raise _Refused(f'tool "{name}" does not support stream = true', ErrorKind.INVALID_REQUEST, 404)
            return tool
    raise _Refused(f'unknown tool "{name}"', ErrorKind.INVALID_REQUEST, 404)


@router.post("/tools")
async def call_tool(request: Request) -> Response:
    try:
        name, params, stream = _parse(await request.body())
        for header, key in HEADERS:  # the client's headers, never the model's params, choose these
            params.pop(key, None)
            if request.headers.get(header):
                params[key] = request.headers[header]
        runtime = request.app.state.tools_runtime  # --tools-runtime, where the request names none
        if runtime is not None and "runtime" not in params:
            params["runtime"] = await asyncio.to_thread(runtime.spec)
        tool = _find(_tools(request), name, stream)
    except _Refused as exc:
        return _error(str(exc), exc.kind, exc.status)
    except ToolError as exc:  # (a container that died and would not start again)
        return _error(str(exc), ErrorKind.SERVER)
    if stream:
        # (no charset: b10621's content type is the bare text/event-stream)
        return StreamingResponse(_stream(request, tool, params), headers={"Content-Type": "text/event-stream"})
    try:
        result = await asyncio.to_thread(tool.call, params, None)
    except ToolJSONError as exc:
        return _error(str(exc), ErrorKind.INVALID_REQUEST)
    except (ToolError, OSError, ValueError) as exc:
        return _error(str(exc), ErrorKind.SERVER)
    return UpstreamJSON(result)


async def _stream(request: Request, tool: Tool, params: dict) -> AsyncIterator[bytes]:
    """The tool run on a thread, its chunks sent as they come; a client gone stops it (its next push fails)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    gone = False

    def push(chunk: str) -> bool:
        if chunk:
            loop.call_soon_threadsafe(queue.put_nowait, {"chunk": chunk})
        return not gone

    def work() -> None:
        done: dict = {"done": True}
        try:
            tool.call(params, push)
        except Exception as exc:  # b10621's worker: any error ends the stream with it
            done["error"] = str(exc) or "An unknown error occurred"
        loop.call_soon_threadsafe(queue.put_nowait, done)

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            item = await queue.get()
            yield f"data: {json.dumps(item, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()
            if item.get("done"):
                break
    finally:
        gone = True
        await asyncio.shield(worker)
