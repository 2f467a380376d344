"""The oracle's pure layers: normalization, byte and structural diffs, SSE frames, command capture,
the evidence gate and the decided-position rule."""

from __future__ import annotations

import json
import ssl
import sys

from oracle.diff import diff_exchanges
from oracle.evidence import verify
from oracle.exchange import Exchange, run_command, split_sse
from oracle.trace import compare

JSON = {"content-type": "application/json; charset=utf-8"}


def ex(body: bytes, status: int = 200, headers=JSON, frames=()) -> Exchange:
    return Exchange(status, dict(headers), body, tuple(frames))


def kinds(report):
    return [(d.path, d.kind) for d in report.divergences]


def test_identical_bytes_are_identical():
    r = diff_exchanges(ex(b'{"a":1}'), ex(b'{"a":1}'))
    assert r.identical and r.bytes_identical and r.divergences == []


def test_whitespace_only_difference_is_caught_by_the_byte_layer():
    r = diff_exchanges(ex(b'{"a":1}'), ex(b'{"a": 1}'))
    assert not r.bytes_identical and kinds(r) == [("$", "bytes")]


def test_structural_kinds():
    r = diff_exchanges(ex(b'{"a":1,"b":2,"c":[1],"d":1.0}'), ex(b'{"b":2,"a":1,"c":[1,2],"d":1,"e":0}'))
    assert set(kinds(r)) == {("$.e", "extra"), ("$", "order"), ("$.c", "value"), ("$.d", "number-format")}
    r = diff_exchanges(ex(b'{"a":"1"}'), ex(b"{}", status=500))
    assert set(kinds(r)) == {("status", "status"), ("$.a", "missing")}


def test_masked_values_keep_types_and_report_the_rule_that_fired():
    a = ex(b'{"timings":{"prompt_ms":1.5,"prompt_n":3},"id_slot":2}')
    b = ex(b'{"timings":{"prompt_ms":9.25,"prompt_n":7},"id_slot":0}')
    r = diff_exchanges(a, b, ("clocks", "id_slot"))
    assert kinds(r) == [("$.timings.prompt_n", "value")]  # a count is never masked
    assert r.normalizations_fired == ["clocks", "id_slot"]
    b = ex(b'{"timings":{"prompt_ms":9.25,"prompt_n":3},"id_slot":0}')
    assert diff_exchanges(a, b, ("clocks", "id_slot")).identical
    c = ex(b'{"timings":{"prompt_ms":9,"prompt_n":3},"id_slot":0}')  # an int where a float was
    assert kinds(diff_exchanges(a, c, ("clocks", "id_slot"))) == [("$.timings.prompt_ms", "type")]


def test_memory_the_reference_never_wrote_is_masked_with_its_type_and_only_there():
    """--reranking's /embeddings: b10621 prints whatever its buffer held past the rank head's one float (a NaN
    as null); rank_pooled_embedding masks each component's type too, the vector's length stays compared."""
    a = ex(b'[{"index":0,"embedding":[[1.0,3.8e-41,0.0]]}]')
    b = ex(b'[{"index":0,"embedding":[[1.0,null,0.0]]}]')
    assert kinds(diff_exchanges(a, b, ("embedding_values",))) == [("$[0].embedding[0][1]", "type")]
    assert diff_exchanges(a, b, ("rank_pooled_embedding",)).identical
    c = ex(b'[{"index":0,"embedding":[[1.0,0.0]]}]')
    assert kinds(diff_exchanges(a, c, ("rank_pooled_embedding",))) == [("$[0].embedding[0]", "value")]


def test_sse_frames_are_split_and_compared_one_by_one():
    body = b'data: {"a":1}\n\ndata: {"a":2}\n\n'
    frames = split_sse(body)
    assert frames == (b'data: {"a":1}', b'data: {"a":2}')
    sse = {"content-type": "text/event-stream"}
    other = split_sse(b'data: {"a":1}\n\ndata: {"a":3}\n\n')
    r = diff_exchanges(ex(body, headers=sse, frames=frames), ex(b"", headers=sse, frames=other))
    assert kinds(r) == [("frame[1]$.a", "value")] and not r.bytes_identical


def test_command_exchange_captures_exit_status_and_streams():
    c = run_command([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (c.returncode, c.stdout, c.stderr) == (3, "out\n", "err\n")


def _entry(eid, state):
    return {"id": eid, "state": state}


def _record(eid, identical):
    return {
        "case": "c",
        "entries": [eid],
        "identical": identical,
        "reproduce": "mlxcel-oracle diff x",
        "divergences": [] if identical else [{"path": "$.x", "kind": "value"}],
    }


def test_evidence_gate():
    assert verify([_entry("A", "supported")], [_record("A", True)]) == []
    assert "no oracle evidence" in str(verify([_entry("A", "supported")], [])[0])
    assert "differs at $.x" in str(verify([_entry("A", "supported")], [_record("A", False)])[0])
    assert "it is supported" in str(verify([_entry("B", "by_design")], [_record("B", True)])[0])
    assert verify([_entry("B", "by_design")], [_record("B", False)]) == []
    assert verify([_entry("C", "deferred")], [_record("C", False)]) == []


def _pos(top):
    return {"logprob": top[0][1], "top_logprobs": [{"id": i, "logprob": lp} for i, lp in top]}


def test_decided_position_rule():
    ref = [_pos([(1, -0.1), (2, -3.0)]), _pos([(5, -0.6), (6, -0.9)]), _pos([(7, -0.01), (8, -5.0)])]
    mine = [_pos([(1, -0.12), (2, -2.9)]), _pos([(6, -0.5), (5, -0.7)]), _pos([(7, -0.02), (8, -4.0)])]
    mine[1]["logprob"] = -0.7
    t = compare("p", [1, 5, 7], ref, mine, threshold=2.0)
    assert (t.decided, t.disagreements_at_decided) == (2, 0)  # position 1 (gap 0.3) is undecided
    assert t.first_divergence == {
        "position": 1,
        "reference": 5,
        "mlxcel": 6,
        "gap": ref[1]["top_logprobs"][0]["logprob"] - ref[1]["top_logprobs"][1]["logprob"],
    }
    assert abs(t.max_abs_delta_logprob - 0.02) < 1e-9
    t = compare("p", [1, 5, 7], ref, mine, threshold=0.1)
    assert t.disagreements_at_decided == 1


def test_sse_keepalive_comments_are_not_frames():
    # a ping comes after a silence, whose length is a clock: it is never compared
    assert split_sse(b'data: {"a":1}\n\n:\n\ndata: {"b":2}\n\n') == (b'data: {"a":1}', b'data: {"b":2}')


def test_a_text_body_is_compared_with_the_named_text_patterns_replaced():
    """The reference's web UI page from two builds: only its assets' hashes and SvelteKit's id differ."""
    page = (
        '<link href="./_app/immutable/bundle.{h}.js" rel="modulepreload"><link href="./_app/immutable/'
        'assets/bundle.CsYLz1sd.css"><script>__sveltekit_{s} = {{}};</script>'
    )
    one = page.format(h="cNdTyngK", s="ifm9h8").encode()
    other = page.format(h="B_4lH60N", s="he04gr").encode()
    edited = other.replace(b"modulepreload", b"preload")

    def exchange(body: bytes) -> Exchange:
        return Exchange(200, {"content-type": "text/html"}, body)

    assert not diff_exchanges(exchange(one), exchange(other)).identical
    report = diff_exchanges(exchange(one), exchange(other), ("ui_build_ids",))
    assert report.identical and report.normalizations_fired == ["ui_build_ids"]
    assert not diff_exchanges(exchange(one), exchange(edited), ("ui_build_ids",)).identical


def test_a_template_date_is_replaced_inside_the_rendered_prompt_only():
    """gpt-oss's template renders today's date: a recording from another day differs in that text alone."""

    def verbose(day: str, tail: str = "hi") -> Exchange:
        body = {"__verbose": {"prompt": f"<|start|>system<|message|>Current date: {day}\n\n{tail}"}}
        return ex(json.dumps(body).encode())

    assert not diff_exchanges(verbose("2026-11-30"), verbose("2026-12-01")).identical
    report = diff_exchanges(verbose("2026-11-30"), verbose("2026-12-01"), ("template_date",))
    assert report.identical and report.normalizations_fired == ["template_date"]
    assert not diff_exchanges(verbose("2026-11-30"), verbose("2026-12-01", "ho"), ("template_date",)).identical
    elsewhere = ex(b'{"content":"Current date: 2026-11-30"}'), ex(b'{"content":"Current date: 2026-12-01"}')
    assert not diff_exchanges(*elsewhere, ("template_date",)).identical


def test_server_states_group_cases_by_the_state_they_need():
    """One pair per (twin, flags); a fresh case first on its state's pair, a second fresh one on a pair of its own;
    the shared pairs' cases first."""
    from oracle.corpus import SHARED, Case, server_states
    from oracle.exchange import OracleRequest

    req = OracleRequest.from_dict({"method": "GET", "path": "/health"})

    def case(name, args=(), fresh=False, twin="f32", store=False):
        return Case(name, ("GET /health",), twin, req, (), True, (), tuple(args), (), fresh, store)

    states = server_states(
        [
            case("b", ["-np", "1"]),
            case("a", ["-np", "1"]),
            case("z", ["-np", "1"], fresh=True),
            case("y", ["-np", "1"], fresh=True),
            case("s"),
            case("r", twin="q4_1"),
            case("f", fresh=True),
            case("d", ["-np", "1"], store=True),
        ]
    )
    keys = [k for k, _ in states]
    names = [[c.name for c in cs] for _, cs in states]
    assert keys[0] == SHARED and names[0] == ["s", "r"]  # by twin (f32, q4_1), then name
    assert ["y", "a", "b"] in names and ["z"] in names  # y: first fresh, ahead of the rest; z: its own pair
    assert ["f"] in names  # a fresh case without flags leaves the shared pair
    assert ["d"] in names  # a store case: servers whose stores hold a model, never a store-less pair
    assert len(states) == 5 and len(set(keys)) == 5


def test_the_corpus_needs_one_pair_per_server_state():
    from oracle.corpus import SHARED, load_corpus, server_states

    states = server_states(load_corpus())
    own = [cs for k, cs in states if k != SHARED]
    assert all(len({(c.twin, c.args, c.store) for c in cs}) == 1 for cs in own)
    assert all(not any(c.fresh for c in cs[1:]) for cs in own)  # a fresh case is never second on a pair


def _recorded(case) -> dict:
    from oracle.corpus import TRANSCRIPT_DIR

    return json.loads((TRANSCRIPT_DIR / f"{case.name}.json").read_text(encoding="utf-8"))["reference"]


def test_every_own_server_case_states_the_server_state_it_needs():
    from oracle.corpus import load_corpus, unstated_states

    assert unstated_states(load_corpus(), _recorded) == []


def test_a_case_reading_what_earlier_cases_left_is_caught():
    from oracle.corpus import Case, unstated_states
    from oracle.exchange import OracleRequest

    def case(method, path, args=("-np", "1"), setup=(), fresh=False):
        req = OracleRequest.from_dict({"method": method, "path": path})
        return Case(path, ("x",), "f32", req, (), True, (), tuple(args), tuple(setup), fresh)

    completion = OracleRequest.from_dict({"method": "POST", "path": "/completion", "body": {"prompt": "a"}})
    hidden = [
        case("GET", "/metrics", setup=[completion]),
        case("GET", "/slots?fail_on_no_slot=1"),
        case("POST", "/slots/7?action=erase"),
        case("GET", "/lora-adapters"),
    ]
    stated = [
        case("GET", "/metrics", fresh=True),
        case("POST", "/slots/7?action=erase", setup=[completion]),
        case("GET", "/slots", args=()),
    ]  # the shared pair: its own rules (no counter is compared there)
    ok, refused = {"status": 200, "body": {"text": "{}"}}, {"status": 400, "body": {"text": "{}"}}
    assert [p.split(":")[0] for p in unstated_states(hidden, lambda c: ok)] == [c.name for c in hidden]
    assert unstated_states(stated, lambda c: ok) == []
    assert unstated_states(hidden, lambda c: refused) == []  # a refusal reads no state
    # a completion second on its pair whose recorded cache_n came from the first
    first, second = case("POST", "/completion"), case("POST", "/completion?b")
    cached = {"status": 200, "body": {"text": '{"timings":{"cache_n":6,"prompt_n":1}}'}}
    assert [p.split(":")[0] for p in unstated_states([first, second], lambda c: cached)] == [second.name]
    assert unstated_states([first, case("POST", "/completion?b", setup=[completion])], lambda c: cached) == []


def test_loopback_calls_share_one_tls_context_and_reach_the_server(monkeypatch):
    """oracle/loopback.py: every call hands httpx the same context (httpx would build and load a new one per call,
    ~50 ms of CPU each), a caller's own `verify` wins, and the answer is the server's."""
    import http.server
    import threading

    import httpx

    from oracle import loopback

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello " + self.path.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen = []
    real = httpx.Client.__init__

    def spy(self, *args, **kw):
        seen.append(kw.get("verify"))
        real(self, *args, **kw)

    monkeypatch.setattr(httpx.Client, "__init__", spy)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert loopback.get(url + "/a").text == "hello /a"
        assert loopback.post(url + "/b").status_code == 501  # (the handler has no POST: the server's own answer)
        with loopback.Client() as client:
            assert client.get(url + "/c").text == "hello /c"
        loopback.get(url + "/d", verify=False)
    finally:
        server.shutdown()
    assert seen[:3] == [loopback.tls_context()] * 3 and isinstance(seen[0], ssl.SSLContext)
    assert seen[3] is False
