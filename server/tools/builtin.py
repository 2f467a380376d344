"""b10621's built-in tools for the web UI's agent (--tools; server-tools.cpp): read_file, file_glob_search,
grep_search, exec_shell_command, write_file, edit_file, get_info. Each tool's definition (the function schema
GET /tools lists), and its call: the same results, error texts and limits, run on the host (host.py).

A tool's failure is a result ({"error": ...}, status 200), as b10621's; what b10621 throws (a missing parameter,
a runtime it refuses) is a ToolError. grep_search's patterns are ECMAScript regular expressions there (std::regex)
and Python's here: the common syntax agrees; look-behind, named groups and the like differ."""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import json_type_name, type_error
from .host import HostIO, ToolError, ToolJSONError, make_io, path_glob_match
from .mcp import Manager

log = logging.getLogger("mlxcel")

READ_FILE_MAX = 16 * 1024
READ_FILE_MAX_BASE64 = 32 * 1024 * 1024
SEARCH_MAX = 100  # file_glob_search's and grep_search's result caps
EXEC_MAX_OUTPUT = 16 * 1024
EXEC_MAX_TIMEOUT = 60
GET_INFO_MAX_OUTPUT, GET_INFO_TIMEOUT = 4096, 5

Stream = Callable[[str], bool]  # a chunk pushed to the client; False once it is gone


def _param(params: dict, name: str, default, kind: type):
    """json_value: the parameter when present and of a type that converts (numbers to int), else the default."""
    value = params.get(name)
    if value is None:
        return default
    if kind is bool:
        return value if isinstance(value, bool) else default
    if kind is int:
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    return value if isinstance(value, kind) else default


def _required(params: dict, name: str):
    """params.at(name).get<std::string>(): nlohmann's own words when it is missing or not a string."""
    if name not in params:
        raise ToolJSONError(f"[json.exception.out_of_range.403] key '{name}' not found")
    value = params[name]
    if not isinstance(value, str):
        raise ToolJSONError(type_error("string", value))
    return value


def _schema(name: str, description: str, properties: dict, required: list[str] | None = None) -> dict:
    parameters: dict = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def _prop(kind: str, description: str) -> dict:
    return {"type": kind, "description": description}


@dataclass(frozen=True)
class Tool:
    name: str
    display_name: str
    permission_write: bool
    definition: dict
    call: Callable[[dict, Stream | None], dict | None]
    support_stream: bool = False
    uses_cwd: bool = True
    kind: str = "server"  # "mcp": a tool of an MCP server (server/tools/mcp.py)

    def to_json(self) -> dict:
        """server_tool::to_json: what GET /tools lists for it."""
        return {
            "display_name": self.display_name,
            "tool": self.name,
            "type": self.kind,
            "permissions": {"write": self.permission_write},
            "uses_cwd": self.uses_cwd,
            "definition": self.definition,
        }


def _lines(content: str) -> list[str]:
    """std::getline over the content: no empty last line after a final newline."""
    lines = content.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_file(params: dict, _stream: Stream | None = None) -> dict:  # noqa: C901 (as upstream's, step by step)
    path = _required(params, "path")
    start_line = _param(params, "start_line", 1, int)
    end_line = _param(params, "end_line", -1, int)
    append_loc = _param(params, "append_loc", False, bool)
    as_base64 = params.get("resp_type") == "base64"
    io = make_io(params)
    size = io.file_size(path)
    if size is None:
        return {"error": f"cannot stat file: {path}"}
    if as_base64:
        if size > READ_FILE_MAX_BASE64:
            return {"error": f"file too large ({size} bytes, max {READ_FILE_MAX_BASE64})"}
        raw = io.read_file(path)
        if raw is None:
            return {"error": f"failed to open file: {path}"}
        return {"base64": base64.b64encode(raw).decode(), "size_bytes": len(raw)}
    if size > READ_FILE_MAX and end_line == -1:
        return {
            "error": f"file too large ({size} bytes, max {READ_FILE_MAX}). Use start_line/end_line to read a portion."
        }
    raw = io.read_file(path)
    if raw is None:
        return {"error": f"failed to open file: {path}"}
    result = b""
    for lineno, line in enumerate(_lines(raw.decode("utf-8", "surrogateescape")), start=1):
        if lineno < start_line:
            continue
        if end_line != -1 and lineno > end_line:
            break
        out = ((f"{lineno}\u2192" if append_loc else "") + line + "\n").encode("utf-8", "surrogateescape")
        if len(result) + len(out) > READ_FILE_MAX:
            result += b"[output truncated]"
            break
        result += out
    return {"plain_text_response": result.decode("utf-8", "replace")}


def file_glob_search(params: dict, _stream: Stream | None = None) -> dict:
    io = make_io(params)
    path = _required(params, "path")
    base = io.resolve(path)
    include = _param(params, "include", "**", str)
    exclude = _param(params, "exclude", "", str)
    kind = _param(params, "type", "file", str)
    max_depth = max(0, _param(params, "max_depth", 0, int))
    limit_req = _param(params, "limit", SEARCH_MAX, int)
    if limit_req < 1:
        return {"error": f"invalid limit: {limit_req} (expected 1 or more)"}
    limit = min(limit_req, SEARCH_MAX)
    if kind not in ("file", "dir", "all"):
        return {"error": f'invalid type: {kind} (expected "file", "dir" or "all")'}
    listing = io.list_entries(base, max_depth, kind)
    if listing.err:
        return {"error": f"{listing.err}: {path}"}
    matches = [
        (rel, is_dir)
        for rel, is_dir in listing.entries
        if path_glob_match(include, rel) and not (exclude and path_glob_match(exclude, rel))
    ]
    shown = matches[:limit]
    text = "".join(f"{rel}{'/' if is_dir else ''}\n" for rel, is_dir in shown)
    text += f"\n---\nTotal matches: {len(matches)}\n"
    if len(matches) > len(shown):
        text += (
            f"[{len(shown)} results limit reached ({len(matches)} total matches). Refine the glob pattern to "
            "narrow the search.]\n"
        )
    if listing.truncated:
        text += "[results truncated: time budget or unreadable directory]\n"
    entries = [{"path": rel, "type": "dir" if is_dir else "file"} for rel, is_dir in shown]
    return {"plain_text_response": text, "entries": entries, "base": base}


def grep_search(params: dict, _stream: Stream | None = None) -> dict:  # noqa: C901 (as upstream's)
    path = _required(params, "path")
    pattern_text = _required(params, "pattern")
    include = _param(params, "include", "**", str)
    exclude = _param(params, "exclude", "", str)
    show_lineno = _param(params, "return_line_numbers", False, bool)
    literal = _param(params, "literal", False, bool)
    ignore_case = _param(params, "ignore_case", False, bool)
    ctx_lines = max(0, _param(params, "context_lines", 0, int))
    source = re.escape(pattern_text) if literal else pattern_text
    try:
        pattern = re.compile(source, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        return {"error": f"invalid regex: {exc}"}
    io = make_io(params)
    files: list[tuple[str, str]] = []
    absolute = io.resolve(path)
    if io.is_regular_file(absolute):
        files.append((absolute, path))
    elif io.is_directory(absolute):
        listing = io.list_entries(absolute, 0, "file")
        if listing.err:
            return {"error": f"{listing.err}: {path}"}
        files += [
            (absolute.rstrip("/") + "/" + rel, rel)
            for rel, _ in listing.entries
            if path_glob_match(include, rel) and not (exclude and path_glob_match(exclude, rel))
        ]
    else:
        return {"error": f"path does not exist: {path}"}
    out, total, limit_reached = [], 0, False
    show_num = show_lineno or ctx_lines > 0
    for full, display in files:
        if limit_reached:
            break
        raw = io.read_file(full)
        if raw is None:
            continue
        lines = _lines(raw.decode("utf-8", "surrogateescape"))
        for i, line in enumerate(lines):
            if total >= SEARCH_MAX:
                limit_reached = True
                break
            if not pattern.search(line):
                continue
            lo, hi = (max(0, i - ctx_lines), min(len(lines) - 1, i + ctx_lines)) if ctx_lines else (i, i)
            for j in range(lo, hi + 1):
                mark = ":" if j == i else "-"
                out.append(f"{display}{mark}" + (f"{j + 1}{mark}" if show_num else "") + lines[j] + "\n")
            if ctx_lines > 0:
                out.append("--\n")
            total += 1
    text = "".join(out) + f"\n---\nTotal matches: {total}\n"
    if limit_reached:
        text += f"[{SEARCH_MAX} matches limit reached. Narrow the path/pattern/include to see more.]\n"
    return {"plain_text_response": text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")}


def exec_shell_command(params: dict, stream: Stream | None = None) -> dict | None:
    command = _required(params, "command")
    timeout = min(_param(params, "timeout", 10, int), EXEC_MAX_TIMEOUT)
    max_output = min(_param(params, "max_output_size", EXEC_MAX_OUTPUT, int), EXEC_MAX_OUTPUT)
    io = make_io(params)
    args = ["sh", "-c", command]
    if stream is not None:
        alive = [True]

        def push(chunk: str) -> bool:
            alive[0] = stream(chunk)
            return alive[0]

        res = io.run(args, max_output, timeout, push)
        if not alive[0]:
            return None
        tail = f"\n[exit code: {res.exit_code}]" + (" [exit due to timed out]" if res.timed_out else "")
        stream(tail)
        return None
    res = io.run(args, max_output, timeout)
    text = res.output + f"\n[exit code: {res.exit_code}]" + (" [exit due to timed out]" if res.timed_out else "")
    return {"plain_text_response": text}


def write_file(params: dict, _stream: Stream | None = None) -> dict:
    path = _required(params, "path")
    content = _required(params, "content")
    data = content.encode("utf-8", "surrogateescape")
    if not make_io(params).write_file(path, data):
        return {"error": f"failed to write file: {path}"}
    return {"result": "file written successfully", "path": path, "bytes": len(data)}


_FUZZY = [(chr(c), "'") for c in (0x2018, 0x2019, 0x201A, 0x201B)]
_FUZZY += [(chr(c), '"') for c in (0x201C, 0x201D, 0x201E, 0x201F)]
_FUZZY += [(chr(c), "-") for c in range(0x2010, 0x2016)] + [("\u2212", "-"), ("\u00a0", " ")]
_FUZZY += [(chr(c), " ") for c in range(0x2002, 0x200B)] + [("\u202f", " "), ("\u205f", " "), ("\u3000", " ")]


def _fuzzy_line(line: str) -> str:
    """normalize_line_for_fuzzy_match: trailing blanks dropped, smart quotes, dashes and spaces made ASCII."""
    line = line.rstrip(" \t\r")
    for old, new in _FUZZY:
        line = line.replace(old, new)
    return line


def _fuzzy(content: str) -> str:
    return "\n".join(_fuzzy_line(line) for line in content.split("\n"))


def _count(content: str, needle: str) -> int:
    count = pos = 0
    while needle and (pos := content.find(needle, pos)) >= 0:
        count, pos = count + 1, pos + len(needle)
    return count


def _with_endings(content: str) -> list[str]:
    return content.splitlines(keepends=True) if "\r" not in content else re.findall(r"[^\n]*\n|[^\n]+$", content)


def _apply(content: str, reps: list[tuple[int, int, int, str]], offset: int) -> str:
    for _, idx, length, new in reversed(reps):
        local = idx - offset
        content = content[:local] + new + content[local + length :]
    return content


def _apply_keeping_lines(original: str, base: str, reps: list[tuple[int, int, int, str]]) -> str:
    """apply_replacements_preserving_unchanged_lines: each replacement widened to the lines it touches in the
    normalized text; lines no edit touches come from the original."""
    original_lines = _with_endings(original)
    spans, offset = [], 0
    for line in _with_endings(base):
        spans.append((offset, offset + len(line)))
        offset += len(line)
    groups: list[list] = []
    for rep in reps:
        start, end = rep[1], rep[1] + rep[2]
        first = next((i for i, (a, b) in enumerate(spans) if a <= start < b), None)
        if first is None:
            first_line, end_line = 0, 0
        else:
            last = first
            while last < len(spans) and spans[last][1] < end:
                last += 1
            first_line, end_line = (first, last + 1) if last < len(spans) else (0, 0)
        if groups and first_line < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end_line)
            groups[-1][2].append(rep)
        else:
            groups.append([first_line, end_line, [rep]])
    out, at = [], 0
    for first_line, end_line, group in groups:
        out += original_lines[at:first_line]
        lo, hi = spans[first_line][0], spans[end_line - 1][1]
        out.append(_apply(base[lo:hi], group, lo))
        at = end_line
    out += original_lines[at:]
    return "".join(out)


def edit_file(params: dict, _stream: Stream | None = None) -> dict:  # noqa: C901 (as upstream's)
    path = _required(params, "path")
    if "edits" not in params:
        raise ToolJSONError("[json.exception.out_of_range.403] key 'edits' not found")
    edits_json = params["edits"]
    if not isinstance(edits_json, list) or not edits_json:
        return {"error": '"edits" must be a non-empty array'}
    edits: list[tuple[str, str]] = []
    for e in edits_json:
        if not isinstance(e, dict):
            raise ToolJSONError(f"[json.exception.type_error.304] cannot use at() with {json_type_name(e)}")
        old, new = _required(e, "old_text"), _required(e, "new_text")
        if not old:
            return {"error": f"edits[{len(edits)}].old_text must not be empty"}
        edits.append((old, new))
    io = make_io(params)
    raw = io.read_file(path)
    if raw is None:
        return {"error": f"failed to open file: {path}"}
    original = raw.decode("utf-8", "surrogateescape")
    any_fuzzy = False
    for i, (old, _) in enumerate(edits):
        if old in original:
            continue
        if _fuzzy(old) not in _fuzzy(original):
            return {
                "error": f"could not find edits[{i}].old_text in {path}, it must match the file's current content "
                "exactly"
            }
        any_fuzzy = True
    base = _fuzzy(original) if any_fuzzy else original
    matched = []
    for i, (old, new) in enumerate(edits):
        needle = _fuzzy(old) if any_fuzzy else old
        occurrences = _count(_fuzzy(original), _fuzzy(old))
        if occurrences > 1:
            return {"error": f"found {occurrences} occurrences of edits[{i}].old_text in {path}, it must be unique"}
        matched.append((i, base.find(needle), len(needle), new))
    matched.sort(key=lambda m: m[1])
    for a, b in zip(matched, matched[1:], strict=False):
        if a[1] + a[2] > b[1]:
            return {
                "error": f"edits[{a[0]}] and edits[{b[0]}] overlap in {path}; merge them into one edit or target "
                "disjoint regions"
            }
    updated = _apply_keeping_lines(original, base, matched) if any_fuzzy else _apply(base, matched, 0)
    if updated == original:
        return {"error": "no changes made: the replacement(s) produced identical content"}
    if not io.write_file(path, updated.encode("utf-8", "surrogateescape")):
        return {"error": f"failed to write file: {path}"}
    return {"result": "file edited successfully", "path": path, "edits_applied": len(matched)}


def get_info(params: dict, _stream: Stream | None = None) -> dict:
    io = make_io(params)
    res = io.run(["uname", "-a"], GET_INFO_MAX_OUTPUT, GET_INFO_TIMEOUT)
    os_info = res.output.strip() if res.exit_code == 0 and not res.timed_out else "unknown"
    cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else ""
    if not cwd and not params.get("runtime"):
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = ""
    elif not cwd:  # (inside an isolate: its own working directory)
        pwd = io.run(["pwd"], GET_INFO_MAX_OUTPUT, GET_INFO_TIMEOUT)
        cwd = pwd.output.strip() if pwd.exit_code == 0 and not pwd.timed_out else "unknown"
    return {"os": os_info, "cwd": cwd}


def _definitions() -> list[Tool]:
    """build_tools, in its order."""
    return [
        Tool(
            "read_file",
            "Read file",
            False,
            _schema(
                "read_file",
                "Read the contents of a file. Optionally specify a 1-based line range. If append_loc is true, each "
                'line is prefixed with its line number (e.g. "1\u2192...").',
                {
                    "path": _prop("string", "Path to the file"),
                    "start_line": _prop("integer", "First line to read, 1-based (default: 1)"),
                    "end_line": _prop("integer", "Last line to read, 1-based inclusive (default: end of file)"),
                    "append_loc": _prop("boolean", "Prefix each line with its line number"),
                },
                ["path"],
            ),
            read_file,
        ),
        Tool(
            "file_glob_search",
            "File search",
            False,
            _schema(
                "file_glob_search",
                "Recursively search for files matching a glob pattern under a directory. Automatically skips files "
                "ignored by .gitignore (when the directory is inside a git repo) and common junk directories (.git, "
                "node_modules, build, dist, etc.) otherwise. A pattern with no '/' (e.g. \"*.cpp\") matches the file's "
                "basename at any depth. A pattern containing '/' matches the full relative path; unless already "
                'anchored with "**/" or a leading \'/\', it is automatically prefixed with "**/". Use type="dir" or '
                "\"all\" to also list directories; directory entries are suffixed with '/' in the output. Note: "
                "directory listings do not apply .gitignore filtering.",
                {
                    "path": _prop("string", "Base directory to search in"),
                    "include": _prop(
                        "string", 'Glob pattern for files to include (e.g. "*.cpp" or "src/**/*.cpp"). Default: **'
                    ),
                    "exclude": _prop("string", "Glob pattern for files to exclude"),
                    "type": _prop("string", 'Entry type to return: "file" (default), "dir" or "all"'),
                    "max_depth": _prop(
                        "integer",
                        "Maximum depth to descend into subdirectories (default: 0 = unlimited; 1 = direct children "
                        "only)",
                    ),
                    "limit": _prop(
                        "integer", f"Maximum number of results to return, capped at {SEARCH_MAX} (default {SEARCH_MAX})"
                    ),
                },
                ["path"],
            ),
            file_glob_search,
        ),
        Tool(
            "grep_search",
            "Grep search",
            False,
            _schema(
                "grep_search",
                "Search for a pattern in files under a path. Returns matching lines with file paths (and, unless "
                "searching a single file, paths relative to the given directory). Automatically skips files ignored "
                "by .gitignore (when the directory is inside a git repo) and common junk directories (.git, "
                "node_modules, build, dist, etc.) otherwise. include/exclude: a pattern with no '/' matches the "
                "basename at any depth; a pattern containing '/' matches the full relative path (auto-anchored with "
                '"**/" unless already anchored).',
                {
                    "path": _prop("string", "File or directory to search in"),
                    "pattern": _prop("string", "Pattern to search for (regular expression unless literal is true)"),
                    "include": _prop("string", "Glob pattern to filter files (default: **)"),
                    "exclude": _prop("string", "Glob pattern to exclude files"),
                    "return_line_numbers": _prop("boolean", "If true, include line numbers in results"),
                    "literal": _prop(
                        "boolean",
                        "Treat pattern as a literal string instead of a regular expression (default: false)",
                    ),
                    "ignore_case": _prop("boolean", "Case-insensitive search (default: false)"),
                    "context_lines": _prop(
                        "integer", "Number of lines of context to show before and after each match (default: 0)"
                    ),
                },
                ["path", "pattern"],
            ),
            grep_search,
        ),
        Tool(
            "exec_shell_command",
            "Execute shell command",
            True,
            _schema(
                "exec_shell_command",
                "Execute a shell command and return its output (stdout and stderr combined).",
                {
                    "command": _prop("string", "Shell command to execute"),
                    "timeout": _prop("integer", f"Timeout in seconds (default 10, max {EXEC_MAX_TIMEOUT})"),
                    "max_output_size": _prop("integer", f"Maximum output size in bytes (default {EXEC_MAX_OUTPUT})"),
                },
                ["command"],
            ),
            exec_shell_command,
            support_stream=True,
        ),
        Tool(
            "write_file",
            "Write file",
            True,
            _schema(
                "write_file",
                "Write content to a file, creating it (including parent directories) if it does not exist. May use "
                "with edit_file for more complex edits.",
                {
                    "path": _prop("string", "Path of the file to write"),
                    "content": _prop("string", "Content to write"),
                },
                ["path", "content"],
            ),
            write_file,
        ),
        Tool(
            "edit_file",
            "Edit file",
            True,
            _schema(
                "edit_file",
                "Edit a file using exact text replacement. Each edits[].old_text must be unique in the file and is "
                "matched against the original content, not incrementally. Merge nearby changes into one edit "
                "instead of overlapping edits. Use write_file to replace the whole file.",
                {
                    "path": _prop("string", "Path to the file to edit"),
                    "edits": {
                        "type": "array",
                        "description": "One or more exact text replacements to apply",
                        "items": {
                            "type": "object",
                            "properties": {
                                "old_text": _prop(
                                    "string",
                                    "Exact text to find; must be unique in the file and must not overlap with other "
                                    "edits",
                                ),
                                "new_text": _prop("string", "Text to replace old_text with"),
                            },
                            "required": ["old_text", "new_text"],
                        },
                    },
                },
                ["path", "edits"],
            ),
            edit_file,
        ),
        Tool(
            "get_info",
            "Get Runtime Info",
            False,
            _schema("get_info", "Returns runtime info: the OS name/version and the current working directory", {}),
            get_info,
        ),
    ]


TOOLS = _definitions()
NAMES = [t.name for t in TOOLS]


def select(names: list[str]) -> list[Tool]:
    """server_tools::setup's tools for --tools NAMES ("all": every one), in build_tools' order; ValueError with
    b10621's words for an unknown name."""
    for name in names:
        if name != "all" and name not in NAMES:
            raise ValueError(f'unknown tool "{name}". available tools: {", ".join(NAMES)}')
    return [t for t in TOOLS if "all" in names or t.name in names]


def _mcp_call(manager: Manager, server: str, tool: str) -> Callable[[dict, Stream | None], dict | None]:
    """server_mcp_tool::invoke: the params, as the request left them, are the tool's arguments."""
    return lambda params, _stream: manager.call(server, tool, params)


def with_mcp(tools: list[Tool], manager: Manager) -> list[Tool]:
    """server_tools::setup: the MCP servers' tools after the built-in ones, each "<server>_<tool>", one whose name
    is taken already skipped (b10621's warning)."""
    seen = {t.name for t in tools}
    out = list(tools)
    for d in manager.registry:
        name = f"{d.server}_{d.name}"
        if name in seen:
            log.warning('MCP tool "%s" from server "%s" collides with an existing tool, skipping', name, d.server)
            continue
        seen.add(name)
        schema = d.input_schema if isinstance(d.input_schema, dict) else {}
        definition = {
            "type": "function",
            "function": {"name": name, "description": d.description, "parameters": schema},
        }
        out.append(
            Tool(name, name, False, definition, _mcp_call(manager, d.server, d.name), uses_cwd=False, kind="mcp")
        )
    added = len(out) - len(tools)
    if added:
        log.info("Added %d MCP tools", added)
    return out


__all__ = ["NAMES", "TOOLS", "HostIO", "Tool", "ToolError", "ToolJSONError", "select", "with_mcp"]
