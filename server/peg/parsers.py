"""The parser variants of b10621's common/peg-parser.h, and the character-class reader of
common/peg-parser.cpp that chars() uses.

Children are parser ids into the owning PegArena; the dataclasses are mutable because
PegArena.resolve_refs() rewrites them in place, as the C++ does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INVALID_PARSER_ID = -1


@dataclass
class EpsilonParser:
    pass


@dataclass
class StartParser:
    pass


@dataclass
class EndParser:
    pass


@dataclass
class LiteralParser:
    literal: str


@dataclass
class SequenceParser:
    children: list[int] = field(default_factory=list)


@dataclass
class ChoiceParser:
    children: list[int] = field(default_factory=list)


@dataclass
class RepetitionParser:
    child: int
    min_count: int
    max_count: int  # -1: unbounded


@dataclass
class AndParser:
    child: int


@dataclass
class NotParser:
    child: int


@dataclass
class AnyParser:
    pass


@dataclass
class SpaceParser:
    pass


@dataclass
class CharRange:
    start: int
    end: int

    def contains(self, codepoint: int) -> bool:
        return self.start <= codepoint <= self.end


@dataclass
class CharsParser:
    pattern: str
    ranges: list[CharRange]
    negated: bool
    min_count: int
    max_count: int  # -1: unbounded


@dataclass
class StringParser:
    delimiter: str  # one character


@dataclass
class UntilParser:
    delimiters: list[str]


@dataclass
class SchemaParser:
    child: int
    name: str
    schema: object
    raw: bool  # the GBNF may accept the raw text of a string-typed value


@dataclass
class RuleParser:
    name: str
    child: int
    trigger: bool


@dataclass
class RefParser:
    name: str


@dataclass
class AtomicParser:
    child: int


@dataclass
class TagParser:
    child: int
    tag: str


@dataclass
class GbnfParser:
    child: int
    grammar: str


@dataclass
class AcParser:
    child: int
    delimiters: list[str]


ParserVariant = (
    EpsilonParser
    | StartParser
    | EndParser
    | LiteralParser
    | SequenceParser
    | ChoiceParser
    | RepetitionParser
    | AndParser
    | NotParser
    | AnyParser
    | SpaceParser
    | CharsParser
    | StringParser
    | UntilParser
    | SchemaParser
    | RuleParser
    | RefParser
    | AtomicParser
    | TagParser
    | GbnfParser
    | AcParser
)

# variants that wrap exactly one child in their `child` field
SINGLE_CHILD_TYPES = (
    RepetitionParser,
    AndParser,
    NotParser,
    TagParser,
    AtomicParser,
    GbnfParser,
    AcParser,
    RuleParser,
    SchemaParser,
)

_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {ord("n"): ord("\n"), ord("t"): ord("\t"), ord("r"): ord("\r")}
_HEX_ESCAPE_WIDTHS = {ord("x"): 2, ord("u"): 4, ord("U"): 8}


def _parse_hex_escape(text: bytes, pos: int, count: int) -> int | None:
    if pos + count > len(text) or not all(b in _HEX_DIGITS for b in text[pos : pos + count]):
        return None
    return int(text[pos : pos + count], 16)


def _parse_char_class_char(content: bytes, pos: int) -> tuple[int, int]:
    """One class member at `pos`: (code point, bytes used)."""
    if content[pos] == ord("\\") and pos + 1 < len(content):
        escaped = content[pos + 1]
        width = _HEX_ESCAPE_WIDTHS.get(escaped)
        if width is not None:
            value = _parse_hex_escape(content, pos + 2, width)
            # a malformed \x, \u or \U stands for the letter itself
            return (escaped, 2) if value is None else (value, 2 + width)
        if escaped in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[escaped], 2
        # `char` is signed in the C++: a UTF-8 byte after a backslash sign-extends to uint32
        return (escaped if escaped < 0x80 else escaped + 0xFFFFFF00), 2
    return content[pos], 1


def parse_char_classes(classes: str) -> tuple[list[CharRange], bool]:
    """Ranges and negation of a `[...]` class. Like the C++ it reads the pattern's UTF-8 bytes, so a
    literal non-ASCII character becomes byte-valued members; use \\u escapes for code points."""
    content = classes.encode("utf-8")
    if content[:1] == b"[":
        content = content[1:]
    if content[-1:] == b"]":
        content = content[:-1]
    negated = content[:1] == b"^"
    if negated:
        content = content[1:]

    ranges: list[CharRange] = []
    i = 0
    while i < len(content):
        start, used = _parse_char_class_char(content, i)
        i += used
        if i + 1 < len(content) and content[i] == ord("-"):
            end, end_used = _parse_char_class_char(content, i + 1)
            ranges.append(CharRange(start, end))
            i += 1 + end_used
        else:
            ranges.append(CharRange(start, start))
    return ranges, negated
