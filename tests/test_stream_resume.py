"""Resumable streams: a client that drops mid-stream finds what it got as an exact prefix of the replay, and
the rest from its offset; the generation is not cancelled by the drop; DELETE stops it; sessions belong to the
API key that made them."""

from __future__ import annotations

import json
import time

import openai
import pytest

from oracle import loopback
from oracle.processes import mlxcel_server

KEYS = ("key-one", "key-two")


@pytest.fixture(scope="module")
def server():
    proc = mlxcel_server("smollm2-135m-instruct-q4_1", ["--api-key", ",".join(KEYS), "-np", "2"])
    proc.start()
    yield proc
    proc.cleanup()


def _auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _wait_done(url: str, conv: str, key: str) -> dict:
    for _ in range(300):
        found = loopback.post(url + "/v1/streams/lookup", json={"conversation_ids": [conv]}, headers=_auth(key)).json()
        if found and found[0]["is_done"]:
            return found[0]
        time.sleep(0.1)
    raise AssertionError("the stream never finished")


def test_a_dropped_client_resumes_byte_exactly(server):
    url, conv = server.base_url, "conv-drop"
    body = {"prompt": "Once upon a time", "n_predict": 48, "temperature": 0, "stream": True, "ignore_eos": True}
    got = b""
    with loopback.Client(timeout=60) as client:
        with client.stream(
            "POST", url + "/completion", json=body, headers={**_auth(KEYS[0]), "X-Conversation-Id": conv}
        ) as r:
            for chunk in r.iter_raw():
                got += chunk
                if len(got) > 300:
                    break  # the connection closes here, mid-stream
    info = _wait_done(url, conv, KEYS[0])  # the generation went on without its client
    replay = loopback.get(
        url + "/v1/stream", params={"conv_id": conv, "from": 0}, headers=_auth(KEYS[0]), timeout=60
    ).content
    assert info["total_bytes"] == len(replay) > len(got)
    assert replay.startswith(got)
    rest = loopback.get(
        url + "/v1/stream", params={"conv_id": conv, "from": len(got)}, headers=_auth(KEYS[0]), timeout=60
    ).content
    assert got + rest == replay
    assert b'"stop":true' in replay and replay.count(b"data: ") > 40


def test_the_openai_client_drops_and_the_replay_completes_it(server):
    url, conv = server.base_url, "conv-sdk"
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[0])
    stream = client.chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=40,
        temperature=0,
        stream=True,
        extra_headers={"X-Conversation-Id": conv},
        extra_body={"ignore_eos": True},
    )
    seen = ""
    for i, chunk in enumerate(stream):
        seen += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if i == 5:
            break
    stream.close()
    _wait_done(url, conv, KEYS[0])
    replay = loopback.get(url + "/v1/stream", params={"conv_id": conv}, headers=_auth(KEYS[0]), timeout=60).text
    frames = [json.loads(line[6:]) for line in replay.split("\n\n") if line.startswith("data: {")]
    full = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices"))
    assert full.startswith(seen) and len(full) > len(seen)
    assert replay.rstrip().endswith("data: [DONE]")


def test_sessions_belong_to_their_key_and_delete_stops_them(server):
    url, conv = server.base_url, "conv-key"
    body = {"prompt": "Count:", "n_predict": 400, "temperature": 0, "stream": True, "ignore_eos": True}
    with loopback.Client(timeout=60) as client:
        with client.stream(
            "POST", url + "/completion", json=body, headers={**_auth(KEYS[0]), "X-Conversation-Id": conv}
        ) as r:
            next(r.iter_raw())
    other = _auth(KEYS[1])
    assert loopback.post(url + "/v1/streams/lookup", json={"conversation_ids": [conv]}, headers=other).json() == []
    assert loopback.get(url + "/v1/stream", params={"conv_id": conv}, headers=other).status_code == 404
    assert loopback.delete(url + "/v1/stream", params={"conv_id": conv}, headers=other).status_code == 204
    mine = loopback.post(url + "/v1/streams/lookup", json={"conversation_ids": [conv]}, headers=_auth(KEYS[0])).json()
    assert mine and not mine[0]["is_done"]  # another key's DELETE touched nothing
    assert loopback.delete(url + "/v1/stream", params={"conv_id": conv}, headers=_auth(KEYS[0])).status_code == 204
    assert (
        loopback.post(url + "/v1/streams/lookup", json={"conversation_ids": [conv]}, headers=_auth(KEYS[0])).json()
        == []
    )
    slots = loopback.get(url + "/slots", headers=_auth(KEYS[0])).json()
    deadline = time.monotonic() + 30
    while any(s["is_processing"] for s in slots):  # the stopped generation frees its slot
        assert time.monotonic() < deadline
        time.sleep(0.2)
        slots = loopback.get(url + "/slots", headers=_auth(KEYS[0])).json()
