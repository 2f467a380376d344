"""GET and POST /cors-proxy?url=...: b10621's CORS proxy for the web UI's MCP client (--ui-mcp-proxy).

As server-cors-proxy.h and server_http_proxy (server-models.cpp) forward a request: the target parsed as
common_http_parse_url parses it (its errors, word for word, in ex_wrapper's envelope: 500, or 400 for what
std::stoi rejects), only the x-llama-server-proxy-header-* headers sent on (their prefix dropped; Accept-Encoding,
Transfer-Encoding and Content-Length left out, Host set to the target's, Connection: close), the body as it came, redirects
followed, ten minutes each way; the answer streamed back with the target's status and headers, less those a
proxy must not repeat (Server, Transfer-Encoding, Content-Length, Keep-Alive, Access-Control-*). A target that
cannot be reached answers 500 "proxy error: " and cpp-httplib's words for what failed. Like b10621's, the
proxy reaches any host the server can (it is off by default: "do not enable in untrusted environments")."""

from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from ..errors import ErrorKind, UpstreamError
from .jsonio import error_response

router = APIRouter()

PREFIX = "x-llama-server-proxy-header-"
TIMEOUT_S = 600  # timeout_read, timeout_write (server-cors-proxy.h)
_NOT_SENT = ("accept-encoding", "transfer-encoding", "content-length", "host")
JSON_TYPE = "application/json; charset=utf-8"  # server_http_res's content type when the target sends none


# cpp-httplib's to_string(Error) for what an httpx failure stands for (httpx deferred: ~0.1 s of every start-up
# for a route that is off by default)
@lru_cache(maxsize=1)
def _failures() -> tuple[tuple[type[Exception], str], ...]:
    import httpx  # deferred: a proxied request's failure only (every start-up would pay the import)

    return (
        (httpx.ConnectTimeout, "Connection timed out"),
        (httpx.ConnectError, "Could not establish connection"),
        (httpx.ReadTimeout, "Read timeout"),
        (httpx.WriteTimeout, "Failed to write connection"),
        (httpx.TooManyRedirects, "Maximum redirect count exceeded"),
        (httpx.RemoteProtocolError, "Connection closed by server"),
        (httpx.ReadError, "Failed to read connection"),
        (httpx.WriteError, "Failed to write connection"),
    )


class TargetError(Exception):
    """A target URL b10621 refuses: its exception's words, and ex_wrapper's status for its kind."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status


def _stoi(text: str) -> int:
    """std::stoi: leading blanks, a sign, then digits (what follows them ignored); std::invalid_argument
    (400 in ex_wrapper) without a digit, std::out_of_range (500) past an int."""
    rest = text.lstrip(" \t\n\r\f\v")
    sign = -1 if rest[:1] == "-" else 1
    rest = rest[1:] if rest[:1] in "+-" else rest
    digits = len(rest) - len(rest.lstrip("0123456789"))
    if not digits:
        raise TargetError("stoi", 400)
    value = sign * int(rest[:digits])
    if not -(2**31) <= value < 2**31:
        raise TargetError("stoi")
    return value


def parse_target(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) as common_http_parse_url and proxy_request check it; TargetError otherwise."""
    scheme_end = url.find("://")
    if scheme_end < 0:
        raise TargetError("invalid URL: no scheme")
    scheme = url[:scheme_end]
    if scheme not in ("http", "https"):
        raise TargetError(f"unsupported URL scheme: {scheme}")
    rest = url[scheme_end + 3 :]
    password = ""
    if "@" in rest:
        auth, rest = rest.split("@", 1)
        password = auth.split(":", 1)[1] if ":" in auth else ""
    host, path = (rest.split("/", 1)[0], "/" + rest.split("/", 1)[1]) if "/" in rest else (rest, "/")
    port_text = ""
    if host.startswith("["):
        close = host.find("]")
        if close < 0:
            raise TargetError(f"invalid IPv6 URL authority: {host}")
        after = host[close + 1 :]
        port_text = after[1:] if after.startswith(":") else ""
        host = host[1:close]
    elif ":" in host:
        host, port_text = host.split(":", 1)
    port = _stoi(port_text) if port_text else 80 if scheme == "http" else 443
    if not host:
        raise TargetError("invalid target URL: missing host")
    if password:
        raise TargetError("authentication in target URL is not supported")
    return scheme, host, port, path


def _url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _kept(name: str) -> bool:
    """A target's response header the proxy repeats (should_strip_proxy_header's complement; the content
    type travels as the response's own)."""
    lowered = name.lower()
    return lowered not in ("server", "transfer-encoding", "content-length", "keep-alive", "content-type") and not (
        lowered.startswith("access-control-")
    )


async def _proxy(request: Request, method: str) -> Response:
    try:
        scheme, host, port, path = parse_target(request.query_params.get("url", ""))
    except TargetError as exc:
        kind = ErrorKind.INVALID_REQUEST if exc.status == 400 else ErrorKind.SERVER
        return error_response(UpstreamError(str(exc), kind))
    headers = {
        key[len(PREFIX) :]: value
        for key, value in request.headers.items()
        if key.lower().startswith(PREFIX) and len(key) > len(PREFIX) and key[len(PREFIX) :].lower() not in _NOT_SENT
    }
    default_port = port == (443 if scheme == "https" else 80)
    bracketed = f"[{host}]" if ":" in host else host
    headers["Host"] = bracketed if default_port else f"{bracketed}:{port}"
    headers["Connection"] = "close"  # (one request per client: cpp-httplib's one-shot client says so too)
    import httpx  # deferred: the proxy is off by default (every start-up would pay the import, ~0.1 s)

    client = httpx.AsyncClient(follow_redirects=True, timeout=TIMEOUT_S)
    del client.headers["accept-encoding"]  # (cpp-httplib asks for no encoding: the body comes back as sent)
    outgoing = client.build_request(
        method, _url(scheme, host, port) + path, headers=headers, content=await request.body()
    )
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        said = next((words for kind, words in _failures() if isinstance(exc, kind)), "Unknown")
        return Response(f"proxy error: {said}", status_code=500, media_type=JSON_TYPE)

    async def close() -> None:
        await answer.aclose()
        await client.aclose()

    response = StreamingResponse(
        answer.aiter_raw(),
        status_code=answer.status_code,
        media_type=answer.headers.get("content-type", JSON_TYPE),
        background=BackgroundTask(close),
    )
    # every header the target sent (Set-Cookie may come more than once), less those a proxy must not repeat
    response.raw_headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.multi_items() if _kept(k)
    )
    return response


@router.get("/cors-proxy")
async def proxy_get(request: Request) -> Response:
    return await _proxy(request, "GET")


@router.post("/cors-proxy")
async def proxy_post(request: Request) -> Response:
    return await _proxy(request, "POST")
