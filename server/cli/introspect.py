"""The three options that print and exit before any model is resolved: --version, --cache-list and
--completion-bash, in b10621's output shapes (common/arg.cpp, common/build-info.cpp.in)."""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
from collections.abc import Iterable
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..build import UPSTREAM_BUILD
from .surface import flag_surface

# --- --version ----------------------------------------------------------------------------------------------


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def source_commit() -> str:
    """The short commit of the checkout mlxcel runs from, "unknown" for an installed package (b10621's
    BUILD_COMMIT default)."""
    here = Path(__file__).resolve().parent
    if not any((p / ".git").exists() for p in (here, *here.parents)):
        return "unknown"
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{4,40}", commit) else "unknown"


def version_text() -> str:
    """llama_print_build_info's two lines, which b10621 writes to standard error before exiting 0:
    ``version: <version> (build <n>, commit <commit>)`` and ``built with <compiler> for <target>``.
    mlxcel reports its own version, the upstream build it is compatible with, its checkout's commit, the
    Python and MLX it runs on in the compiler's place, and the platform as CMake names it (Darwin arm64)."""
    mine = _package_version("mlxcel") or "unknown"
    runtime = f"{platform.python_implementation()} {platform.python_version()}"
    mlx = _package_version("mlx")
    if mlx:
        runtime += f" and mlx {mlx}"
    return (
        f"version: {mine} (build {UPSTREAM_BUILD}, commit {source_commit()})\n"
        f"built with {runtime} for {platform.system()} {platform.machine()}\n"
    )


# --- --cache-list -------------------------------------------------------------------------------------------


def cache_list_text(models: Iterable[str] | None = None) -> str:
    """--cache-list's standard output: ``number of models in cache: N`` and then ``%4zu. %s`` per model."""
    if models is None:
        # deferred: the model store's modules, which --version and --completion-bash do not need
        from ..models.store import cached_models

        models = cached_models()
    models = list(models)
    lines = [f"number of models in cache: {len(models)}"]
    lines += [f"{i:4d}. {name}" for i, name in enumerate(models, 1)]
    return "\n".join(lines) + "\n"


# --- --completion-bash --------------------------------------------------------------------------------------

_SAFE_SPELLING = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9._-]*")
_HIDDEN_FROM_COMPLETION = {"--dump-flag-surface"}
# how the word after an option completes; options absent from the surface are dropped from the case block
_FILE_PATTERNS = {  # b10621's own three, adapted: -m is an MLX checkpoint directory or a store name
    ("-m", "--model"): 'COMPREPLY=( $(compgen -d -- "$cur") $(compgen -W "{store_names}" -- "$cur") )',
    ("--grammar-file",): 'COMPREPLY=( $(compgen -f -X \'!*.gbnf\' -- "$cur") $(compgen -d -- "$cur") )',
    ("--chat-template-file",): 'COMPREPLY=( $(compgen -f -X \'!*.jinja\' -- "$cur") $(compgen -d -- "$cur") )',
    ("-jf", "--json-schema-file"): 'COMPREPLY=( $(compgen -f -X \'!*.json\' -- "$cur") $(compgen -d -- "$cur") )',
    (
        "--log-file",
        "--api-key-file",
        "--ssl-key-file",
        "--ssl-cert-file",
        "-f",
        "--file",
        "-bf",
        "--binary-file",
        "--prompt-cache",
        "--lora",
        "--lora-scaled",
        "-mm",
        "--mmproj",
        "--slot-save-path",
        "--chat-template-kwargs-file",
        "--models-preset",
        "-md",
        "--model-draft",
        "--spec-draft-model",
        "--draft-model",
        "-mv",
        "--model-vocoder",
        "--tools-config",
    ): 'COMPREPLY=( $(compgen -f -- "$cur") )',
    ("--path", "--media-path", "--models-dir", "--model-store-root"): 'COMPREPLY=( $(compgen -d -- "$cur") )',
}


def _is_negative(spelling: str, spellings: list[str]) -> bool:
    """--no-X beside --X, -noX beside -X: b10621's args_neg, which its script leaves out."""
    if spelling.startswith("--no-"):
        return "--" + spelling[5:] in spellings
    if spelling.startswith("-no") and not spelling.startswith("--"):
        return "-" + spelling[3:] in spellings
    return False


_PATH_METAVAR = re.compile(r"FNAME|FILE|PATH|DIR")


def _path_valued(surface) -> list[str]:
    """Spellings of options whose value the surface names a file or a path (metavar FNAME, FILE, PATH)."""
    found = []
    for entry in _surface_options(surface):
        metavar = _field(entry, "metavar", None) or ()
        metavar = (metavar,) if isinstance(metavar, str) else tuple(metavar)
        if any(_PATH_METAVAR.search(m or "") for m in metavar):
            found += list(_field(entry, "spellings", ()) or ())
    return found


def _store_names() -> list[str]:
    from ..models.bundled import BUNDLED_MODELS  # deferred: --version does not read the store

    return sorted(n for n in BUNDLED_MODELS if re.fullmatch(r"[A-Za-z0-9._-]+", n))


def _field(entry, name, default=None):
    if isinstance(entry, dict):
        return entry.get(name, default)
    return getattr(entry, name, default)


def _surface_options(surface) -> list:
    """Accepts the --dump-flag-surface document, its "options" list, rows with spellings/hidden attributes
    (the CLI's option table), or an argparse parser."""
    if isinstance(surface, argparse.ArgumentParser):
        surface = flag_surface(surface, surface.prog)
    if isinstance(surface, dict):
        surface = surface.get("options", [])
    return list(surface)


def completion_spellings(surface) -> list[str]:
    """The spellings the script offers: every visible option's spellings except its negative forms (b10621
    prints opt->args, never args_neg), without the hidden compatibility surface and --dump-flag-surface."""
    seen: list[str] = []
    for entry in _surface_options(surface):
        if _field(entry, "hidden", False):
            continue
        spellings = list(_field(entry, "spellings", ()) or ())
        for s in spellings:
            if _is_negative(s, spellings):
                continue
            if s in _HIDDEN_FROM_COMPLETION or s in seen:
                continue
            if not _SAFE_SPELLING.fullmatch(s):
                raise ValueError(f"option spelling {s!r} cannot be written into a shell script safely")
            seen.append(s)
    return seen


def completion_bash(surface, prog: str = "mlxcel-server") -> str:
    """A source-able bash completion script in b10621's shape (one function, an opts list, a case "$prev"
    block completing paths for path-valued options, then complete -F). `prog` "mlxcel serve" registers it
    against the mlxcel command, which then also completes its subcommands."""
    opts = completion_spellings(surface)
    command = prog.split()[0]
    if not re.fullmatch(r"[A-Za-z0-9._-]+", command):
        raise ValueError(f"command name {command!r} cannot be written into a shell script safely")
    func = "_" + re.sub(r"[^A-Za-z0-9_]", "_", command) + "_completions"
    subcommand = " ".join(prog.split()[1:])
    out = [f"# bash completion for {prog} (mlxcel, compatible with llama-server b{UPSTREAM_BUILD})"]
    if subcommand:
        out.append(f"# registered against {command}: completes `{prog}` options and {command}'s subcommands")
    out.append(f"# use: source <({prog} --completion-bash)")
    out += [
        f"{func}() {{",
        "    local cur prev opts",
        "    COMPREPLY=()",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "",
    ]
    if subcommand:
        out += [
            '    if [ "$COMP_CWORD" -eq 1 ]; then',
            '        COMPREPLY=( $(compgen -W "serve convert" -- "$cur") )',
            "        return 0",
            "    fi",
            "",
        ]
    out += [f'    opts="{" ".join(opts)}"', "", '    case "$prev" in']
    for spellings, action in _FILE_PATTERNS.items():
        present = [s for s in spellings if s in opts]
        if not present:
            continue
        action = action.replace("{store_names}", " ".join(_store_names()))
        out += [f"        {'|'.join(present)})", f"            {action}", "            return 0", "            ;;"]
    listed = {s for spellings in _FILE_PATTERNS for s in spellings}
    by_metavar = [s for s in _path_valued(surface) if s in opts and s not in listed]
    if by_metavar:
        out += [
            f"        {'|'.join(by_metavar)})",
            '            COMPREPLY=( $(compgen -f -- "$cur") )',
            "            return 0",
            "            ;;",
        ]
    out += [
        "        *)",
        '            COMPREPLY=( $(compgen -W "${opts}" -- "$cur") )',
        "            return 0",
        "            ;;",
        "    esac",
        "}",
        "",
        f"complete -F {func} {command}",
    ]
    return "\n".join(out) + "\n"


__all__ = [
    "cache_list_text",
    "completion_bash",
    "completion_spellings",
    "source_commit",
    "version_text",
]
