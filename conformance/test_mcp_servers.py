"""MCP servers through /tools (--mcp-servers-json, --mcp-servers-config; issue 30 point 6), on both servers with
the reference sdist's own MCP test servers (tools/server/tests/fixtures: an echo server with echo / add /
fail_once, a slow one, one that crashes mid-call). Each server spawns its own copies, so the stateful tools
(fail_once, the crash) run the same course on both; every answer compared whole: status and body."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import Pair

pytestmark = pytest.mark.reference


def _fixtures() -> Path:
    from oracle.reference import source_tree

    return Path(source_tree()) / "tools" / "server" / "tests" / "fixtures"


@pytest.fixture(scope="module")
def pair(reference_binary):
    fixtures = _fixtures()
    config = {
        "mcpServers": {
            "echo": {"command": sys.executable, "args": [str(fixtures / "mcp_echo_server.py")]},
            "slow": {"command": sys.executable, "args": [str(fixtures / "mcp_slow_server.py")], "timeout_ms": 1500},
            "crash": {"command": sys.executable, "args": [str(fixtures / "mcp_crash_server.py")]},
            "nothing": {"args": ["no command: skipped"]},
            "missing": {"command": "/nonexistent/mcp-server"},
        }
    }
    with Pair("f32", ("--tools", "get_info", "--mcp-servers-json", json.dumps(config)), reference_binary) as p:
        yield p


def _both(pair, method: str, path: str, body: dict | None = None) -> list[dict]:
    out = []
    for base in (pair.reference.base_url, pair.mlxcel.base_url):
        r = loopback.request(method, base + path, json=body, timeout=60)
        out.append({"status": r.status_code, "body": r.json()})
    return out


def _record(name: str, method: str, identical: bool) -> None:
    write_record(
        {
            "case": f"mcp-servers-{name}-f32",
            "entries": ["--mcp-servers-json", "--mcp-servers-config", f"{method} /tools"],
            "twin": "f32",
            "request": {"method": method, "path": f"/tools ({name})", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": identical,
            "bytes_identical": False,
            "normalizations_fired": [],
            "divergences": [] if identical else [{"path": "$", "kind": "value"}],
            "reproduce": f"pytest conformance/test_mcp_servers.py -k {name}",
        }
    )


def test_the_mcp_tools_are_listed_after_the_built_in_ones(pair):
    theirs, ours = _both(pair, "GET", "/tools")
    _record("list", "GET", ours == theirs)
    assert ours == theirs
    names = [t["tool"] for t in ours["body"]]
    assert names[0] == "get_info" and "echo_echo" in names and "slow_sleep" in names


CALLS = [  # in order: fail_once fails the first time only, the crash server dies in its call
    ("echo", "echo_echo", {"message": "hello world"}),
    ("add", "echo_add", {"a": 3, "b": 5}),
    ("fail-once-first", "echo_fail_once", {}),
    ("fail-once-again", "echo_fail_once", {}),
    ("timeout", "slow_sleep", {"seconds": 3}),
    ("crash", "crash_crash", {}),
    ("respawn", "crash_echo", {"message": "back"}),  # the dead server started again
    ("unknown", "echo_nope", {}),
    ("unknown-server-tool", "missing_x", {}),
]


@pytest.mark.parametrize("call", CALLS, ids=[c[0] for c in CALLS])
def test_each_call_answers_as_b10621s(pair, call):
    name, tool, params = call
    theirs, ours = _both(pair, "POST", "/tools", {"tool": tool, "params": params})
    _record(name, "POST", ours == theirs)
    assert ours == theirs
