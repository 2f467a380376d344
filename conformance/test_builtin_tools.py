"""GET and POST /tools with --tools all on both servers (issue 30 point 6): b10621's built-in tools, called with
the same requests on two copies of one directory tree (one per server: the write tools change files), every answer
compared whole: status, body (each copy's absolute path written as {dir}). Paths are given relative to the
x-tool-cwd header, as the web UI gives them.

Not compared: grep_search's message for a pattern its regex engine rejects (ECMAScript's std::regex there,
Python's re here: both refuse, each in its own words), and the container / SSH runtimes (mlxcel runs the tools on
the host and refuses a runtime by name; b10621's refusals of malformed ones are compared)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from fixtures.families import in_turn
from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import Pair

pytestmark = pytest.mark.reference


def _tree(root: Path) -> None:
    (root / "src" / "deep").mkdir(parents=True)
    (root / "build" / "nested").mkdir(parents=True)
    (root / "notes").mkdir()
    (root / "README.md").write_text("# Project\nSee src/main.cpp.\n")
    (root / "src" / "main.cpp").write_text("int main() {\n    return helper(); // TODO: errors\n}\n")
    (root / "src" / "helper.cpp").write_text("int helper() {\n    return 0;\n}\n// todo: more\n")
    (root / "src" / "deep" / "a.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    (root / "build" / "artifact.txt").write_text("built TODO\n")
    (root / "notes" / "smart.txt").write_text("say \u201chello\u201d \u2014 ok   \nsecond line\n")
    (root / "notes" / "dup.txt").write_text("dup\ndup\n")
    (root / "notes" / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 41)))
    (root / "big.txt").write_text("x" * 20000 + "\n")


@pytest.fixture(scope="module")
def setup(reference_binary, tmp_path_factory):
    dirs = [tmp_path_factory.mktemp(side) for side in ("reference", "mlxcel")]
    for d in dirs:
        _tree(d)
    with Pair("f32", ("--tools", "all"), reference_binary) as pair:
        yield pair, dirs


def _said(response: httpx.Response, root: Path) -> dict:
    text = response.text.replace(str(root), "{dir}")
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return {"status": response.status_code, "type": response.headers.get("content-type", ""), "body": body}


CALLS = [  # (name, tool, params, headers beyond x-tool-cwd, stream)
    ("read", "read_file", {"path": "src/main.cpp"}, {}, False),
    (
        "read-range",
        "read_file",
        {"path": "notes/lines.txt", "start_line": 3, "end_line": 5, "append_loc": True},
        {},
        False,
    ),
    ("read-missing", "read_file", {"path": "nope.txt"}, {}, False),
    ("read-too-large", "read_file", {"path": "big.txt"}, {}, False),
    ("read-base64", "read_file", {"path": "README.md"}, {"x-resp-type": "base64"}, False),
    ("read-no-path", "read_file", {}, {}, False),
    ("write", "write_file", {"path": "out/new.txt", "content": "one\ntwo\n"}, {}, False),
    ("write-then-read", "read_file", {"path": "out/new.txt"}, {}, False),
    (
        "edit",
        "edit_file",
        {
            "path": "src/deep/a.txt",
            "edits": [
                {"old_text": "beta", "new_text": "BETA"},
                {"old_text": "delta\n", "new_text": "delta\nepsilon\n"},
            ],
        },
        {},
        False,
    ),
    ("edit-then-read", "read_file", {"path": "src/deep/a.txt"}, {}, False),
    (
        "edit-not-unique",
        "edit_file",
        {"path": "notes/dup.txt", "edits": [{"old_text": "dup", "new_text": "x"}]},
        {},
        False,
    ),
    (
        "edit-overlap",
        "edit_file",
        {
            "path": "notes/lines.txt",
            "edits": [{"old_text": "line 1\nline 2", "new_text": "a"}, {"old_text": "line 2\n", "new_text": "b"}],
        },
        {},
        False,
    ),
    (
        "edit-not-found",
        "edit_file",
        {"path": "notes/lines.txt", "edits": [{"old_text": "line 99", "new_text": "x"}]},
        {},
        False,
    ),
    (
        "edit-fuzzy",
        "edit_file",
        {"path": "notes/smart.txt", "edits": [{"old_text": 'say "hello" - ok', "new_text": "said"}]},
        {},
        False,
    ),
    ("edit-fuzzy-then-read", "read_file", {"path": "notes/smart.txt"}, {}, False),
    (
        "edit-identical",
        "edit_file",
        {"path": "README.md", "edits": [{"old_text": "Project", "new_text": "Project"}]},
        {},
        False,
    ),
    ("edit-empty-old", "edit_file", {"path": "README.md", "edits": [{"old_text": "", "new_text": "x"}]}, {}, False),
    ("edit-no-edits", "edit_file", {"path": "README.md", "edits": []}, {}, False),
    ("glob-files", "file_glob_search", {"path": ".", "include": "*.cpp"}, {}, False),
    ("glob-dirs", "file_glob_search", {"path": ".", "type": "dir"}, {}, False),
    ("glob-all-depth", "file_glob_search", {"path": ".", "type": "all", "max_depth": 1}, {}, False),
    ("glob-path-pattern", "file_glob_search", {"path": ".", "include": "src/**/*.txt", "exclude": "*.md"}, {}, False),
    ("glob-limit", "file_glob_search", {"path": ".", "limit": 2}, {}, False),
    ("glob-bad-type", "file_glob_search", {"path": ".", "type": "bogus"}, {}, False),
    ("glob-bad-limit", "file_glob_search", {"path": ".", "limit": 0}, {}, False),
    ("glob-missing", "file_glob_search", {"path": "nowhere"}, {}, False),
    ("grep", "grep_search", {"path": ".", "pattern": "TODO", "include": "*.cpp"}, {}, False),
    (
        "grep-context",
        "grep_search",
        {"path": "src", "pattern": "return", "context_lines": 1, "return_line_numbers": True},
        {},
        False,
    ),
    (
        "grep-icase-literal",
        "grep_search",
        {"path": ".", "pattern": "todo:", "ignore_case": True, "literal": True},
        {},
        False,
    ),
    (
        "grep-file",
        "grep_search",
        {"path": "notes/lines.txt", "pattern": "^line [23]$", "return_line_numbers": True},
        {},
        False,
    ),
    ("grep-missing", "grep_search", {"path": "nowhere", "pattern": "x"}, {}, False),
    ("exec", "exec_shell_command", {"command": "echo out; echo err 1>&2; exit 3"}, {}, False),
    ("exec-cwd", "exec_shell_command", {"command": "ls src"}, {}, False),
    ("exec-stream", "exec_shell_command", {"command": "echo hello; echo world"}, {}, True),
    ("exec-small-output", "exec_shell_command", {"command": "seq 1 200", "max_output_size": 20}, {}, False),
    ("info", "get_info", {}, {}, False),
    ("cwd-param-ignored", "read_file", {"path": "README.md", "cwd": "/definitely/not/here"}, {}, False),
    ("stream-refused", "read_file", {"path": "README.md"}, {}, True),
    ("unknown-tool", "no_such_tool", {}, {}, False),
    ("runtime-unknown", "exec_shell_command", {"command": "echo hi"}, {"x-tool-runtime": "fake:x"}, False),
    (
        "runtime-ssh-injection",
        "exec_shell_command",
        {"command": "echo hi"},
        {"x-tool-runtime": "ssh:-oProxyCommand=x"},
        False,
    ),
    (
        "runtime-container-injection",
        "exec_shell_command",
        {"command": "echo hi"},
        {"x-tool-runtime": "docker-container:--privileged"},
        False,
    ),
    (
        "runtime-spawn-refused",
        "exec_shell_command",
        {"command": "echo hi"},
        {"x-tool-runtime": "podman:busybox"},
        False,
    ),
]


def test_the_tool_list_is_b10621s(setup):
    pair, dirs = setup
    ours = _said(loopback.get(pair.mlxcel.base_url + "/tools"), dirs[1])
    theirs = _said(loopback.get(pair.reference.base_url + "/tools"), dirs[0])
    _record("list", "GET", ours == theirs)
    assert ours == theirs
    assert [t["tool"] for t in ours["body"]] == [
        "read_file",
        "file_glob_search",
        "grep_search",
        "exec_shell_command",
        "write_file",
        "edit_file",
        "get_info",
    ]


def _record(name: str, method: str, identical: bool, entries: tuple[str, ...] = ()) -> None:
    write_record(
        {
            "case": f"builtin-tools-{name}-f32",
            "entries": ["--tools", f"{method} /tools", *entries],
            "twin": "f32",
            "request": {"method": method, "path": f"/tools ({name})", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": identical,
            "bytes_identical": False,
            "normalizations_fired": ["tree-path"],
            "divergences": [] if identical else [{"path": "$", "kind": "value"}],
            "reproduce": f"pytest conformance/test_builtin_tools.py -k {name}",
        }
    )


def _call_both(pair, dirs: list[Path], tool: str, params: dict, headers: dict, stream: bool) -> list[dict]:
    """The same call on the reference (its copy of the tree) and on mlxcel (its own), paths relative to x-tool-cwd;
    a stream's chunks (as each read them from the pipe) compared joined, then its last event."""
    answers = []
    for base, root in ((pair.reference.base_url, dirs[0]), (pair.mlxcel.base_url, dirs[1])):
        body = {"tool": tool, "params": params, **({"stream": True} if stream else {})}
        r = loopback.post(base + "/tools", json=body, headers={"x-tool-cwd": str(root), **headers}, timeout=60)
        said = _said(r, root)
        if stream and said["status"] == 200:
            events = [json.loads(e[len("data: ") :]) for e in said["body"].split("\n\n") if e]
            said["body"] = ["".join(e.get("chunk", "") for e in events[:-1]), events[-1]]
        answers.append(said)
    return answers


@pytest.mark.parametrize("call", CALLS, ids=[c[0] for c in CALLS])
def test_each_call_answers_as_b10621s(setup, call):
    pair, dirs = setup
    name, tool, params, headers, stream = call
    theirs, ours = _call_both(pair, dirs, tool, params, headers, stream)
    _record(name, "POST", ours == theirs)
    assert ours == theirs


def test_requests_b10621_refuses_are_refused_alike(setup):
    """A body that is not JSON, or has no tool: both 400 invalid_request_error (nlohmann's parse message is
    its own: the status and type are compared)."""
    pair, _ = setup
    for raw in (b"{not json", b'{"params": {}}', b'{"tool": 7}'):
        said = [
            loopback.post(b + "/tools", content=raw, timeout=30)
            for b in (pair.reference.base_url, pair.mlxcel.base_url)
        ]
        assert [r.status_code for r in said] == [400, 400], raw
        assert said[0].json()["type"] == said[1].json()["type"] == "invalid_request_error"
        if raw != b"{not json":
            assert said[0].json() == said[1].json()


def test_tools_make_the_default_cors_origin_localhost(setup):
    pair, _ = setup
    for origin, echoed in (("http://localhost:5173", True), ("https://evil.example", False)):
        said = [
            loopback.get(b + "/health", headers={"Origin": origin}).headers.get("access-control-allow-origin")
            for b in (pair.reference.base_url, pair.mlxcel.base_url)
        ]
        assert said[0] == said[1] == (origin if echoed else None)


SHIMS = Path(__file__).resolve().parent.parent / "fixtures" / "tools_runtime"
RUNTIME_CALLS = [
    c
    for c in CALLS
    if c[0]
    in {
        "read",
        "read-range",
        "read-missing",
        "read-base64",
        "write",
        "write-then-read",
        "edit",
        "edit-then-read",
        "glob-files",
        "glob-dirs",
        "glob-all-depth",
        "glob-missing",
        "grep",
        "grep-context",
        "grep-file",
        "exec",
        "exec-cwd",
        "exec-stream",
        "info",
    }
]


# each landing takes one runtime in turn (fixtures/families.py in_turn; all three outside CI)
RUNTIMES = in_turn([("container", "docker-container:abc123"), ("ssh", "ssh:me@box.example"), ("spawned", None)])


@pytest.mark.parametrize("runtime", [r for _, r in RUNTIMES], ids=[n for n, _ in RUNTIMES])
def test_the_tools_run_through_a_runtime_as_b10621s(reference_binary, tmp_path, runtime):
    """Through an isolate (x-tool-runtime, or --tools-runtime docker:IMAGE's own container): every file and shell
    operation a command for the engine or ssh, here run by stand-ins on PATH (fixtures/tools_runtime), so what
    each server asks of the isolate is compared, answer by answer."""
    dirs = [tmp_path / side for side in ("reference", "mlxcel")]
    for d in dirs:
        d.mkdir()
        _tree(d)
    extra = ("--tools-runtime", "docker:busybox") if runtime is None else ()
    pair = Pair("f32", ("--tools", "all", *extra), reference_binary)
    for server in (pair.reference, pair.mlxcel):
        server.env["PATH"] = f"{SHIMS}:{server.env.get('PATH') or os.environ['PATH']}"
    seen: dict = {}
    with pair:
        for name, tool, params, headers, stream in RUNTIME_CALLS:
            sent = {**headers, **({"x-tool-runtime": runtime} if runtime else {})}
            theirs, ours = _call_both(pair, dirs, tool, params, sent, stream)
            case = f"runtime-{runtime.split(':')[0] if runtime else 'spawned'}-{name}"
            _record(case, "POST", ours == theirs, ("--tools-runtime",))
            assert ours == theirs, name
            seen[name] = ours["body"]
    # not a refusal both gave: the isolate's files and commands answered
    assert "int main()" in seen["read"]["plain_text_response"]
    assert "out\nerr\n\n[exit code: 3]" in seen["exec"]["plain_text_response"]
    assert "src/main.cpp" in seen["glob-files"]["plain_text_response"]
    assert seen["write-then-read"] == {"plain_text_response": "one\ntwo\n"}
