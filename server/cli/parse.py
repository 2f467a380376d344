"""b10621's reading of a command line (common_params_parse_ex): every bound variable first, in the option
table's order, then argv token by token. A token in option position must be an exact spelling (`--a_b` reads
as `--a-b`); a value is the next token whatever it looks like, so `--alias -np` names the alias "-np". Errors
are b10621's sentences; the caller prints them and exits with status 1, as upstream does.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import NamedTuple

from ..textparse import TRUTHY, parse_bool_value, stoi
from .classify import check_value


class ArgError(Exception):
    """A command line b10621 refuses while parsing; str() is what it prints to stderr."""


# mlxcel's own options, beside b10621's: spelling -> (namespace attribute, takes a value)
MLXCEL_OWN = {
    "--model-store-root": ("model_store_root", True),
    "--lora-fuse": ("lora_fuse", False),
    "--tp-size": ("tp_size", True),
    "--pp-size": ("pp_size", True),
    "--estimate-memory": ("estimate_memory", False),
}
OWN_WHOLE_NUMBERS = frozenset({"--tp-size", "--pp-size"})


class Given(NamedTuple):
    """One option as b10621 applied it: from a variable (source is its name, raw its text) or the command
    line (source is the spelling typed). value: None (no value), a bool (a pair), an int (std::stoi), a str,
    or a tuple of two strs."""

    option: str
    source: str
    value: object
    raw: str | None = None

    def shown(self) -> str:
        if self.raw is not None:  # a variable: NAME=text
            return f"{self.source}={self.raw}"
        if self.value is None or isinstance(self.value, bool):
            return self.source
        if isinstance(self.value, tuple):
            return " ".join((self.source, *self.value))
        return f"{self.source} {self.value}"


# --- string_process_escapes ----------------------------------------------------------------------------------------


def process_escapes(s: str) -> str:
    """string_process_escapes: \\n \\r \\t \\' \\" \\\\ and \\xHH; any other escape is kept as written."""
    out, i = [], 0
    simple = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\"}
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            i += 1
            c = s[i]
            if c in simple:
                out.append(simple[c])
            elif c == "x" and i + 2 < len(s) and re.fullmatch(r"[0-9a-fA-F]{2}", s[i + 1 : i + 3]):
                out.append(chr(int(s[i + 1 : i + 3], 16)))
                i += 2
            else:
                out.append("\\" + c)
        else:
            out.append(s[i])
        i += 1
    return "".join(out)


# --- the loop ------------------------------------------------------------------------------------------------------


def _env_value(option, environ) -> str | None:
    """common_arg::get_value_from_env: a pair's LLAMA_ARG_NO_* alias (any value) reads as "0"."""
    if option.env is None:
        return None
    if option.negatives and option.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_") in environ:
        return "0"
    return environ.get(option.env)


def _has_env(option, environ) -> bool:
    return _env_value(option, environ) is not None


def usage(option) -> str:
    """common_arg::to_string: the spellings, the value hints, the help wrapped at 70 columns from column 40."""
    args = [*option.spellings, *option.negatives]
    head = args[0] if len(args) == 1 else (args[0] + ", ").ljust(7) + ", ".join(args[1:])
    head += "".join(" " + m for m in option.metavar)
    words, lines, cur = option.help.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > 70:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    first = "\n" + " " * 40 if len(head) > 37 else " " * (40 - len(head))
    return head + first + ("\n" + " " * 40).join(lines) + "\n"


def parse(parser: argparse.ArgumentParser, argv: list[str], environ) -> argparse.Namespace:  # noqa: C901
    """Parse as b10621 does; raises ArgError with its words. The namespace carries `given`, the options as
    applied (for classify.py), and `dump_flag_surface`."""
    actions = {a.option.id: a for a in parser._actions if getattr(a, "option", None) is not None}
    by_spelling = {s: a for a in actions.values() for s in a.option_strings}
    ns = argparse.Namespace(
        dump_flag_surface=False, **{dest: (None if v else False) for dest, v in MLXCEL_OWN.values()}
    )
    for a in parser._actions:
        if a.dest != argparse.SUPPRESS and not hasattr(ns, a.dest) and a.default != argparse.SUPPRESS:
            setattr(ns, a.dest, list(a.default) if isinstance(a.default, list) else a.default)
    given: list[Given] = []

    def apply(action, spelling: str, value, source: str, raw: str | None = None) -> None:
        o = action.option
        check_value(o.id, value)
        if isinstance(value, str) and action.type is not None:
            converted = action.type(value)
        else:
            converted = value
        if o.kind in ("void", "bool"):
            converted = []
        action(parser, ns, converted, spelling)
        given.append(Given(o.id, source, value, raw))

    for a in actions.values():  # the variables, in arg.cpp's registration order
        o = a.option
        raw = _env_value(o, environ)
        if raw is None:
            continue
        try:
            if o.kind == "void":
                if raw in TRUTHY:
                    apply(a, o.spellings[-1], None, o.env, raw)
            elif o.kind == "bool":
                on = parse_bool_value(raw)
                apply(a, o.spellings[-1] if on else o.negatives[-1], on, o.env, raw)
            elif o.kind == "int":
                apply(a, o.env, stoi(raw), o.env, raw)
            elif o.kind == "string":
                apply(a, o.env, raw, o.env, raw)
        except ValueError as e:
            raise ArgError(f'error while handling environment variable "{o.env}": {e}\n\n') from None

    seen: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        if arg == "--dump-flag-surface":  # mlxcel's hidden machine interface
            ns.dump_flag_surface = True
            i += 1
            continue
        if arg in MLXCEL_OWN:  # mlxcel's own options (no b10621 spelling): a flag, or one value
            dest, takes_value = MLXCEL_OWN[arg]
            if takes_value:
                if i + 1 >= len(argv):
                    raise ArgError(f'error while handling argument "{arg}": expected value for argument')
                value = argv[i + 1]
                if arg in OWN_WHOLE_NUMBERS:
                    if not value.lstrip("-").isdigit():
                        raise ArgError(f'error while handling argument "{arg}": not a whole number: {value}')
                    value = int(value)
                setattr(ns, dest, value)
                i += 2
            else:
                setattr(ns, dest, True)
                i += 1
            continue
        a = by_spelling.get(arg)
        if a is None:
            raise ArgError(f"error: invalid argument: {arg}")
        o = a.option
        if arg in seen and arg != "--spec-type":
            print(
                f"W DEPRECATED: argument '{arg}' specified multiple times, use comma-separated values instead "
                "(only last value will be used)",
                file=sys.stderr,
            )
        seen.add(arg)
        if _has_env(o, environ):
            print(
                f"warn: {o.env} environment variable is set, but will be overwritten by command line argument {arg}",
                file=sys.stderr,
            )
        try:
            if o.kind == "void":
                apply(a, arg, None, arg)
                if o.id in ("--version", "--cache-list"):  # b10621's handlers print and exit right there
                    # deferred: introspect's importlib.metadata (~15 ms) is paid here only, not by --help
                    from .introspect import cache_list_text, version_text

                    if o.id == "--version":
                        print(version_text(), end="", file=sys.stderr)
                    else:
                        print(cache_list_text(), end="")
                    sys.exit(0)
            elif o.kind == "bool":
                apply(a, arg, arg in o.spellings, arg)
            else:
                n = 2 if o.kind == "str_str" else 1
                if i + n >= len(argv):
                    raise ValueError("expected value for argument")
                values = argv[i + 1 : i + 1 + n]
                i += n
                value = tuple(values) if n == 2 else stoi(values[0]) if o.kind == "int" else values[0]
                apply(a, arg, value, arg)
        except ValueError as e:
            raise ArgError(
                f'error while handling argument "{arg}": {e}\n\nusage:\n{usage(o)}\n\nto show complete '
                "usage, run with -h"
            ) from None
        i += 1
    if seen & {"-lm", "--load-mode"} and seen & {
        "--mlock",
        "--mmap",
        "--no-mmap",
        "-dio",
        "--direct-io",
        "-ndio",
        "--no-direct-io",
    }:
        print(
            "W DEPRECATED: `--load-mode` and `--mlock`/`--mmap`/`--direct-io` should not be combined; only the "
            "last flag on the command line will take effect",
            file=sys.stderr,
        )
    if getattr(ns, "escape", False):  # common_params_parse_ex's escape pass over the strings it keeps
        for dest in ("reverse_prompt", "dry_sequence_breaker"):
            if getattr(ns, dest, None):
                setattr(ns, dest, [process_escapes(s) for s in getattr(ns, dest)])
    ns.given = given
    return ns
