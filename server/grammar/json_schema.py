"""JSON schema -> GBNF conversion, mirroring llama.cpp b10621's common/json-schema-to-grammar.cpp.

`json_schema_to_grammar(schema)` reproduces the plain GBNF builder (the `force_gbnf=false` path of a
build without llguidance) byte for byte: same rule names, same dedup suffixes, same rule order (a
std::map, i.e. sorted by name in byte order), same literal formatting (nlohmann's compact `dump()`),
and the same error texts, raised as `ValueError`.

The C++ walks std::string bytes, so a few corners (splitting a UTF-8 character before a regex
quantifier, the signed-char ordering of its key trie) are byte-level. To get those right every string
of the schema is carried as a "raw" str whose code points are the UTF-8 bytes (latin-1 decoding);
results are turned back into ordinary text on the way out. Numbers inside literals and error texts
follow nlohmann's dump(), whose Grisu2 float printing is reproduced rather than approximated by repr().
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..errors import type_error
from ..jsonfloat import dump_float

__all__ = ["GrammarBuilder", "build_grammar", "json_schema_to_grammar"]

INT_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name -> (content, deps), as in the C++ tables
PRIMITIVE_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": (
        '("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
        ("integral-part", "decimal-part"),
    ),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": (
        "object | array | string | number | boolean | null",
        ("object", "array", "string", "number", "boolean", "null"),
    ),
    "object": (
        '"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
        ("string", "value"),
    ),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": (
        ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""'),
        (),
    ),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}

STRING_FORMAT_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": (
        (
            '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
            '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
        ),
        (),
    ),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}

RESERVED_NAMES = frozenset({"root", *PRIMITIVE_RULES, *STRING_FORMAT_RULES})

INVALID_RULE_CHARS_RE = re.compile(r"[^a-zA-Z0-9-]+")
GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
GRAMMAR_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]", "\\": "\\\\"}
UUID_FORMAT_RE = re.compile(r"uuid[1-5]?")

MAX_PATTERN_DEPTH = 100
NON_LITERAL_SET = frozenset("|.()[]{}*+?^$")
ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = frozenset("^$.[]()|{}*+?")


# --- raw (byte-per-code-point) strings -------------------------------------------------------------


def _to_raw(value: object) -> object:
    """Deep copy of a parsed JSON value whose strings hold UTF-8 bytes as code points."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("latin-1")
    if isinstance(value, dict):
        return {_to_raw(k): _to_raw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_raw(v) for v in value]
    return value


def _from_raw(text: str) -> str:
    # surrogateescape keeps any byte sequence the C++ may have split mid-character
    return text.encode("latin-1").decode("utf-8", "surrogateescape")


# --- nlohmann::ordered_json semantics ---------------------------------------------------------------


class _CppError(Exception):
    """An exception the C++ lets escape json_schema_to_grammar; its text is the C++ what()."""


class _CppInvalidArgument(_CppError):
    """check_errors()'s std::invalid_argument (the schema's own errors), as opposed to the runtime and json
    errors: callers that answer a request tell them apart (b10621's ex_wrapper: 400 versus 500)."""


class SchemaInvalid(ValueError):
    """json_schema_to_grammar refused the schema with std::invalid_argument ("JSON schema conversion failed")."""


def _is_number_integer(v: object) -> bool:
    # nlohmann keeps integers that fit int64/uint64; bigger ones become doubles
    return isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= UINT64_MAX


def _type_error(expected: str, v: object) -> _CppError:
    return _CppError(type_error(expected, v))


def _get_str(v: object) -> str:
    if not isinstance(v, str):
        raise _type_error("string", v)
    return v


def _wrap(value: int, bits: int) -> int:
    """static_cast to a signed integer of `bits` bits (two's complement wrap)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _get_number(v: object, bits: int, allow_bool: bool) -> int:
    # get<int>() goes through the generic arithmetic from_json (booleans allowed);
    # get<int64_t>() through get_arithmetic_value (booleans refused)
    if isinstance(v, bool):
        if not allow_bool:
            raise _type_error("number", v)
        return int(v)
    if isinstance(v, float) or (isinstance(v, int) and not _is_number_integer(v)):
        f = float(v)
        return _wrap(math.trunc(f), bits) if math.isfinite(f) else 0
    if isinstance(v, int):
        return _wrap(v, bits)
    raise _type_error("number", v)


def _get_int(v: object) -> int:
    return _get_number(v, 32, allow_bool=True)


def _get_int64(v: object) -> int:
    return _get_number(v, 64, allow_bool=False)


def _contains(j: object, key: str) -> bool:
    return isinstance(j, dict) and key in j


def _empty(j: object) -> bool:
    if j is None:
        return True
    return isinstance(j, (dict, list)) and not j


def _size(j: object) -> int:
    if j is None:
        return 0
    return len(j) if isinstance(j, (dict, list)) else 1


def _values(j: object) -> list:
    """Range-for over a common_json: elements, object values, nothing for null, else the value once."""
    if isinstance(j, dict):
        return list(j.values())
    if isinstance(j, list):
        return list(j)
    return [] if j is None else [j]


def _items(j: object) -> list[tuple[str, object]]:
    """common_json::items(): array keys are indices, a plain value has the key ""."""
    if isinstance(j, dict):
        return list(j.items())
    if isinstance(j, list):
        return [(str(i), v) for i, v in enumerate(j)]
    return [] if j is None else [("", j)]


def _dump_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20:
            short = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
            out.append(short or f"\\u{ord(ch):04x}")
        else:
            out.append(ch)  # ensure_ascii is off: UTF-8 goes out as is
    out.append('"')
    return "".join(out)


def _dump(j: object) -> str:
    """Compact nlohmann dump() (no spaces, insertion order, UTF-8 unescaped)."""
    if j is None:
        return "null"
    if j is True:
        return "true"
    if j is False:
        return "false"
    if isinstance(j, int):
        if _is_number_integer(j):
            return str(j)
        return dump_float(float(j)) if abs(j) < 2**1024 else "null"
    if isinstance(j, float):
        return dump_float(j)
    if isinstance(j, str):
        return _dump_string(j)
    if isinstance(j, list):
        return "[" + ",".join(_dump(v) for v in j) + "]"
    return "{" + ",".join(_dump_string(k) + ":" + _dump(v) for k, v in j.items()) + "}"


def _stoull(s: str) -> int | None:
    """std::stoull: None where it throws invalid_argument; out_of_range escapes like the C++."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", s)
    if not m:
        return None
    value = int(m.group(2))
    if value > UINT64_MAX:
        raise _CppError("stoull")
    return (-value) % (UINT64_MAX + 1) if m.group(1) == "-" else value


def _stoi(s: str) -> int:
    """std::stoi; raises ValueError for both of its logic_errors (no number, out of range)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", s)
    if not m:
        raise ValueError("stoi")
    value = int(m.group(1))
    if not -(2**31) <= value <= INT_MAX:
        raise ValueError("stoi")
    return value


# --- free helpers of the C++ file -------------------------------------------------------------------


def format_literal(literal: str) -> str:
    escaped = GRAMMAR_LITERAL_ESCAPE_RE.sub(lambda m: GRAMMAR_LITERAL_ESCAPES[m.group(0)], literal)
    return f'"{escaped}"'


def build_repetition(item_rule: str, min_items: int, max_items: int, separator_rule: str = "") -> str:
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item_rule + "?"
    if not separator_rule:
        if min_items == 1 and not has_max:
            return item_rule + "+"
        if min_items == 0 and not has_max:
            return item_rule + "*"
        return f"{item_rule}{{{min_items},{max_items if has_max else ''}}}"
    result = (
        item_rule
        + " "
        + build_repetition(
            f"({separator_rule} {item_rule})",
            0 if min_items == 0 else min_items - 1,
            max_items - 1 if has_max else max_items,
        )
    )
    return f"({result})?" if min_items == 0 else result


def _gbnf_escape_length(pattern: str, pos: int) -> int:
    """Length of a GBNF-compatible escape at pos (0 if there is none)."""
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    nxt = pattern[pos + 1]
    if nxt in 'trn\\"[]':
        return 2
    n_hex = {"x": 2, "u": 4, "U": 8}.get(nxt)
    if n_hex is None or pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in "0123456789abcdefABCDEF" for h in pattern[pos + 2 : pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


# --- integer ranges (build_min_max_int) ---------------------------------------------------------------


class _IntRange:
    """Writes the GBNF alternation for an int64 range, exactly as build_min_max_int does."""

    def __init__(self) -> None:
        self.out: list[str] = []

    def digit_range(self, lo: str, hi: str) -> None:
        self.out.append(f"[{lo}]" if lo == hi else f"[{lo}-{hi}]")

    def more_digits(self, min_digits: int, max_digits: int) -> None:
        self.out.append("[0-9]")
        if min_digits == max_digits == 1:
            return
        self.out.append("{" + str(min_digits))
        if max_digits != min_digits:
            self.out.append(",")
            if max_digits != INT_MAX:
                self.out.append(str(max_digits))
        self.out.append("}")

    def uniform_range(self, lo: str, hi: str) -> None:
        out = self.out
        i = 0
        while i < len(lo) and i < len(hi) and lo[i] == hi[i]:
            i += 1
        if i > 0:
            out.append(f'"{lo[:i]}"')
        if i >= len(lo) or i >= len(hi):
            return
        if i > 0:
            out.append(" ")
        sub_len = len(lo) - i - 1
        if sub_len <= 0:
            out.append(f"[{lo[i]}-{hi[i]}]")
            return
        lo_sub, hi_sub = lo[i + 1 :], hi[i + 1 :]
        zeros, nines = "0" * sub_len, "9" * sub_len
        to_reached = False
        out.append("(")
        if lo_sub == zeros:
            self.digit_range(lo[i], chr(ord(hi[i]) - 1))
            out.append(" ")
            self.more_digits(sub_len, sub_len)
        else:
            out.append(f"[{lo[i]}] (")
            self.uniform_range(lo_sub, nines)
            out.append(")")
            if ord(lo[i]) < ord(hi[i]) - 1:
                out.append(" | ")
                if hi_sub == nines:
                    self.digit_range(chr(ord(lo[i]) + 1), hi[i])
                    to_reached = True
                else:
                    self.digit_range(chr(ord(lo[i]) + 1), chr(ord(hi[i]) - 1))
                out.append(" ")
                self.more_digits(sub_len, sub_len)
        if not to_reached:
            out.append(" | ")
            self.digit_range(hi[i], hi[i])
            out.append(" ")
            self.uniform_range(zeros, hi_sub)
        out.append(")")

    def build(self, min_value: int, max_value: int, decimals_left: int = 16, top_level: bool = True) -> None:
        has_min = min_value != INT64_MIN
        has_max = max_value != INT64_MAX
        if has_min and has_max:
            self._bounded(min_value, max_value, decimals_left)
        elif has_min:
            self._min_only(min_value, decimals_left, top_level)
        elif has_max:
            self._max_only(max_value, decimals_left, top_level)
        else:
            raise _CppError("At least one of min_value or max_value must be set")

    def _bounded(self, min_value: int, max_value: int, decimals_left: int) -> None:
        out = self.out
        if min_value < 0 and max_value < 0:
            out.append('"-" (')
            self.build(-max_value, -min_value, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            self.build(0, -min_value, decimals_left, True)
            out.append(") | ")
            min_value = 0
        min_s, max_s = str(min_value), str(max_value)
        for digits in range(len(min_s), len(max_s)):
            self.uniform_range(min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        self.uniform_range(min_s, max_s)

    def _min_only(self, min_value: int, decimals_left: int, top_level: bool) -> None:
        out = self.out
        less_decimals = max(decimals_left - 1, 1)
        if min_value < 0:
            out.append('"-" (')
            self.build(INT64_MIN, -min_value, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            self.more_digits(0, decimals_left - 1)
        elif min_value == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                self.more_digits(0, less_decimals)
            else:
                self.more_digits(1, decimals_left)
        elif min_value <= 9:
            c = str(min_value)
            range_start = "1" if top_level else "0"
            if c > range_start:
                self.digit_range(range_start, chr(ord(c) - 1))
                out.append(" ")
                self.more_digits(1, less_decimals)
                out.append(" | ")
            self.digit_range(c, "9")
            out.append(" ")
            self.more_digits(0, less_decimals)
        else:
            min_s = str(min_value)
            length, c = len(min_s), min_s[0]
            if c > "1":
                self.digit_range("1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                self.more_digits(length, less_decimals)
                out.append(" | ")
            self.digit_range(c, c)
            out.append(" (")
            self.build(int(min_s[1:]), INT64_MAX, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                self.digit_range(chr(ord(c) + 1), "9")
                out.append(" ")
                self.more_digits(length - 1, less_decimals)

    def _max_only(self, max_value: int, decimals_left: int, top_level: bool) -> None:
        out = self.out
        less_decimals = max(decimals_left - 1, 1)
        if max_value >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                self.more_digits(0, less_decimals)
                out.append(" | ")
            self.build(0, max_value, decimals_left, True)
        else:
            out.append('"-" (')
            self.build(-max_value, INT64_MAX, decimals_left, False)
            out.append(")")


def build_min_max_int(min_value: int, max_value: int) -> str:
    rng = _IntRange()
    rng.build(min_value, max_value)
    return "".join(rng.out)


# --- regex patterns ---------------------------------------------------------------------------------


class _UnsupportedPattern(Exception):
    """A valid regex with no grammar equivalent: the C++ warns and accepts any string."""


class _InvalidPattern(Exception):
    """Not a valid regex: the C++ records a conversion error."""


class _PatternTranslator:
    """The regex -> GBNF walk of _pattern_to_rule (anchored patterns only)."""

    def __init__(self, conv: _SchemaConverter, sub_pattern: str, name: str) -> None:
        self.conv = conv
        self.p = sub_pattern
        self.name = name
        self.i = 0
        self.depth = 0
        self.sub_rule_ids: dict[str, str] = {}

    @staticmethod
    def to_rule(item: tuple[str, bool]) -> str:
        text, is_literal = item
        return f'"{text}"' if is_literal else text

    def join_seq(self, seq: list[tuple[str, bool]]) -> tuple[str, bool]:
        """Join the sequence, merging consecutive literals."""
        parts: list[str] = []
        literal = ""
        for text, is_literal in seq:
            if is_literal:
                literal += text
                continue
            if literal:
                parts.append(f'"{literal}"')
                literal = ""
            parts.append(text)
        if literal:
            parts.append(f'"{literal}"')
        return " ".join(parts), False

    def dot(self) -> str:
        rule = "[\\U00000000-\\U0010FFFF]" if self.conv.dotall else "[^\\x0A\\x0D]"
        return self.conv.add_rule("dot", rule)

    def transform(self) -> tuple[str, bool]:  # noqa: C901
        seq: list[tuple[str, bool]] = []
        p, n = self.p, len(self.p)
        while self.i < n:
            c = p[self.i]
            if c == ".":
                seq.append((self.dot(), False))
                self.i += 1
            elif c == "(":
                self.open_group(seq)
            elif c == ")":
                self.i += 1
                if self.depth == 0:
                    raise _InvalidPattern("unbalanced parentheses")
                self.depth -= 1
                return self.join_seq(seq)
            elif c in "^$":
                raise _UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                seq.append((self.char_class(), False))
            elif c == "|":
                seq.append(("|", False))
                self.i += 1
            elif c in "*+?":
                if not seq:
                    raise _InvalidPattern("nothing to repeat")
                seq[-1] = (self.to_rule(seq[-1]) + c, False)
                self.i += 1
            elif c == "{":
                self.curly_repeat(seq)
            else:
                seq.append((self.literal(c), True))
        return self.join_seq(seq)

    def open_group(self, seq: list[tuple[str, bool]]) -> None:
        p, n = self.p, len(self.p)
        self.i += 1
        if self.i < n and p[self.i] == "?":
            if self.i + 1 < n and p[self.i + 1] == ":":
                self.i += 2  # a non-capturing group is an ordinary group here
            else:
                raise _UnsupportedPattern("unsupported group syntax")
        self.depth += 1
        if self.depth > MAX_PATTERN_DEPTH:
            raise _UnsupportedPattern("pattern nesting too deep")
        seq.append(("(" + self.to_rule(self.transform()) + ")", False))

    def char_class(self) -> str:
        p, n = self.p, len(self.p)
        out = "["
        self.i += 1
        while self.i < n and p[self.i] != "]":
            if p[self.i] == "\\":
                length = _gbnf_escape_length(p, self.i)
                if length == 0:
                    raise _UnsupportedPattern("unsupported escape in character class: " + p[self.i : self.i + 2])
                out += p[self.i : self.i + length]
                self.i += length
            else:
                out += p[self.i]
                self.i += 1
        if self.i >= n:
            raise _InvalidPattern("unterminated character class")
        self.i += 1
        return out + "]"

    def curly_repeat(self, seq: list[tuple[str, bool]]) -> None:
        p = self.p
        start = self.i + 1
        end = p.find("}", start)
        if end < 0:
            raise _UnsupportedPattern("unterminated curly brackets")
        self.i = end + 1
        nums = p[start:end].split(",")
        if len(nums) not in (1, 2):
            raise _UnsupportedPattern("wrong number of values in curly brackets")
        min_times, max_times = 0, INT_MAX
        try:
            if len(nums) == 1:
                min_times = max_times = _stoi(nums[0])
            else:
                if nums[0]:
                    min_times = _stoi(nums[0])
                if nums[1]:
                    max_times = _stoi(nums[1])
        except ValueError:
            raise _UnsupportedPattern("invalid number in curly brackets") from None
        if not seq:
            raise _InvalidPattern("nothing to repeat")
        sub, sub_is_literal = seq[-1]
        if not sub_is_literal:
            # a repeated sub-expression gets its own rule, shared by identical sub-expressions
            self.sub_rule_ids.setdefault(sub, "")
            if not self.sub_rule_ids[sub]:
                self.sub_rule_ids[sub] = self.conv.add_rule(f"{self.name}-{len(self.sub_rule_ids)}", sub)
            sub = self.sub_rule_ids[sub]
        item = f'"{sub}"' if sub_is_literal else sub
        seq[-1] = (build_repetition(item, min_times, max_times, ""), False)

    def literal(self, c: str) -> str:
        p, n = self.p, len(self.p)
        literal = ""
        while self.i < n:
            ch = p[self.i]
            if ch == "\\":
                if self.i == n - 1:
                    raise _InvalidPattern("trailing backslash")
                if p[self.i + 1] in ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                    literal += p[self.i + 1]
                    self.i += 2
                else:
                    length = _gbnf_escape_length(p, self.i)
                    if length == 0:
                        raise _UnsupportedPattern("unsupported escape: " + p[self.i : self.i + 2])
                    literal += p[self.i : self.i + length]
                    self.i += length
            elif ch == '"':
                literal += '\\"'
                self.i += 1
            elif ch not in NON_LITERAL_SET and (
                self.i == n - 1 or not literal or p[self.i + 1] == "." or p[self.i + 1] not in NON_LITERAL_SET
            ):
                # a char right before a quantifier is left for the next round, so it is repeated alone
                literal += ch
                self.i += 1
            else:
                break
        if not literal:  # nothing consumed, e.g. a stray ']' or '}'
            raise _UnsupportedPattern("unsupported character: " + c)
        return literal

    def run(self) -> str:
        rule = self.to_rule(self.transform())
        if self.depth != 0:
            raise _InvalidPattern("unbalanced parentheses")
        return rule


# --- the converter ----------------------------------------------------------------------------------


def _signed_char_key(ch: str) -> int:
    # std::map<char, ...> on x86 orders bytes as signed chars: UTF-8 lead/continuation bytes first
    code = ord(ch)
    return code - 256 if code >= 128 else code


class _TrieNode:
    __slots__ = ("children", "is_end_of_string")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.is_end_of_string = False

    def insert(self, s: str) -> None:
        node = self
        for ch in s:
            node = node.children.setdefault(ch, _TrieNode())
        node.is_end_of_string = True


class _SchemaConverter:
    def __init__(self, dotall: bool = False) -> None:
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.refs: dict[str, object] = {}
        self.refs_being_resolved: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    # rules

    def add_rule(self, name: str, rule: str) -> str:
        esc_name = INVALID_RULE_CHARS_RE.sub("-", name)
        if self.rules.get(esc_name, rule) == rule:
            self.rules[esc_name] = rule
            return esc_name
        i = 0
        while f"{esc_name}{i}" in self.rules and self.rules[f"{esc_name}{i}"] != rule:
            i += 1
        key = f"{esc_name}{i}"
        self.rules[key] = rule
        return key

    def add_primitive(self, name: str, builtin: tuple[str, tuple[str, ...]]) -> str:
        content, deps = builtin
        rule_name = self.add_rule(name, content)
        for dep in deps:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
                continue
            if dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return rule_name

    def format_grammar(self) -> str:
        return "".join(f"{name} ::= {rule}\n" for name, rule in sorted(self.rules.items()))

    def check_errors(self) -> None:
        if self.errors:
            raise _CppInvalidArgument("JSON schema conversion failed:\n" + "\n".join(self.errors))
        # warnings only go to the server's stderr

    # $ref resolution

    def resolve_refs(self, schema: object, url: str) -> None:
        """Record every $ref target in self.refs (remote documents are never fetched: they are null)."""

        def visit_refs(n: object) -> None:
            if isinstance(n, list):
                for x in n:
                    visit_refs(x)
            elif isinstance(n, dict):
                if "$ref" in n:
                    self._resolve_one_ref(schema, n, url)
                else:
                    for v in n.values():
                        visit_refs(v)

        visit_refs(schema)

    def _resolve_one_ref(self, schema: object, n: dict, url: str) -> None:
        ref = _get_str(n["$ref"])
        if ref in self.refs:
            return
        target: object = None
        if ref.startswith("https://"):
            base_url = ref[: ref.find("#")] if "#" in ref else ref
            if base_url in self.refs:
                target = self.refs[base_url]
            else:
                # the server's fetcher answers null; the C++ then walks from an empty target
                self.refs[base_url] = None
            if "#" not in ref or not ref[ref.find("#") + 1 :]:
                return
        elif ref.startswith("#/"):
            target = schema
            ref = url + ref
            n["$ref"] = ref
        else:
            self.errors.append("Unsupported ref: " + ref)
            return
        tokens = ref[ref.find("#") + 1 :].split("/")
        for sel in tokens[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
                continue
            if isinstance(target, list):
                index = _stoull(sel)
                if index is not None and index < len(target):
                    target = target[index]
                    continue
            self.errors.append(f"Error resolving ref {ref}: {sel} not in {_dump(target)}")
            return
        self.refs[ref] = target

    def _resolve_ref(self, ref: str) -> str:
        fragment = ref[ref.find("#") + 1 :] if "#" in ref else ref
        ref_name = "ref" + INVALID_RULE_CHARS_RE.sub("-", fragment)
        if ref_name not in self.rules and ref not in self.refs_being_resolved:
            self.refs_being_resolved.add(ref)
            resolved = self.refs.setdefault(ref, None)
            ref_name = self.visit(resolved, ref_name)
            self.refs_being_resolved.discard(ref)
        return ref_name

    # patterns

    def visit_pattern(self, pattern: str, name: str) -> str:
        snapshot = dict(self.rules)
        try:
            return self._pattern_to_rule(pattern, name)
        except _UnsupportedPattern as err:
            self.rules = snapshot
            self.warnings.append(f"pattern {pattern} is not supported ({err}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except _InvalidPattern as err:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {err}")
            return ""

    def _pattern_to_rule(self, pattern: str, name: str) -> str:
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise _UnsupportedPattern("not anchored with '^' and '$'")
        rule = _PatternTranslator(self, pattern[1:-1], name).run()
        return self.add_rule(name, f'"\\"" ({rule}) "\\""')

    # objects

    def _not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of `strings` (keys other than the declared properties)."""
        trie = _TrieNode()
        for s in strings:
            trie.insert(s)
        char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(node: _TrieNode) -> None:
            rejects = ""
            first = True
            for ch in sorted(node.children, key=_signed_char_key):
                child = node.children[ch]
                rejects += ch
                if not first:
                    out.append(" | ")
                first = False
                out.append(f"[{ch}]")
                if child.children:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                elif child.is_end_of_string:
                    out.append(f" {char_rule}+")
            if node.children:
                if not first:
                    out.append(" | ")
                out.append(f'[^"{rejects}] {char_rule}*')

        visit(trie)
        out.append(" )")
        if not trie.is_end_of_string:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def build_object_rule(  # noqa: C901
        self, properties: list[tuple[str, object]], required: set[str], name: str, additional: object
    ) -> str:
        prefix = name + "-" if name else ""
        required_props: list[str] = []
        optional_props: list[str] = []
        kv_rule_names: dict[str, str] = {}
        prop_names: list[str] = []
        for prop_name, prop_schema in properties:
            prop_rule_name = self.visit(prop_schema, prefix + prop_name)
            kv_rule_names[prop_name] = self.add_rule(
                f"{prefix}{prop_name}-kv",
                f'{format_literal(_dump_string(prop_name))} space ":" space {prop_rule_name}',
            )
            (required_props if prop_name in required else optional_props).append(prop_name)
            prop_names.append(prop_name)

        if additional is True or isinstance(additional, dict):
            sub_name = prefix + "additional"
            if isinstance(additional, dict):
                value_rule = self.visit(additional, sub_name + "-value")
            else:
                value_rule = self.add_primitive("value", PRIMITIVE_RULES["value"])
            if prop_names:
                key_rule = self.add_rule(sub_name + "-k", self._not_strings(prop_names))
            else:
                key_rule = self.add_primitive("string", PRIMITIVE_RULES["string"])
            kv_rule_names["*"] = self.add_rule(sub_name + "-kv", f'{key_rule} ":" space {value_rule}')
            optional_props.append("*")

        rule = '"{" space ' + ' "," space '.join(kv_rule_names[k] for k in required_props)
        if optional_props:
            rule += " ("
            if required_props:
                rule += ' "," space ( '

            def recursive_refs(keys: list[str], first_is_optional: bool) -> str:
                # every optional property may start the list; the ones after it are optional in turn
                if not keys:
                    return ""
                k = keys[0]
                kv_rule_name = kv_rule_names[k]
                comma_ref = f'( "," space {kv_rule_name} )'
                if first_is_optional:
                    res = comma_ref + ("*" if k == "*" else "?")
                else:
                    res = kv_rule_name + (" " + comma_ref + "*" if k == "*" else "")
                if len(keys) > 1:
                    res += " " + self.add_rule(f"{prefix}{k}-rest", recursive_refs(keys[1:], True))
                return res

            rule += " | ".join(recursive_refs(optional_props[i:], False) for i in range(len(optional_props)))
            if required_props:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    # schemas

    def _generate_union_rule(self, name: str, alt_schemas: list) -> str:
        sep = "-" if name else "alternative-"
        return " | ".join(self.visit(alt, f"{name}{sep}{i}") for i, alt in enumerate(alt_schemas))

    @staticmethod
    def _constant_rule(value: object) -> str:
        return format_literal(_dump(value))

    def visit(self, schema: object, name: str) -> str:
        schema_type = schema["type"] if _contains(schema, "type") else None
        schema_format = _get_str(schema["format"]) if _contains(schema, "format") else ""
        rule_name = name + "-" if name in RESERVED_NAMES else (name or "root")
        untyped = schema_type is None

        if _contains(schema, "$ref"):
            return self.add_rule(rule_name, self._resolve_ref(_get_str(schema["$ref"])))
        if _contains(schema, "oneOf") or _contains(schema, "anyOf"):
            alts = schema["oneOf"] if "oneOf" in schema else schema["anyOf"]
            return self.add_rule(rule_name, self._generate_union_rule(name, _values(alts)))
        if isinstance(schema_type, list):
            alts = [{**schema, "type": t} for t in schema_type]
            return self.add_rule(rule_name, self._generate_union_rule(name, alts))
        if _contains(schema, "const"):
            return self.add_rule(rule_name, self._constant_rule(schema["const"]))
        if _contains(schema, "enum"):
            values = [self._constant_rule(v) for v in _values(schema["enum"])]
            return self.add_rule(rule_name, "(" + " | ".join(values) + ")")
        if (untyped or schema_type == "object") and (
            _contains(schema, "properties")
            or (_contains(schema, "additionalProperties") and schema["additionalProperties"] is not True)
        ):
            return self._visit_object(schema, name, rule_name)
        if (untyped or schema_type in ("object", "string")) and _contains(schema, "allOf"):
            return self._visit_all_of(schema, name, rule_name)
        if (untyped or schema_type == "array") and (_contains(schema, "items") or _contains(schema, "prefixItems")):
            return self._visit_array(schema, name, rule_name)
        return self._visit_scalar(schema, schema_type, schema_format, rule_name)

    def _visit_object(self, schema: dict, name: str, rule_name: str) -> str:
        required: set[str] = set()
        if isinstance(schema.get("required"), list):
            required = {item for item in schema["required"] if isinstance(item, str)}
        properties = _items(schema["properties"]) if "properties" in schema else []
        additional = schema.get("additionalProperties")
        return self.add_rule(rule_name, self.build_object_rule(properties, required, name, additional))

    def _visit_all_of(self, schema: dict, name: str, rule_name: str) -> str:  # noqa: C901
        required: set[str] = set()
        properties: list[tuple[str, object]] = []
        enum_counts: dict[str, int] = {}

        def add_component(comp: object, is_required: bool) -> None:
            if _contains(comp, "$ref"):
                add_component(self.refs.setdefault(_get_str(comp["$ref"]), None), is_required)
            elif _contains(comp, "properties"):
                for key, value in _items(comp["properties"]):
                    properties.append((key, value))
                    if is_required:
                        required.add(key)
            elif _contains(comp, "enum"):
                for v in _values(comp["enum"]):
                    rule = self._constant_rule(v)
                    enum_counts[rule] = enum_counts.get(rule, 0) + 1

        for t in _values(schema["allOf"]):
            if _contains(t, "anyOf"):
                for tt in _values(t["anyOf"]):
                    add_component(tt, False)
            else:
                add_component(t, True)
        if enum_counts:
            total = _size(schema["allOf"])
            intersection = [rule for rule, count in sorted(enum_counts.items()) if count == total]
            if intersection:
                return self.add_rule(rule_name, "(" + " | ".join(intersection) + ")")
        return self.add_rule(rule_name, self.build_object_rule(properties, required, name, None))

    def _visit_array(self, schema: dict, name: str, rule_name: str) -> str:
        items = schema["items"] if "items" in schema else schema["prefixItems"]
        prefix = name + "-" if name else ""
        if isinstance(items, list):
            parts = [self.visit(item, f"{prefix}tuple-{i}") for i, item in enumerate(items)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(parts) + ' space "]"')
        item_rule_name = self.visit(items, prefix + "item")
        min_items = _get_int(schema["minItems"]) if "minItems" in schema else 0
        max_json = schema.get("maxItems")
        max_items = _get_int(max_json) if _is_number_integer(max_json) else INT_MAX
        repetition = build_repetition(item_rule_name, min_items, max_items, '"," space')
        return self.add_rule(rule_name, f'"[" space {repetition} space "]"')

    def _visit_scalar(self, schema: object, schema_type: object, schema_format: str, rule_name: str) -> str:
        untyped = schema_type is None
        stringy = untyped or schema_type == "string"
        if stringy and _contains(schema, "pattern"):
            return self.visit_pattern(_get_str(schema["pattern"]), rule_name)
        if stringy and UUID_FORMAT_RE.fullmatch(schema_format):
            return self.add_primitive("root" if rule_name == "root" else schema_format, PRIMITIVE_RULES["uuid"])
        if stringy and schema_format + "-string" in STRING_FORMAT_RULES:
            prim_name = schema_format + "-string"
            return self.add_rule(rule_name, self.add_primitive(prim_name, STRING_FORMAT_RULES[prim_name]))
        if schema_type == "string" and (_contains(schema, "minLength") or _contains(schema, "maxLength")):
            char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
            min_len = _get_int(schema["minLength"]) if "minLength" in schema else 0
            max_len = _get_int(schema["maxLength"]) if "maxLength" in schema else INT_MAX
            return self.add_rule(rule_name, f'"\\"" {build_repetition(char_rule, min_len, max_len)} "\\""')
        if schema_type == "integer" and any(
            _contains(schema, k) for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
        ):
            return self.add_rule(rule_name, "(" + self._int_bounds(schema) + ")")
        if _empty(schema) or schema_type == "object":
            return self.add_rule(rule_name, self.add_primitive("object", PRIMITIVE_RULES["object"]))
        if untyped and isinstance(schema, dict):
            # no type and no structural keyword (e.g. only a description): any JSON value
            return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))
        if not isinstance(schema_type, str) or schema_type not in PRIMITIVE_RULES:
            self.errors.append("Unrecognized schema: " + _dump(schema))
            return ""
        return self.add_primitive("root" if rule_name == "root" else schema_type, PRIMITIVE_RULES[schema_type])

    @staticmethod
    def _int_bounds(schema: dict) -> str:
        min_value, max_value = INT64_MIN, INT64_MAX
        if "minimum" in schema:
            min_value = _get_int64(schema["minimum"])
        elif "exclusiveMinimum" in schema:
            min_value = _wrap(_get_int64(schema["exclusiveMinimum"]) + 1, 64)
        if "maximum" in schema:
            max_value = _get_int64(schema["maximum"])
        elif "exclusiveMaximum" in schema:
            max_value = _wrap(_get_int64(schema["exclusiveMaximum"]) - 1, 64)
        return build_min_max_int(min_value, max_value)


def json_schema_to_grammar(schema: object, name: str = "") -> str:
    """GBNF for a parsed JSON schema, byte-identical to b10621's json_schema_to_grammar(); with `name`, the
    schema's rules as its grammar builder's add_schema(name, schema) writes them (no root rule).

    Raises ValueError with the C++ exception's what() text when the schema is refused (SchemaInvalid for
    upstream's std::invalid_argument).
    """
    raw = _to_raw(schema)
    converter = _SchemaConverter()
    try:
        converter.resolve_refs(raw, "")
        converter.visit(raw, name)
        converter.check_errors()
    except _CppError as err:
        kind = SchemaInvalid if isinstance(err, _CppInvalidArgument) else ValueError
        raise kind(_from_raw(str(err))) from None
    return _from_raw(converter.format_grammar())


class GrammarBuilder:
    """common_grammar_builder: the callbacks build_grammar() lends its caller, on one converter.

    Everything crosses in ordinary text and is carried as raw bytes inside, like the schemas."""

    def __init__(self, converter: _SchemaConverter) -> None:
        self._converter = converter

    def add_rule(self, name: str, rule: str) -> str:
        """Adds a rule, or finds an identical one; a clashing name gets a numeric suffix."""
        return _from_raw(self._converter.add_rule(_to_raw(name), _to_raw(rule)))

    def add_schema(self, name: str, schema: object) -> str:
        """The rule name for a parsed JSON schema, its rules added (as the root's when name is "root")."""
        return _from_raw(self._converter.visit(_to_raw(schema), "" if name == "root" else _to_raw(name)))

    def resolve_refs(self, schema: object) -> None:
        """Records the schema's local $ref targets for later add_schema() calls."""
        # the C++ rewrites each local "$ref" to base url + ref with an empty url, i.e. leaves it as is
        self._converter.resolve_refs(_to_raw(schema), "")


def build_grammar(callback: Callable[[GrammarBuilder], None], dotall: bool = False) -> str:
    """The GBNF text of whatever `callback` adds through the builder, as b10621's build_grammar() writes
    it (the space rule is always there). Raises ValueError with the C++ what() text on schema errors."""
    converter = _SchemaConverter(dotall)
    try:
        callback(GrammarBuilder(converter))
        converter.check_errors()
    except _CppError as err:
        raise ValueError(_from_raw(str(err))) from None
    return _from_raw(converter.format_grammar())
