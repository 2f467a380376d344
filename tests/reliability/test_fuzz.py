"""Hostile request bodies on every route, over the wire (issue 10): wrong types, out-of-domain numbers, huge
strings, deep nesting, invalid UTF-8, duplicate keys, NaN and infinities, truncated JSON.

Every answer must be a clean one: a 2xx, or an error in b10621's JSON envelope ({"error": {...}}) with a 4xx, or
501 on a route mlxcel does not serve yet; 500 only where b10621 itself answers 500 (a body that is not JSON:
its parser's exception, post-completion.malformed-json). Never a dropped connection, a hang (30 s) or a plain
500. Afterwards the server still serves: /health ok, every slot idle, a completion generates.
"""

from __future__ import annotations

import json
import math
import os
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle import loopback
from server.api.native_fields import SCHEMA
from tests.reliability import figures
from tests.reliability.routes import ROUTES, path_of

TIMEOUT = 30.0
EXAMPLES = int(os.environ.get("MLXCEL_FUZZ_EXAMPLES", "12"))  # per route and strategy; `nox -s soak`: 60

# a base body per route family that would be served as it is, so a fuzzed field is what is being tested
_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
BASE = {
    "/completion": {"prompt": "Hello", "n_predict": 4},
    "/completions": {"prompt": "Hello", "n_predict": 4},
    "/v1/completions": {"prompt": "Hello", "max_tokens": 4},
    "/infill": {"input_prefix": "def f(", "input_suffix": ")", "n_predict": 4},
    "/tokenize": {"content": "Hello"},
    "/detokenize": {"tokens": [504, 3458]},
    "/apply-template": _CHAT,
    "/chat/completions": _CHAT,
    "/v1/chat/completions": _CHAT,
    "/chat/completions/input_tokens": _CHAT,
    "/v1/chat/completions/input_tokens": _CHAT,
    "/v1/messages": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
    "/responses": {"input": "Hi", "max_output_tokens": 4},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 4},
    "/mlxcel/score": {"prompt": "Hello", "continuation": " world"},
}
FIELDS = sorted(
    {n for f in SCHEMA for n in f.names}
    | {
        "messages",
        "model",
        "input",
        "content",
        "tokens",
        "tools",
        "tool_choice",
        "response_format",
        "max_tokens",
        "system",
    }
)

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=40)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


# the 500s b10621 answers itself (a std::runtime_error out of a handler, not an invalid_argument): matched
UPSTREAM_500 = (
    "[json.exception.",  # its JSON library's exceptions (parse errors, type errors on a non-object body)
    "'messages' is required",  # server-chat.cpp, the Anthropic conversion
)


class Tally:
    def __init__(self):
        self.tried = self.failures = 0
        self.statuses: dict[int, int] = {}
        self.bad: list[str] = []

    def check(self, client: httpx.Client, method: str, path: str, content: bytes, is_json: bool, served: bool) -> None:
        self.tried += 1
        headers = {"content-type": "application/json"}
        try:
            r = client.request(method, path, content=content, headers=headers, timeout=TIMEOUT)
            status, body = r.status_code, r.content
        except httpx.HTTPError as exc:
            self._fail(f"{method} {path} {content[:120]!r}: {type(exc).__name__}: {exc}")
            return
        self.statuses[status] = self.statuses.get(status, 0) + 1
        why = verdict(status, body, r.headers.get("content-type", ""), is_json, served)
        if why:
            self._fail(f"{method} {path} {content[:120]!r} -> {status} {body[:200]!r}: {why}")

    def _fail(self, what: str) -> None:
        self.failures += 1
        if len(self.bad) < 20:
            self.bad.append(what)


def verdict(status: int, body: bytes, content_type: str, is_json: bool, served: bool) -> str:
    """Why an answer is not a clean one ("" when it is)."""
    if status < 400:
        if "text/event-stream" in content_type:
            return "" if body.startswith(b"data: ") or body.startswith(b"event: ") or not body else "bad SSE"
        if "json" in content_type:
            try:
                json.loads(body)
            except ValueError:
                return "a 2xx whose JSON does not parse"
        return ""
    try:
        envelope = json.loads(body)
    except ValueError:
        return "an error that is not JSON"
    if (
        not isinstance(envelope, dict)
        or not isinstance(envelope.get("error"), dict)
        and envelope.get("type") != "error"
    ):
        return "an error outside b10621's envelope"
    if status == 501 and (not served or envelope.get("error", {}).get("type") == "not_supported_error"):
        return ""  # a route not served yet, or b10621's own 501 (POST /props without --props)
    if status == 500 and (not is_json or envelope["error"].get("message", "").startswith(UPSTREAM_500)):
        return ""  # b10621's own 500: its JSON parser's exception, or a runtime_error it throws itself
    if status >= 500:
        return "a 5xx"
    return ""


@pytest.fixture(scope="module")
def server(twin_q4_1):
    from oracle.processes import COMMON_ARGS, mlxcel_server

    proc = mlxcel_server(twin_q4_1.mlx_model, [*COMMON_ARGS, "-np", "2", "-c", "512"])
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture(scope="module")
def tally(server):
    t = Tally()
    yield t
    figures.add(
        "fuzz",
        requests_tried=t.tried,
        bad_inputs_tried=t.tried,
        failures=t.failures,
        statuses=json.dumps(dict(sorted(t.statuses.items()))),
    )


@pytest.fixture(scope="module")
def client(server):
    with loopback.Client(base_url=server.base_url) as c:
        yield c


def _body(route: str) -> dict:
    return dict(BASE.get(route, {}))


@pytest.mark.parametrize("method,route,served", ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES])
def test_wrong_types_and_out_of_domain_values_get_clean_answers(client, tally, method, route, served):
    before = tally.failures

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(field=st.sampled_from(FIELDS), value=json_value)
    def one(field, value):
        body = _body(route)
        body[field] = value
        tally.check(client, method, path_of(route), json.dumps(body).encode(), True, served)

    one()
    assert tally.failures == before, tally.bad


@pytest.mark.parametrize("method,route,served", ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES])
def test_whole_bodies_of_any_shape_get_clean_answers(client, tally, method, route, served):
    before = tally.failures

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=json_value)
    def one(body):
        tally.check(client, method, path_of(route), json.dumps(body).encode(), True, served)

    one()
    assert tally.failures == before, tally.bad


def _raw_bodies(route: str) -> list[tuple[bytes, bool]]:
    """(body, is valid JSON): the classes a JSON library never produces."""
    base = _body(route)
    text = json.dumps(base)
    deep = "[" * 100_000 + "]" * 100_000
    rest = ", " + text[1:] if base else "}"  # the base body's fields after a first one
    out = [
        (b"", False),
        (text[:-1].encode(), False),  # truncated
        (b'\xff\xfe{"prompt": "\xc3\x28"}', False),  # invalid UTF-8
        (('{"prompt": "a", "prompt": "b"' + (", " + text[1:] if base else "}")).encode(), True),  # duplicate keys
        (('{"n_predict": NaN' + rest).encode(), False),
        (('{"temperature": Infinity' + rest).encode(), False),
        (('{"top_p": -Infinity' + rest).encode(), False),
        (('{"prompt": ' + deep + rest).encode(), True),  # deep nesting
        (('{"x": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + rest).encode(), True),
        (json.dumps({**base, "prompt": "word " * 200_000}).encode(), True),  # ~1 MB of text
        (json.dumps({**base, "content": "\u0000\ud7ff\U0010ffff" * 1000}).encode(), True),
        (json.dumps({**base, "n_predict": 2**64, "temperature": 1e308, "top_k": -(2**63)}).encode(), True),
        (json.dumps({**base, "n_predict": math.pi, "seed": -1.5}).encode(), True),
        (b"[1, 2, 3]", True),
        (b'"just a string"', True),
        (b"null", True),
    ]
    return out


@pytest.mark.parametrize("method,route,served", ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES])
def test_bodies_no_json_library_writes_get_clean_answers(client, tally, method, route, served):
    before = tally.failures
    for content, is_json in _raw_bodies(route):
        tally.check(client, method, path_of(route), content, is_json, served)
    assert tally.failures == before, tally.bad


def test_the_server_still_serves_after_the_fuzzing(client, server, tally):
    """Run last in this module: nothing the fuzzing sent left the engine stuck or a slot busy."""
    assert client.get("/health", timeout=TIMEOUT).json() == {"status": "ok"}
    deadline = time.time() + 30
    while time.time() < deadline:
        slots = client.get("/slots", timeout=TIMEOUT).json()
        if not any(s["is_processing"] for s in slots):
            break
        time.sleep(0.2)
    assert not any(s["is_processing"] for s in slots), slots
    # ignore_eos: the server's default sampling may draw an end of generation before the fourth token
    r = client.post(
        "/completion", json={"prompt": "The capital of France is", "n_predict": 4, "ignore_eos": True}, timeout=TIMEOUT
    )
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 4
    figures.add("fuzz", slots_leaked=sum(s["is_processing"] for s in slots))
