"""Structural diff of two exchanges: status, content type, then keys, order, types and values."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .exchange import Exchange
from .normalize import Normalization, normalize


@dataclass(frozen=True)
class Divergence:
    path: str
    kind: str  # status | content-type | missing | extra | order | type | value | body
    reference: Any = None
    mlxcel: Any = None

    def describe(self) -> str:
        if self.kind == "missing":
            return f"{self.path}: missing in mlxcel (reference has {_short(self.reference)})"
        if self.kind == "extra":
            return f"{self.path}: only in mlxcel ({_short(self.mlxcel)})"
        return f"{self.path}: {self.kind} differs: reference {_short(self.reference)} vs mlxcel {_short(self.mlxcel)}"


def _short(v: Any, n: int = 120) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(v), type(v).__name__)


def diff_values(ref: Any, got: Any, path: str = "$") -> list[Divergence]:
    if isinstance(ref, tuple) and isinstance(got, tuple):  # both masked: compare the recorded JSON types
        return [] if ref == got else [Divergence(path, "type", ref[1], got[1])]
    if _json_type(ref) != _json_type(got) or isinstance(ref, tuple) != isinstance(got, tuple):
        return [Divergence(path, "type", ref, got)]
    if isinstance(ref, dict):
        out: list[Divergence] = []
        for k in ref:
            if k not in got:
                out.append(Divergence(f"{path}.{k}", "missing", reference=ref[k]))
        for k in got:
            if k not in ref:
                out.append(Divergence(f"{path}.{k}", "extra", mlxcel=got[k]))
        common_ref = [k for k in ref if k in got]
        common_got = [k for k in got if k in ref]
        if common_ref != common_got:
            out.append(Divergence(path, "order", common_ref, common_got))
        for k in common_ref:
            out.extend(diff_values(ref[k], got[k], f"{path}.{k}"))
        return out
    if isinstance(ref, list):
        if len(ref) != len(got):
            return [Divergence(path, "value", ref, got)]
        out = []
        for i, (a, b) in enumerate(zip(ref, got)):
            out.extend(diff_values(a, b, f"{path}[{i}]"))
        return out
    if ref != got:
        return [Divergence(path, "value", ref, got)]
    if isinstance(ref, float) != isinstance(got, float):  # 1 and 1.0 are different bytes on the wire
        return [Divergence(path, "number-format", ref, got)]
    return []


def diff_exchanges(ref: Exchange, got: Exchange, rules: tuple[Normalization, ...] = ()) -> list[Divergence]:
    out: list[Divergence] = []
    if ref.status != got.status:
        out.append(Divergence("status", "status", ref.status, got.status))
    if ref.headers.get("content-type") != got.headers.get("content-type"):
        out.append(Divergence("header content-type", "content-type", ref.headers.get("content-type"),
                              got.headers.get("content-type")))
    try:
        a, b = ref.json(), got.json()
    except ValueError:
        if ref.body != got.body:
            out.append(Divergence("body", "body", ref.body[:200].decode(errors="replace"),
                                  got.body[:200].decode(errors="replace")))
        return out
    return out + diff_values(normalize(a, rules), normalize(b, rules))
