"""Generate server/options.py, the table of b10621's server options, from common/arg.cpp and the manifest.

    python -m compat.gen_cli_table --source-dir DIR [--check]

arg.cpp gives what --help cannot: the order the options are registered in (b10621 applies environment
bindings in that order), which spellings are the negative half of a bool pair, and the handler kind (no
value, bool, int via std::stoi, string, or two strings), which decides how a value is consumed and how an
environment value is read. The manifest (itself extracted from the reference's --help) selects the 249
server options and gives each its shard, value hint, default and description. Every manifest option must
match exactly one arg.cpp registration, so a drift in either fails the generation.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .schema import MANIFEST_DIR, load_json, shard_files

TABLE = Path(__file__).resolve().parent.parent / "server" / "options.py"
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LAMBDA = re.compile(r"\[\]\(common_params\s*&\s*[^,)]*(?:,([^)]*))?\)")


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesis closing the one at text[start], skipping literals and comments."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _STRING.match(text, i).end()
            continue
        if c == "'":
            i = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1) + 1
            continue
        if text.startswith("//", i):
            i = text.index("\n", i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced")


def _strings(text: str) -> list[str]:
    return [bytes(m.group(0)[1:-1], "utf-8").decode("unicode_escape") for m in _STRING.finditer(text)]


def _strip_comments(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == '"':
            j = _STRING.match(text, i).end()
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            i = text.index("\n", i)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def registrations(arg_cpp: str) -> list[dict]:
    """Every add_opt(common_arg(...)) in source order: spellings, negatives, handler kind, env, examples."""
    out = []
    arg_cpp = _strip_comments(arg_cpp)
    for m in re.finditer(r"add_opt\(common_arg\(", arg_cpp):
        open_paren = m.end() - 1
        end = _balanced(arg_cpp, open_paren)
        body = arg_cpp[open_paren + 1 : end - 1]
        tail_end = arg_cpp.index(";", end)
        tail = arg_cpp[end:tail_end]
        first_end = _balanced(body, body.index("{"))
        spellings = _strings(body[:first_end])
        rest = body[first_end:].lstrip(" \n,")
        negatives: list[str] = []
        if rest.startswith("{"):
            neg_end = _balanced(rest, 0)
            negatives = _strings(rest[:neg_end])
        lam = _LAMBDA.search(body)
        params = [p.strip() for p in (lam.group(1) or "").split(",") if p.strip()] if lam.group(1) else []
        if not params:
            kind = "void"
        elif len(params) == 2:
            kind = "str_str"
        elif params[0].startswith("int"):
            kind = "int"
        elif params[0].startswith("bool"):
            kind = "bool"
        else:
            kind = "string"
        env = re.search(r'\.set_env\("([A-Z0-9_]+)"\)', tail)
        examples = re.search(r"\.set_examples\(\{([^}]*)\}\)", tail)
        excludes = re.search(r"\.set_excludes\(\{([^}]*)\}\)", tail)
        out.append(
            {
                "spellings": spellings,
                "negatives": negatives,
                "kind": kind,
                "env": env.group(1) if env else None,
                "examples": set(re.findall(r"LLAMA_EXAMPLE_\w+", examples.group(1)))
                if examples
                else {"LLAMA_EXAMPLE_COMMON"},
                "excludes": set(re.findall(r"LLAMA_EXAMPLE_\w+", excludes.group(1))) if excludes else set(),
                "preset_only": ".set_preset_only()" in tail,
            }
        )
    return out


def _in_server(reg: dict) -> bool:
    return (
        ({"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"} & reg["examples"])
        and "LLAMA_EXAMPLE_SERVER" not in reg["excludes"]
        and not reg["preset_only"]
    )


def build_table(arg_cpp: str, manifest_dir: Path = MANIFEST_DIR) -> list[dict]:  # noqa: C901
    entries = {}
    for path in shard_files(manifest_dir):
        for e in load_json(path).get("entries", []):
            if e["kind"] == "option":
                entries[frozenset(e["spellings"])] = (path.stem, e)
    table, matched, chosen = [], set(), {}
    for reg in registrations(arg_cpp):
        key = frozenset(reg["spellings"] + reg["negatives"])
        if key in entries and _in_server(reg):
            chosen.setdefault(key, []).append(reg)
    for reg in registrations(arg_cpp):
        key = frozenset(reg["spellings"] + reg["negatives"])
        regs = chosen.get(key, [])
        if len(regs) > 1:  # a server-only branch (`if (ex == LLAMA_EXAMPLE_SERVER)`) beats the common one
            regs = [r for r in regs if "LLAMA_EXAMPLE_SERVER" in r["examples"]]
        if reg not in regs or key in matched:
            continue
        if len(regs) != 1:
            raise ValueError(f"{len(regs)} server registrations of {sorted(key)}")
        matched.add(key)
        shard, e = entries[key]
        hints = (e["value_hint"] or "").split(" ") if reg["kind"] == "str_str" else [e["value_hint"]]
        table.append(
            {
                "id": e["id"],
                "shard": shard,
                "spellings": tuple(reg["spellings"]),
                "negatives": tuple(reg["negatives"]),
                "kind": reg["kind"],
                "env": reg["env"],
                "metavar": tuple(h for h in hints if h),
                "default": e["default"],
                "help": e["description"],
            }
        )
        if reg["env"] != e["env"] and not (reg["env"] is None and e["env"] == "HF_TOKEN"):
            raise ValueError(f"{e['id']}: arg.cpp binds {reg['env']}, --help says {e['env']}")
    missing = sorted(e["id"] for k, (_, e) in entries.items() if k not in matched)
    if missing:
        raise ValueError(f"manifest options with no server registration in arg.cpp: {missing}")
    return table


def render(table: list[dict]) -> str:
    lines = [
        '"""b10621\'s server options, in common/arg.cpp\'s registration order. GENERATED by',
        "`python -m compat.gen_cli_table --source-dir SRC` from arg.cpp and the manifest: do not edit by hand.",
        "",
        "kind: how a value is consumed and how the environment is read (arg.cpp's handler types): void (no",
        "value; the variable fires only for on|enabled|true|1), bool (a positive/negative pair; the variable",
        "through parse_bool_value, LLAMA_ARG_NO_* meaning false), int (std::stoi), string, str_str (two values,",
        'no environment). default and help are the reference\'s --help text; "help" includes "(env: ...)".',
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import NamedTuple",
        "",
        "",
        "class Option(NamedTuple):",
        "    id: str",
        "    shard: str",
        "    spellings: tuple[str, ...]",
        "    negatives: tuple[str, ...]",
        "    kind: str",
        "    env: str | None",
        "    metavar: tuple[str, ...]",
        "    default: str | None",
        "    help: str",
        "",
        "",
        "OPTIONS: tuple[Option, ...] = (",
    ]
    for o in table:
        lines.append(f"    Option({o['id']!r}, {o['shard']!r}, {o['spellings']!r}, {o['negatives']!r}, {o['kind']!r},")
        lines.append(f"           {o['env']!r}, {o['metavar']!r}, {o['default']!r},")
        lines.append(f"           {o['help']!r}),")
    lines += [")", "", "BY_ID: dict[str, Option] = {o.id: o for o in OPTIONS}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m compat.gen_cli_table")
    p.add_argument("--source-dir", type=Path, required=True, help="the pinned llama.cpp source tree")
    p.add_argument("--check", action="store_true", help="fail when the committed table differs")
    args = p.parse_args(argv)
    text = render(build_table((args.source_dir / "common" / "arg.cpp").read_text(encoding="utf-8")))
    if args.check:
        same = TABLE.read_text(encoding="utf-8") == text
        print(f"{TABLE.name}: {'up to date' if same else 'stale: regenerate it'}")
        return 0 if same else 1
    TABLE.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
