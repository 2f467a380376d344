"""Facts about b10621's surface, read from the binary's --help and the pinned sources.

Counting rules (also written in pin.json):
- options: one entry per --help entry (a line starting with '-' in column 0, section headers excluded);
  its id is its first long spelling.
- routes: every distinct method/path pair registered with ctx_http in tools/server/server.cpp, plus the
  routes server-http.cpp registers by literal path: the UI index (GET / and GET /index.html) and the
  Vertex AI predict route at its default path (POST /predict). Embedded UI assets (generated from a
  table), AIP_HEALTH_ROUTE (an alias of GET /health) and OPTIONS preflights (a pre-routing handler, no
  registration) are not counted.
- native request fields: one entry per field that server-schema.cpp's make_llama_cmpl_schema declares
  outside comments and `#if 0` blocks (nested subfields included, with their parent), aliases recorded on
  their field; plus the three /completion fields read outside the schema: prompt, id_slot and
  message_delimiters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DESCRIPTION_COLUMN = 40
_SPELLING = re.compile(r"(-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*)(,\s*|\s+|$)")
_ENV = re.compile(r"\(env: ([A-Z0-9_]+)\)")
_SECTION = re.compile(r"^----- (.+) -----$")


def _balanced_default(text: str) -> str | None:
    start = text.find("(default: ")
    if start < 0:
        return None
    depth, i = 0, start
    while i < len(text):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + len("(default: ") : i]
        i += 1
    return None


def parse_help(help_text: str) -> list[dict]:
    """Option facts, in --help order."""
    entries: list[dict] = []
    section = None
    current: dict | None = None
    desc_lines: list[str] = []

    def finish() -> None:
        if current is None:
            return
        description = " ".join(ln.strip() for ln in desc_lines if ln.strip())
        env = _ENV.search(description)
        current["env"] = env.group(1) if env else None
        current["default"] = _balanced_default(description)
        current["description"] = description
        entries.append(current)

    for line in help_text.splitlines():
        m = _SECTION.match(line)
        if m:
            finish()
            current, desc_lines, section = None, [], m.group(1)
            continue
        if line.startswith("-"):
            finish()
            head, desc = line, ""
            # arg.cpp pads a head of at most 37 characters to column 40; a longer one ends the line
            if len(line) > DESCRIPTION_COLUMN and line[DESCRIPTION_COLUMN - 3 : DESCRIPTION_COLUMN] == "   ":
                head, desc = line[:DESCRIPTION_COLUMN], line[DESCRIPTION_COLUMN:]
            spellings, rest = _split_head(head.rstrip())
            longs = [s for s in spellings if s.startswith("--")]
            current = {
                "kind": "option",
                "id": longs[0] if longs else spellings[0],
                "section": section,
                "spellings": spellings,
                "long_spellings": longs,
                "value_hint": rest or None,
                "discovery": "help-entry-head",
            }
            desc_lines = [desc]
            continue
        if current is not None:
            desc_lines.append(line)
    finish()
    return entries


def _split_head(head: str) -> tuple[list[str], str]:
    spellings: list[str] = []
    pos = 0
    while True:
        m = _SPELLING.match(head, pos)
        if not m:
            break
        spellings.append(m.group(1))
        pos = m.end()
        if "," not in m.group(2):
            break
    return spellings, head[pos:].strip()


def _code_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) of lines outside `#if 0` blocks, with // comments stripped."""
    out, skip_depth, depth = [], 0, 0
    for n, line in enumerate(source.splitlines(), 1):
        s = line.strip()
        if s.startswith("#if"):
            depth += 1
            if skip_depth or s == "#if 0":
                skip_depth = skip_depth or depth
            continue
        if s.startswith("#endif"):
            if skip_depth == depth:
                skip_depth = 0
            depth -= 1
            continue
        if skip_depth:
            continue
        out.append((n, re.sub(r"//.*$", "", line)))
    return out


_REG = re.compile(r"ctx_http\.(get|post|put|del|patch)\s*\(\s*\"([^\"]+)\"")
_METHOD = {"get": "GET", "post": "POST", "put": "PUT", "del": "DELETE", "patch": "PATCH"}


def _conditions(lines: list[tuple[int, str]]) -> dict[int, str | None]:
    """For each line, the innermost enclosing `if (...)` / `else` condition text (None at top level)."""
    stack: list[str | None] = []
    result: dict[int, str | None] = {}
    last_closed: str | None = None
    for n, line in lines:
        result[n] = next((c for c in reversed(stack) if c is not None), None)
        s = line.strip()
        m = re.match(r"^(?:\}\s*)?(else\s+)?if\s*\((.*)\)\s*\{\s*$", s)
        closes = s.count("}")
        opens = s.count("{")
        if s.startswith("}"):
            last_closed = stack.pop() if stack else None
            closes -= 1
        if m:
            cond = m.group(2).strip()
            stack.append(f"!({last_closed}) && {cond}" if m.group(1) and last_closed else cond)
            opens -= 1
        elif re.match(r"^(?:\}\s*)?else\s*\{\s*$", s):
            stack.append(f"!({last_closed})" if last_closed else None)
            opens -= 1
        for _ in range(max(opens - closes, 0)):
            stack.append(None)
        for _ in range(max(closes - opens, 0)):
            last_closed = stack.pop() if stack else None
    return result


def parse_routes(server_cpp: str) -> list[dict]:
    lines = _code_lines(server_cpp)
    conds = _conditions(lines)
    seen: dict[str, dict] = {}
    for n, line in lines:
        for m in _REG.finditer(line):
            method, path = _METHOD[m.group(1)], m.group(2)
            rid = f"{method} {path}"
            cond = conds.get(n)
            if rid in seen:
                prev = seen[rid]["condition"]
                seen[rid]["condition"] = None if prev is None or cond is None or prev != cond else prev
                if prev and cond and prev != cond:
                    seen[rid]["condition"] = None  # registered on every branch: unconditional
                continue
            seen[rid] = {
                "kind": "route",
                "id": rid,
                "method": method,
                "path": path,
                "source": "tools/server/server.cpp",
                "condition": cond,
                "discovery": "source-route-registration",
            }
    return list(seen.values())


def parse_http_literal_routes(server_http_cpp: str) -> list[dict]:
    out = []
    if 'srv->Get(params.api_prefix + "/",' in server_http_cpp:
        for path in ("/", "/index.html"):
            out.append(
                {
                    "kind": "route",
                    "id": f"GET {path}",
                    "method": "GET",
                    "path": path,
                    "source": "tools/server/server-http.cpp",
                    "condition": "the web UI is enabled (--ui)",
                    "discovery": "source-ui-index-registration",
                }
            )
    m = re.search(r'getenv\("AIP_PREDICT_ROUTE",\s*"([^"]+)"', server_http_cpp)
    if m:
        out.append(
            {
                "kind": "route",
                "id": f"POST {m.group(1)}",
                "method": "POST",
                "path": m.group(1),
                "source": "tools/server/server-http.cpp",
                "condition": "AIP_MODE=PREDICTION",
                "discovery": "source-gcp-predict-default",
            }
        )
    return out


_FIELD = re.compile(r"new (field_[a-z_]+)\(\s*\"([^\"]+)\"")
_FIELD_TYPES = {
    "field_bool": "bool",
    "field_num": "number",
    "field_str": "string",
    "field_json": "json",
    "field_nested": "object",
}


@dataclass
class _Field:
    name: str
    ftype: str
    parent: str | None
    aliases: list[str]
    desc: str | None


def parse_schema_fields(schema_cpp: str) -> list[dict]:
    lines = _code_lines(schema_cpp)
    text = "\n".join(line for _, line in lines)
    start = text.find("make_llama_cmpl_schema(")
    end = text.find("\n}\n", start)
    body = text[start:end]
    fields: list[_Field] = []
    # walk the declarations in order; a field_nested's subfields are declared inside add_subfield(...)
    tokens = list(
        re.finditer(
            r"new (field_[a-z_]+)\(\s*\"([^\"]+)\"|add_alias\(\"([^\"]+)\"\)|"
            r"set_desc\(\"((?:[^\"\\]|\\.)*)\"\)|add_subfield\(|\badd\(\(",
            body,
        )
    )
    nested_parent: str | None = None
    stack: list[_Field] = []
    for t in tokens:
        if t.group(0).startswith("add(("):
            nested_parent = None
            stack = []
        elif t.group(0).startswith("add_subfield("):
            nested_parent = stack[0].name if stack else None
        elif t.group(1):
            f = _Field(t.group(2), _FIELD_TYPES.get(t.group(1), t.group(1)), nested_parent, [], None)
            fields.append(f)
            stack.append(f)
        elif t.group(3):
            stack[-1].aliases.append(t.group(3))
        elif t.group(4) is not None:
            # the innermost field without a description gets it (subfield descriptions come first)
            target = next((f for f in reversed(stack) if f.desc is None), None)
            if target is not None:
                target.desc = t.group(4).encode().decode("unicode_escape")
    out = [
        {
            "kind": "native_request_field",
            "id": f"field:{f.parent + '.' if f.parent else ''}{f.name}",
            "field": f.name,
            "aliases": f.aliases,
            "parent": f.parent,
            "field_type": f.ftype,
            "description": f.desc,
            "discovery": "source-schema-declaration",
        }
        for f in fields
    ]
    for name, ftype, desc in OUTSIDE_SCHEMA_FIELDS:
        out.append(
            {
                "kind": "native_request_field",
                "id": f"field:{name}",
                "field": name,
                "aliases": [],
                "parent": None,
                "field_type": ftype,
                "description": desc,
                "discovery": "source-read-outside-schema",
            }
        )
    return out


# /completion fields the handlers read without declaring them in the schema
OUTSIDE_SCHEMA_FIELDS = (
    ("prompt", "json", "The prompt: a string, token ids, a mixed array, or several prompts"),
    ("id_slot", "number", "Assign the request to a specific slot (-1: any idle slot)"),
    ("message_delimiters", "json", "Delimiters used when a prompt is split into messages"),
)


def read_sources(source_dir: Path) -> dict[str, str]:
    server = source_dir / "tools" / "server"
    return {
        "arg.cpp": (source_dir / "common" / "arg.cpp").read_text(encoding="utf-8"),
        "server.cpp": (server / "server.cpp").read_text(encoding="utf-8"),
        "server-http.cpp": (server / "server-http.cpp").read_text(encoding="utf-8"),
        "server-schema.cpp": (server / "server-schema.cpp").read_text(encoding="utf-8"),
    }


def env_bindings_from_arg_cpp(arg_cpp: str) -> set[str]:
    return set(re.findall(r"set_env\(\"([A-Z0-9_]+)\"\)", arg_cpp))
