"""Where b10621's built-in tools read, write, list and run (server-tools.cpp's tools_io_basic): the host, with paths
resolved against the request's working directory (the x-tool-cwd header) or the server's own, and b10621's glob
matching (common.cpp's glob_match, path_glob_match)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("mlxcel")

LIST_TIMEOUT_S = 15  # SERVER_TOOL_LIST_ENTRIES_TIMEOUT: one listing call's budget, git and walker alike
GIT_LS_FILES_MAX_OUTPUT = 8 * 1024 * 1024
# listed but never walked: they can be enormous (SERVER_TOOL_JUNK_DIR_NAMES)
JUNK_DIR_ORDER: tuple[str, ...] = (".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist")
JUNK_DIR_ORDER += ("build", "target", ".cache", ".idea", ".vscode")
JUNK_DIRS = frozenset(JUNK_DIR_ORDER)


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
    raw: bytes = b""  # the output's bytes (a file read through `cat`)


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
        return run_subprocess(args, max_output, timeout_s, on_chunk, True, self.cwd)


def run_subprocess(  # noqa: C901 (b10621's loop, step by step)
    args: list[str],
    max_output: int,
    timeout_s: int,
    on_chunk: Callable[[str], bool] | None = None,
    combine_stderr: bool = True,
    cwd: str = "",
    stdin_data: bytes | None = None,
) -> RunResult:
    """run_subprocess: the output read as it comes (kept to max_output, drained past it), stderr with it or not,
    stdin written then closed, killed at the timeout; a process ended by a signal reports 1 (subprocess.h's
    EXIT_FAILURE)."""
    res = RunResult()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if combine_stderr else subprocess.DEVNULL,
            cwd=cwd or None,
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
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if stdin_data:
            proc.stdin.write(stdin_data)
        proc.stdin.close()
    except OSError:
        pass
    output, truncated = bytearray(), False
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
    code = proc.wait()
    res.exit_code = code if code >= 0 else 1
    res.raw = bytes(output)
    res.output = res.raw.decode("utf-8", "replace")
    res.timed_out = timed_out.is_set()
    if truncated:
        res.output += "\n[output truncated]"
    return res


ISOLATE_TIMEOUT_S = 15  # SERVER_TOOL_ISOLATE_EXEC_TIMEOUT: the stat, mkdir and list helpers
ISOLATE_READ_MAX = 64 * 1024 * 1024


def shell_quote_join(argv: list[str]) -> str:
    """One string a POSIX shell re-parses into exactly argv (each word in single quotes)."""
    return " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)


class IsolateIO(HostIO):
    """tools_io_isolate: every operation a POSIX command run inside the isolate (build_argv wraps it)."""

    def build_argv(self, inner: list[str], needs_stdin: bool) -> list[str]:
        raise NotImplementedError

    def resolve(self, path: str) -> str:
        return path if not self.cwd or path.startswith("/") else f"{self.cwd}/{path}"

    def _exec(self, inner: list[str], max_output: int, combine_stderr: bool) -> RunResult:
        return run_subprocess(self.build_argv(inner, False), max_output, ISOLATE_TIMEOUT_S, None, combine_stderr)

    def _test(self, flag: str, path: str) -> bool:
        res = self._exec(["sh", "-c", f'[ {flag} "$1" ]', "_", path], 4096, True)
        return res.exit_code == 0 and not res.timed_out

    def is_directory(self, path: str) -> bool:
        return self._test("-d", self.resolve(path))

    def is_regular_file(self, path: str) -> bool:
        return self._test("-f", self.resolve(path))

    def file_size(self, path: str) -> int | None:
        res = self._exec(["sh", "-c", 'wc -c < "$1"', "_", self.resolve(path)], 64, True)
        if res.exit_code != 0 or res.timed_out:
            return None
        digits = res.output.strip().split()[0] if res.output.strip() else ""
        return int(digits) if digits.isdigit() else None

    def read_file(self, path: str) -> bytes | None:
        res = self._exec(["cat", "--", self.resolve(path)], ISOLATE_READ_MAX, False)
        return None if res.exit_code != 0 or res.timed_out else res.raw

    def write_file(self, path: str, content: bytes) -> bool:
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
        argv = self.build_argv(["sh", "-c", script, "_", self.resolve(path)], True)
        res = run_subprocess(argv, 4096, ISOLATE_TIMEOUT_S, None, True, "", content)
        return res.exit_code == 0 and not res.timed_out

    def _lines(self, text: str, strip_dot_slash: bool) -> list[str]:
        out = []
        for line in text.split("\n"):
            line = line.rstrip("\r")
            if not line:
                continue
            if strip_dot_slash and line.startswith("./"):
                line = line[2:]
            out.append(line.replace("\\", "/"))
        return out

    def _find(self, base: str, max_depth: int, dirs: bool) -> tuple[list[str], bool]:
        prune = " -o ".join(f"-name {n}" for n in JUNK_DIR_ORDER)
        cmd = 'cd "$1" && find . -mindepth 1' + (f" -maxdepth {max_depth}" if max_depth > 0 else "")
        cmd += f" \\( {prune} \\) -prune" + (" -print -o -type d -print" if dirs else " -o -type f -print")
        res = self._exec(["sh", "-c", cmd, "_", base], GIT_LS_FILES_MAX_OUTPUT, True)
        return self._lines(res.output, True), res.timed_out

    def list_entries(self, base: str, max_depth: int, kind: str) -> Listing:
        out = Listing()
        absolute = self.resolve(base)
        if not self.is_directory(base):
            out.err = "path does not exist or is not a directory"
            return out
        if kind == "file":
            res = self._exec(
                ["sh", "-c", 'cd "$1" && git ls-files --cached --others --exclude-standard', "_", absolute],
                GIT_LS_FILES_MAX_OUTPUT,
                True,
            )
            if res.exit_code == 0 and not res.timed_out:
                for rel in self._lines(res.output, False):
                    if not (max_depth > 0 and rel.count("/") + 1 > max_depth):
                        out.entries.append((rel, False))
                return out
        for dirs in (True, False):
            if (dirs and kind in ("dir", "all")) or (not dirs and kind in ("file", "all")):
                found, cut = self._find(absolute, max_depth, dirs)
                out.entries += [(rel, dirs) for rel in found]
                out.truncated = out.truncated or cut
        return out

    def run(
        self,
        args: list[str],
        max_output: int,
        timeout_s: int,
        on_chunk: Callable[[str], bool] | None = None,
    ) -> RunResult:
        """Under the isolate's own `timeout` (killing the host-side client leaves its processes running), in
        the working directory set by the command itself; the host waits five seconds more."""
        inner = ["timeout", f"{timeout_s}s", *args]
        if self.cwd:  # (127: what a shell reports for a command it could not run)
            inner = ["sh", "-c", 'cd "$1" || exit 127; shift; exec "$@"', "_", self.cwd, *inner]
        return run_subprocess(self.build_argv(inner, True), max_output, timeout_s + 5, on_chunk, True)


class ContainerIO(IsolateIO):
    """tools_io_container: a running docker or podman container, through `<engine> exec`."""

    def __init__(self, engine: str, container: str, cwd: str = ""):
        super().__init__(cwd)
        self.engine, self.container = engine, container

    def build_argv(self, inner: list[str], needs_stdin: bool) -> list[str]:
        return [self.engine, "exec", *(["-i"] if needs_stdin else []), self.container, *inner]


class SSHIO(IsolateIO):
    """tools_io_ssh: a remote POSIX host (key-based, a trusted host key: no prompt can be answered here)."""

    def __init__(self, target: str, cwd: str = ""):
        super().__init__(cwd)
        self.target = target

    def build_argv(self, inner: list[str], needs_stdin: bool) -> list[str]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no"]
        argv += ["-o", "KbdInteractiveAuthentication=no", "-o", "StrictHostKeyChecking=yes"]
        return [*argv, *([] if needs_stdin else ["-n"]), self.target, shell_quote_join(inner)]


def _alnum(c: str) -> bool:
    """C's isalnum in the C locale: ASCII letters and digits."""
    return c.isascii() and c.isalnum()


def parse_container(spec: str) -> tuple[str, str, bool] | None:
    """container_runtime_spec::parse: (engine, image or container id, attach) for "<engine>:<image>" or
    "<engine>-container:<id>" (docker, podman), else None."""
    for engine in ("docker", "podman"):
        if spec.startswith(f"{engine}-container:"):
            return engine, spec[len(engine) + 11 :], True
        if spec.startswith(f"{engine}:"):
            return engine, spec[len(engine) + 1 :], False
    return None


def make_io(params: dict) -> HostIO:
    """make_tools_io: the host for an empty runtime, an attached container, an SSH target; b10621's words for a
    runtime it refuses (never a fall-back to the host)."""
    cwd = str(params["cwd"]) if isinstance(params.get("cwd"), str) else ""
    runtime = str(params["runtime"]) if isinstance(params.get("runtime"), str) else ""
    if not runtime:
        return HostIO(cwd)
    container = parse_container(runtime)
    if container is not None:
        engine, ident, attach = container
        if not attach:  # (spawning belongs to --tools-runtime, which owns the container)
            raise ToolError(f"tool runtime must name a running container: {runtime}")
        if not ident or not _alnum(ident[0]) or not all(_alnum(c) or c in ".-_" for c in ident):
            raise ToolError(f"invalid container id: {ident}")
        return ContainerIO(engine, ident, cwd)
    if runtime.startswith("ssh:"):
        target = runtime[4:]
        if not target or target.startswith("-") or not all(_alnum(c) or c in ".-_@" for c in target):
            raise ToolError(f"invalid ssh target: {target}")
        return SSHIO(target, cwd)
    raise ToolError(f"unknown tool runtime: {runtime}")


class StaticRuntime:
    """--tools-runtime naming a target that exists already (a running container, an SSH host): checked once at
    startup, then passed to every call."""

    def __init__(self, spec: str):
        make_io({"runtime": spec})  # b10621's refusals of a malformed one, now
        self._spec = spec

    def spec(self) -> str:
        return self._spec

    def close(self) -> None:
        pass


class ContainerRuntime:
    """--tools-runtime docker:<image> / podman:<image>: b10621's server_tools_container_runtime, a container run
    with `<engine> run --rm -i --cidfile FILE <image> sh` and kept alive by its open stdin (closed at exit: --rm
    removes it), started again if it dies."""

    def __init__(self, engine: str, image: str):
        if not image:
            raise ToolError(f"--tools-runtime {engine}:<image> requires an image name")
        self.engine, self.image = engine, image
        self.proc: subprocess.Popen | None = None
        self.container = ""
        self.lock = threading.Lock()
        self._spawn()

    def _spawn(self) -> None:
        cidfile = os.path.join(tempfile.gettempdir(), f"llama-tools-runtime-cid-{threading.get_ident()}.tmp")
        with contextlib.suppress(OSError):
            os.remove(cidfile)
        argv = [self.engine, "run", "--rm", "-i", "--cidfile", cidfile, self.image, "sh"]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        except OSError:
            raise ToolError(
                f"failed to spawn {self.engine} container for tools runtime (image: {self.image})"
            ) from None
        cid = ""
        for _ in range(100):
            with contextlib.suppress(OSError), open(cidfile) as f:
                cid = f.readline().strip()
            if cid:
                break
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            os.remove(cidfile)
        if not cid:
            self.proc.kill()
            raise ToolError(f"timed out waiting for {self.engine} container to start (image: {self.image})")
        self.container = cid

    def spec(self) -> str:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                log.warning('%s tools runtime container "%s" died, respawning', self.engine, self.container)
                self._spawn()
            return f"{self.engine}-container:{self.container}"

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)


def make_runtime(spec: str) -> StaticRuntime | ContainerRuntime:
    """make_tools_runtime: the container form owns a container; any other names a target, checked now."""
    container = parse_container(spec)
    if container is not None and not container[2]:
        return ContainerRuntime(container[0], container[1])
    return StaticRuntime(spec)
