"""PegArena, the parser store and executor of b10621's common/peg-parser.cpp (common_peg_arena and
its parser_executor).

The input is a Python str, so positions count code points and a character can never be cut in
half; the C++'s failures on malformed UTF-8 cannot happen. At the end of the input every parser
behaves as the C++ does when it runs out of bytes. In lenient mode the C++ also takes a trailing
incomplete UTF-8 sequence for the end of the input in any(), chars(), string content and until(),
but end(), literals and repetitions still see bytes there: on "Caf\\xC3" one_or_more(any()) + end() needs
more input, where this port, given "Caf", succeeds. A caller that holds back incomplete bytes gets
the C++ results everywhere else. Whitespace is C isspace() (ASCII only). There is no memoisation,
as in the C++.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..grammar.json_schema import _dump, _from_raw, _to_raw
from .context import FAIL, NEED_MORE_INPUT, SUCCESS, ParseContext, ParseResult, parse_result_type_name
from .grammar import build_arena_grammar
from .parsers import (
    INVALID_PARSER_ID,
    SINGLE_CHILD_TYPES,
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
)

if TYPE_CHECKING:
    from ..grammar.json_schema import GrammarBuilder

log = logging.getLogger("mlxcel.peg")

_C_SPACE = frozenset(" \t\n\v\f\r")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset("\\/bfnrt")


class PegArena:
    """common_peg_arena: parsers by id, named rules and the root."""

    def __init__(self) -> None:
        self._parsers: list[ParserVariant] = []
        self._rules: dict[str, int] = {}
        self._root = INVALID_PARSER_ID

    # storage

    def get(self, parser_id: int) -> ParserVariant:
        if parser_id < 0:
            raise IndexError(f"parser id {parser_id} out of range")
        return self._parsers[parser_id]

    def size(self) -> int:
        return len(self._parsers)

    def empty(self) -> bool:
        return not self._parsers

    def get_rule(self, name: str) -> int:
        rule_id = self._rules.get(name)
        if rule_id is None:
            raise RuntimeError("Rule not found: " + name)
        return rule_id

    def has_rule(self, name: str) -> bool:
        return name in self._rules

    @property
    def rules(self) -> Mapping[str, int]:
        """Rule name -> rule parser id, in first-insertion order."""
        return MappingProxyType(self._rules)

    @property
    def root(self) -> int:
        return self._root

    def set_root(self, parser_id: int) -> None:
        self._root = parser_id

    def add_parser(self, parser: ParserVariant) -> int:
        self._parsers.append(parser)
        return len(self._parsers) - 1

    def add_rule(self, name: str, parser_id: int) -> None:
        self._rules[name] = parser_id

    # parsing

    def parse(self, ctx: ParseContext, start: int = 0) -> ParseResult:
        if self._root == INVALID_PARSER_ID:
            raise RuntimeError("No root parser set")
        return self.parse_id(self._root, ctx, start)

    def parse_id(self, parser_id: int, ctx: ParseContext, start: int) -> ParseResult:
        parser = self._parsers[parser_id] if parser_id >= 0 else self.get(parser_id)
        return _EXECUTORS[type(parser)](self, parser, ctx, start)

    # building

    def resolve_refs(self) -> None:
        """Point every child that is a ref at the rule it names, so parsing skips the lookup."""
        for parser in self._parsers:
            if isinstance(parser, (SequenceParser, ChoiceParser)):
                parser.children = [self._resolve_ref(child) for child in parser.children]
            elif isinstance(parser, SINGLE_CHILD_TYPES):
                parser.child = self._resolve_ref(parser.child)
        if self._root != INVALID_PARSER_ID:
            self._root = self._resolve_ref(self._root)

    def _resolve_ref(self, parser_id: int) -> int:
        parser = self.get(parser_id)
        return self.get_rule(parser.name) if isinstance(parser, RefParser) else parser_id

    def build_grammar(self, builder: GrammarBuilder, lazy: bool = False) -> None:
        """Add this parser's GBNF to `builder`; lazy: only the trigger rules and what they reach."""
        build_arena_grammar(self, builder, lazy)

    def dump(self, parser_id: int) -> str:
        return self._dump(parser_id, set())

    def _dump(self, parser_id: int, visited: set[int]) -> str:  # noqa: C901
        if parser_id in visited:
            return "[cycle]"
        visited.add(parser_id)
        p = self.get(parser_id)

        def child(child_id: int) -> str:
            return self._dump(child_id, visited)

        def bounds(lo: int, hi: int) -> str:
            return f"{lo}, unbounded" if hi == -1 else f"{lo}, {hi}"

        if isinstance(p, EpsilonParser):
            return "Epsilon"
        if isinstance(p, StartParser):
            return "Start"
        if isinstance(p, EndParser):
            return "End"
        if isinstance(p, LiteralParser):
            return f"Literal({p.literal})"
        if isinstance(p, SequenceParser):
            return "Sequence(" + ", ".join(child(c) for c in p.children) + ")"
        if isinstance(p, ChoiceParser):
            return "Choice(" + ", ".join(child(c) for c in p.children) + ")"
        if isinstance(p, RepetitionParser):
            return f"Repetition({child(p.child)}, {bounds(p.min_count, p.max_count)})"
        if isinstance(p, AndParser):
            return f"And({child(p.child)})"
        if isinstance(p, NotParser):
            return f"Not({child(p.child)})"
        if isinstance(p, AtomicParser):
            return f"Atomic({child(p.child)})"
        if isinstance(p, GbnfParser):
            return f"Gbnf({p.grammar}, {child(p.child)})"
        if isinstance(p, AcParser):
            return f"Ac({' | '.join(p.delimiters)}, {child(p.child)})"
        if isinstance(p, AnyParser):
            return "Any"
        if isinstance(p, SpaceParser):
            return "Space"
        if isinstance(p, CharsParser):
            return f"CharRepeat({p.pattern}, {bounds(p.min_count, p.max_count)})"
        if isinstance(p, StringParser):
            return f"String({p.delimiter})"
        if isinstance(p, UntilParser):
            return f"Until({' | '.join(p.delimiters)})"
        if isinstance(p, SchemaParser):
            return f"Schema({child(p.child)}, {_dump_json(p.schema)})"
        if isinstance(p, RuleParser):
            return f"Rule({p.name}, {child(p.child)})"
        if isinstance(p, RefParser):
            return f"Ref({p.name})"
        # a tag's child is dumped with a fresh cycle set
        return f"Tag({p.tag}, {self.dump(p.child)})"


def _dump_json(value: object) -> str:
    """nlohmann's compact dump(), as the schema's C++ dump prints it."""
    return _from_raw(_dump(_to_raw(value)))


# --- the executor: one function per variant --------------------------------------------------------


def _debug(ctx: ParseContext, message: str) -> None:
    sys.stderr.write("  " * ctx.parse_depth + message + "\n")


def _snippet(ctx: ParseContext, pos: int, length: int = 60) -> str:
    if pos >= len(ctx.input):
        return "<EOF>"
    text = ctx.input[pos : pos + length].replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return text + "..." if pos + length < len(ctx.input) else text


def _out_of_input(ctx: ParseContext, start: int, end: int) -> ParseResult:
    """The input ran out before the match was decided: a partial match up to `end` when lenient, else a
    failure."""
    return ParseResult(NEED_MORE_INPUT, start, end) if ctx.is_lenient() else ParseResult(FAIL, start)


def _epsilon(arena: PegArena, p: EpsilonParser, ctx: ParseContext, start: int) -> ParseResult:
    return ParseResult(SUCCESS, start)


def _start(arena: PegArena, p: StartParser, ctx: ParseContext, start: int) -> ParseResult:
    return ParseResult(SUCCESS if start == 0 else FAIL, start)


def _end(arena: PegArena, p: EndParser, ctx: ParseContext, start: int) -> ParseResult:
    return ParseResult(SUCCESS if start >= len(ctx.input) else FAIL, start)


def _literal(arena: PegArena, p: LiteralParser, ctx: ParseContext, start: int) -> ParseResult:
    text, literal = ctx.input, p.literal
    if text.startswith(literal, start):
        return ParseResult(SUCCESS, start, start + len(literal))
    # a mismatch inside the input fails; running out of input while matching is a partial match
    if len(text) - start < len(literal) and literal.startswith(text[start:]):
        return _out_of_input(ctx, start, len(text))
    return ParseResult(FAIL, start)


def _sequence(arena: PegArena, p: SequenceParser, ctx: ParseContext, start: int) -> ParseResult:
    debug = ctx.is_debug()
    if debug:
        # the C++ sends this one line to the debug log rather than straight to stderr
        indent = "  " * ctx.parse_depth
        log.debug("%sSEQ start at %d '%s' (%d children)", indent, start, _snippet(ctx, start), len(p.children))
    ctx.parse_depth += 1
    pos = start
    nodes: list[int] = []
    for i, child_id in enumerate(p.children):
        if debug:
            _debug(ctx, f"SEQ child {i}: {arena.dump(child_id)}")
        result = arena.parse_id(child_id, ctx, pos)
        if debug:
            name = parse_result_type_name(result.type)
            _debug(ctx, f"SEQ child {i}: {name} at {result.start}->{result.end}")
        if result.type == FAIL:
            ctx.parse_depth -= 1
            if debug:
                _debug(ctx, "SEQ -> FAIL")
            return ParseResult(FAIL, start, result.end)
        nodes.extend(result.nodes)
        if result.type == NEED_MORE_INPUT:
            ctx.parse_depth -= 1
            if debug:
                _debug(ctx, "SEQ -> NEED_MORE")
            return ParseResult(NEED_MORE_INPUT, start, result.end, nodes)
        pos = result.end
    ctx.parse_depth -= 1
    if debug:
        _debug(ctx, f"SEQ -> SUCCESS at {start}->{pos}")
    return ParseResult(SUCCESS, start, pos, nodes)


def _choice(arena: PegArena, p: ChoiceParser, ctx: ParseContext, start: int) -> ParseResult:
    debug = ctx.is_debug()
    if debug:
        _debug(ctx, f"CHOICE start at {start} '{_snippet(ctx, start)}' ({len(p.children)} options)")
    ctx.parse_depth += 1
    for i, child_id in enumerate(p.children):
        if debug:
            _debug(ctx, f"CHOICE option {i}: {arena.dump(child_id)}")
        result = arena.parse_id(child_id, ctx, start)
        if debug:
            _debug(ctx, f"CHOICE option {i}: {parse_result_type_name(result.type)}")
        if result.type != FAIL:
            ctx.parse_depth -= 1
            if debug:
                _debug(ctx, f"CHOICE -> {parse_result_type_name(result.type)} (option {i})")
            return result
    ctx.parse_depth -= 1
    if debug:
        _debug(ctx, "CHOICE -> FAIL (no options matched)")
    return ParseResult(FAIL, start)


def _repetition(arena: PegArena, p: RepetitionParser, ctx: ParseContext, start: int) -> ParseResult:  # noqa: C901
    debug = ctx.is_debug()
    if debug:
        _debug(
            ctx,
            f"REPEAT start at {start} '{_snippet(ctx, start)}' (min={p.min_count}, max={p.max_count})",
        )
    ctx.parse_depth += 1
    pos = start
    count = 0
    nodes: list[int] = []
    n = len(ctx.input)
    while p.max_count == -1 or count < p.max_count:
        # the child is never tried at the end of the input, even when more may come
        if pos >= n:
            if debug:
                _debug(ctx, f"REPEAT: at end of input, count={count}")
            break
        result = arena.parse_id(p.child, ctx, pos)
        if debug:
            name = parse_result_type_name(result.type)
            _debug(ctx, f"REPEAT iter {count}: {name} at {result.start}->{result.end}, nodes={len(result.nodes)}")
            _debug(ctx, f"REPEAT CHILD: {arena.dump(p.child)}")
        if result.type == SUCCESS:
            if result.end == pos:  # an empty match would loop forever
                if debug:
                    _debug(ctx, "  REPEAT: empty match, stopping")
                break
            nodes.extend(result.nodes)
            pos = result.end
            count += 1
            continue
        if result.type == NEED_MORE_INPUT:
            nodes.extend(result.nodes)
            ctx.parse_depth -= 1
            if debug:
                _debug(ctx, f"REPEAT -> NEED_MORE (count={count}, nodes={len(nodes)})")
            return ParseResult(NEED_MORE_INPUT, start, result.end, nodes)
        if debug:
            _debug(ctx, "REPEAT: child failed, stopping")
        break

    if p.min_count > 0 and count < p.min_count:
        ctx.parse_depth -= 1
        if pos >= n and ctx.is_lenient():
            if debug:
                _debug(ctx, f"REPEAT -> NEED_MORE (not enough matches: {count} < {p.min_count})")
            return ParseResult(NEED_MORE_INPUT, start, pos, nodes)
        if debug:
            _debug(ctx, f"REPEAT -> FAIL (not enough matches: {count} < {p.min_count})")
        return ParseResult(FAIL, start, pos)

    ctx.parse_depth -= 1
    if debug:
        _debug(ctx, f"REPEAT -> SUCCESS (count={count}, nodes={len(nodes)})")
    return ParseResult(SUCCESS, start, pos, nodes)


def _and(arena: PegArena, p: AndParser, ctx: ParseContext, start: int) -> ParseResult:
    return ParseResult(arena.parse_id(p.child, ctx, start).type, start)


def _not(arena: PegArena, p: NotParser, ctx: ParseContext, start: int) -> ParseResult:
    result = arena.parse_id(p.child, ctx, start)
    if result.type == SUCCESS:
        return ParseResult(FAIL, start)
    if result.type == NEED_MORE_INPUT:
        # cannot negate what the child might still match
        return ParseResult(NEED_MORE_INPUT, start)
    return ParseResult(SUCCESS, start)


def _any(arena: PegArena, p: AnyParser, ctx: ParseContext, start: int) -> ParseResult:
    if start < len(ctx.input):
        return ParseResult(SUCCESS, start, start + 1)
    return _out_of_input(ctx, start, start)


def _space(arena: PegArena, p: SpaceParser, ctx: ParseContext, start: int) -> ParseResult:
    text, pos = ctx.input, start
    while pos < len(text) and text[pos] in _C_SPACE:
        pos += 1
    return ParseResult(SUCCESS, start, pos)


def _chars(arena: PegArena, p: CharsParser, ctx: ParseContext, start: int) -> ParseResult:
    text = ctx.input
    pos = start
    count = 0
    while p.max_count == -1 or count < p.max_count:
        if pos >= len(text):
            if count >= p.min_count:
                return ParseResult(SUCCESS, start, pos)
            return _out_of_input(ctx, start, pos)
        codepoint = ord(text[pos])
        matches = any(r.start <= codepoint <= r.end for r in p.ranges)
        if matches == p.negated:
            break
        pos += 1
        count += 1

    if count < p.min_count:
        if pos >= len(text) and ctx.is_lenient():
            return ParseResult(NEED_MORE_INPUT, start, pos)
        return ParseResult(FAIL, start, pos)
    return ParseResult(SUCCESS, start, pos)


_STRING_STOPS: dict[str, re.Pattern[str]] = {}


def _string(arena: PegArena, p: StringParser, ctx: ParseContext, start: int) -> ParseResult:  # noqa: C901
    """String content up to (not including) an unescaped delimiter."""
    text, delimiter = ctx.input, p.delimiter
    stops = _STRING_STOPS.get(delimiter)
    if stops is None:
        stops = _STRING_STOPS[delimiter] = re.compile("[" + re.escape(delimiter) + r"\\]")
    n = len(text)
    pos = start
    while True:
        found = stops.search(text, pos)
        if found is None:
            pos = n
            break
        pos = found.start()
        if text[pos] == delimiter:
            return ParseResult(SUCCESS, start, pos)
        escape_start = pos
        pos += 1  # the backslash
        if pos >= n:
            # a dangling backslash is left out of the partial content
            return _out_of_input(ctx, start, escape_start)
        escaped = text[pos]
        if escaped == delimiter or escaped in _SIMPLE_ESCAPES:
            pos += 1
        elif escaped == "u":
            pos += 1
            for _ in range(4):
                if pos >= n:
                    # so is an incomplete \uXXXX
                    return _out_of_input(ctx, start, escape_start)
                if text[pos] not in _HEX_DIGITS:
                    return ParseResult(FAIL, start)
                pos += 1
        else:
            return ParseResult(FAIL, start)

    if not ctx.is_lenient():
        return ParseResult(FAIL, start, pos)
    return ParseResult(NEED_MORE_INPUT, start, pos)


def _until(arena: PegArena, p: UntilParser, ctx: ParseContext, start: int) -> ParseResult:
    """Everything before the first position where a delimiter starts, or where the rest of the input
    is the beginning of one (the C++ walks a trie at each code point; these are its stopping points).
    Empty delimiters never match, as in the C++ trie."""
    text = ctx.input
    n = len(text)
    delimiters = [d for d in p.delimiters if d]
    stop = n
    for delimiter in delimiters:
        found = text.find(delimiter, start, stop + len(delimiter) - 1)
        if found != -1:
            stop = found
    if delimiters:
        # a partial delimiter can only begin within the last (longest delimiter - 1) characters
        tail_start = max(start, n - max(map(len, delimiters)) + 1)
        for pos in range(tail_start, stop):
            rest = text[pos:]
            if any(d.startswith(rest) for d in delimiters):
                stop = pos
                break
    if stop < n:
        return ParseResult(SUCCESS, start, stop)
    if ctx.is_lenient():
        # the input may continue, and the delimiter with it
        return ParseResult(NEED_MORE_INPUT, start, n)
    return ParseResult(SUCCESS, start, n)


def _delegate(arena: PegArena, p: SchemaParser | GbnfParser | AcParser, ctx: ParseContext, start: int) -> ParseResult:
    return arena.parse_id(p.child, ctx, start)


def _node_text(ctx: ParseContext, result: ParseResult) -> str:
    return ctx.input[result.start : result.end] if result.start < len(ctx.input) else ""


def _ast_node(arena: PegArena, child: int, ctx: ParseContext, start: int, rule: str, tag: str) -> ParseResult:
    """The child's match as one AST node (named by a rule or a tag) over the child's nodes."""
    result = arena.parse_id(child, ctx, start)
    if result.type == FAIL:
        return result
    node_id = ctx.ast.add_node(
        rule,
        tag,
        result.start,
        result.end,
        _node_text(ctx, result),
        result.nodes,
        result.type == NEED_MORE_INPUT,
    )
    return ParseResult(result.type, result.start, result.end, [node_id])


def _rule(arena: PegArena, p: RuleParser, ctx: ParseContext, start: int) -> ParseResult:
    return _ast_node(arena, p.child, ctx, start, p.name, "")


def _tag(arena: PegArena, p: TagParser, ctx: ParseContext, start: int) -> ParseResult:
    if ctx.is_debug():
        _debug(ctx, f"TAG: {p.tag}")
    return _ast_node(arena, p.child, ctx, start, "", p.tag)


def _ref(arena: PegArena, p: RefParser, ctx: ParseContext, start: int) -> ParseResult:
    return arena.parse_id(arena.get_rule(p.name), ctx, start)


def _atomic(arena: PegArena, p: AtomicParser, ctx: ParseContext, start: int) -> ParseResult:
    result = arena.parse_id(p.child, ctx, start)
    if result.type == NEED_MORE_INPUT:
        # a partial match contributes no nodes
        result.nodes = []
    return result


_EXECUTORS: dict[type, Callable[[PegArena, object, ParseContext, int], ParseResult]] = {
    EpsilonParser: _epsilon,
    StartParser: _start,
    EndParser: _end,
    LiteralParser: _literal,
    SequenceParser: _sequence,
    ChoiceParser: _choice,
    RepetitionParser: _repetition,
    AndParser: _and,
    NotParser: _not,
    AnyParser: _any,
    SpaceParser: _space,
    CharsParser: _chars,
    StringParser: _string,
    UntilParser: _until,
    SchemaParser: _delegate,
    RuleParser: _rule,
    RefParser: _ref,
    AtomicParser: _atomic,
    TagParser: _tag,
    GbnfParser: _delegate,
    AcParser: _delegate,
}
