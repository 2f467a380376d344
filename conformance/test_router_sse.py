"""GET /models/sse against b10621's router: both servers watched while the same models are loaded, evicted by
--models-max, unloaded and reloaded; each model's events compared in order (b10621's children report load
progress as often as its 200 ms throttle lets them, so repeats of one progress value count once, and the event
clock in `info.created` is masked). Needs the live reference (the reference_binary fixture skips offline)."""

from __future__ import annotations

import json
import threading
import time

import httpx

from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import server_pair


def _listen(base: str, into: list, ready: threading.Event) -> None:
    try:
        with loopback.stream("GET", base + "/models/sse", timeout=None) as r:
            ready.set()
            for line in r.iter_lines():
                if line.startswith("data: "):
                    into.append(json.loads(line[len("data: ") :]))
    except httpx.HTTPError:
        pass


def _per_model(events: list[dict]) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in events:
        e = json.loads(json.dumps(e))
        info = (e.get("data") or {}).get("info")
        if info is not None:
            info["created"] = "<clock>"
        seq = out.setdefault(e["model"], [])
        if not seq or seq[-1] != e:
            seq.append(e)
    return out


def _unloaded(events: list, model: str, timeout: float = 30) -> None:
    """Until the server has reported `model` unloaded (b10621's router reports it when the child has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.get("model") == model and (e.get("data") or {}).get("status") == "unloaded" for e in list(events)):
            return
        time.sleep(0.05)
    raise AssertionError(f"no unloaded event for {model} in {timeout} s")


def _settled(*lists: list, quiet: float = 1.0, timeout: float = 10) -> None:
    """Until no new event has arrived on any of the lists for `quiet` seconds (the last ones in flight)."""
    deadline, seen, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        now = [len(x) for x in lists]
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)


def test_model_events_match_b10621(reference_binary):
    ref, mine = server_pair(
        "router", ("--models-dir", "{models_dir}", "-fa", "off", "--models-max", "1"), reference_binary
    )
    events = {"reference": [], "mlxcel": []}
    with ref, mine:
        for name, proc in (("reference", ref), ("mlxcel", mine)):
            ready = threading.Event()
            threading.Thread(target=_listen, args=(proc.base_url, events[name], ready), daemon=True).start()
            assert ready.wait(30)
        for name, proc in (("reference", ref), ("mlxcel", mine)):
            base = proc.base_url
            assert loopback.post(base + "/models/load", json={"model": "smollm2-f32"}).status_code == 200
            for model in ("smollm2-f32", "smollm2-q4-1"):  # the second evicts the first (--models-max 1)
                r = loopback.post(
                    base + "/completion", json={"model": model, "prompt": "Hi", "n_predict": 1}, timeout=300
                )
                assert r.status_code == 200, r.text
            assert loopback.post(base + "/models/unload", json={"model": "smollm2-q4-1"}).status_code == 200
            _unloaded(events[name], "smollm2-q4-1")  # b10621's child takes a moment to exit
            assert loopback.get(base + "/models?reload=1").status_code == 200
        _settled(events["reference"], events["mlxcel"])
    got, want = _per_model(events["mlxcel"]), _per_model(events["reference"])
    assert set(want) == {"smollm2-f32", "smollm2-q4-1", "*"}
    differing = sorted(m for m in set(got) | set(want) if got.get(m) != want.get(m))
    write_record(
        {  # the evidence behind GET /models/sse (mlxcel-oracle verify)
            "case": "sse-router-model-events",
            "entries": ["GET /models/sse"],
            "twin": "router",
            "request": {"method": "GET", "path": "/models/sse", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": not differing,
            "bytes_identical": False,
            "normalizations_fired": ["sse_progress_repeats"],
            "divergences": [{"path": f"$events[{m}]", "kind": "value"} for m in differing],
            "reproduce": "pytest conformance/test_router_sse.py",
        }
    )
    assert got == want
