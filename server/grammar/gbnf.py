"""GBNF parsed exactly as b10621's llama_grammar_parser does (src/llama-grammar.cpp).

The parser produces two views of one grammar:
- `rules`: llama.cpp's element vectors, generated repetition rules included. They decide acceptance
  (undefined rules, left recursion over every rule) and drive the reference recognizer in `recognizer.py`.
- `lark`: the same language as llguidance Lark source, where repetitions stay operators instead of
  right-recursive helper rules (Earley parses those in linear rather than quadratic item counts).

Every terminal becomes a one-character lexeme: GBNF is a character-level grammar, and llguidance's
lexer is greedy, so a multi-character lexeme could end where a GBNF parse would have continued.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

# llama_gretype
END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)

MAX_REPETITION_THRESHOLD = 2000
UINT64_MAX = 2**64 - 1

Element = tuple[int, int]
Rule = list[Element]


class GrammarError(ValueError):
    """A grammar b10621 refuses; the message is the one its parser logs."""


class GrammarTooDeep(ValueError):
    """A grammar b10621 takes whose nesting exceeds what mlxcel lowers safely (a recorded divergence)."""


def _is_digit(c: int) -> bool:
    return 0x30 <= c <= 0x39


def _is_word(c: int) -> bool:
    return 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or c == 0x2D or _is_digit(c)


def _rest(src: bytes, pos: int) -> str:
    """What C++ prints for `... at " + pos`: the remaining source."""
    return src[pos:].decode("utf-8", errors="replace")


def _decode_utf8(src: bytes, pos: int) -> tuple[int, int]:
    """decode_utf8(const char *): lenient, stops at NUL or after the lead byte's length."""
    lookup = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)
    first = src[pos]
    n = lookup[first >> 4]
    value = first & ((1 << (8 - n)) - 1)
    end = pos + n
    pos += 1
    while pos < end and pos < len(src) and src[pos]:
        value = (value << 6) + (src[pos] & 0x3F)
        pos += 1
    return value, pos


def _at(src: bytes, pos: int) -> int:
    return src[pos] if pos < len(src) else 0


def _parse_hex(src: bytes, pos: int, size: int) -> tuple[int, int]:
    start, end, value = pos, pos + size, 0
    while pos < end and _at(src, pos):
        c = chr(src[pos])
        if c in "0123456789abcdefABCDEF":
            value = (value << 4) + int(c, 16)
            pos += 1
        else:
            break
    if pos != end:
        raise GrammarError(f"expecting {size} hex chars at {_rest(src, start)}")
    return value, pos


_SIMPLE_ESCAPES = {ord("t"): 9, ord("r"): 13, ord("n"): 10}
_LITERAL_ESCAPES = frozenset(b'\\"[]-')


def _parse_char(src: bytes, pos: int) -> tuple[int, int]:
    c = _at(src, pos)
    if c == 0x5C:
        e = _at(src, pos + 1)
        if e == ord("x"):
            return _parse_hex(src, pos + 2, 2)
        if e == ord("u"):
            return _parse_hex(src, pos + 2, 4)
        if e == ord("U"):
            return _parse_hex(src, pos + 2, 8)
        if e in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[e], pos + 2
        if e in _LITERAL_ESCAPES:
            return e, pos + 2
        raise GrammarError(f"unknown escape at {_rest(src, pos)}")
    if c:
        return _decode_utf8(src, pos)
    raise GrammarError("unexpected end of input")


def _parse_space(src: bytes, pos: int, newline_ok: bool) -> int:
    while True:
        c = _at(src, pos)
        if c == 0x23:  # '#': comment to end of line
            while _at(src, pos) and _at(src, pos) not in (0x0D, 0x0A):
                pos += 1
        elif c in (0x20, 0x09) or (newline_ok and c in (0x0D, 0x0A)):
            pos += 1
        else:
            return pos


def _parse_name(src: bytes, pos: int) -> int:
    end = pos
    while _is_word(_at(src, end)):
        end += 1
    if end == pos:
        raise GrammarError(f"expecting name at {_rest(src, pos)}")
    return end


def _parse_int(src: bytes, pos: int) -> int:
    end = pos
    while _is_digit(_at(src, end)):
        end += 1
    if end == pos:
        raise GrammarError(f"expecting integer at {_rest(src, pos)}")
    return end


def _stoull(text: bytes) -> int:
    value = int(text)
    if value > UINT64_MAX:
        raise GrammarError("stoull")
    return value


# Tokenizes the text of a `<token>` terminal with parse_special; None when there is no vocabulary.
TokenizeFn = Callable[[str], list[int]]


@dataclass
class Grammar:
    rules: list[Rule]
    symbol_ids: dict[str, int]
    lark: str
    root: int


@dataclass
class _Seq:
    """One alternative in Lark form: its symbols as (text, is_atom); repetition applies to the last.

    An atom is one Lark term (a rule name, a one-character regex, a token); a literal of several
    characters is not, and is moved into a rule of its own before an operator applies to it, so the
    Lark source never nests parentheses (llguidance refuses deep nesting)."""

    items: list[tuple[str, bool]] = field(default_factory=list)


class _Parser:
    def __init__(self, src: bytes, tokenize: TokenizeFn | None, n_vocab: int | None):
        self.src = src
        self.tokenize = tokenize
        self.n_vocab = n_vocab
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[Rule] = []
        self.lark_rules: dict[int, list[_Seq]] = {}
        self.hoisted: list[str] = []  # bodies of the h<n> rules that carry an operand of an operator
        self.terminals: dict[str, str] = {}  # character-class regex -> its terminal's name

    # symbol table, as get_symbol_id / generate_symbol_id
    def symbol(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate(self, base: str) -> int:
        next_id = len(self.symbol_ids)
        self.symbol_ids[f"{base}_{next_id}"] = next_id
        return next_id

    def add_rule(self, rule_id: int, rule: Rule) -> None:
        if len(self.rules) <= rule_id:
            self.rules.extend([] for _ in range(rule_id + 1 - len(self.rules)))
        self.rules[rule_id] = rule

    def parse(self) -> None:
        pos = _parse_space(self.src, 0, True)
        while _at(self.src, pos):
            pos = self.parse_rule(pos)
        for rule in self.rules:
            if not rule:
                raise GrammarError("Undefined rule")
            for kind, value in rule:
                if kind == RULE_REF and (value >= len(self.rules) or not self.rules[value]):
                    for name, sid in self.symbol_ids.items():
                        if sid == value:
                            raise GrammarError(f"Undefined rule identifier '{name}'")

    def parse_rule(self, pos: int) -> int:
        src = self.src
        name_end = _parse_name(src, pos)
        name = src[pos:name_end].decode("ascii")
        pos = _parse_space(src, name_end, False)
        rule_id = self.symbol(name)
        if src[pos : pos + 3] != b"::=":
            raise GrammarError(f"expecting ::= at {_rest(src, pos)}")
        pos = _parse_space(src, pos + 3, True)
        pos, alts = self.parse_alternates(pos, name, rule_id, False)
        self.lark_rules[rule_id] = alts
        c = _at(src, pos)
        if c == 0x0D:
            pos += 2 if _at(src, pos + 1) == 0x0A else 1
        elif c == 0x0A:
            pos += 1
        elif c:
            raise GrammarError(f"expecting newline or end at {_rest(src, pos)}")
        return _parse_space(src, pos, True)

    def parse_alternates(self, pos: int, name: str, rule_id: int, nested: bool) -> tuple[int, list[_Seq]]:
        rule: Rule = []
        alts = [_Seq()]
        pos = self.parse_sequence(pos, name, rule, nested, alts[-1])
        while _at(self.src, pos) == ord("|"):
            rule.append((ALT, 0))
            pos = _parse_space(self.src, pos + 1, True)
            alts.append(_Seq())
            pos = self.parse_sequence(pos, name, rule, nested, alts[-1])
        rule.append((END, 0))
        self.add_rule(rule_id, rule)
        return pos, alts

    def parse_sequence(self, pos: int, name: str, rule: Rule, nested: bool, seq: _Seq) -> int:  # noqa: C901
        src = self.src
        last_sym_start = len(rule)
        n_prev_rules = 1

        def repeat(lo: int, hi: int) -> None:
            nonlocal n_prev_rules
            no_max = hi == UINT64_MAX
            if last_sym_start == len(rule):
                raise GrammarError(f"expecting preceding item to */+/?/{{ at {_rest(src, pos)}")
            prev = rule[last_sym_start:]
            total = hi if (not no_max and hi > 0) else (lo if lo > 0 else 1)
            if n_prev_rules * total >= MAX_REPETITION_THRESHOLD:
                raise GrammarError(
                    "number of rules that are going to be repeated multiplied by the new repetition exceeds sane "
                    "defaults, please reduce the number of repetitions or rule complexity"
                )
            if lo == 0:
                del rule[last_sym_start:]
            else:
                for _ in range(1, lo):
                    rule.extend(prev)
            last_rec = 0
            n_opt = 1 if no_max else hi - lo
            for i in range(n_opt):
                rec = list(prev)
                rec_id = self.generate(name)
                if i > 0 or no_max:
                    rec.append((RULE_REF, rec_id if no_max else last_rec))
                rec += [(ALT, 0), (END, 0)]
                self.add_rule(rec_id, rec)
                last_rec = rec_id
            if n_opt > 0:
                rule.append((RULE_REF, last_rec))
            n_prev_rules *= total
            # Lark: the operator applies to the last item (erased by x{0}, as the elements are)
            text, atom = seq.items.pop()
            if lo == hi == 0:
                return
            op = {(0, UINT64_MAX): "*", (1, UINT64_MAX): "+", (0, 1): "?"}.get((lo, hi))
            if op is None:
                op = f"{{{lo},}}" if no_max else f"{{{lo},{hi}}}"
            seq.items.append((f"{text if atom else self.hoist(text)}{op}", False))

        def symbol_start(item: str) -> None:
            nonlocal last_sym_start, n_prev_rules
            last_sym_start = len(rule)
            n_prev_rules = 1
            seq.items.append((item, True))

        while _at(src, pos):
            c = src[pos]
            if c == ord('"'):
                pos += 1
                last_sym_start, n_prev_rules = len(rule), 1
                chars = []
                while _at(src, pos) != ord('"'):
                    if not _at(src, pos):
                        raise GrammarError("unexpected end of input")
                    ch, pos = _parse_char(src, pos)
                    rule.append((CHAR, ch))
                    chars.append(self.terminal(_char_class([(ch, ch)], False)))
                if chars:
                    seq.items.append((" ".join(chars), len(chars) == 1))
                pos = _parse_space(src, pos + 1, nested)
            elif c == ord("["):
                pos += 1
                negated = _at(src, pos) == ord("^")
                if negated:
                    pos += 1
                last_sym_start, n_prev_rules = len(rule), 1
                ranges: list[tuple[int, int]] = []
                while _at(src, pos) != ord("]"):
                    if not _at(src, pos):
                        raise GrammarError("unexpected end of input")
                    ch, pos = _parse_char(src, pos)
                    kind = CHAR_ALT if last_sym_start < len(rule) else (CHAR_NOT if negated else CHAR)
                    rule.append((kind, ch))
                    hi_ch = ch
                    if _at(src, pos) == ord("-") and _at(src, pos + 1) != ord("]"):
                        if not _at(src, pos + 1):
                            raise GrammarError("unexpected end of input")
                        hi_ch, pos = _parse_char(src, pos + 1)
                        rule.append((CHAR_RNG_UPPER, hi_ch))
                    ranges.append((ch, hi_ch))
                if ranges:  # "[]" and "[^]" leave no element at all: they match the empty string
                    seq.items.append((self.terminal(_char_class(ranges, negated)), True))
                pos = _parse_space(src, pos + 1, nested)
            elif c in (ord("<"), ord("!")):
                kind = TOKEN
                if c == ord("!"):
                    kind = TOKEN_NOT
                    pos += 1
                token, end = self.parse_token(pos)
                symbol_start(self.token_item(kind, token))
                rule.append((kind, token))
                pos = _parse_space(src, end, nested)
            elif _is_word(c):
                name_end = _parse_name(src, pos)
                ref = self.symbol(src[pos:name_end].decode("ascii"))
                pos = _parse_space(src, name_end, nested)
                symbol_start(f"r{ref}")
                rule.append((RULE_REF, ref))
            elif c == ord("("):
                pos = _parse_space(src, pos + 1, True)
                n_before = len(self.symbol_ids)
                sub_id = self.generate(name)
                pos, alts = self.parse_alternates(pos, name, sub_id, True)
                self.lark_rules[sub_id] = alts
                n_prev = max(1, len(self.symbol_ids) - n_before)
                symbol_start(f"r{sub_id}")
                n_prev_rules = n_prev
                rule.append((RULE_REF, sub_id))
                if _at(src, pos) != ord(")"):
                    raise GrammarError(f"expecting ')' at {_rest(src, pos)}")
                pos = _parse_space(src, pos + 1, nested)
            elif c == ord("."):
                symbol_start(self.terminal(ANY_CHAR))
                rule.append((CHAR_ANY, 0))
                pos = _parse_space(src, pos + 1, nested)
            elif c in (ord("*"), ord("+"), ord("?")):
                pos = _parse_space(src, pos + 1, nested)
                repeat(*{ord("*"): (0, UINT64_MAX), ord("+"): (1, UINT64_MAX), ord("?"): (0, 1)}[c])
            elif c == ord("{"):
                pos = _parse_space(src, pos + 1, nested)
                if not _is_digit(_at(src, pos)):
                    raise GrammarError(f"expecting an int at {_rest(src, pos)}")
                end = _parse_int(src, pos)
                lo = _stoull(src[pos:end])
                pos = _parse_space(src, end, nested)
                hi = UINT64_MAX
                if _at(src, pos) == ord("}"):
                    hi = lo
                    pos = _parse_space(src, pos + 1, nested)
                elif _at(src, pos) == ord(","):
                    pos = _parse_space(src, pos + 1, nested)
                    if _is_digit(_at(src, pos)):
                        end = _parse_int(src, pos)
                        hi = _stoull(src[pos:end])
                        pos = _parse_space(src, end, nested)
                    if _at(src, pos) != ord("}"):
                        raise GrammarError(f"expecting '}}' at {_rest(src, pos)}")
                    pos = _parse_space(src, pos + 1, nested)
                else:
                    raise GrammarError(f"expecting ',' at {_rest(src, pos)}")
                if lo > MAX_REPETITION_THRESHOLD:
                    raise GrammarError(
                        "number of repetitions exceeds sane defaults, please reduce the number of repetitions"
                    )
                if hi != UINT64_MAX and hi > MAX_REPETITION_THRESHOLD:
                    hi = UINT64_MAX
                repeat(lo, hi)
            else:
                break
        return pos

    def terminal(self, regex: str) -> str:
        """One named Lark terminal per distinct character class: llguidance counts every inline regex as a
        terminal of its own, and a large grammar would pass its 65535-symbol bound."""
        return self.terminals.setdefault(regex, f"T{len(self.terminals)}")

    def hoist(self, body: str) -> str:
        self.hoisted.append(body)
        return f"h{len(self.hoisted) - 1}"

    def token_item(self, kind: int, token: int) -> str:
        if self.n_vocab is not None and token >= self.n_vocab:  # b10621 has no range check: no token is it
            return self.terminal(NOTHING) if kind == TOKEN else "<[*]>"
        return f"<[{token}]>" if kind == TOKEN else f"<[^{token}]>"

    def parse_token(self, pos: int) -> tuple[int, int]:
        src, start = self.src, pos
        if _at(src, pos) != ord("<"):
            raise GrammarError(f"expecting '<' at {_rest(src, pos)}")
        pos += 1
        if _at(src, pos) == ord("["):
            pos += 1
            end = _parse_int(src, pos)
            token = int(src[pos:end])
            if token > 2**64 - 1:
                raise GrammarError("stoul")
            token &= 0xFFFFFFFF  # std::stoul into a uint32_t
            pos = end
            if _at(src, pos) != ord("]"):
                raise GrammarError(f"expecting ']' at {_rest(src, pos)}")
            pos += 1
            if _at(src, pos) != ord(">"):
                raise GrammarError(f"expecting '>' at {_rest(src, pos)}")
            return token, pos + 1
        if self.tokenize is None:
            raise GrammarError(f"no vocab to parse token at {_rest(src, start)}")
        while _at(src, pos) and _at(src, pos) != ord(">"):
            pos += 1
        if _at(src, pos) != ord(">"):
            raise GrammarError(f"expecting '>' at {_rest(src, pos)}")
        pos += 1
        text = src[start:pos].decode("utf-8", errors="replace")
        ids = self.tokenize(text)
        if len(ids) != 1:
            raise GrammarError(f"invalid token '{text}'")
        return ids[0], pos


# --- Lark rendering -------------------------------------------------------------------------------

ANY_CHAR = r"/(?s:.)/"
_MAX_SCALAR = 0x10FFFF


def _regex_char(cp: int) -> str:
    if 0x30 <= cp <= 0x39 or 0x41 <= cp <= 0x5A or 0x61 <= cp <= 0x7A:
        return chr(cp)
    return f"\\x{{{cp:X}}}"


def _valid_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Clip to Unicode scalar values: surrogates and values past U+10FFFF can never be decoded."""
    out = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, _MAX_SCALAR))):
            if a <= b:
                out.append((a, b))
    return out


def _char_class(ranges: list[tuple[int, int]], negated: bool) -> str:
    valid = _valid_ranges(ranges)
    body = "".join(_regex_char(a) if a == b else f"{_regex_char(a)}-{_regex_char(b)}" for a, b in valid)
    if negated:
        return f"/[^{body}]/" if body else ANY_CHAR
    # A class with no decodable code point matches nothing; the empty class stands for that.
    return f"/[{body}]/" if body else NOTHING


NOTHING = r"/[^\x{0}-\x{10FFFF}]/"


def _sequence(seq: _Seq) -> str:
    return " ".join(text for text, _ in seq.items)


def _alternation(alts: list[_Seq]) -> str:
    """A rule body; empty alternatives make it optional."""
    nonempty = [_sequence(a) for a in alts if a.items]
    if not nonempty:
        return '""'
    body = " | ".join(nonempty)
    return f"({body})?" if len(nonempty) < len(alts) else body


# llguidance compiles rule references recursively; a reference chain a few thousand deep overflows its
# stack and takes the process down. b10621 has no such bound, so this one is recorded as a divergence.
MAX_LOWERED_DEPTH = 1000


def _reference_depth(lark: str) -> int:
    """The deepest stack a depth-first walk of the Lark rules from `start` reaches (cycles cut)."""
    refs: dict[str, list[str]] = {}
    for line in lark.splitlines()[1:]:
        name, body = line.split(": ", 1)
        if name.startswith("T"):
            continue
        terms = (t.strip("()|?*+") for t in body.split() if not t.startswith(("/", "<")))
        refs[name] = [t for t in (re.sub(r"\{[0-9,]*\}$", "", t) for t in terms) if re.fullmatch(r"[rh][0-9]+", t)]
    deepest, done, on_stack = 0, set(), set()
    stack = [("start", iter(refs["start"]))]
    on_stack.add("start")
    while stack:
        deepest = max(deepest, len(stack))
        name, it = stack[-1]
        nxt = next((r for r in it if r not in done and r not in on_stack), None)
        if nxt is None:
            stack.pop()
            on_stack.discard(name)
            done.add(name)
        else:
            on_stack.add(nxt)
            stack.append((nxt, iter(refs.get(nxt, []))))
    return deepest


def _lark(parser: _Parser, root: int) -> str:
    # no_forcing: llguidance otherwise narrows forced text to its canonical tokenization, where b10621's
    # grammar sampler allows every token that keeps the output parsable
    lines = ['%llguidance {"no_forcing": true}', f"start: r{root}"]
    for rule_id in sorted(parser.lark_rules):
        lines.append(f"r{rule_id}: {_alternation(parser.lark_rules[rule_id])}")
    lines += [f"h{i}: {body}" for i, body in enumerate(parser.hoisted)]
    lines += [f"{name}: {regex}" for regex, name in parser.terminals.items()]
    return "\n".join(lines) + "\n"


# --- validation after parsing (llama_grammar_init_impl) ------------------------------------------


def _is_end_of_sequence(e: Element) -> bool:
    return e[0] in (END, ALT)


def _left_recursive(rules: list[Rule]) -> int | None:  # noqa: C901
    """The first rule index llama_grammar_detect_left_recursion flags, scanning every rule."""
    n = len(rules)
    visited, in_progress, may_be_empty = [False] * n, [False] * n, [False] * n

    def detect(i: int) -> bool:
        if in_progress[i]:
            return True
        in_progress[i] = True
        rule = rules[i]
        at_start = True
        for e in rule:
            if _is_end_of_sequence(e):
                if at_start:
                    may_be_empty[i] = True
                    break
                at_start = True
            else:
                at_start = False
        recurse = True
        for e in rule:
            if e[0] == RULE_REF and recurse:
                if detect(e[1]):
                    return True
                if not may_be_empty[e[1]]:
                    recurse = False
            elif _is_end_of_sequence(e):
                recurse = True
            else:
                recurse = False
        in_progress[i] = False
        visited[i] = True
        return False

    for i in range(n):
        if not visited[i] and detect(i):
            return i
    return None


def parse_gbnf(
    source: str | bytes, tokenize: TokenizeFn | None = None, root: str = "root", n_vocab: int | None = None
) -> Grammar:
    """Parse and validate like llama_grammar_init_impl; raise GrammarError with b10621's log text."""
    src = source.encode("utf-8") if isinstance(source, str) else source
    src = src.split(b"\0", 1)[0]  # a C string ends at the first NUL
    parser = _Parser(src, tokenize, n_vocab)
    try:
        parser.parse()
    except RecursionError:
        raise GrammarTooDeep(f"grammar rules nest deeper than mlxcel's limit of {MAX_LOWERED_DEPTH}") from None
    if not parser.rules:
        raise GrammarError("failed to parse grammar")
    if root not in parser.symbol_ids:
        raise GrammarError(f"grammar does not contain a '{root}' symbol")
    try:
        bad = _left_recursive(parser.rules)
    except RecursionError:
        raise GrammarTooDeep(f"grammar rules nest deeper than mlxcel's limit of {MAX_LOWERED_DEPTH}") from None
    if bad is not None:
        raise GrammarError(f"unsupported grammar, left recursion detected for nonterminal at index {bad}")
    root_id = parser.symbol_ids[root]
    lark = _lark(parser, root_id)
    if _reference_depth(lark) > MAX_LOWERED_DEPTH:
        raise GrammarTooDeep(f"grammar rules nest deeper than mlxcel's limit of {MAX_LOWERED_DEPTH}")
    return Grammar(parser.rules, parser.symbol_ids, lark, root_id)
