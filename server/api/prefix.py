"""--api-prefix: b10621 registers every route at prefix + path and nowhere else (server_http_context::get/post).

The prefix is concatenated as given, without normalization: ``/p`` serves ``/p/health``, ``/p/`` serves
``/p//health``, and a prefix without a leading slash matches no request at all, as upstream. A path outside
the prefix answers the 404 File Not Found of an unknown route. This layer sits innermost, after CORS, the
loading gate and the API-key check, which all see the full path (so ``/p/health`` is not a public path).
"""

from __future__ import annotations

from ..errors import NOT_FOUND_BODY
from .jsonio import UpstreamJSON


class ApiPrefix:
    def __init__(self, app, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.prefix:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if not (path.startswith(self.prefix) and path[len(self.prefix) :].startswith("/")):
            await UpstreamJSON(NOT_FOUND_BODY, status_code=404)(scope, receive, send)
            return
        # Starlette routes on the path below root_path (starlette._utils.get_route_path)
        scope = {**scope, "root_path": scope.get("root_path", "") + self.prefix}
        await self.app(scope, receive, send)
