"""GBNF from a PEG arena: common_peg_arena::build_grammar() of b10621's common/peg-parser.cpp, with
its Aho-Corasick helpers for until() (everything that avoids the delimiters) and ac() (everything
up to and including the first delimiter).

Rules go to a grammar builder (server.grammar.json_schema.GrammarBuilder, the C++
common_grammar_builder), which owns naming and the final text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..grammar.json_schema import format_literal
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
from .rule_order import unordered_map_order
from .trie import AhoCorasick

if TYPE_CHECKING:
    from ..grammar.json_schema import GrammarBuilder
    from .arena import PegArena

# completing chars, non-root destinations (sorted by state), chars with a transition, state namer
_RuleBody = Callable[[list[int], list[tuple[int, list[int]]], list[int], Callable[[int], str]], str]


def _escape_class_char(c: int) -> str:
    if chr(c) in "-][\\":
        return "\\" + chr(c)
    if c == 0x0A:
        return "\\n"
    if c == 0x09:
        return "\\t"
    if c == 0x0D:
        return "\\r"
    if 0x20 <= c <= 0x7E:
        return chr(c)
    if c <= 0xFF:
        return f"\\x{c:02X}"
    if c <= 0xFFFF:
        return f"\\u{c:04X}"
    return f"\\U{c:08X}"


def _char_class(chars: list[int], negate: bool) -> str:
    return ("[^" if negate else "[") + "".join(map(_escape_class_char, chars)) + "]"


def _ac_grammar(builder: GrammarBuilder, prefix: str, strings: list[str], build_rule: _RuleBody) -> str:
    """One rule per non-matching automaton state; returns the start state's rule name."""
    ac = AhoCorasick(strings)

    def state_name(state: int) -> str:
        return prefix if state == 0 else f"{prefix}-{state:02d}"

    for q in range(ac.num_states()):
        if ac.is_terminal(q):
            continue
        buckets: dict[int, list[int]] = {}
        completing: list[int] = []
        specific: list[int] = []
        for c in ac.alphabet:
            d = ac.next(q, c)
            if ac.is_terminal(d):
                completing.append(c)
                specific.append(c)
            elif d != 0:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        builder.add_rule(state_name(q), build_rule(completing, sorted(buckets.items()), specific, state_name))

    # an empty delimiter makes the start state a match: keep its name valid with an empty rule
    if ac.is_terminal(0):
        builder.add_rule(prefix, "|")
    return state_name(0)


def _excluding_body(
    completing: list[int],
    buckets: list[tuple[int, list[int]]],
    specific: list[int],
    state_name: Callable[[int], str],
) -> str:
    # every state accepts, and completing chars have no alternative, so no delimiter can appear
    rhs = "|"
    for d, chars in buckets:
        rhs += f" {_char_class(chars, False)} {state_name(d)} |"
    return rhs + f" {_char_class(specific, True)} {state_name(0)}"


def _including_body(
    completing: list[int],
    buckets: list[tuple[int, list[int]]],
    specific: list[int],
    state_name: Callable[[int], str],
) -> str:
    alts = [_char_class(completing, False)] if completing else []
    alts += [f"{_char_class(chars, False)} {state_name(d)}" for d, chars in buckets]
    alts.append(f"{_char_class(specific, True)} {state_name(0)}")
    return " | ".join(alts)


def _collect_reachable_rules(arena: PegArena, start_id: int) -> set[str]:
    reachable: set[str] = set()

    def visit(parser_id: int) -> None:
        p = arena.get(parser_id)
        if isinstance(p, (SequenceParser, ChoiceParser)):
            for child in p.children:
                visit(child)
        elif isinstance(p, RuleParser):
            if p.name not in reachable:
                reachable.add(p.name)
                visit(p.child)
        elif isinstance(p, RefParser):
            visit(arena.get_rule(p.name))
        elif isinstance(p, SINGLE_CHILD_TYPES):
            visit(p.child)

    visit(start_id)
    return reachable


def _schema_delegates(s: SchemaParser) -> bool:
    """Whether a schema wrapper emits its child's grammar rather than the schema's."""
    schema = s.schema
    if not s.raw or not isinstance(schema, dict):
        return False
    if "type" in schema:
        type_val = schema["type"]
        if type_val == "string":
            return True
        # a nullable ["string", "null"] is still raw text: the first non-null type decides
        if isinstance(type_val, list):
            for t in type_val:
                if isinstance(t, str) and t != "null":
                    return t == "string"
        return False
    # enum values are literal strings in the raw format
    return "enum" in schema


def build_arena_grammar(arena: PegArena, builder: GrammarBuilder, lazy: bool) -> None:  # noqa: C901
    def effective(parser_id: int) -> ParserVariant:
        """The parser a wrapper stands for, to decide on parentheses."""
        while True:
            p = arena.get(parser_id)
            transparent = isinstance(p, (TagParser, AtomicParser))
            if transparent or (isinstance(p, SchemaParser) and _schema_delegates(p)):
                parser_id = p.child
            else:
                return p

    def needs_parens(parser_id: int, *kinds: type) -> bool:
        return isinstance(effective(parser_id), kinds)

    def to_gbnf(parser_id: int) -> str:  # noqa: C901
        p = arena.get(parser_id)
        if isinstance(p, (EpsilonParser, StartParser, EndParser, AndParser, NotParser)):
            return ""  # nothing to match, or lookahead GBNF cannot express
        if isinstance(p, LiteralParser):
            return format_literal(p.literal)
        if isinstance(p, SequenceParser):
            parts = []
            for child in p.children:
                child_gbnf = to_gbnf(child)
                if not child_gbnf:
                    continue
                parens = needs_parens(child, ChoiceParser, SequenceParser)
                parts.append(f"({child_gbnf})" if parens else child_gbnf)
            return " ".join(parts)
        if isinstance(p, ChoiceParser):
            s = ""
            for child in p.children:
                # an empty first alternative adds no separator, as in the C++
                if s:
                    s += " | "
                child_gbnf = to_gbnf(child)
                s += f"({child_gbnf})" if needs_parens(child, ChoiceParser) else child_gbnf
            return s
        if isinstance(p, RepetitionParser):
            child_gbnf = to_gbnf(p.child)
            if needs_parens(p.child, ChoiceParser, SequenceParser):
                child_gbnf = f"({child_gbnf})"
            return child_gbnf + _quantifier(p.min_count, p.max_count)
        if isinstance(p, AnyParser):
            return "."
        if isinstance(p, SpaceParser):
            return "space"
        if isinstance(p, CharsParser):
            return p.pattern + _quantifier(p.min_count, p.max_count)
        if isinstance(p, StringParser):
            d = p.delimiter
            return f'( [^{d}\\\\] | "\\\\" ( [{d}\\\\/ bfnrt] | "u" [0-9a-fA-F]{{4}} ) )*'
        if isinstance(p, UntilParser):
            if not p.delimiters:
                return ".*"
            return _ac_grammar(builder, f"until-{parser_id}", p.delimiters, _excluding_body)
        if isinstance(p, SchemaParser):
            if _schema_delegates(p):
                return to_gbnf(p.child)
            return builder.add_schema(p.name, p.schema)
        if isinstance(p, (RuleParser, RefParser)):
            return p.name
        if isinstance(p, (TagParser, AtomicParser)):
            return to_gbnf(p.child)
        if isinstance(p, GbnfParser):
            return p.grammar
        assert isinstance(p, AcParser)
        return _ac_grammar(builder, f"ac-{parser_id}", p.delimiters, _including_body)

    rules = arena.rules
    # the C++ walks an unordered_map; its order decides which of two clashing names gets a suffix
    rule_names = unordered_map_order(rules)

    def trigger_rule(name: str) -> RuleParser | None:
        p = arena.get(rules[name])
        return p if isinstance(p, RuleParser) and p.trigger else None

    if lazy:
        reachable: set[str] = set()
        for name in rule_names:
            if trigger_rule(name):
                reachable.add(name)
                reachable |= _collect_reachable_rules(arena, rules[name])
    else:
        reachable = _collect_reachable_rules(arena, arena.root)

    for name in rule_names:
        p = arena.get(rules[name])
        if name in reachable and isinstance(p, RuleParser):
            builder.add_rule(p.name, to_gbnf(p.child))

    if lazy:
        triggers = sorted(rule.name for rule in map(trigger_rule, rule_names) if rule)
        builder.add_rule("root", " | ".join(triggers))
    elif arena.root != INVALID_PARSER_ID:
        builder.add_rule("root", to_gbnf(arena.root))


def _quantifier(min_count: int, max_count: int) -> str:
    if min_count == 0 and max_count == 1:
        return "?"
    if min_count == 0 and max_count == -1:
        return "*"
    if min_count == 1 and max_count == -1:
        return "+"
    if max_count == -1:
        return f"{{{min_count},}}"
    if min_count == max_count:
        return "" if min_count == 1 else f"{{{min_count}}}"
    return f"{{{min_count},{max_count}}}"
