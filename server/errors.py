"""Every upstream error type, status and sentence in one place (b10621 server-common.cpp, server-http.cpp)."""

from __future__ import annotations

from enum import Enum


class ErrorKind(Enum):
    # name = (type string, HTTP status), as format_error_response maps them
    INVALID_REQUEST = ("invalid_request_error", 400)
    AUTHENTICATION = ("authentication_error", 401)
    NOT_FOUND = ("not_found_error", 404)
    SERVER = ("server_error", 500)
    PERMISSION = ("permission_error", 403)
    NOT_SUPPORTED = ("not_supported_error", 501)
    UNAVAILABLE = ("unavailable_error", 503)
    EXCEED_CONTEXT_SIZE = ("exceed_context_size_error", 400)

    @property
    def type(self) -> str:
        return self.value[0]

    @property
    def status(self) -> int:
        return self.value[1]


# Sentences, verbatim from upstream.
LOADING_MODEL = "Loading model"
# /completion without "prompt": the JSON library's out_of_range error surfaces as a 400 upstream
MISSING_PROMPT = "[json.exception.out_of_range.403] key 'prompt' not found"


class UpstreamError(Exception):
    """An error that renders as upstream's {"error": {"code", "message", "type"}} envelope."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INVALID_REQUEST):
        super().__init__(message)
        self.message = message
        self.kind = kind

    def body(self) -> dict:
        return error_body(self.message, self.kind)


def error_body(message: str, kind: ErrorKind) -> dict:
    # key order as b10621's format_error_response builds it
    return {"error": {"code": kind.status, "message": message, "type": kind.type}}
