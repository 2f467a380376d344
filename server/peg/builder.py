"""PegBuilder and the PegParser handle: common_peg_parser_builder and common_peg_parser of b10621's
common/peg-parser.{h,cpp}, with the same method names.

Parser ids are visible in generated grammars (the `until-N` and `ac-N` rule names), so a port
must create parsers in the order the C++ does. GCC, which built the reference, evaluates the two
operands of an overloaded `+` or `|` right to left: in `p.literal("a") + p.until("b")` the until
gets the smaller id. Python goes left to right, so such an expression needs its right operand
created first (or written as `"a" + p.until("b")`, which creates the literal last in both
languages). `<<` is left to right in C++17, and braced lists (`sequence({...})`) are too.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from .arena import PegArena
from .parsers import (
    AcParser,
    AndParser,
    AnyParser,
    AtomicParser,
    CharsParser,
    ChoiceParser,
    EndParser,
    EpsilonParser,
    GbnfParser,
    LiteralParser,
    NotParser,
    ParserVariant,
    RefParser,
    RepetitionParser,
    RuleParser,
    SchemaParser,
    SequenceParser,
    SpaceParser,
    StartParser,
    StringParser,
    TagParser,
    UntilParser,
    parse_char_classes,
)

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")

T = TypeVar("T")


class PegParser:
    """A parser id bound to its builder, with the C++ operators: `a + b` sequence, `a << b` sequence
    with space() between, `a | b` choice; a str operand is a literal. `+=` and `|=` rebind to a new
    parser like the C++ (a choice on the left has its alternatives copied into the new choice)."""

    __slots__ = ("builder", "id")

    def __init__(self, parser_id: int, builder: PegBuilder) -> None:
        self.id = parser_id
        self.builder = builder

    def _operand(self, other: object) -> PegParser | None:
        if isinstance(other, str):
            return self.builder.literal(other)
        return other if isinstance(other, PegParser) else None

    def __add__(self, other: PegParser | str) -> PegParser:
        rhs = self._operand(other)
        return NotImplemented if rhs is None else self.builder.sequence([self.id, rhs.id])

    def __radd__(self, other: str) -> PegParser:
        return self.builder.literal(other) + self if isinstance(other, str) else NotImplemented

    def __lshift__(self, other: PegParser | str) -> PegParser:
        rhs = self._operand(other)
        if rhs is None:
            return NotImplemented
        return self.builder.sequence([self.id, self.builder.space().id, rhs.id])

    def __rlshift__(self, other: str) -> PegParser:
        return self.builder.literal(other) << self if isinstance(other, str) else NotImplemented

    def __or__(self, other: PegParser | str) -> PegParser:
        rhs = self._operand(other)
        return NotImplemented if rhs is None else self.builder.choice([self.id, rhs.id])

    def __ror__(self, other: str) -> PegParser:
        return self.builder.literal(other) | self if isinstance(other, str) else NotImplemented

    def __repr__(self) -> str:
        return f"PegParser({self.id})"


ParserRef = PegParser | int


def _id(p: ParserRef) -> int:
    return p if isinstance(p, int) else p.id


class PegBuilder:
    """Creates parsers in one arena; subclass it to add helpers (they get `self` to build with)."""

    def __init__(self) -> None:
        self._arena = PegArena()

    def _wrap(self, parser_id: int) -> PegParser:
        return PegParser(parser_id, self)

    def _add(self, parser: ParserVariant) -> PegParser:
        return self._wrap(self._arena.add_parser(parser))

    # primitives

    def eps(self) -> PegParser:
        """Matches nothing, always succeeds."""
        return self._add(EpsilonParser())

    def start(self) -> PegParser:
        """Matches at the start of the input only."""
        return self._add(StartParser())

    def end(self) -> PegParser:
        """Matches at the end of the input only."""
        return self._add(EndParser())

    def literal(self, literal: str) -> PegParser:
        return self._add(LiteralParser(literal))

    def sequence(self, parsers: Iterable[ParserRef] = ()) -> PegParser:
        """All in order; nested sequences are flattened into this one."""
        children: list[int] = []
        for child_id in map(_id, parsers):
            child = self._arena.get(child_id)
            if isinstance(child, SequenceParser):
                children.extend(child.children)
            else:
                children.append(child_id)
        return self._add(SequenceParser(children))

    def choice(self, parsers: Iterable[ParserRef] | None = None) -> PegParser:
        """The first alternative that does not fail; nested choices are flattened into this one."""
        children: list[int] = []
        for child_id in map(_id, parsers or ()):
            child = self._arena.get(child_id)
            if isinstance(child, ChoiceParser):
                children.extend(child.children)
            else:
                children.append(child_id)
        return self._add(ChoiceParser(children))

    def choice_of(self, items: Iterable[T], make: Callable[[T], PegParser] | None = None) -> PegParser:
        """C++ `auto c = choice(); for (item : items) c |= make(item);`: an empty choice, then a new choice
        per item (make(item), or the item itself, built after the choice before it), with the C++'s ids."""
        result = self.choice()
        for item in items:
            result = result | (item if make is None else make(item))
        return result

    def one_or_more(self, p: ParserRef) -> PegParser:
        return self.repeat(p, 1, -1)

    def zero_or_more(self, p: ParserRef) -> PegParser:
        return self.repeat(p, 0, -1)

    def optional(self, p: ParserRef) -> PegParser:
        return self.repeat(p, 0, 1)

    def peek(self, p: ParserRef) -> PegParser:
        """Positive lookahead: the child's result type, consuming nothing."""
        return self._add(AndParser(_id(p)))

    def negate(self, p: ParserRef) -> PegParser:
        """Negative lookahead: succeeds where the child fails, consuming nothing."""
        return self._add(NotParser(_id(p)))

    def any(self) -> PegParser:
        """One character."""
        return self._add(AnyParser())

    def chars(self, classes: str, min: int = 1, max: int = -1) -> PegParser:
        """Between min and max (-1: unbounded) characters of a `[...]` class."""
        ranges, negated = parse_char_classes(classes)
        return self._add(CharsParser(classes, ranges, negated, min, max))

    def ref(self, name: str) -> PegParser:
        """A named rule, resolved by build(); for forward and recursive references."""
        return self._add(RefParser(name))

    def space(self) -> PegParser:
        """Zero or more ASCII whitespace characters."""
        return self._add(SpaceParser())

    def until(self, delimiter: str) -> PegParser:
        """Everything before the delimiter (which is not consumed)."""
        return self._add(UntilParser([delimiter]))

    def until_one_of(self, delimiters: Iterable[str]) -> PegParser:
        return self._add(UntilParser(list(delimiters)))

    def rest(self) -> PegParser:
        return self.until_one_of([])

    def repeat(self, p: ParserRef, min: int, max: int | None = None) -> PegParser:
        """Between min and max (-1: unbounded) matches; exactly min when max is omitted."""
        return self._add(RepetitionParser(_id(p), min, min if max is None else max))

    # strings

    def string_content(self, delimiter: str) -> PegParser:
        """String content with JSON escapes, up to an unescaped delimiter (not consumed)."""
        return self._add(StringParser(delimiter))

    def double_quoted_string(self) -> PegParser:
        return self.rule(
            "double-quoted-string",
            lambda: self.sequence([self.literal('"'), self.string_content('"'), self.literal('"')]),
        )

    def single_quoted_string(self) -> PegParser:
        return self.rule(
            "single-quoted-string",
            lambda: self.sequence([self.literal("'"), self.string_content("'"), self.literal("'")]),
        )

    def quoted_string(self) -> PegParser:
        return self.rule(
            "quoted-string", lambda: self.choice([self.double_quoted_string(), self.single_quoted_string()])
        )

    # JSON

    def json(self) -> PegParser:
        return self.rule(
            "json-value",
            lambda: self.choice(
                [
                    self.json_object(),
                    self.json_array(),
                    self.json_string(),
                    self.json_number(),
                    self.json_bool(),
                    self.json_null(),
                ]
            ),
        )

    def json_object(self) -> PegParser:
        def build() -> PegParser:
            ws = self.space()
            return self._bracketed(ws, "{", self._members(ws, self.json_string, self.json), "}")

        return self.rule("json-object", build)

    def _members(self, ws: PegParser, key: Callable[[], PegParser], value: Callable[[], PegParser]) -> PegParser:
        """`key: value` pairs separated by commas, whitespace around the colons and commas."""
        member = self.sequence([key(), ws, self.literal(":"), ws, value()])
        return self.sequence([member, self.zero_or_more(self.sequence([ws, self.literal(","), ws, member]))])

    def _bracketed(
        self, ws: PegParser, opening: str, items: PegParser, closing: str, trailing_space: bool = False
    ) -> PegParser:
        """`opening`, then `closing` alone or after the items, with whitespace after `opening` and before
        `closing` (and after it with trailing_space)."""
        parts = [
            self.literal(opening),
            ws,
            self.choice([self.literal(closing), self.sequence([items, ws, self.literal(closing)])]),
        ]
        if trailing_space:
            parts.append(ws)
        return self.sequence(parts)

    def json_string(self) -> PegParser:
        return self.rule(
            "json-string",
            lambda: self.sequence([self.literal('"'), self.string_content('"'), self.literal('"')]),
        )

    def json_array(self) -> PegParser:
        def build() -> PegParser:
            ws = self.space()
            elements = self.sequence(
                [self.json(), self.zero_or_more(self.sequence([ws, self.literal(","), ws, self.json()]))]
            )
            return self._bracketed(ws, "[", elements, "]")

        return self.rule("json-array", build)

    def json_number(self) -> PegParser:
        def build() -> PegParser:
            digit1_9 = self.chars("[1-9]", 1, 1)
            digits = self.chars("[0-9]")
            int_part = self.choice([self.literal("0"), self.sequence([digit1_9, self.chars("[0-9]", 0, -1)])])
            frac = self.sequence([self.literal("."), digits])
            exp = self.sequence(
                [
                    self.choice([self.literal("e"), self.literal("E")]),
                    self.optional(self.chars("[+-]", 1, 1)),
                    digits,
                ]
            )
            # commit only when the next character cannot extend the number: at the end of a partial
            # input this lookahead needs more input, so "3" is not taken for a finished "3.14"
            not_number_continuation = self.negate(self.chars("[0-9.eE+-]", 1, 1))
            return self.sequence(
                [
                    self.optional(self.literal("-")),
                    int_part,
                    self.optional(frac),
                    self.optional(exp),
                    not_number_continuation,
                ]
            )

        return self.rule("json-number", build)

    def json_bool(self) -> PegParser:
        return self.rule("json-bool", lambda: self.choice([self.literal("true"), self.literal("false")]))

    def json_null(self) -> PegParser:
        return self.rule("json-null", lambda: self.literal("null"))

    def json_member(self, key: str, p: ParserRef) -> PegParser:
        """`"key"`, `:` and the value parser, with whitespace around the colon."""
        ws = self.space()
        return self.sequence([self.literal('"' + key + '"'), ws, self.literal(":"), ws, p])

    # Python literals (True/False/None, either quote style)

    def python_value(self) -> PegParser:
        return self.rule(
            "python-value",
            lambda: self.choice(
                [
                    self.python_dict(),
                    self.python_array(),
                    self.python_string(),
                    self.python_number(),
                    self.python_bool(),
                    self.python_null(),
                ]
            ),
        )

    def python_dict(self) -> PegParser:
        def build() -> PegParser:
            ws = self.space()
            members = self._members(ws, self.python_string, self.python_value)
            return self._bracketed(ws, "{", members, "}", trailing_space=True)

        return self.rule("python-dict", build)

    def python_string(self) -> PegParser:
        return self.rule(
            "python-string", lambda: self.choice([self.double_quoted_string(), self.single_quoted_string()])
        )

    def python_array(self) -> PegParser:
        def build() -> PegParser:
            ws = self.space()
            # unlike the dict, no whitespace before the comma, as in the C++
            elements = self.sequence(
                [
                    self.python_value(),
                    self.zero_or_more(self.sequence([self.literal(","), ws, self.python_value()])),
                ]
            )
            return self._bracketed(ws, "[", elements, "]", trailing_space=True)

        return self.rule("python-array", build)

    def python_number(self) -> PegParser:
        return self.json_number()

    def python_bool(self) -> PegParser:
        return self.rule("python-bool", lambda: self.choice([self.literal("True"), self.literal("False")]))

    def python_null(self) -> PegParser:
        return self.rule("python-none", lambda: self.literal("None"))

    def marker(self) -> PegParser:
        """Text between a pair of <> or []."""
        # the C++ `literal("<") + until(">") + literal(">")` creates its operands right to left
        sharp_close = self.literal(">")
        sharp_body = self.until(">")
        sharp = self.literal("<") + sharp_body + sharp_close
        square_close = self.literal("]")
        square_body = self.until("]")
        square = self.literal("[") + square_body + square_close
        return self.choice([sharp, square])

    # wrappers

    def schema(self, p: ParserRef, name: str, schema: object, raw: bool = False) -> PegParser:
        """Parses with `p`; the grammar uses the JSON schema instead (raw: a string-typed value may be
        bare text)."""
        return self._add(SchemaParser(_id(p), name, copy.deepcopy(schema), raw))

    def rule(self, name: str, p: ParserRef | Callable[[], PegParser], trigger: bool = False) -> PegParser:
        """Stores a named rule and returns a ref to it. With a function, an existing rule of that name is
        reused, and the function may refer to the rule recursively while it builds."""
        clean_name = _INVALID_RULE_CHARS.sub("-", name)
        if not callable(p):
            rule_id = self._arena.add_parser(RuleParser(clean_name, _id(p), trigger))
            self._arena.add_rule(clean_name, rule_id)
            return self.ref(clean_name)

        if self._arena.has_rule(clean_name):
            return self.ref(clean_name)
        # a placeholder rule makes the name resolvable during the build
        placeholder = self.any()
        self._arena.add_rule(clean_name, self._arena.add_parser(RuleParser(clean_name, placeholder.id, trigger)))
        parser = p()
        self._arena.add_rule(clean_name, self._arena.add_parser(RuleParser(clean_name, parser.id, trigger)))
        return self.ref(clean_name)

    def trigger_rule(self, name: str, p: ParserRef | Callable[[], PegParser]) -> PegParser:
        """A rule that starts a lazy grammar: only trigger rules and what they reach are emitted."""
        return self.rule(name, p, True)

    def atomic(self, p: ParserRef) -> PegParser:
        """Drops the child's AST nodes while its match is only partial."""
        return self._add(AtomicParser(_id(p)))

    def tag(self, tag: str, p: ParserRef) -> PegParser:
        """An AST node with this tag around the child's match."""
        return self._add(TagParser(_id(p), tag))

    def gbnf(self, p: ParserRef, grammar: str) -> PegParser:
        """Parses with `p`, emits `grammar` as its GBNF."""
        return self._add(GbnfParser(_id(p), grammar))

    def ac(self, p: ParserRef, delimiters: str | Iterable[str]) -> PegParser:
        """Parses with `p`; the GBNF matches everything up to and including the first delimiter."""
        delimiters = [delimiters] if isinstance(delimiters, str) else list(delimiters)
        if not delimiters:
            raise RuntimeError("ac parser requires at least one delimiter")
        return self._add(AcParser(_id(p), delimiters))

    def set_root(self, p: ParserRef) -> None:
        self._arena.set_root(_id(p))

    def build(self) -> PegArena:
        """Resolves refs and hands the arena over; the builder starts a new, empty one."""
        arena = self._arena
        arena.resolve_refs()
        self._arena = PegArena()
        return arena


Part = PegParser | str | Callable[[], PegParser]


def _built(parts: tuple[Part, ...]) -> list[PegParser | str]:
    """The operands of a C++ chain of binary operators, built right to left as GCC evaluates them: a
    callable part is built when its turn comes; a str stays a str (the operator makes its literal)."""
    return [part() if callable(part) else part for part in reversed(parts)][::-1]


def plus(*parts: Part) -> PegParser:
    """C++ `parts[0] + parts[1] + ...` in GCC's order: the operands built right to left, then the
    sequences left to right."""
    built = _built(parts)
    result = built[0]
    for part in built[1:]:
        result = result + part
    return result


def alt(*parts: Part) -> PegParser:
    """C++ `parts[0] | parts[1] | ...` in GCC's order (see plus())."""
    built = _built(parts)
    result = built[0]
    for part in built[1:]:
        result = result | part
    return result


def build_peg_parser(fn: Callable[[PegBuilder], PegParser]) -> PegArena:
    """The arena of the parser `fn` builds, with that parser as root."""
    builder = PegBuilder()
    builder.set_root(fn(builder))
    return builder.build()
