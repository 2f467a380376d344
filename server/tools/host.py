"""Where b10621's built-in tools read, write, list and run (server-tools.cpp's tools_io_basic): the host, with paths
resolved against the request's working directory (the x-tool-cwd header) or the server's own, and b10621's glob
matching (common.cpp's glob_match, path_glob_match)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LIST_TIMEOUT_S = 15  # SERVER_TOOL_LIST_ENTRIES_TIMEOUT: one listing call's budget, git and walker alike
GIT_LS_FILES_MAX_OUTPUT = 8 * 1024 * 1024
# listed but never walked: they can be enormous (SERVER_TOOL_JUNK_DIR_NAMES)
JUNK_DIRS = frozenset(
    (".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build", "target", ".cache")
    + (".idea", ".vscode")
)


class ToolError(Exception):
    """An error b10621 throws out of a tool call: a 500 in format_error_response's shape."""


class ToolJSONError(ToolError):
    """A parameter missing or of another type (common_json_error, nlohmann's words): a 400."""


def _class_match(c: str, cls: str) -> bool:
    """glob_class_match: [!...] negates, a leading ] or - is literal, a-z ranges."""
    negated = cls.startswith("!")
    i = 1 if negated else 0
    if i < len(cls) and cls[i] in "]-":
        if cls[i] == c:
            return not negated
        i += 1
    matched = False
    while i < len(cls):
        if i + 2 < len(cls) and cls[i + 1] == "-" and cls[i + 2] != "]":
            if cls[i] <= c <= cls[i + 2]:
                matched = True
                break
            i += 3
        else:
            if cls[i] == c:
                matched = True
                break
            i += 1
    return not matched if negated else matched


def glob_match(pattern: str, text: str) -> bool:  # noqa: C901 (common.cpp's recursion, case by case)
    """common.cpp's glob_match: * within a path segment, ** across segments, ? one non-/ character, [] a class."""
    if not pattern:
        return not text
    if pattern.startswith("**"):
        rest = pattern[2:]
        return any(glob_match(rest, text[i:]) for i in range(len(text) + 1))
    if pattern[0] == "*":
        rest = pattern[1:]
        i = 0
        while i < len(text) and text[i] != "/":
            if glob_match(rest, text[i:]):
                return True
            i += 1
        return glob_match(rest, text[i:])
    if pattern[0] == "?" and text and text[0] != "/":
        return glob_match(pattern[1:], text[1:])
    if pattern[0] == "[":
        end = 1
        if end < len(pattern) and pattern[end] in "]-":
            end += 1
        while end < len(pattern) and pattern[end] != "]":
            end += 1
        if end < len(pattern):
            return bool(text) and _class_match(text[0], pattern[1:end]) and glob_match(pattern[end + 1 :], text[1:])
        return bool(text) and text[0] == "[" and glob_match(pattern[1:], text[1:])
    return bool(text) and pattern[0] == text[0] and glob_match(pattern[1:], text[1:])


def path_glob_match(pattern: str, rel: str) -> bool:
    """No '/' in the pattern: the basename at any depth; else the whole relative path, anchored with **/ unless
    it already starts with ** or /."""
    if "/" not in pattern:
        return glob_match(pattern, rel.rsplit("/", 1)[-1])
    if pattern == "**" or pattern.startswith("**/") or pattern.startswith("/"):
        return glob_match(pattern, rel)
    return glob_match("**/" + pattern, rel)


@dataclass
class RunResult:
    output: str = ""
    exit_code: int = -1
    timed_out: bool = False


@dataclass
class Listing:
    entries: list[tuple[str, bool]] = field(default_factory=list)  # ('/'-separated relative path, is a directory)
    err: str = ""
    truncated: bool = False


def _normal(path: str) -> str:
    """fs::path::lexically_normal, then a trailing separator dropped (a trailing '..' leaves one)."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not absolute:
                parts.append(part)
            continue
        parts.append(part)
    joined = "/".join(parts)
    return ("/" + joined) if absolute else (joined or ".")


class HostIO:
    """tools_io_basic: the tools' files and processes on the host."""

    def __init__(self, cwd: str = ""):
        self.cwd = cwd

    def resolve(self, path: str) -> str:
        """A leading ~ expanded, then made absolute against the working directory, normalized."""
        p = path
        home = os.environ.get("HOME", "")
        if p.startswith("~") and (len(p) == 1 or p[1] in "/\\") and home:
            p = home + p[1:]
        if not p.startswith("/"):
            base = self.cwd
            if not base:
                try:
                    base = os.getcwd()
                except OSError:
                    return p
            p = base.rstrip("/") + "/" + p
        return _normal(p)

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(self.resolve(path))

    def is_regular_file(self, path: str) -> bool:
        return os.path.isfile(self.resolve(path))

    def file_size(self, path: str) -> int | None:
        try:
            st = os.stat(self.resolve(path))
        except OSError:
            return None
        return None if os.path.isdir(self.resolve(path)) else st.st_size

    def read_file(self, path: str) -> bytes | None:
        try:
            with open(self.resolve(path), "rb") as f:
                return f.read()
        except OSError:
            return None

    def write_file(self, path: str, content: bytes) -> bool:
        full = self.resolve(path)
        try:
            parent = os.path.dirname(full)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(full, "wb") as f:
                f.write(content)
        except OSError:
            return False
        return True

    def list_entries(self, base: str, max_depth: int, kind: str) -> Listing:  # noqa: C901 (git, then the walk)
        """Entries under base (absolute): `git ls-files` for files inside a repository, else a walk that lists
        junk directories without entering them and never follows a link; max_depth 0 is unlimited."""
        out = Listing()
        if not os.path.isdir(base):
            out.err = "path does not exist or is not a directory"
            return out
        deadline = time.monotonic() + LIST_TIMEOUT_S
        if kind == "file":
            res = self.run(
                ["git", "-C", base, "ls-files", "--cached", "--others", "--exclude-standard"],
                GIT_LS_FILES_MAX_OUTPUT,
                LIST_TIMEOUT_S,
            )
            if res.exit_code == 0 and not res.timed_out:
                for line in res.output.split("\n"):
                    line = line.rstrip("\r").replace("\\", "/")
                    if not line or (max_depth > 0 and line.count("/") + 1 > max_depth):
                        continue
                    if os.path.isfile(base.rstrip("/") + "/" + line):
                        out.entries.append((line, False))
                return out
        stack = [(base, "", 0)]
        while stack:
            if time.monotonic() >= deadline:
                out.truncated = True
                return out
            directory, rel_dir, depth = stack.pop()
            try:
                scanned = list(os.scandir(directory))
            except PermissionError:
                continue
            except OSError:
                out.truncated = True
                continue
            for entry in scanned:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if is_dir:
                    if kind in ("dir", "all"):
                        out.entries.append((rel, True))
                    if entry.name in JUNK_DIRS:
                        continue
                    if not entry.is_symlink() and (max_depth == 0 or depth + 1 < max_depth):
                        stack.append((entry.path, rel, depth + 1))
                elif entry.is_file() and kind in ("file", "all"):
                    out.entries.append((rel, False))
        return out

    def run(
        self,
        args: list[str],
        max_output: int,
        timeout_s: int,
        on_chunk: Callable[[str], bool] | None = None,
    ) -> RunResult:
        """run_subprocess: stdout and stderr combined, read as it comes (kept to max_output, drained past it),
        killed at the timeout, in the working directory."""
        res = RunResult()
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.cwd or None,
            )
        except OSError:
            res.output = "failed to spawn process"
            return res
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        output, truncated = bytearray(), False
        assert proc.stdout is not None
        try:
            while True:
                buf = os.read(proc.stdout.fileno(), 4096)
                if not buf:
                    break
                if truncated:
                    continue
                if len(output) + len(buf) <= max_output:
                    output += buf
                    if on_chunk is not None and not on_chunk(buf.decode("utf-8", "replace")):
                        proc.kill()
                        break
                else:
                    room = max_output - len(output)
                    output += buf[:room]
                    if on_chunk is not None and room > 0:
                        on_chunk(buf[:room].decode("utf-8", "replace"))
                    truncated = True
        finally:
            timer.cancel()
            proc.stdout.close()
        res.exit_code = proc.wait()
        res.output = output.decode("utf-8", "replace")
        res.timed_out = timed_out.is_set()
        if truncated:
            res.output += "\n[output truncated]"
        return res


def _alnum(c: str) -> bool:
    """C's isalnum in the C locale: ASCII letters and digits."""
    return c.isascii() and c.isalnum()


def make_io(params: dict) -> HostIO:
    """make_tools_io: the host for an empty runtime; b10621's words for a runtime it refuses; mlxcel's for the
    isolates it does not run (containers, SSH)."""
    cwd = params.get("cwd") or ""
    runtime = params.get("runtime") or ""
    if not runtime:
        return HostIO(cwd if isinstance(cwd, str) else "")
    for engine in ("docker", "podman"):
        for attach, prefix in ((True, f"{engine}-container:"), (False, f"{engine}:")):
            if runtime.startswith(prefix):
                arg = runtime[len(prefix) :]
                if not attach:
                    raise ToolError(f"tool runtime must name a running container: {runtime}")
                if not arg or not _alnum(arg[0]) or not all(_alnum(c) or c in ".-_" for c in arg):
                    raise ToolError(f"invalid container id: {arg}")
                raise ToolError(f"tool runtime {runtime}: mlxcel runs the built-in tools on the host only")
    if runtime.startswith("ssh:"):
        target = runtime[4:]
        if not target or target.startswith("-") or not all(_alnum(c) or c in ".-_@" for c in target):
            raise ToolError(f"invalid ssh target: {target}")
        raise ToolError(f"tool runtime {runtime}: mlxcel runs the built-in tools on the host only")
    raise ToolError(f"unknown tool runtime: {runtime}")
