"""Where each value of a JSON document lies in its raw bytes, so that a masked value can be cut out of the wire
bytes while every other byte (escaping, float spelling, whitespace) stays compared."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_WS = re.compile(rb"[ \t\n\r]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


@dataclass
class Span:
    start: int
    end: int
    children: dict[str, "Span"] | list["Span"] = field(default_factory=dict)


class _Scanner:
    def __init__(self, raw: bytes):
        self.raw = raw

    def ws(self, i: int) -> int:
        return _WS.match(self.raw, i).end()

    def value(self, i: int) -> tuple[Span, int]:
        c = self.raw[i : i + 1]
        if c == b"{":
            return self.obj(i)
        if c == b"[":
            return self.arr(i)
        if c == b'"':
            end = _STRING.match(self.raw, i).end()
            return Span(i, end), end
        for literal in (b"true", b"false", b"null"):
            if self.raw.startswith(literal, i):
                return Span(i, i + len(literal)), i + len(literal)
        m = _NUMBER.match(self.raw, i)
        if m is None or m.end() == i:
            raise ValueError(f"not JSON at byte {i}")
        return Span(i, m.end()), m.end()

    def obj(self, start: int) -> tuple[Span, int]:
        children: dict[str, Span] = {}
        i = self.ws(start + 1)
        if self.raw[i : i + 1] == b"}":
            return Span(start, i + 1, children), i + 1
        while True:
            key_end = _STRING.match(self.raw, i).end()
            key = json.loads(self.raw[i:key_end])
            i = self.ws(self.ws(key_end) + 1)  # past the colon
            children[key], i = self.value(i)
            i = self.ws(i)
            if self.raw[i : i + 1] == b"}":
                return Span(start, i + 1, children), i + 1
            i = self.ws(i + 1)  # past the comma

    def arr(self, start: int) -> tuple[Span, int]:
        children: list[Span] = []
        i = self.ws(start + 1)
        if self.raw[i : i + 1] == b"]":
            return Span(start, i + 1, children), i + 1
        while True:
            child, i = self.value(i)
            children.append(child)
            i = self.ws(i)
            if self.raw[i : i + 1] == b"]":
                return Span(start, i + 1, children), i + 1
            i = self.ws(i + 1)


def spans(raw: bytes) -> Span:
    """The span tree of a document json.loads has already accepted."""
    scanner = _Scanner(raw)
    root, _ = scanner.value(scanner.ws(0))
    return root


def splice(raw: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """`raw` with each (start, end) range replaced; the ranges do not overlap."""
    out, last = [], 0
    for start, end, replacement in sorted(edits):
        out += [raw[last:start], replacement]
        last = end
    out.append(raw[last:])
    return b"".join(out)
