"""--sleep-idle-seconds: the requests that wake a sleeping server before they are served.

b10621 wakes the server at the top of every route handler that may need the model (server_res_generator's
wait_until_no_sleep(), tools/server/server-context.cpp): tokenize and detokenize, the slots and LoRA routes,
POST /props, token counting and every generation, embedding and rerank route, even when the request is then
refused. /health, /metrics, GET /props and GET /models answer asleep (bypass_sleep), from what the server
held when it fell asleep. A request refused before its handler (unknown path, API key) wakes nothing.
"""

from __future__ import annotations

import asyncio

WAKING_GET = frozenset({"/slots", "/lora-adapters"})
WAKING_POST = frozenset(
    {
        "/props",
        "/completion",
        "/completions",
        "/v1/completions",
        "/chat/completions",
        "/v1/chat/completions",
        "/v1/chat/completions/control",
        "/v1/responses",
        "/responses",
        "/v1/audio/transcriptions",
        "/audio/transcriptions",
        "/v1/messages",
        "/infill",
        "/embedding",
        "/embeddings",
        "/v1/embeddings",
        "/rerank",
        "/reranking",
        "/v1/rerank",
        "/v1/reranking",
        "/tokenize",
        "/detokenize",
        "/apply-template",
        "/chat/completions/input_tokens",
        "/v1/chat/completions/input_tokens",
        "/responses/input_tokens",
        "/v1/responses/input_tokens",
        "/v1/messages/count_tokens",
        "/lora-adapters",
    }
)


def wakes(method: str, path: str) -> bool:
    if method == "GET":
        return path in WAKING_GET
    if method == "POST":
        return path in WAKING_POST or (path.startswith("/slots/") and path.count("/") == 2)
    return False


class WakeOnRequest:
    """Innermost, after the API-key check and below --api-prefix: a request for a waking route waits until the
    sleeping engine has reloaded its model, then is served."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            state = scope["app"].state.mlxcel
            engine = getattr(state, "engine", None)
            path = scope["path"][len(scope.get("root_path", "")) :]
            if engine is not None and getattr(engine, "sleeping", False) and wakes(scope["method"], path):
                await asyncio.wrap_future(engine.wake())
        await self.app(scope, receive, send)
