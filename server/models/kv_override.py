"""--override-kv KEY=TYPE:VALUE[,...]: a GGUF's metadata overridden as b10621's model loader overrides it
(string_parse_kv_override; llama_model_loader's try_override): int, float, bool or str, given to the GGUF's
conversion in place of the file's value (server/models/gguf_import.py), so that everything read from that key
(the vocabulary's add_bos_token, the context length, the rope base, ...) sees it. An override whose type is not
the key's in the file is ignored with b10621's warning; one for a key the file lacks is taken."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..textparse import parse_csv_row

log = logging.getLogger("mlxcel")

MAX_KEY, MAX_STR = 127, 127  # llama_model_kv_override's key[128] and val_str[128]


@dataclass(frozen=True)
class KVOverride:
    key: str
    kind: str  # "int", "float", "bool", "str"
    value: object

    def shown(self) -> str:
        """llama_model_loader's log of it: %5s type, then the value as it prints it."""
        value = self.value
        text = (
            ("true" if value else "false") if self.kind == "bool" else f"{value:.6f}" if self.kind == "float" else value
        )
        return f"validate_override: Using metadata override ({self.kind:>5s}) '{self.key}' = {text}"


_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_FLOAT = re.compile(
    r"[ \t\n\v\f\r]*([+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan))",
    re.IGNORECASE,
)


def _atol(text: str) -> int:
    """std::atol: leading blanks, a sign, digits (what follows ignored); 0 without any."""
    m = _INT.match(text)
    return int(m.group(1)) if m else 0


def _atof(text: str) -> float:
    """std::atof: the longest decimal number (or inf, nan) at the start; 0 without one."""
    m = _FLOAT.match(text)
    return float(m.group(1)) if m else 0.0


def parse_one(item: str) -> KVOverride:
    """string_parse_kv_override; ValueError with b10621's words (its handler's) for one it rejects."""
    key, sep, rest = item.partition("=")
    if not sep or len(key) >= 128:
        raise ValueError(f"error: Invalid type for KV override: {item}")
    for kind in ("int", "float", "bool", "str"):
        if rest.startswith(kind + ":"):
            text = rest[len(kind) + 1 :]
            if kind == "int":
                return KVOverride(key, kind, _atol(text))
            if kind == "float":
                return KVOverride(key, kind, _atof(text))
            if kind == "bool":
                if text not in ("true", "false"):
                    raise ValueError(f"error: Invalid type for KV override: {item}")
                return KVOverride(key, kind, text == "true")
            if len(text.encode()) > MAX_STR:
                raise ValueError(f"error: Invalid type for KV override: {item}")
            return KVOverride(key, kind, text)
    raise ValueError(f"error: Invalid type for KV override: {item}")


def parse(values: list[str]) -> tuple[KVOverride, ...]:
    """Every --override-kv given (each a comma-separated list, parse_csv_row's), in order."""
    return tuple(parse_one(item) for value in values for item in parse_csv_row(value))


def field_kind(types: list) -> str | None:
    """The override type a GGUF field's value is ("int", "float", "bool", "str"), or None for an array."""
    import gguf  # deferred: gguf-py is the converter's (a GGUF -m only)

    if not types or types[0] == gguf.GGUFValueType.ARRAY:
        return None
    t = types[0]
    if t == gguf.GGUFValueType.BOOL:
        return "bool"
    if t == gguf.GGUFValueType.STRING:
        return "str"
    if t in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
        return "float"
    return "int"


class _Overridden:
    """A metadata field standing for the override's value (what gguf_import reads: contents())."""

    def __init__(self, value: object):
        self.value = value

    def contents(self):
        return self.value


def apply(fields: dict, overrides: tuple[KVOverride, ...]) -> None:
    """The overrides put into a GGUF reader's fields; one of another type than the file's ignored (warned)."""
    for o in overrides:
        present = fields.get(o.key)
        kind = field_kind(list(getattr(present, "types", []))) if present is not None else o.kind
        if kind != o.kind:
            log.warning(
                "validate_override: Warning: Bad metadata override type for key '%s', expected %s but got %s",
                o.key,
                kind or "array",
                o.kind,
            )
            continue
        fields[o.key] = _Overridden(o.value)
