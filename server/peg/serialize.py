"""Serialization of a PegArena: b10621's common_peg_arena::to_json(), from_json(), save() and load()
(common/peg-parser.cpp), with the parts of nlohmann::ordered_json 3.12.0 they go through
(common/json.cpp wraps it): the compact dump() and the parser with its error messages.

b10621's chat layer hands a parser to a task as the string of save(), and the task load()s it.
save() is byte-identical to the C++: keys in the C++ order, rules in the iteration order of the
C++'s unordered_map (rule_order.py), numbers and strings as nlohmann prints them. Parser ids are
size_t there: INVALID_PARSER_ID (-1) is written as 18446744073709551615 and read back as -1.

load() raises ValueError with the C++ what(): nlohmann's parse, type and range errors, and
from_json()'s own checks. Positions in parse errors count UTF-8 bytes, as nlohmann does; a message
that quotes bytes which are not valid UTF-8 holds them as surrogate escapes.

Where the port cannot follow the C++: a schema parser whose schema is JSON null loads as
SchemaParser(schema=None), the same as the builder's null schema, while the C++ loads it as no schema
at all (nullptr), whose GBNF is the child's; a string delimiter is kept as the first character of
the JSON string, where the C++ keeps its first byte. Number-to-integer conversions out of range
(undefined in C++) give what GCC's x86-64 code gives.
"""

from __future__ import annotations

import copy
import json as _stdlib_json
import math

from ..errors import json_type_name
from ..jsonfloat import dump_float  # nlohmann's Grisu2 number printing
from .arena import PegArena
from .parsers import (
    AcParser,
    AndParser,
    AnyParser,
    AtomicParser,
    CharRange,
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

__all__ = ["arena_from_json", "arena_to_json", "dump_json", "load", "parse_json", "save"]

_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
_SIZE_T = 2**64


# --- bytes ---------------------------------------------------------------------------------------


def _encode(text: str) -> bytes:
    """The UTF-8 bytes of `text`; surrogate escapes (U+DC80..U+DCFF) stand for raw bytes."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        out = bytearray()
        for ch in text:
            code = ord(ch)
            if 0xDC80 <= code <= 0xDCFF:
                out.append(code - 0xDC00)
            else:
                out += ch.encode("utf-8", "surrogatepass")
        return bytes(out)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


# --- dump() --------------------------------------------------------------------------------------

# second-byte ranges of the well-formed UTF-8 sequences (Unicode table 3-7), by lead byte
_UTF8_LEADS: dict[int, tuple[int, int, int]] = {}
for _lead in range(0xC2, 0xE0):
    _UTF8_LEADS[_lead] = (1, 0x80, 0xBF)
for _lead in range(0xE0, 0xF0):
    _UTF8_LEADS[_lead] = (2, 0x80, 0xBF)
for _lead in range(0xF0, 0xF5):
    _UTF8_LEADS[_lead] = (3, 0x80, 0xBF)
_UTF8_LEADS[0xE0] = (2, 0xA0, 0xBF)
_UTF8_LEADS[0xED] = (2, 0x80, 0x9F)
_UTF8_LEADS[0xF0] = (3, 0x90, 0xBF)
_UTF8_LEADS[0xF4] = (3, 0x80, 0x8F)


def _utf8_error(data: bytes) -> str | None:
    """The type_error.316 serializer::dump_escaped() throws in strict mode, or None for valid UTF-8."""
    need, lo, hi = 0, 0x80, 0xBF
    for i, byte in enumerate(data):
        if need == 0:
            if byte < 0x80:
                continue
            lead = _UTF8_LEADS.get(byte)
            if lead is None:
                return f"[json.exception.type_error.316] invalid UTF-8 byte at index {i}: 0x{byte:02X}"
            need, lo, hi = lead
        else:
            if not lo <= byte <= hi:
                return f"[json.exception.type_error.316] invalid UTF-8 byte at index {i}: 0x{byte:02X}"
            need, lo, hi = need - 1, 0x80, 0xBF
    if need:
        return f"[json.exception.type_error.316] incomplete UTF-8 string; last byte: 0x{data[-1]:02X}"
    return None


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _dump_string(text: str) -> str:
    if not text.isascii():
        error = _utf8_error(_encode(text))
        if error is not None:
            raise ValueError(error)
    out = ['"']
    for ch in text:
        escaped = _ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)  # ensure_ascii is off: everything else, DEL included, goes out as is
    out.append('"')
    return "".join(out)


def _dump_number(value: float) -> str:
    if isinstance(value, int):
        if _INT64_MIN <= value <= _UINT64_MAX:
            return str(value)
        # nlohmann holds a bigger integer as a double
        return dump_float(float(value)) if abs(value) < 2**1024 else "null"
    return dump_float(value)


def dump_json(value: object) -> str:
    """nlohmann's compact dump() (indent -1, ensure_ascii off, strict UTF-8) of a JSON value made of
    dict (keys in insertion order), list/tuple, str, int, float, bool and None. A string that is not
    valid UTF-8 (surrogate escapes) raises ValueError with nlohmann's type_error.316."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return _dump_number(value)
    if isinstance(value, str):
        return _dump_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dump_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_dump_string(key) + ":" + dump_json(item) for key, item in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


# --- parse(): nlohmann's lexer and parser ---------------------------------------------------------

_EOF = -1

# lexer_base::token_type
(
    _UNINITIALIZED,
    _LITERAL_TRUE,
    _LITERAL_FALSE,
    _LITERAL_NULL,
    _VALUE_STRING,
    _VALUE_UNSIGNED,
    _VALUE_INTEGER,
    _VALUE_FLOAT,
    _BEGIN_ARRAY,
    _BEGIN_OBJECT,
    _END_ARRAY,
    _END_OBJECT,
    _NAME_SEPARATOR,
    _VALUE_SEPARATOR,
    _PARSE_ERROR,
    _END_OF_INPUT,
    _LITERAL_OR_VALUE,
) = range(17)

_TOKEN_NAMES = {
    _UNINITIALIZED: "<uninitialized>",
    _LITERAL_TRUE: "true literal",
    _LITERAL_FALSE: "false literal",
    _LITERAL_NULL: "null literal",
    _VALUE_STRING: "string literal",
    _VALUE_UNSIGNED: "number literal",
    _VALUE_INTEGER: "number literal",
    _VALUE_FLOAT: "number literal",
    _BEGIN_ARRAY: "'['",
    _BEGIN_OBJECT: "'{'",
    _END_ARRAY: "']'",
    _END_OBJECT: "'}'",
    _NAME_SEPARATOR: "':'",
    _VALUE_SEPARATOR: "','",
    _PARSE_ERROR: "<parse error>",
    _END_OF_INPUT: "end of input",
    _LITERAL_OR_VALUE: "'[', '{', or a literal",
}

_PUNCTUATION = {
    ord("["): _BEGIN_ARRAY,
    ord("]"): _END_ARRAY,
    ord("{"): _BEGIN_OBJECT,
    ord("}"): _END_OBJECT,
    ord(":"): _NAME_SEPARATOR,
    ord(","): _VALUE_SEPARATOR,
}
_LITERALS = {
    ord("t"): (b"true", _LITERAL_TRUE),
    ord("f"): (b"false", _LITERAL_FALSE),
    ord("n"): (b"null", _LITERAL_NULL),
}
_SIMPLE_ESCAPES = {
    ord('"'): 0x22,
    ord("\\"): 0x5C,
    ord("/"): 0x2F,
    ord("b"): 0x08,
    ord("f"): 0x0C,
    ord("n"): 0x0A,
    ord("r"): 0x0D,
    ord("t"): 0x09,
}
_CONTROL_NAMES = [
    "NUL",
    "SOH",
    "STX",
    "ETX",
    "EOT",
    "ENQ",
    "ACK",
    "BEL",
    "BS",
    "HT",
    "LF",
    "VT",
    "FF",
    "CR",
    "SO",
    "SI",
    "DLE",
    "DC1",
    "DC2",
    "DC3",
    "DC4",
    "NAK",
    "SYN",
    "ETB",
    "CAN",
    "EM",
    "SUB",
    "ESC",
    "FS",
    "GS",
    "RS",
    "US",
]
_CONTROL_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
_DIGITS = frozenset(b"0123456789")
_WHITESPACE = frozenset(b" \t\n\r")
# byte ranges after a UTF-8 lead byte inside a string (lexer::scan_string)
_STRING_UTF8 = {lead: ((0x80, 0xBF),) for lead in range(0xC2, 0xE0)}
_STRING_UTF8.update({lead: ((0x80, 0xBF), (0x80, 0xBF)) for lead in (*range(0xE1, 0xED), 0xEE, 0xEF)})
_STRING_UTF8.update({lead: ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)) for lead in range(0xF1, 0xF4)})
_STRING_UTF8[0xE0] = ((0xA0, 0xBF), (0x80, 0xBF))
_STRING_UTF8[0xED] = ((0x80, 0x9F), (0x80, 0xBF))
_STRING_UTF8[0xF0] = ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))
_STRING_UTF8[0xF4] = ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))


def _control_message(byte: int) -> str:
    short = _CONTROL_SHORT.get(byte)
    suffix = f" or \\{short}" if short else ""
    return (
        f"invalid string: control character U+{byte:04X} ({_CONTROL_NAMES[byte]}) "
        f"must be escaped to \\u{byte:04X}{suffix}"
    )


class _Lexer:
    """nlohmann::detail::lexer over an iterator input adapter (bytes), comments not allowed."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.current = _EOF
        self.next_unget = False
        self.chars_read_total = 0
        self.chars_read_current_line = 0
        self.lines_read = 0
        self.token_string = bytearray()
        self.token_buffer = bytearray()
        self.error_message = ""
        self.number: int | float = 0

    def get(self) -> int:
        self.chars_read_total += 1
        self.chars_read_current_line += 1
        if self.next_unget:
            self.next_unget = False
        elif self.pos < len(self.data):
            self.current = self.data[self.pos]
            self.pos += 1
        else:
            self.current = _EOF
        if self.current != _EOF:
            self.token_string.append(self.current)
        if self.current == 0x0A:
            self.lines_read += 1
            self.chars_read_current_line = 0
        return self.current

    def unget(self) -> None:
        self.next_unget = True
        self.chars_read_total -= 1
        if self.chars_read_current_line == 0:
            if self.lines_read > 0:
                self.lines_read -= 1
        else:
            self.chars_read_current_line -= 1
        if self.current != _EOF:
            self.token_string.pop()

    def reset(self) -> None:
        self.token_buffer.clear()
        self.token_string.clear()
        self.token_string.append(self.current)

    def get_token_string(self) -> bytes:
        out = bytearray()
        for byte in self.token_string:
            if byte <= 0x1F:
                out += f"<U+{byte:04X}>".encode()
            else:
                out.append(byte)
        return bytes(out)

    def position(self) -> str:
        return f" at line {self.lines_read + 1}, column {self.chars_read_current_line}"

    def fail(self, message: str) -> int:
        self.error_message = message
        return _PARSE_ERROR

    # scanning

    def scan(self) -> int:
        if self.chars_read_total == 0 and not self.skip_bom():
            return self.fail("invalid BOM; must be 0xEF 0xBB 0xBF if given")
        while True:
            self.get()
            if self.current not in _WHITESPACE:
                break
        c = self.current
        token = _PUNCTUATION.get(c)
        if token is not None:
            return token
        literal = _LITERALS.get(c)
        if literal is not None:
            return self.scan_literal(*literal)
        if c == 0x22:
            return self.scan_string()
        if c == 0x2D or c in _DIGITS:
            return self.scan_number()
        if c in (0, _EOF):
            return _END_OF_INPUT
        return self.fail("invalid literal")

    def skip_bom(self) -> bool:
        if self.get() == 0xEF:
            return self.get() == 0xBB and self.get() == 0xBF
        self.unget()
        return True

    def scan_literal(self, text: bytes, token: int) -> int:
        for expected in text[1:]:
            if self.get() != expected:
                return self.fail("invalid literal")
        return token

    def get_codepoint(self) -> int:
        codepoint = 0
        for _ in range(4):
            c = self.get()
            if c in _DIGITS:
                digit = c - 0x30
            elif 0x41 <= c <= 0x46:
                digit = c - 0x37
            elif 0x61 <= c <= 0x66:
                digit = c - 0x57
            else:
                return -1
            codepoint = codepoint * 16 + digit
        return codepoint

    def scan_string(self) -> int:  # noqa: C901
        self.reset()
        add = self.token_buffer.append
        while True:
            c = self.get()
            if c == _EOF:
                return self.fail("invalid string: missing closing quote")
            if c == 0x22:
                return _VALUE_STRING
            if c == 0x5C:
                c = self.get()
                simple = _SIMPLE_ESCAPES.get(c)
                if simple is not None:
                    add(simple)
                    continue
                if c != ord("u"):
                    return self.fail("invalid string: forbidden character after backslash")
                codepoint = self.get_codepoint()
                if codepoint == -1:
                    return self.fail("invalid string: '\\u' must be followed by 4 hex digits")
                if 0xD800 <= codepoint <= 0xDBFF:
                    if not (self.get() == 0x5C and self.get() == ord("u")):
                        return self.fail("invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF")
                    low = self.get_codepoint()
                    if low == -1:
                        return self.fail("invalid string: '\\u' must be followed by 4 hex digits")
                    if not 0xDC00 <= low <= 0xDFFF:
                        return self.fail("invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF")
                    codepoint = (codepoint << 10) + low - 0x35FDC00
                elif 0xDC00 <= codepoint <= 0xDFFF:
                    return self.fail("invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF")
                self.token_buffer += chr(codepoint).encode("utf-8")
                continue
            if c <= 0x1F:
                return self.fail(_control_message(c))
            if c <= 0x7F:
                add(c)
                continue
            ranges = _STRING_UTF8.get(c)
            if ranges is None:
                return self.fail("invalid string: ill-formed UTF-8 byte")
            add(c)
            for lo, hi in ranges:
                c = self.get()
                if not lo <= c <= hi:
                    return self.fail("invalid string: ill-formed UTF-8 byte")
                add(c)

    def scan_number(self) -> int:  # noqa: C901
        self.reset()
        add = self.token_buffer.append
        token = _VALUE_UNSIGNED
        c = self.current
        add(c)
        if c == 0x2D:
            token = _VALUE_INTEGER
            c = self.get()
            if c not in _DIGITS:
                return self.fail("invalid number; expected digit after '-'")
            add(c)
        c = self.get()
        if self.token_buffer[-1] != 0x30:  # after 1-9, more digits
            while c in _DIGITS:
                add(c)
                c = self.get()
        if c == 0x2E:
            add(c)
            token = _VALUE_FLOAT
            c = self.get()
            if c not in _DIGITS:
                return self.fail("invalid number; expected digit after '.'")
            while c in _DIGITS:
                add(c)
                c = self.get()
        if c in (0x65, 0x45):
            add(c)
            token = _VALUE_FLOAT
            c = self.get()
            if c in (0x2B, 0x2D):
                add(c)
                c = self.get()
                if c not in _DIGITS:
                    return self.fail("invalid number; expected digit after exponent sign")
            elif c not in _DIGITS:
                return self.fail("invalid number; expected '+', '-', or digit after exponent")
            while c in _DIGITS:
                add(c)
                c = self.get()
        self.unget()
        text = self.token_buffer.decode("ascii")
        if token != _VALUE_FLOAT:
            value = int(text)
            if (token == _VALUE_UNSIGNED and value <= _UINT64_MAX) or (token == _VALUE_INTEGER and value >= _INT64_MIN):
                self.number = value
                return token
        # out of the integer range (strtoull/strtoll's ERANGE): a double, as nlohmann falls back to
        self.number = float(text)
        return _VALUE_FLOAT


class _Parser:
    """nlohmann::detail::parser::parse(strict=true) with the DOM SAX handler and exceptions on."""

    def __init__(self, data: bytes) -> None:
        self.lexer = _Lexer(data)
        self.last_token = _UNINITIALIZED
        self.get_token()

    def get_token(self) -> int:
        self.last_token = self.lexer.scan()
        return self.last_token

    def exception_message(self, expected: int, context: str) -> bytes:
        msg = b"syntax error "
        if context:
            msg += b"while parsing " + context.encode() + b" "
        msg += b"- "
        if self.last_token == _PARSE_ERROR:
            msg += self.lexer.error_message.encode() + b"; last read: '" + self.lexer.get_token_string() + b"'"
        else:
            msg += b"unexpected " + _TOKEN_NAMES[self.last_token].encode()
        if expected != _UNINITIALIZED:
            msg += b"; expected " + _TOKEN_NAMES[expected].encode()
        return msg

    def error(self, what: bytes) -> ValueError:
        prefix = "[json.exception.parse_error.101] parse error" + self.lexer.position() + ": "
        return ValueError(prefix + _decode(what))

    def syntax_error(self, expected: int, context: str) -> ValueError:
        return self.error(self.exception_message(expected, context))

    def parse(self) -> object:
        result = self.parse_value()
        if self.get_token() != _END_OF_INPUT:
            raise self.syntax_error(_END_OF_INPUT, "value")
        return result

    def parse_value(self) -> object:  # noqa: C901
        # sax_parse_internal with json_sax_dom_parser: containers are linked into their parent when they
        # start, a key is set (to null) when read, so a repeated key keeps its first place
        root: list[object] = [None]
        ref_stack: list[dict | list] = []
        object_key = ""
        states: list[bool] = []  # True: in an array

        def handle_value(value: object) -> object:
            if not ref_stack:
                root[0] = value
            elif isinstance(ref_stack[-1], list):
                ref_stack[-1].append(value)
            else:
                ref_stack[-1][object_key] = value
            return value

        def read_key() -> str:
            key = self.lexer.token_buffer.decode("utf-8")
            ref_stack[-1][key] = None
            return key

        skip_to_state_evaluation = False
        while True:
            if not skip_to_state_evaluation:
                token = self.last_token
                if token == _BEGIN_OBJECT:
                    ref_stack.append(handle_value({}))
                    if self.get_token() == _END_OBJECT:
                        ref_stack.pop()
                    else:
                        if self.last_token != _VALUE_STRING:
                            raise self.syntax_error(_VALUE_STRING, "object key")
                        object_key = read_key()
                        if self.get_token() != _NAME_SEPARATOR:
                            raise self.syntax_error(_NAME_SEPARATOR, "object separator")
                        states.append(False)
                        self.get_token()
                        continue
                elif token == _BEGIN_ARRAY:
                    ref_stack.append(handle_value([]))
                    if self.get_token() == _END_ARRAY:
                        ref_stack.pop()
                    else:
                        states.append(True)
                        continue
                elif token == _VALUE_FLOAT:
                    if not math.isfinite(self.lexer.number):
                        raise ValueError(
                            "[json.exception.out_of_range.406] number overflow parsing '"
                            + _decode(self.lexer.get_token_string())
                            + "'"
                        )
                    handle_value(self.lexer.number)
                elif token == _LITERAL_FALSE:
                    handle_value(False)
                elif token == _LITERAL_NULL:
                    handle_value(None)
                elif token == _LITERAL_TRUE:
                    handle_value(True)
                elif token in (_VALUE_INTEGER, _VALUE_UNSIGNED):
                    handle_value(self.lexer.number)
                elif token == _VALUE_STRING:
                    handle_value(self.lexer.token_buffer.decode("utf-8"))
                elif token == _PARSE_ERROR:
                    raise self.syntax_error(_UNINITIALIZED, "value")
                elif token == _END_OF_INPUT:
                    if self.lexer.chars_read_total == 1:
                        raise self.error(
                            b"attempting to parse an empty input; check that your input string or stream "
                            b"contains the expected JSON"
                        )
                    raise self.syntax_error(_LITERAL_OR_VALUE, "value")
                else:
                    raise self.syntax_error(_LITERAL_OR_VALUE, "value")
            else:
                skip_to_state_evaluation = False

            if not states:
                return root[0]
            if states[-1]:  # array
                if self.get_token() == _VALUE_SEPARATOR:
                    self.get_token()
                    continue
                if self.last_token == _END_ARRAY:
                    ref_stack.pop()
                    states.pop()
                    skip_to_state_evaluation = True
                    continue
                raise self.syntax_error(_END_ARRAY, "array")
            if self.get_token() == _VALUE_SEPARATOR:
                if self.get_token() != _VALUE_STRING:
                    raise self.syntax_error(_VALUE_STRING, "object key")
                object_key = read_key()
                if self.get_token() != _NAME_SEPARATOR:
                    raise self.syntax_error(_NAME_SEPARATOR, "object separator")
                self.get_token()
                continue
            if self.last_token == _END_OBJECT:
                ref_stack.pop()
                states.pop()
                skip_to_state_evaluation = True
                continue
            raise self.syntax_error(_END_OBJECT, "object")


class _NotPlain(Exception):
    """The stdlib reading differs from nlohmann's (or failed): read with the port instead."""


def _refuse_constant(name: str) -> object:
    raise _NotPlain(name)


def _as_nlohmann(value: object) -> object:
    """A json.loads() value as nlohmann holds it: integers out of int64/uint64 as doubles. Raises
    _NotPlain where nlohmann would refuse what the stdlib took (lone surrogates, overflowing numbers)."""
    if isinstance(value, str):
        value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate (from a \uD800 escape)
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            key.encode("utf-8")
            value[key] = _as_nlohmann(item)
        return value
    if isinstance(value, list):
        value[:] = [_as_nlohmann(item) for item in value]
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _UINT64_MAX else float(value)  # OverflowError past 1e308
    if not math.isfinite(value):
        raise _NotPlain("overflow")
    return value


def _parse_plain(text: str) -> object:
    """The stdlib's C reader where it agrees with nlohmann: same grammar (no NaN/Infinity), same
    whitespace, control characters refused, a repeated key keeping its first place and last value."""
    if text.startswith("\ufeff"):
        raise _NotPlain("BOM")
    return _as_nlohmann(_stdlib_json.loads(text, parse_constant=_refuse_constant))


def parse_json(text: str | bytes) -> object:
    """nlohmann::ordered_json::parse(text): dict (keys in order; a repeated key keeps its first place
    and its last value), list, str, int (within int64/uint64), float, bool, None. Raises ValueError
    with nlohmann's what() (parse_error.101, out_of_range.406).

    Valid input takes the stdlib's C reader (checked to agree with nlohmann); anything it refuses or
    reads differently goes through the port of nlohmann's lexer and parser, which gives the errors."""
    try:
        plain = text.decode("utf-8") if isinstance(text, bytes) else text
        return _parse_plain(plain)
    except (ValueError, _NotPlain, UnicodeError, OverflowError, RecursionError):
        pass
    return _parse_exact(text)


def _parse_exact(text: str | bytes) -> object:
    data = text if isinstance(text, bytes) else _encode(text)
    return _Parser(data).parse()


# --- get<T>() of the C++ from_json() -------------------------------------------------------------


def _type_error(expected: str, value: object) -> ValueError:
    return ValueError(f"[json.exception.type_error.302] type must be {expected}, but is {json_type_name(value)}")


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _UINT64_MAX


def _cast_float(value: float, bits: int) -> int:
    """static_cast of a double to an unsigned type as GCC compiles it for x86-64 (the C++ leaves values
    out of range undefined): truncation through a signed 64-bit conversion, which gives 2^63 when out of
    its range; above 2^63 a size_t conversion subtracts 2^63 first and flips the top bit back."""
    if bits == 64 and value >= 2.0**63:
        rest = value - 2.0**63
        return (math.trunc(rest) ^ (1 << 63)) if rest < 2.0**63 else 0
    converted = math.trunc(value) if -(2.0**63) <= value < 2.0**63 else 1 << 63
    return converted % (1 << bits)


def _get_unsigned(value: object, bits: int, allow_bool: bool) -> int:
    """get<size_t>() (get_arithmetic_value, booleans refused) or get<uint32_t>/get<int>() (the generic
    arithmetic from_json, booleans allowed), as the unsigned bit pattern."""
    if isinstance(value, bool):
        if not allow_bool:
            raise _type_error("number", value)
        return int(value)
    if _is_integer(value):
        return value % (1 << bits)
    if isinstance(value, (int, float)):
        return _cast_float(float(value), bits)
    raise _type_error("number", value)


def _get_size_t(value: object) -> int:
    return _get_unsigned(value, 64, allow_bool=False)


def _get_uint32(value: object) -> int:
    return _get_unsigned(value, 32, allow_bool=True)


def _get_int(value: object) -> int:
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and not _is_integer(value)):
        # cvttsd2si: a double out of the int range gives INT_MIN
        f = float(value)
        t = math.trunc(f) if math.isfinite(f) else None
        return t if t is not None and -(2**31) <= t < 2**31 else -(2**31)
    bits = _get_unsigned(value, 32, allow_bool=True)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def _get_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _type_error("boolean", value)
    return value


def _get_str(value: object) -> str:
    if not isinstance(value, str):
        raise _type_error("string", value)
    return value


def _get_array(value: object, get) -> list:
    if not isinstance(value, (list, tuple)):
        raise _type_error("array", value)
    return [get(item) for item in value]


def _contains(j: object, key: str) -> bool:
    return isinstance(j, dict) and key in j


def _values(j: object) -> list:
    """A range-for over a common_json: elements, object values, nothing for null, else the value once."""
    if isinstance(j, dict):
        return list(j.values())
    if isinstance(j, (list, tuple)):
        return list(j)
    return [] if j is None else [j]


def _parser_id(size_t_value: int) -> int:
    """A size_t id as a Python id: SIZE_MAX (COMMON_PEG_INVALID_PARSER_ID) is -1."""
    return size_t_value - _SIZE_T if size_t_value >= 1 << 63 else size_t_value


def _size_t(parser_id: int) -> int:
    return parser_id % _SIZE_T


def _get_id(value: object) -> int:
    return _parser_id(_get_size_t(value))


# --- to_json() -----------------------------------------------------------------------------------


def _serialize(p: ParserVariant) -> dict:  # noqa: C901
    """serialize_parser_variant(): the keys in the C++ order."""
    if isinstance(p, EpsilonParser):
        return {"type": "epsilon"}
    if isinstance(p, StartParser):
        return {"type": "start"}
    if isinstance(p, EndParser):
        return {"type": "end"}
    if isinstance(p, LiteralParser):
        return {"type": "literal", "literal": p.literal}
    if isinstance(p, SequenceParser):
        return {"type": "sequence", "children": [_size_t(c) for c in p.children]}
    if isinstance(p, ChoiceParser):
        return {"type": "choice", "children": [_size_t(c) for c in p.children]}
    if isinstance(p, RepetitionParser):
        return {
            "type": "repetition",
            "child": _size_t(p.child),
            "min_count": p.min_count,
            "max_count": p.max_count,
        }
    if isinstance(p, AndParser):
        return {"type": "and", "child": _size_t(p.child)}
    if isinstance(p, NotParser):
        return {"type": "not", "child": _size_t(p.child)}
    if isinstance(p, AnyParser):
        return {"type": "any"}
    if isinstance(p, SpaceParser):
        return {"type": "space"}
    if isinstance(p, CharsParser):
        return {
            "type": "chars",
            "pattern": p.pattern,
            "ranges": [{"start": r.start, "end": r.end} for r in p.ranges],
            "negated": p.negated,
            "min_count": p.min_count,
            "max_count": p.max_count,
        }
    if isinstance(p, StringParser):
        return {"type": "string", "delimiter": p.delimiter}
    if isinstance(p, UntilParser):
        return {"type": "until", "delimiters": list(p.delimiters)}
    if isinstance(p, SchemaParser):
        return {
            "type": "schema",
            "child": _size_t(p.child),
            "name": p.name,
            "schema": copy.deepcopy(p.schema),
            "raw": p.raw,
        }
    if isinstance(p, RuleParser):
        return {"type": "rule", "name": p.name, "child": _size_t(p.child), "trigger": p.trigger}
    if isinstance(p, RefParser):
        return {"type": "ref", "name": p.name}
    if isinstance(p, AtomicParser):
        return {"type": "atomic", "child": _size_t(p.child)}
    if isinstance(p, TagParser):
        return {"type": "tag", "child": _size_t(p.child), "tag": p.tag}
    if isinstance(p, GbnfParser):
        return {"type": "gbnf", "child": _size_t(p.child), "grammar": p.grammar}
    if isinstance(p, AcParser):
        return {"type": "ac", "child": _size_t(p.child), "delimiters": list(p.delimiters)}
    raise TypeError(f"not a parser variant: {type(p).__name__}")


def arena_to_json(arena: PegArena) -> dict:
    """common_peg_arena::to_json(): {"parsers", "rules", "root"} with ids as size_t values and the rules
    in the C++ unordered_map's iteration order."""
    rules = arena.rules
    return {
        "parsers": [_serialize(arena.get(i)) for i in range(arena.size())],
        "rules": {name: _size_t(rules[name]) for name in unordered_map_order(rules)},
        "root": _size_t(arena.root),
    }


def save(arena: PegArena) -> str:
    """common_peg_arena::save(): to_json().dump(), byte for byte."""
    return dump_json(arena_to_json(arena))


# --- from_json() ---------------------------------------------------------------------------------


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _deserialize(j: object) -> ParserVariant:  # noqa: C901
    """deserialize_parser_variant(): the C++ checks, in the C++ order."""
    _require(
        _contains(j, "type") and isinstance(j["type"], str),
        "Parser variant JSON missing or invalid 'type' field",
    )
    assert isinstance(j, dict)
    kind = j["type"]
    has = j.__contains__

    if kind == "epsilon":
        return EpsilonParser()
    if kind == "start":
        return StartParser()
    if kind == "end":
        return EndParser()
    if kind == "literal":
        _require(
            has("literal") and isinstance(j["literal"], str),
            "literal parser missing or invalid 'literal' field",
        )
        return LiteralParser(j["literal"])
    if kind in ("sequence", "choice"):
        _require(
            has("children") and isinstance(j["children"], list),
            f"{kind} parser missing or invalid 'children' field",
        )
        children = _get_array(j["children"], _get_id)
        return SequenceParser(children) if kind == "sequence" else ChoiceParser(children)
    if kind == "repetition":
        _require(
            has("child") and has("min_count") and has("max_count"),
            "repetition parser missing required fields",
        )
        child = _get_id(j["child"])
        min_count = _get_int(j["min_count"])
        return RepetitionParser(child, min_count, _get_int(j["max_count"]))
    if kind == "and":
        _require(has("child"), "and parser missing 'child' field")
        return AndParser(_get_id(j["child"]))
    if kind == "not":
        _require(has("child"), "not parser missing 'child' field")
        return NotParser(_get_id(j["child"]))
    if kind == "any":
        return AnyParser()
    if kind == "space":
        return SpaceParser()
    if kind == "chars":
        _require(
            has("pattern") and has("ranges") and has("negated") and has("min_count") and has("max_count"),
            "chars parser missing required fields",
        )
        pattern = _get_str(j["pattern"])
        negated = _get_bool(j["negated"])
        min_count = _get_int(j["min_count"])
        max_count = _get_int(j["max_count"])
        ranges = []
        for range_json in _values(j["ranges"]):
            _require(
                _contains(range_json, "start") and _contains(range_json, "end"),
                "char_range missing 'start' or 'end' field",
            )
            start = _get_uint32(range_json["start"])
            ranges.append(CharRange(start, _get_uint32(range_json["end"])))
        return CharsParser(pattern, ranges, negated, min_count, max_count)
    if kind == "string":
        _require(has("delimiter"), "string parser missing delimiter field.")
        delimiter = _get_str(j["delimiter"])
        _require(delimiter != "", "string parser delimiter is empty.")
        return StringParser(delimiter[0])
    if kind == "until":
        _require(
            has("delimiters") and isinstance(j["delimiters"], list),
            "until parser missing or invalid 'delimiters' field",
        )
        return UntilParser(_get_array(j["delimiters"], _get_str))
    if kind == "schema":
        _require(
            has("child") and has("name") and has("schema") and has("raw"),
            "schema parser missing required fields",
        )
        child = _get_id(j["child"])
        name = _get_str(j["name"])
        schema = None if j["schema"] is None else copy.deepcopy(j["schema"])
        return SchemaParser(child, name, schema, _get_bool(j["raw"]))
    if kind == "rule":
        _require(has("name") and has("child") and has("trigger"), "rule parser missing required fields")
        name = _get_str(j["name"])
        child = _get_id(j["child"])
        return RuleParser(name, child, _get_bool(j["trigger"]))
    if kind == "ref":
        _require(has("name") and isinstance(j["name"], str), "ref parser missing or invalid 'name' field")
        return RefParser(j["name"])
    if kind == "atomic":
        _require(has("child"), "tag parser missing required fields")  # sic: the C++ message
        return AtomicParser(_get_id(j["child"]))
    if kind == "tag":
        _require(has("child") and has("tag"), "tag parser missing required fields")
        child = _get_id(j["child"])
        return TagParser(child, _get_str(j["tag"]))
    if kind == "gbnf":
        _require(has("child") and has("grammar"), "gbnf parser missing required fields")
        child = _get_id(j["child"])
        return GbnfParser(child, _get_str(j["grammar"]))
    if kind == "ac":
        _require(
            has("child") and has("delimiters") and isinstance(j["delimiters"], list) and len(j["delimiters"]) > 0,
            "ac parser requires 'child' and a non-empty 'delimiters' array",
        )
        child = _get_id(j["child"])
        return AcParser(child, _get_array(j["delimiters"], _get_str))
    raise ValueError("Unknown parser type: " + kind)


def arena_from_json(j: object) -> PegArena:
    """common_peg_arena::from_json(): raises ValueError with the C++ message. Rule and root ids are
    checked against the parser count (rules in the C++ iteration order, so the first bad rule reported is
    the C++'s); children ids are not, as in the C++."""
    _require(_contains(j, "parsers") and isinstance(j["parsers"], list), "JSON missing or invalid 'parsers' array")
    _require(_contains(j, "rules") and isinstance(j["rules"], dict), "JSON missing or invalid 'rules' object")
    _require(_contains(j, "root"), "JSON missing 'root' field")
    assert isinstance(j, dict)

    arena = PegArena()
    for parser_json in j["parsers"]:
        arena.add_parser(_deserialize(parser_json))

    # get<std::unordered_map<std::string, size_t>>(): inserted in the JSON object's order
    rules = {name: _get_size_t(value) for name, value in j["rules"].items()}
    for name in unordered_map_order(rules):
        if rules[name] >= arena.size():
            raise ValueError(f"Rule '{name}' references invalid parser ID: {rules[name]}")
    for name, rule_id in rules.items():
        arena.add_rule(name, _parser_id(rule_id))

    root = _get_size_t(j["root"])
    if root != _SIZE_T - 1 and root >= arena.size():
        raise ValueError(f"Root references invalid parser ID: {root}")
    arena.set_root(_parser_id(root))
    return arena


def load(text: str | bytes) -> PegArena:
    """common_peg_arena::load(): from_json(common_json::parse(text))."""
    return arena_from_json(parse_json(text))
