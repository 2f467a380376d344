"""`--dump-flag-surface` (hidden): the parser's accepted surface as JSON, for the manifest's claims gate."""

from __future__ import annotations

import argparse
import json

DUMP_FLAG = "--dump-flag-surface"


def flag_surface(parser: argparse.ArgumentParser, binary: str) -> dict:
    options = []
    for action in parser._actions:  # argparse exposes no public iterator over its actions
        if not action.option_strings or DUMP_FLAG in action.option_strings:
            continue
        env = getattr(action, "env", None)
        default = getattr(action, "declared_default", action.default)
        if default == argparse.SUPPRESS:
            default = None
        options.append(
            {
                "spellings": list(action.option_strings),
                "env": env,
                "default": default if isinstance(default, (str, int, float, bool, type(None))) else None,
                "hidden": action.help == argparse.SUPPRESS,
            }
        )
    return {"binary": binary, "options": options}


def dump(parser: argparse.ArgumentParser, binary: str) -> str:
    return json.dumps(flag_surface(parser, binary), indent=2)
