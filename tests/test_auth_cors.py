"""API keys and CORS on the real app (in process): b10621's 401, its preflight matrix, its key forms.

The pinned bytes come from the reference binary: tests/data/b10621_cors_auth.json was recorded from b10621
by tests/data/record_b10621_cors_auth.py (raw HTTP/1.1, --api-key k1 plus each CORS configuration), and the
key-form table below was recorded the same way against b10621 started with
``--api-key 'k1,"k,2",,' --api-key k3 --api-key-file FILE`` (FILE: "# comment", "filekey", "", "  spaced ").
No model is loaded: the engine stands in as ready, and only the HTTP layer's answers are compared.
"""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path

import httpx
import pytest

from server.api import auth as auth_mod
from server.api.app import create_app, registered_routes
from server.api.auth import (
    PUBLIC_PATHS,
    UNAUTHORIZED_BODY,
    AuthConfig,
    AuthMiddleware,
    KeyFileError,
    parse_csv_row,
    presented_key,
    resolve_api_keys,
)
from server.api.cors import CorsConfig, origin_is_localhost
from server.api.state import ServerSettings

RECORDED = json.loads((Path(__file__).parent / "data" / "b10621_cors_auth.json").read_text())


def _state(ready: bool = True, **settings):
    event = threading.Event()
    if ready:
        event.set()
    engine = types.SimpleNamespace(ready=event, load_error=None)
    return types.SimpleNamespace(engine=engine, settings=ServerSettings(**settings))


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t")


def _cors_from_args(args: list[str]) -> CorsConfig:
    ns = types.SimpleNamespace(cors_origins=None, cors_headers=None, cors_methods=None, cors_credentials=None)
    it = iter(args)
    for arg in it:
        if arg == "--no-cors-credentials":
            ns.cors_credentials = False
        else:
            setattr(ns, arg[2:].replace("-", "_"), next(it))
    return CorsConfig.from_args(ns)


def _app(args: list[str] = (), keys=("k1",), **settings):
    return create_app(_state(cors=_cors_from_args(list(args)), auth=AuthConfig(tuple(keys)), **settings))


# --- the pinned b10621 answers ------------------------------------------------------------------------------


def _without_transport_headers(headers) -> list[list[str]]:
    # Server (added by the HTTP server, tests/test_transport.py) and Connection belong to the transport
    return [[k, v] for k, v in headers if k.lower() not in ("server", "connection")]


async def test_401_is_b10621_byte_for_byte():
    rec = RECORDED["unauthorized"]
    async with _client(_app()) as c:
        r = await c.get("/props", headers={"Origin": "http://a.example"})
    assert r.status_code == rec["status"] == 401
    assert r.content == rec["body"].encode() == UNAUTHORIZED_BODY
    got = sorted([k.decode().lower(), v.decode()] for k, v in r.headers.raw)
    assert got == sorted([k.lower(), v] for k, v in _without_transport_headers(rec["headers"]))


async def test_preflight_is_b10621_byte_for_byte():
    rec = RECORDED["preflight"]
    async with _client(_app()) as c:
        r = await c.options("/props", headers={"Origin": "http://a.example"})
    assert r.status_code == rec["status"] == 200 and r.content == b""
    # same names in the same order (the four Access-Control-* ones first), same casing, same values
    assert [[k.decode(), v.decode()] for k, v in r.headers.raw] == _without_transport_headers(rec["headers"])


@pytest.mark.parametrize("config", sorted(RECORDED["configs"]))
async def test_cors_matrix_matches_b10621(config):
    rec = RECORDED["configs"][config]
    mismatches = []
    async with _client(_app(rec["args"])) as c:
        for case in rec["cases"]:
            headers = {} if case["origin"] is None else {"Origin": case["origin"]}
            r = await c.request(case["method"], case["path"], headers=headers)
            cors = [[k.decode(), v.decode()] for k, v in r.headers.raw if k.lower().startswith(b"access-control-")]
            if (r.status_code, cors) != (case["status"], case["cors"]):
                mismatches.append((case, r.status_code, cors))
    assert mismatches == []


# recorded from b10621 (see the module docstring): (headers sent to GET /props, status)
KEY_FORMS = [
    ([], 401),
    ([("Authorization", "Bearer k1")], 200),
    ([("Authorization", "k1")], 200),
    ([("X-Api-Key", "k1")], 200),
    ([("x-api-key", "Bearer k3")], 200),
    ([("Authorization", "bearer k1")], 401),
    ([("Authorization", "Bearer  k1")], 401),
    ([("Authorization", "Bearer\tk1")], 401),
    ([("Authorization", "Bearer Bearer k1")], 401),
    ([("Authorization", "Bearer k1 ")], 200),
    ([("Authorization", "   k1")], 200),
    ([("Authorization", "Bearer k,2")], 200),
    ([("Authorization", "Bearer filekey")], 200),
    ([("Authorization", "Bearer   spaced ")], 401),
    ([("Authorization", "  spaced")], 401),
    ([("Authorization", "")], 401),
    ([("Authorization", "wrong"), ("X-Api-Key", "k1")], 401),
    ([("Authorization", ""), ("X-Api-Key", "k1")], 200),
    ([("Authorization", "Bearer k1"), ("Authorization", "Bearer bad")], 200),
    ([("Authorization", "Bearer bad"), ("Authorization", "Bearer k1")], 401),
]


@pytest.fixture
def recorded_keys(tmp_path) -> tuple[str, ...]:
    key_file = tmp_path / "keys.txt"
    key_file.write_text("# comment\nfilekey\n\n  spaced \n")
    return resolve_api_keys(['k1,"k,2",,', "k3"], str(key_file), {})


@pytest.mark.parametrize(("headers", "status"), KEY_FORMS)
async def test_key_forms_match_b10621(recorded_keys, headers, status):
    assert recorded_keys == ("k1", "k,2", "k3", "filekey", "  spaced ")
    app = AuthMiddleware(_probe, AuthConfig(recorded_keys))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.get("/props", headers=headers)
    # _probe's 204 stands for b10621's 200: the request got past the key check
    assert r.status_code == {200: 204, 401: 401}[status]
    if status == 401:
        assert r.content == UNAUTHORIZED_BODY


# --- which paths are public, in which order the gates run -----------------------------------------------------


def _inventory() -> list[tuple[str, str]]:
    app = create_app(_state())
    return sorted(
        (m, p.replace("{id_slot}", "0").replace("{id}", "x")) for m, p in registered_routes(app) if m != "HEAD"
    )


async def _probe(scope, receive, send):  # stands in for routing: 204 means "the key check let it through"
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def test_every_route_needs_the_key_but_the_public_ones():
    routes = _inventory()
    assert len(routes) > 20 and ("GET", "/health") in routes
    guarded = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AuthMiddleware(_probe, AuthConfig(("k1",)))), base_url="http://t"
    )
    open_app = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AuthMiddleware(_probe, AuthConfig())), base_url="http://t"
    )
    async with guarded as c, open_app as o:
        for method, path in routes:
            public = path in PUBLIC_PATHS
            r = await c.request(method, path)
            assert r.status_code == (204 if public else 401), (method, path)
            for headers in ({"Authorization": "Bearer k1"}, {"Authorization": "k1"}, {"X-Api-Key": "k1"}):
                assert (await c.request(method, path, headers=headers)).status_code == 204, (method, path)
            wrong = await c.request(method, path, headers={"Authorization": "Bearer k2"})
            assert wrong.status_code == (204 if public else 401) and (public or wrong.content == UNAUTHORIZED_BODY)
            assert (await o.request(method, path)).status_code == 204  # no key configured: nothing checked


# recorded from b10621 with --api-key k1 --no-ui: (method, path, with key?, status)
PUBLIC_CASES = [
    ("GET", "/health", False, 200),
    ("GET", "/v1/health", False, 200),
    ("GET", "/health?x=1", False, 200),
    ("GET", "/h%65alth", False, 200),
    ("GET", "/v1%2Fhealth", False, 200),
    ("POST", "/health", False, 404),  # public by path, whatever the method: routing answers
    ("GET", "/", False, 404),
    ("GET", "/health/", False, 401),
    ("GET", "/HEALTH", False, 401),
    ("GET", "/health%20", False, 401),
    ("GET", "/nope", False, 401),  # unknown paths are refused before routing
    ("GET", "/nope", True, 404),
    ("PUT", "/props", True, 404),
    ("GET", "/props", False, 401),
]


@pytest.mark.parametrize(("method", "path", "with_key", "status"), PUBLIC_CASES)
async def test_public_paths_match_b10621(method, path, with_key, status):
    async with _client(_app()) as c:
        r = await c.request(method, path, headers={"Authorization": "Bearer k1"} if with_key else {})
    assert r.status_code == status
    if status == 200:
        assert r.content == b'{"status":"ok"}'


async def test_gates_run_in_b10621_order_while_loading():
    # CORS first (a preflight is answered even while loading), then the loading gate (503 before 401)
    app = create_app(_state(ready=False, auth=AuthConfig(("k1",))))
    async with _client(app) as c:
        loading = await c.get("/props", headers={"Origin": "http://o"})
        preflight = await c.options("/props")
        root = await c.get("/")
    assert loading.status_code == 503 and loading.headers["access-control-allow-origin"] == "http://o"
    assert b"Loading model" in loading.content
    assert preflight.status_code == 200
    assert root.status_code == 404  # "/" is a frontend path: upstream lets it past the loading gate


async def test_api_prefix_moves_every_route_and_the_public_paths_stay_unprefixed():
    # recorded from b10621 with --api-prefix /pfx --api-key k1 --no-ui
    cases = [
        ("/health", False, 404),
        ("/pfx/health", False, 401),
        ("/pfx/health", True, 200),
        ("/props", True, 404),
        ("/pfx", True, 404),
        ("/pfx/", False, 401),
        ("/pfx//health", True, 404),
    ]
    async with _client(_app(api_prefix="/pfx")) as c:
        for path, with_key, status in cases:
            r = await c.get(path, headers={"Authorization": "k1"} if with_key else {})
            assert r.status_code == status, path
        assert (await c.options("/pfx/anything")).status_code == 200


async def test_defaults_without_any_option():
    # b10621's defaults: no key checked, the Origin echoed (empty when absent), preflights answered
    async with _client(create_app(_state())) as c:
        plain = await c.get("/health")
        echoed = await c.get("/health", headers={"Origin": "http://x.example"})
        preflight = await c.options("/v1/chat/completions")
    assert plain.status_code == 200 and plain.headers["access-control-allow-origin"] == ""
    assert echoed.headers["access-control-allow-origin"] == "http://x.example"
    assert "access-control-allow-credentials" not in echoed.headers  # preflight-only headers
    assert "access-control-expose-headers" not in echoed.headers
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-credentials"] == "true"
    async with _client(create_app(_state(cors=None))) as c:
        assert "access-control-allow-origin" not in (await c.get("/health")).headers


# --- the comparison itself ------------------------------------------------------------------------------------


async def test_every_key_is_compared_in_constant_time(monkeypatch):
    calls = []
    real = auth_mod.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth_mod.hmac, "compare_digest", spy)
    app = AuthMiddleware(_probe, AuthConfig(("first", "second", "third")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.get("/x", headers={"Authorization": "Bearer first"})).status_code == 204
        assert calls == [(b"first", b"first"), (b"first", b"second"), (b"first", b"third")]  # no early exit
        calls.clear()
        assert (await c.get("/x", headers={"Authorization": "Bearer nope"})).status_code == 401
        assert len(calls) == 3


def test_presented_key_rules():
    assert presented_key([(b"authorization", b"Bearer abc")]) == b"abc"
    assert presented_key([(b"x-api-key", b"Bearer abc")]) == b"abc"
    assert presented_key([(b"authorization", b"Basic abc")]) == b"Basic abc"
    assert presented_key([(b"authorization", b""), (b"x-api-key", b"k")]) == b"k"
    assert presented_key([]) == b""


# --- where keys come from -------------------------------------------------------------------------------------


def test_csv_rules_of_api_key():
    assert parse_csv_row('a,"b,c",,"d""e",f"g') == ["a", "b,c", "", 'd"e', 'f"g']
    assert parse_csv_row("") == [""]
    assert resolve_api_keys(['a,"b,c",,'], None, {}) == ("a", "b,c")
    assert resolve_api_keys([""], None, {}) == ()


def test_every_key_source_adds(tmp_path):
    # b10621 runs an option's env handler and then its command-line handler; key handlers append
    # (verified: LLAMA_API_KEY=envkey --api-key clikey accepts both)
    env_file = tmp_path / "env.txt"
    env_file.write_text("envfile\n")
    cli_file = tmp_path / "cli.txt"
    cli_file.write_bytes(b"#x\r\nclifile\r\n\nlast")
    env = {"LLAMA_API_KEY": "envkey,e2", "MLXCEL_API_KEY": "mlx", "LLAMA_ARG_API_KEY_FILE": str(env_file)}
    keys = resolve_api_keys(["clikey"], str(cli_file), env)
    # a CRLF file keeps its '\r' as std::getline does (such a key never matches, in b10621 too)
    assert keys == ("envkey", "e2", "mlx", "envfile", "clikey", "clifile\r", "last")
    assert resolve_api_keys(None, None, {"MLXCEL_API_KEY": "m"}) == ("m",)
    assert resolve_api_keys(None, None, {}) == ()
    assert AuthConfig.from_args(types.SimpleNamespace(api_key=["a"], api_key_file=None), {}).keys == ("a",)


def test_every_api_key_file_adds_its_keys_and_the_variable_is_read_once(tmp_path):
    from server.cli.args import build_parser
    from server.cli.parse import parse

    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("k1\n")
    two.write_text("# c\nk2\n")
    env = {"LLAMA_ARG_API_KEY_FILE": str(one)}
    ns = parse(build_parser("mlxcel-server"), ["--api-key-file", str(one), "--api-key-file", str(two)], {})
    assert AuthConfig.from_args(ns, {}).keys == ("k1", "k2")  # b10621's handler appends, every use
    ns = parse(build_parser("mlxcel-server"), ["--api-key-file", str(two)], env)
    assert AuthConfig.from_args(ns, env).keys == ("k1", "k2")  # the variable's file, then the command line's


def test_unreadable_key_file_stops_startup_with_b10621_sentence(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(KeyFileError) as err:
        resolve_api_keys(None, str(missing), {})
    # b10621: error while handling argument "--api-key-file": error: failed to open file '...'
    assert str(err.value) == f"error while handling argument \"--api-key-file\": error: failed to open file '{missing}'"
    with pytest.raises(KeyFileError, match='environment variable "LLAMA_ARG_API_KEY_FILE"'):
        resolve_api_keys(None, None, {"LLAMA_ARG_API_KEY_FILE": str(missing)})


# --- CORS details ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "local"),
    [
        ("http://localhost", True),
        ("https://localhost:8443/x", True),
        ("http://127.0.0.1:1", True),
        ("http://[::1]", True),
        ("http://u:p@localhost", True),
        ("http://localhost: 80", True),
        ("http://localhost:80abc", True),
        ("http://LOCALHOST", False),
        ("localhost", False),
        ("ws://localhost", False),
        ("http://localhost:abc", False),
        ("http://localhost:99999999999", False),
        ("http://[::1", False),
        ("http://localhost/@evil", False),
        ("http://localhost.evil", False),
        ("http://127.0.0.2", False),
    ],
)
def test_origin_is_localhost(origin, local):
    assert origin_is_localhost(origin) is local


def test_cors_values_must_be_sendable():
    with pytest.raises(ValueError, match="--cors-methods"):
        CorsConfig(methods="GET\r\nX-Injected: 1")
    with pytest.raises(ValueError, match="--cors-origins"):
        CorsConfig(origins=" http://a")
    assert CorsConfig(origins="http://a, http://b").origins == "http://a, http://b"
