"""Which requests wake a sleeping server (server/api/wake.py): b10621's handlers that call create_response()
without bypass_sleep. The list must name routes mlxcel serves, and the wake must happen before the handler runs
and only for those routes (in process, on a stand-in engine)."""

from __future__ import annotations

import threading
import types
from concurrent.futures import Future

import httpx
import pytest

from server.api.app import create_app, registered_routes
from server.api.state import ServerSettings
from server.api.wake import WAKING_GET, WAKING_POST, wakes


class _SleepyEngine:
    """Asleep until woken; records the wakes."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.ready.set()
        self.load_error = None
        self.sleeping = True
        self.woken = 0

    def wake(self) -> Future:
        self.sleeping, self.woken = False, self.woken + 1
        f: Future = Future()
        f.set_result(None)
        return f


def _app(engine, **settings):
    return create_app(types.SimpleNamespace(engine=engine, settings=ServerSettings(**settings)))


def test_every_waking_route_is_served():
    served = registered_routes(_app(_SleepyEngine()))
    paths = {(m, p.replace("{id_slot}", "0")) for m, p in served}
    for path in WAKING_GET:
        assert ("GET", path) in paths, path
    for path in WAKING_POST:
        assert ("POST", path) in paths, path
    assert wakes("POST", "/slots/0") and ("POST", "/slots/0") in paths


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("GET", "/props"),
        ("GET", "/models"),
        ("GET", "/v1/models"),
        ("POST", "/nowhere"),
    ],
)
async def test_bypass_routes_leave_it_asleep(method, path):
    engine = _SleepyEngine()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app(engine), raise_app_exceptions=False), base_url="http://t"
    ) as c:
        await c.request(method, path)
    assert engine.woken == 0


async def test_a_waking_route_wakes_it_before_its_handler_and_under_the_prefix():
    engine = _SleepyEngine()
    app = _app(engine, api_prefix="/v9")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t"
    ) as c:
        await c.post("/tokenize", json={"content": "x"})  # outside the prefix: a 404 before any handler
        assert engine.woken == 0
        await c.post("/v9/tokenize", content=b"{not json")  # b10621 wakes before it parses the body
    assert engine.woken == 1
