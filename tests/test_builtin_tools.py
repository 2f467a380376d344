"""The built-in tools' host side (server/tools/host.py) without a server: b10621's glob_match and path_glob_match
(common.cpp), path resolution against the tool's working directory, and the refusals of a tools runtime. The tools
against b10621's own answers: conformance/test_builtin_tools.py."""

from __future__ import annotations

import pytest

from server.tools.builtin import NAMES, edit_file, read_file, select, write_file
from server.tools.host import (
    SSHIO,
    ContainerIO,
    HostIO,
    ToolError,
    glob_match,
    make_io,
    path_glob_match,
    shell_quote_join,
)


@pytest.mark.parametrize(
    "pattern,text,want",
    [
        ("*.cpp", "main.cpp", True),
        ("*.cpp", "src/main.cpp", False),  # * stays within a segment
        ("**/*.cpp", "src/deep/main.cpp", True),
        ("**", "a/b/c", True),
        ("src/?.txt", "src/a.txt", True),
        ("src/?.txt", "src/ab.txt", False),
        ("[a-c]x", "bx", True),
        ("[!a-c]x", "bx", False),
        ("[]]x", "]x", True),
        ("[abc", "[abc", True),  # an unclosed class is a literal [
    ],
)
def test_glob_match_is_common_cpps(pattern, text, want):
    assert glob_match(pattern, text) is want


def test_a_pattern_without_a_slash_matches_the_basename_and_one_with_is_anchored():
    assert path_glob_match("*.txt", "a/b/c.txt")
    assert path_glob_match("b/*.txt", "a/b/c.txt")  # anchored with **/
    assert not path_glob_match("/b/*.txt", "a/b/c.txt")


def test_paths_resolve_against_the_working_directory(tmp_path):
    io = HostIO(str(tmp_path))
    assert io.resolve("a/../b/./c") == f"{tmp_path}/b/c"
    assert io.resolve("/x/y/..") == "/x"
    assert write_file({"path": "d/e.txt", "content": "one\ntwo\n", "cwd": str(tmp_path)})["bytes"] == 8
    assert read_file({"path": "d/e.txt", "cwd": str(tmp_path), "append_loc": True})["plain_text_response"] == (
        "1\u2192one\n2\u2192two\n"
    )
    edited = edit_file({"path": "d/e.txt", "cwd": str(tmp_path), "edits": [{"old_text": "two", "new_text": "2"}]})
    assert edited == {"result": "file edited successfully", "path": "d/e.txt", "edits_applied": 1}
    assert (tmp_path / "d" / "e.txt").read_text() == "one\n2\n"


@pytest.mark.parametrize(
    "runtime,said",
    [
        ("fake:x", "unknown tool runtime: fake:x"),
        ("ssh:-oProxyCommand=x", "invalid ssh target: -oProxyCommand=x"),
        ("docker-container:--privileged", "invalid container id: --privileged"),
        ("podman:busybox", "tool runtime must name a running container: podman:busybox"),
    ],
)
def test_a_runtime_b10621_refuses_is_refused_never_run_on_the_host(runtime, said):
    with pytest.raises(ToolError, match="^" + said.replace("+", r"\+") + "$"):
        make_io({"runtime": runtime})


def test_tool_names_are_checked_as_b10621_checks_them():
    assert [t.name for t in select(["all"])] == NAMES
    assert [t.name for t in select(["get_info", "read_file"])] == ["read_file", "get_info"]  # build_tools' order
    with pytest.raises(ValueError, match='^unknown tool "fly". available tools: read_file, file_glob_search'):
        select(["read_file", "fly"])


def test_an_isolate_is_reached_with_b10621s_command_lines():
    """tools_io_container's and tools_io_ssh's argv (the commands themselves against b10621's:
    conformance/test_builtin_tools.py, through stand-ins for the engine and ssh)."""
    assert isinstance(make_io({"runtime": "podman-container:c1", "cwd": "/w"}), ContainerIO)
    assert ContainerIO("podman", "c1").build_argv(["cat", "--", "/f"], True) == [
        "podman",
        "exec",
        "-i",
        "c1",
        "cat",
        "--",
        "/f",
    ]
    ssh = make_io({"runtime": "ssh:me@host"})
    assert isinstance(ssh, SSHIO) and ssh.build_argv(["echo", "it's"], False)[-3:] == [
        "-n",
        "me@host",
        "'echo' 'it'\\''s'",
    ]
    assert shell_quote_join(["a b", "c"]) == "'a b' 'c'"
