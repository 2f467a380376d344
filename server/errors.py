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
BAD_PROMPT = (
    '"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt string, '
    "or a list of mixed strings & tokens."
)
PROPS_DISABLED = "This server does not support changing global properties. Start it with `--props`"
LORA_NOT_ARRAY = "Request body must be an array"  # POST /lora-adapters
# mlxcel's own: --lora-fuse fixes the adapters' scales (no b10621 command line reaches it)
LORA_FUSED = (
    "the LoRA adapters are fused into the weights (--lora-fuse): their scales are fixed; start without "
    "--lora-fuse to change them per request or with POST /lora-adapters"
)
METRICS_DISABLED = "This server does not support metrics endpoint. Start it with `--metrics`"
SLOT_ACTIONS_DISABLED = "This server does not support slots action. Start it with `--slot-save-path`"
INVALID_SLOT_ID = "Invalid slot ID"
INVALID_SLOT_ACTION = "Invalid action"
INVALID_FILENAME = "Invalid filename"
SLOTS_DISABLED = "This server does not support slots endpoint. Start it with `--slots`"
NO_SLOT_AVAILABLE = "no slot available"
SAMPLERS_FAILED = "Failed to initialize samplers: "
EMPTY_PROMPTS = '"prompt" must not be empty'
EMBEDDINGS_DISABLED = "This server does not support embeddings. Start it with `--embeddings`"
RERANK_DISABLED = "This server does not support reranking. Start it with `--reranking`"
POOLING_NONE_NOT_OAI = "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
EMBEDDING_INPUT_MISSING = '"input" or "content" must be provided'
ENCODING_FORMAT_INVALID = "The format to return the embeddings in. Can be either float or base64"
EMBEDDING_INPUT_EMPTY = "Input content cannot be empty"
INPUT_TOO_LARGE = (
    "input ({n} tokens) is too large to process. increase the physical batch size (current batch size: {n_ubatch})"
)
INPUT_OVER_CONTEXT = "input ({n} tokens) is larger than the max context size ({n_ctx} tokens). skipping"
INVALID_TOKENS = "Prompt contains invalid tokens"
RERANK_QUERY_MISSING = '"query" must be provided'
RERANK_QUERY_NOT_STRING = '"query" must be a string'
RERANK_DOCUMENTS_INVALID = '"documents" must be a non-empty string array'
# mlxcel's own (b10621 runs the request and fails it with a 500): a generation route on an encoder server
GENERATION_DISABLED = "This server does not support completions. Start it without `{flag}`"
MULTIMODAL_UNSUPPORTED = "Multimodal data provided, but model does not support multimodal requests."
# POST /slots/:id_slot (the engine's slot actions raise them; the API renders kind and status)
SLOT_INVALID_ID = "Invalid slot ID"
SLOT_INVALID_FILE = "Invalid slot file"
SLOT_SAVE_FAILED = "Unable to save slot"
SLOT_RESTORE_FAILED = "Unable to restore slot: No available space in KV cache or invalid slot save file"
SLOT_RESTORE_TOO_LONG = "Unable to restore slot: Restored prompt does not fit in the slot context"
SLOT_RESTORE_BAD_TOKENS = "Unable to restore slot: Invalid tokens in slot save file"
# Unknown path or method: httplib's 404, whose envelope orders its keys differently from format_error_response
# res_403 (server.cpp): the tools and CORS-proxy routes of a server started without --tools / --ui-mcp-proxy
FEATURE_DISABLED_BODY = {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}
NOT_FOUND_BODY = {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}


def exceeds_context(n_prompt: int, n_ctx: int) -> "UpstreamError":
    """A prompt that does not fit its slot (context shift off, b10621's default)."""
    return UpstreamError(
        f"request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
        ErrorKind.EXCEED_CONTEXT_SIZE,
        n_prompt_tokens=n_prompt,
        n_ctx=n_ctx,
    )


def json_type_name(value) -> str:
    """nlohmann::json's type_name() of a decoded JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def type_error(expected: str, value) -> str:
    return f"[json.exception.type_error.302] type must be {expected}, but is {json_type_name(value)}"


class UpstreamError(Exception):
    """An error that renders as upstream's {"error": {"code", "message", "type"}} envelope."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INVALID_REQUEST, **extra):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.extra = extra  # keys b10621 appends to the error object (n_prompt_tokens, n_ctx)

    def body(self) -> dict:
        body = error_body(self.message, self.kind)
        body["error"].update(self.extra)
        return body


def error_body(message: str, kind: ErrorKind) -> dict:
    # key order as b10621's format_error_response builds it
    return {"error": {"code": kind.status, "message": message, "type": kind.type}}
