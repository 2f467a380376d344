"""b10621's model presets (common/preset.cpp): a model's options as {option: value}, read from an INI file, from
the router's own command line, or made for a model found on disk; cascaded, merged, and rendered back as the
command line a model is served with and as the INI text GET /models shows.

Options are b10621's (server/options.py) plus its three preset-only keys. A preset keeps them ordered as
b10621's std::map<common_arg, string> orders them: by the option's first spelling, compared byte-wise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..options import OPTIONS, Option
from ..textparse import FALSEY, TRUTHY

DEFAULT_NAME = "default"  # COMMON_PRESET_DEFAULT_NAME


class PresetError(RuntimeError):
    """What b10621 throws while it reads presets; the router fails to start with it."""


@dataclass(frozen=True)
class Key:
    """One option a preset can hold: a b10621 server option, or a preset-only key."""

    first: str  # args[0]: the map's ordering
    last: str  # args.back(): the spelling the command line and the INI text use
    negatives: tuple[str, ...] = ()
    env: str | None = None
    kind: str = "string"  # void | bool | int | string | str_str (options.py), "preset" for preset-only keys
    option_id: str | None = None

    def __lt__(self, other: "Key") -> bool:
        return self.first.encode() < other.first.encode()

    @property
    def preset_only(self) -> bool:
        return self.kind == "preset"

    @property
    def flag(self) -> bool:
        return self.kind in ("void", "bool")


def _key(o: Option) -> Key:
    return Key(o.spellings[0], o.spellings[-1], o.negatives, o.env, o.kind, o.id)


LOAD_ON_STARTUP = Key("load-on-startup", "load-on-startup", env="__PRESET_LOAD_ON_STARTUP", kind="preset")
STOP_TIMEOUT = Key("stop-timeout", "stop-timeout", env="__PRESET_STOP_TIMEOUT", kind="preset")
DEDUP_CACHE_MODELS = Key("dedup-cache-models", "dedup-cache-models", env="__PRESET_DEDUP_CACHE_MODELS", kind="preset")
KEYS: tuple[Key, ...] = (*(_key(o) for o in OPTIONS), LOAD_ON_STARTUP, STOP_TIMEOUT, DEDUP_CACHE_MODELS)
BY_ENV: dict[str, Key] = {k.env: k for k in KEYS if k.env}


def _key_map() -> dict[str, Key]:
    """get_map_key_opt: every variable (and the LLAMA_ARG_NO_ form of a pair's), every spelling without dashes."""
    out: dict[str, Key] = {}
    for k in KEYS:
        if k.env:
            out[k.env] = k
            if k.negatives:
                out[k.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_")] = k
        spellings = (k.first, k.last) if k.preset_only else (*_option(k).spellings, *k.negatives)
        for s in spellings:
            out[s.lstrip("-")] = k
    return out


def _option(k: Key) -> Option:
    return next(o for o in OPTIONS if o.id == k.option_id)


KEY_MAP = _key_map()


@dataclass
class Preset:
    name: str
    options: dict[Key, str] = field(default_factory=dict)

    def sorted_items(self) -> list[tuple[Key, str]]:
        return sorted(self.options.items(), key=lambda kv: kv[0].first.encode())

    def get(self, env: str) -> str | None:
        k = BY_ENV.get(env)
        return None if k is None else self.options.get(k)

    def set(self, env: str, value: str) -> None:
        self.options[BY_ENV[env]] = value

    def unset(self, env: str) -> None:
        k = BY_ENV.get(env)
        if k is not None:
            self.options.pop(k, None)

    def merge(self, other: "Preset") -> None:
        """common_preset::merge: the other's options overwrite these."""
        self.options.update(other.options)

    def copy(self, name: str | None = None) -> "Preset":
        return Preset(self.name if name is None else name, dict(self.options))

    def to_argv(self) -> list[str]:
        """common_preset::to_args (without the binary): each option's last spelling, then its value; a flag set
        false takes its negative spelling, or is left out when it has none."""
        argv: list[str] = []
        for k, value in self.sorted_items():
            if k.preset_only:
                continue
            if k.kind == "str_str":
                raise PresetError(
                    f"common_preset::to_args(): option '{k.last}' has two values, which is not supported yet"
                )
            if k.flag:
                if value in FALSEY:
                    if k.negatives:
                        argv.append(k.negatives[-1])
                    continue
                argv.append(k.last)
            else:
                argv += [k.last, value]
        return argv

    def to_ini(self) -> str:
        """common_preset::to_ini."""
        lines = [f"[{self.name}]"]
        lines += [f"{k.last.lstrip('-')} = {v.replace(chr(10), chr(92) + chr(10))}" for k, v in self.sorted_items()]
        return "\n".join(lines) + "\n\n"


# --- the INI file ---------------------------------------------------------------------------------------------

_IDENT = r"[a-zA-Z_][a-zA-Z0-9_.-]*"
_EOL = r"[ \t]*(?:[;#].*)?$"
_HEADER = re.compile(r"\[[ \t]*([^\] \t][^\]]*)\]" + _EOL)  # blanks after the name are part of it
_KV = re.compile(r"(" + _IDENT + r")[ \t]*=[ \t]*(.*?)" + _EOL)
_BLANK_OR_COMMENT = re.compile(_EOL)


def parse_ini(path: str) -> dict[str, dict[str, str]]:
    """parse_ini_from_file: sections (sorted, as b10621's std::map holds them) of keys (sorted, the last of a key
    winning); a section's header starts it over; keys before any header belong to "default"."""
    p = Path(path)
    if not p.exists():
        raise PresetError(f"preset file does not exist: {path}")
    try:
        text = p.read_bytes().decode("utf-8", "surrogateescape")
    except OSError:
        raise PresetError(f"failed to open server preset file: {path}") from None
    parsed: dict[str, dict[str, str]] = {}
    section = DEFAULT_NAME
    for line in re.split(r"\r\n|\n|\r", text):
        if (m := _HEADER.fullmatch(line)) is not None:
            section = m.group(1)
            parsed[section] = {}
        elif (m := _KV.fullmatch(line)) is not None:
            # a value runs to the first comment character or the line's trailing blanks
            parsed.setdefault(section, {})[m.group(1)] = m.group(2)
        elif _BLANK_OR_COMMENT.fullmatch(line) is None:
            raise PresetError(f"failed to parse server config file: {path}")
    return {s: dict(sorted(keys.items())) for s, keys in sorted(parsed.items())}


def _canonical_tag(tag: str) -> str:
    m = re.search(r"[-.]([A-Z0-9_]+)$", tag, re.IGNORECASE)
    return (m.group(1) if m else tag).upper()


def _bool_value(k: Key, key: str, value: str) -> str:
    """parse_bool_arg: a negative spelling reverses the value."""
    if any(n.lstrip("-") == key for n in k.negatives):
        return "false" if value in TRUTHY else "true"
    return value


def load_ini(path: str) -> tuple[dict[str, Preset], Preset]:
    """common_preset_context::load_from_ini: the file's presets by name, and its global ("*") preset."""
    out: dict[str, Preset] = {}
    global_preset = Preset("*")
    for section, keys in parse_ini(path).items():
        name = section or DEFAULT_NAME
        if name not in ("*", DEFAULT_NAME) and ":" in name:
            head, _, tag = name.rpartition(":")
            name = f"{head}:{_canonical_tag(tag)}"
        preset = Preset(name)
        for key, value in keys.items():
            if key == "version":  # reserved
                continue
            k = KEY_MAP.get(key)
            if k is None:
                raise PresetError(f"option '{key}' not recognized in preset '{name}'")
            preset.options[k] = _bool_value(k, key, value) if k.negatives else value
        if name == DEFAULT_NAME and not preset.options:
            continue
        if name == "*":
            global_preset = preset
        else:
            out[name] = preset
    return out, global_preset


def cascade(base: Preset, presets: dict[str, Preset]) -> dict[str, Preset]:
    """common_preset_context::cascade(global, presets): the global options under each preset's own."""
    out = {}
    for name, preset in presets.items():
        merged = base.copy(name)
        merged.merge(preset)
        out[name] = merged
    return out


# --- the router's own command line ----------------------------------------------------------------------------

# unset_reserved_args: what a model never inherits from the router's command line
RESERVED = (
    "LLAMA_ARG_SSL_KEY_FILE",
    "LLAMA_ARG_SSL_CERT_FILE",
    "LLAMA_API_KEY",
    "LLAMA_ARG_MODELS_DIR",
    "LLAMA_ARG_MODELS_MAX",
    "LLAMA_ARG_MODELS_PRESET",
    "LLAMA_ARG_MODELS_AUTOLOAD",
)
RESERVED_MODEL = ("LLAMA_ARG_MODEL", "LLAMA_ARG_MMPROJ", "LLAMA_ARG_ALIAS", "LLAMA_ARG_HF_REPO")


def unset_reserved(preset: Preset, model_args: bool) -> None:
    for env in (*RESERVED, *(RESERVED_MODEL if model_args else ())):
        preset.unset(env)


def from_argv(argv: list[str]) -> Preset:
    """common_params_to_map: the options on the router's command line (the last of an option winning), a flag as
    "1", or "0" for its negative spelling."""
    by_spelling: dict[str, Key] = {}
    for k in KEYS:
        if k.preset_only:
            continue
        for s in (*_option(k).spellings, *k.negatives):
            by_spelling[s] = k
    preset = Preset(DEFAULT_NAME)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        k = by_spelling.get(arg)
        if k is None:  # the parser has already refused what b10621 does not know
            i += 1
            continue
        if k.kind == "str_str":
            raise PresetError("error: argument with 2 values is not yet supported\n")
        if k.flag:
            preset.options[k] = "0" if arg in k.negatives else "1"
        else:
            if i + 1 >= len(argv):
                raise PresetError("expected value for argument")
            i += 1
            preset.options[k] = argv[i]
        i += 1
    return preset
