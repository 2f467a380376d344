"""server.peg against b10621's common/peg-parser.cpp.

Most cases are those of llama.cpp's tests/peg-parser/ (test-basic, test-json-parser,
test-python-dict-parser, test-unicode, test-gbnf-generation) with their expected values; the
rest pin outputs taken from the C++ built with the reference's compiler (GCC 12.2): AST dumps,
parser dumps, ids and rule-name clashes. Positions count code points where the C++ counts bytes;
the two agree on ASCII input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from server.grammar.json_schema import build_grammar
from server.peg import (
    FAIL,
    INVALID_AST_ID,
    LENIENT,
    NEED_MORE_INPUT,
    NONE,
    SUCCESS,
    AstNode,
    ParseContext,
    ParseResult,
    PegBuilder,
    PegParser,
    build_peg_parser,
    parse_result_type_name,
)
from server.peg.rule_order import string_hash, unordered_map_order

Build = Callable[[PegBuilder], PegParser]

SPACE_RULE = 'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}\n'


def parse(build: Build, text: str, flags: int = NONE) -> ParseResult:
    return build_peg_parser(build).parse(ParseContext(text, flags))


def gbnf(build: Build, lazy: bool = False) -> str:
    arena = build_peg_parser(build)
    return build_grammar(lambda builder: arena.build_grammar(builder, lazy))


# --- test-basic.cpp ---------------------------------------------------------------------------------


def escapes(p: PegBuilder) -> PegParser:
    return p.chars("[\\n\\t\\\\]")


def escaped_dash(p: PegBuilder) -> PegParser:
    return p.chars("[a\\-z]")


def hello_world(p: PegBuilder) -> PegParser:
    return p.literal("hello") + p.optional(p.literal(" world"))


def think(p: PegBuilder) -> PegParser:
    return p.literal("<think>") + p.literal("</think>")


def value_list(p: PegBuilder) -> PegParser:
    p.rule("number", p.chars("0-9"))
    p.rule("list", p.literal("[") + p.ref("value") + p.literal("]"))
    return p.rule("value", p.ref("number") | p.ref("list"))


BASIC_CASES = [
    # chars: escapes inside a class
    ("class_escape_newline", escapes, "\n", NONE, SUCCESS),
    ("class_escape_tab", escapes, "\t", NONE, SUCCESS),
    ("class_escape_backslash", escapes, "\\", NONE, SUCCESS),
    ("class_escape_space_fails", escapes, " ", NONE, FAIL),
    ("class_escaped_dash_a", escaped_dash, "a", NONE, SUCCESS),
    ("class_escaped_dash_is_literal", escaped_dash, "-", NONE, SUCCESS),
    ("class_escaped_dash_z", escaped_dash, "z", NONE, SUCCESS),
    ("class_escaped_dash_is_no_range", escaped_dash, "b", NONE, FAIL),
    # optional
    ("optional_present", hello_world, "hello world", NONE, SUCCESS),
    ("optional_absent", hello_world, "hello", NONE, SUCCESS),
    ("optional_partial_needs_more", hello_world, "hello ", LENIENT, NEED_MORE_INPUT),
    # partial parsing
    ("literal_success", lambda p: p.literal("hello"), "hello", NONE, SUCCESS),
    ("class_without_brackets_lowercase", lambda p: p.chars("a-z"), "a", NONE, SUCCESS),
    ("class_without_brackets_uppercase_fails", lambda p: p.chars("a-z"), "A", NONE, FAIL),
    ("class_trailing_dash_letter", lambda p: p.chars("a-z-"), "f", NONE, SUCCESS),
    ("class_trailing_dash_is_literal", lambda p: p.chars("a-z-"), "-", NONE, SUCCESS),
    ("class_trailing_dash_uppercase_fails", lambda p: p.chars("a-z-"), "A", NONE, FAIL),
    ("sequence_partial_first_literal", think, "<thi", LENIENT, NEED_MORE_INPUT),
    (
        "sequence_partial_missing_second",
        lambda p: p.literal("begin") + p.literal("end"),
        "begin",
        LENIENT,
        NEED_MORE_INPUT,
    ),
    ("sequence_partial_second_literal", think, "<think></", LENIENT, NEED_MORE_INPUT),
    ("sequence_full_match", lambda p: p.literal("hello") + p.literal("world"), "helloworld", NONE, SUCCESS),
    (
        "sequence_mismatch_fails_even_lenient",
        think,
        "<think>I am common_chat_combinator_parser",
        LENIENT,
        FAIL,
    ),
    (
        "choice_partial_prefix",
        lambda p: p.literal("option1") | p.literal("option2"),
        "opt",
        LENIENT,
        NEED_MORE_INPUT,
    ),
    (
        "choice_partial_common_prefix",
        lambda p: p.literal("choice_a") | p.literal("choice_b"),
        "choice",
        LENIENT,
        NEED_MORE_INPUT,
    ),
    ("choice_first", lambda p: p.literal("first") | p.literal("second"), "first", NONE, SUCCESS),
    ("choice_second", lambda p: p.literal("alpha") | p.literal("beta"), "beta", NONE, SUCCESS),
    ("choice_none", lambda p: p.literal("good") | p.literal("better"), "best", NONE, FAIL),
    ("zero_or_more_partial_first", lambda p: p.zero_or_more(p.literal("ab")), "a", LENIENT, NEED_MORE_INPUT),
    (
        "zero_or_more_partial_second",
        lambda p: p.zero_or_more(p.literal("xy")),
        "xyx",
        LENIENT,
        NEED_MORE_INPUT,
    ),
    ("zero_or_more_full", lambda p: p.zero_or_more(p.literal("test")), "test", NONE, SUCCESS),
    (
        "one_or_more_partial_first",
        lambda p: p.one_or_more(p.literal("repeat")),
        "rep",
        LENIENT,
        NEED_MORE_INPUT,
    ),
    ("one_or_more_partial_second", lambda p: p.one_or_more(p.literal("ab")), "aba", LENIENT, NEED_MORE_INPUT),
    ("one_or_more_full", lambda p: p.one_or_more(p.literal("single")), "single", NONE, SUCCESS),
    ("one_or_more_none_fails", lambda p: p.one_or_more(p.literal("()")), "success", NONE, FAIL),
    # recursive rules through refs
    ("recursive_number", value_list, "1", NONE, SUCCESS),
    ("recursive_list", value_list, "[1]", NONE, SUCCESS),
    ("recursive_nested", value_list, "[[2]]", NONE, SUCCESS),
    ("recursive_deeply_nested", value_list, "[[[3]]]", NONE, SUCCESS),
    ("recursive_partial", value_list, "[[", LENIENT, NEED_MORE_INPUT),
    ("recursive_mismatch", value_list, "[a]", NONE, FAIL),
    ("marker_square", lambda p: p.marker(), "[marker]", NONE, SUCCESS),
    ("marker_sharp", lambda p: p.marker(), "<marker>", NONE, SUCCESS),
]


@pytest.mark.parametrize(
    ("build", "text", "flags", "expected"), [c[1:] for c in BASIC_CASES], ids=[c[0] for c in BASIC_CASES]
)
def test_basic_result_types(build: Build, text: str, flags: int, expected: int) -> None:
    assert parse_result_type_name(parse(build, text, flags).type) == parse_result_type_name(expected)


@pytest.mark.parametrize(("text", "end"), [("hello world", 11), ("hello", 5)])
def test_optional_success_ends_after_what_matched(text: str, end: int) -> None:
    result = parse(hello_world, text)
    assert (result.type, result.start, result.end) == (SUCCESS, 0, end)


# --- partial-input semantics of the primitives (values from the C++) ----------------------------------


@pytest.mark.parametrize(
    ("build", "text", "flags", "expected"),
    [
        # a literal cut short by the end of the input needs more only when lenient
        (lambda p: p.literal("hello"), "hel", LENIENT, (NEED_MORE_INPUT, 0, 3)),
        (lambda p: p.literal("hello"), "hel", NONE, (FAIL, 0, 0)),
        (lambda p: p.literal("hello"), "help", LENIENT, (FAIL, 0, 0)),
        # until stops before a delimiter, or before a delimiter's beginning at the end of the input
        (lambda p: p.until("</t>"), "ab</t>cd", NONE, (SUCCESS, 0, 2)),
        (lambda p: p.until("</t>"), "ab</", LENIENT, (SUCCESS, 0, 2)),
        (lambda p: p.until("</t>"), "ab</", NONE, (SUCCESS, 0, 2)),
        (lambda p: p.until("</t>"), "ab<x", LENIENT, (NEED_MORE_INPUT, 0, 4)),
        (lambda p: p.until("</t>"), "ab<x", NONE, (SUCCESS, 0, 4)),
        (lambda p: p.until_one_of(["ab", "cd"]), "xxcdab", NONE, (SUCCESS, 0, 2)),
        (lambda p: p.until_one_of(["", "zz"]), "xx", NONE, (SUCCESS, 0, 2)),
        (lambda p: p.rest(), "anything", LENIENT, (NEED_MORE_INPUT, 0, 8)),
        # a repetition never tries its child at the end of the input
        (lambda p: p.zero_or_more(p.literal("ab")), "abab", LENIENT, (SUCCESS, 0, 4)),
        (lambda p: p.repeat(p.literal("ab"), 3), "abab", LENIENT, (NEED_MORE_INPUT, 0, 4)),
        (lambda p: p.repeat(p.literal("ab"), 3), "abab", NONE, (FAIL, 0, 4)),
        (lambda p: p.repeat(p.literal("a"), 1, 2), "aaa", NONE, (SUCCESS, 0, 2)),
        # chars: too few at the end of the input needs more when lenient
        (lambda p: p.chars("[a-z]", 3, 5), "ab", LENIENT, (NEED_MORE_INPUT, 0, 2)),
        (lambda p: p.chars("[a-z]", 3, 5), "ab", NONE, (FAIL, 0, 0)),
        (lambda p: p.chars("[a-z]", 3, 5), "ab1", LENIENT, (FAIL, 0, 2)),
        (lambda p: p.chars("[^<]", 0, -1), "ab<", NONE, (SUCCESS, 0, 2)),
        # lookaheads consume nothing; a negation cannot decide on a partial match
        (lambda p: p.peek(p.literal("ab")) + p.any(), "ab", NONE, (SUCCESS, 0, 1)),
        (lambda p: p.negate(p.literal("ab")) + p.any(), "a", LENIENT, (NEED_MORE_INPUT, 0, 0)),
        (lambda p: p.negate(p.literal("ab")) + p.any(), "a", NONE, (SUCCESS, 0, 1)),
        (lambda p: p.any(), "", LENIENT, (NEED_MORE_INPUT, 0, 0)),
        (lambda p: p.any(), "", NONE, (FAIL, 0, 0)),
        # space is C isspace(): ASCII only, vertical tab and form feed included
        (lambda p: p.space(), " \t\n\v\f\r\u00a0", NONE, (SUCCESS, 0, 6)),
        (lambda p: p.start() + p.literal("a") + p.end(), "a", NONE, (SUCCESS, 0, 1)),
        (lambda p: p.literal("a") + p.end(), "ab", NONE, (FAIL, 0, 1)),
        # a failed sequence reports where its failing child ended
        (lambda p: p.literal("a") + p.chars("[0-9]", 2, 2), "a1x", NONE, (FAIL, 0, 2)),
    ],
)
def test_primitive_partial_semantics(build: Build, text: str, flags: int, expected: tuple[int, int, int]) -> None:
    result = parse(build, text, flags)
    assert (result.type, result.start, result.end) == expected


def test_parse_can_start_mid_input() -> None:
    arena = build_peg_parser(lambda p: p.literal("b"))
    assert arena.parse(ParseContext("ab"), 1).end == 2
    assert arena.parse(ParseContext("ab"), 0).fail()


def test_parse_without_root_raises() -> None:
    with pytest.raises(RuntimeError, match="No root parser set"):
        PegBuilder().build().parse(ParseContext("x"))


def test_unknown_ref_raises_at_build() -> None:
    with pytest.raises(RuntimeError, match="Rule not found: missing"):
        build_peg_parser(lambda p: p.ref("missing"))


# --- test-json-parser.cpp ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "test", "value": 42, "flag": true}',
        '[1, "hello", true, null, 3.14]',
        (
            '{"users": [{"id": 1, "name": "Alice"}, {"id": 2, "name": "Bob"}], "count": 2, "metadata": '
            '{"version": "1.0", "tags": ["admin", "user"]}}'
        ),
    ],
    ids=["object", "mixed_array", "nested"],
)
def test_json_parses_whole_document(text: str) -> None:
    result = parse(lambda p: p.json(), text)
    assert (result.type, result.end) == (SUCCESS, len(text))


@pytest.mark.parametrize(
    "text",
    ['{"name": "test", "value": ', "[1, 2, 3, ", '{"data": {"nested": '],
    ids=["object", "array", "nested"],
)
def test_json_incomplete_document_needs_more(text: str) -> None:
    assert parse(lambda p: p.json(), text, LENIENT).need_more_input()


@pytest.mark.parametrize("text", ['{"text": "hello\\', '{"text": "hello\\u', '{"text": "hello\\u00'])
def test_json_incomplete_escape_is_left_out_of_partial_value(text: str) -> None:
    result = parse(lambda p: p.json(), text, LENIENT)
    assert result.need_more_input()
    assert result.end == text.index("\\")


def test_json_incomplete_escape_fails_when_input_is_complete() -> None:
    assert parse(lambda p: p.json_string(), '"hello\\u00', NONE).fail()


def test_json_number_waits_for_possible_continuation() -> None:
    # "3" may become "3.14": not committed at the end of a partial input
    assert parse(lambda p: p.json_number(), "3", LENIENT).need_more_input()
    assert parse(lambda p: p.json_number(), "3", NONE).success()
    assert parse(lambda p: p.json_number(), "3,", LENIENT).end == 1


def member(p: PegBuilder) -> PegParser:
    return p.json_member("name", '"' + p.chars("[a-z]") + '"')


@pytest.mark.parametrize(
    ("text", "flags", "expected"),
    [('"name": "bob"', NONE, SUCCESS), ('"name": "bo', LENIENT, NEED_MORE_INPUT), ("[]", NONE, FAIL)],
    ids=["success", "partial", "failed"],
)
def test_json_member(text: str, flags: int, expected: int) -> None:
    assert parse(member, text, flags).type == expected


# --- test-python-dict-parser.cpp --------------------------------------------------------------------


def python_value(p: PegBuilder) -> PegParser:
    return p.python_value()


def flexible_json(p: PegBuilder) -> PegParser:
    # a json-string rule registered first replaces the one json() would create
    p.rule("json-string", lambda: p.choice([p.double_quoted_string(), p.single_quoted_string()]))
    return p.json()


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (python_value, "{'name': 'test', 'value': 42, 'flag': True}"),
        (python_value, "[1, 'hello', True, None, 3.14]"),
        (
            python_value,
            (
                "{'users': [{'id': 1, 'name': 'Alice'}, {'id': 2, 'name': 'Bob'}], 'count': 2, "
                "'metadata': {'version': '1.0', 'tags': ['admin', 'user']}}"
            ),
        ),
        (python_value, "{'message': 'It\\'s working!'}"),
        (python_value, "{'quote': 'He said \"Hello\"'}"),
        (python_value, "{ 'obj' : { 'something': 1, 'other \"something\"' : 'foo\\'s bar' } }"),
        (python_value, "{'message': 'Hello, 世界!'}"),
        (python_value, "{'unicode': 'Hello\\u0041'}"),
        (python_value, '{"name": "test"}'),
        (python_value, "{\"name\": 'test', 'value': \"hello\"}"),
        (python_value, "True"),
        (python_value, "False"),
        (python_value, "None"),
        (flexible_json, "{'name': 'test'}"),
        (flexible_json, '{"name": "test"}'),
        (flexible_json, "{\"name\": 'test', 'value': \"hello\"}"),
        (flexible_json, "{ 'obj' : { 'something': 1, 'other \"something\"' : 'foo\\'s bar' } }"),
    ],
    ids=[
        "dict",
        "array",
        "nested",
        "escaped_single_quote",
        "double_quotes_inside",
        "spaced_complex",
        "unicode",
        "unicode_escape",
        "double_quoted",
        "mixed_quotes",
        "True",
        "False",
        "None",
        "json_flexible_single",
        "json_flexible_double",
        "json_flexible_mixed",
        "json_flexible_nested",
    ],
)
def test_python_value_parses_whole_input(build: Build, text: str) -> None:
    result = parse(build, text)
    assert (result.type, result.end) == (SUCCESS, len(text))


@pytest.mark.parametrize("keyword", ["true", "false", "null"])
def test_python_value_rejects_json_keywords(keyword: str) -> None:
    assert parse(python_value, keyword).fail()


def test_json_rejects_single_quotes_by_default() -> None:
    assert parse(lambda p: p.json(), "{'name': 'test'}").fail()


@pytest.mark.parametrize("text", ["{'name': 'test', 'value': ", "{'name': 'test"])
def test_python_value_incomplete_needs_more(text: str) -> None:
    assert parse(python_value, text, LENIENT).need_more_input()


def single_quoted(p: PegBuilder) -> PegParser:
    return p.sequence([p.literal("'"), p.string_content("'"), p.literal("'"), p.space()])


@pytest.mark.parametrize("text", ["'hello'", "'it\\'s'", "'say \"hello\"'"])
def test_single_quoted_string_content(text: str) -> None:
    result = parse(single_quoted, text)
    assert (result.type, result.end) == (SUCCESS, len(text))


def test_single_quoted_string_incomplete_needs_more() -> None:
    assert parse(single_quoted, "'hello", LENIENT).need_more_input()


# --- test-unicode.cpp (the cases a str can hold; positions in code points) ----------------------------


@pytest.mark.parametrize("text", ["Hello", "Café", "你好", "🚀"])
def test_any_matches_whole_code_points(text: str) -> None:
    result = parse(lambda p: p.sequence([p.one_or_more(p.any()), p.end()]), text, LENIENT)
    assert (result.type, text[result.start : result.end]) == (SUCCESS, text)


CJK = "[\\u4E00-\\u9FFF]"
EMOTICONS = "[\\U0001F600-\\U0001F64F]"
MIXED = "[\\u4E00-\\u9FFF\\U0001F600-\\U0001F64F0-9]"


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (CJK, "\u4e00", SUCCESS),
        (CJK, "\u4f60", SUCCESS),
        (CJK, "\u597d", SUCCESS),
        (CJK, "\u9fff", SUCCESS),
        (CJK, "a", FAIL),
        (CJK, "\u4dff", FAIL),
        (CJK, "\ua000", FAIL),
        (EMOTICONS, "\U0001f600", SUCCESS),
        (EMOTICONS, "\U0001f601", SUCCESS),
        (EMOTICONS, "\U0001f64f", SUCCESS),
        (EMOTICONS, "\U0001f5ff", FAIL),
        (EMOTICONS, "\U0001f650", FAIL),
        (EMOTICONS, "\U0001f680", FAIL),
        (MIXED, "\u4e00", SUCCESS),
        (MIXED, "\U0001f600", SUCCESS),
        (MIXED, "5", SUCCESS),
        (MIXED, "a", FAIL),
        (MIXED, "\U0001f680", FAIL),
    ],
)
def test_char_class_unicode_escapes(pattern: str, text: str, expected: int) -> None:
    result = parse(lambda p: p.sequence([p.chars(pattern), p.end()]), text, LENIENT)
    assert result.type == expected
    if expected == SUCCESS:
        assert result.end == len(text)


@pytest.mark.parametrize(("text", "expected"), [("x", SUCCESS), ("Z", SUCCESS), ("\\", FAIL), ("q", FAIL)])
def test_char_class_malformed_hex_escape_stands_for_its_letter(text: str, expected: int) -> None:
    assert parse(lambda p: p.chars("[\\xZZ]"), text).type == expected


def test_char_class_literal_non_ascii_is_read_as_bytes() -> None:
    # the C++ reads the pattern byte by byte: "[é]" holds 0xC3 and 0xA9, so U+00E9 itself is no member
    # but U+00C3 is
    assert parse(lambda p: p.chars("[é]"), "é").fail()
    assert parse(lambda p: p.chars("[é]"), "\u00c3").success()


@pytest.mark.parametrize(
    ("text", "content"), [("你好</tag>", "你好"), ("😀</tag>", "😀"), ("Hello 世界!</tag>", "Hello 世界!")]
)
def test_until_with_unicode_content(text: str, content: str) -> None:
    result = parse(lambda p: p.until("</tag>"), text)
    assert (result.type, text[result.start : result.end]) == (SUCCESS, content)


def test_until_without_delimiter_needs_more_at_end_of_partial_input() -> None:
    result = parse(lambda p: p.until("</tag>"), "你好", LENIENT)
    assert (result.type, result.end) == (NEED_MORE_INPUT, 2)


def test_until_unicode_delimiter() -> None:
    result = parse(lambda p: p.until("<｜DSML｜"), "x<｜DSML｜y")
    assert (result.type, result.end) == (SUCCESS, 1)


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ('Hello World"', "Hello World"),
        ('Café"', "Café"),
        ('你好"', "你好"),
        ('😀"', "😀"),
        ('Hello 世界!"', "Hello 世界!"),
        ('Hello\\u0041"', "Hello\\u0041"),
        ('你\\n好"', "你\\n好"),
        ('你\\"好"', '你\\"好'),
    ],
)
def test_string_content_with_unicode_and_escapes(text: str, content: str) -> None:
    result = parse(lambda p: p.sequence([p.string_content('"'), p.literal('"')]), text)
    assert (result.type, text[result.start : result.end - 1]) == (SUCCESS, content)


def test_string_content_unterminated() -> None:
    assert parse(lambda p: p.string_content('"'), "Café", LENIENT).end == 4
    assert parse(lambda p: p.string_content('"'), "Café", NONE).fail()


@pytest.mark.parametrize("text", ['a\\x"', 'a\\u00zz"'])
def test_string_content_bad_escape_fails(text: str) -> None:
    assert parse(lambda p: p.string_content('"'), text, LENIENT).fail()


# --- test-gbnf-generation.cpp ----------------------------------------------------------------------


UNTIL_TAG = (
    "root ::= until-0\n" + SPACE_RULE + "until-0 ::= | [<] until-0-01 | [^<] until-0\n"
    "until-0-01 ::= | [<] until-0-01 | [/] until-0-02 | [^/<] until-0\n"
    "until-0-02 ::= | [<] until-0-01 | [t] until-0-03 | [^<t] until-0\n"
    "until-0-03 ::= | [<] until-0-01 | [a] until-0-04 | [^<a] until-0\n"
    "until-0-04 ::= | [<] until-0-01 | [g] until-0-05 | [^<g] until-0\n"
    "until-0-05 ::= | [<] until-0-01 | [^<>] until-0\n"
)

PARAM_LETTERS = "parameter>"
UNTIL_PARAMETER = (
    "root ::= until-0\n" + SPACE_RULE + "until-0 ::= | [\\n] until-0-01 | [^\\n] until-0\n"
    "until-0-01 ::= | [\\n] until-0-01 | [<] until-0-02 | [^\\n<] until-0\n"
    "until-0-02 ::= | [\\n] until-0-01 | [/] until-0-03 | [^\\n/] until-0\n"
    + "".join(
        f"until-0-{i + 3:02d} ::= | [\\n] until-0-01 | [{c}] until-0-{i + 4:02d} | [^\\n{c}] until-0\n"
        for i, c in enumerate(PARAM_LETTERS)
    )
    + "until-0-13 ::= | [^\\n] until-0\n"
)

UNTIL_DSML = (
    "root ::= until-0\n" + SPACE_RULE + "until-0 ::= | [<] until-0-01 | [^<] until-0\n"
    "until-0-01 ::= | [<] until-0-01 | [\\uFF5C] until-0-02 | [^<\\uFF5C] until-0\n"
    "until-0-02 ::= | [<] until-0-01 | [D] until-0-03 | [^<D] until-0\n"
    "until-0-03 ::= | [<] until-0-01 | [S] until-0-04 | [^<S] until-0\n"
    "until-0-04 ::= | [<] until-0-01 | [M] until-0-05 | [^<M] until-0\n"
    "until-0-05 ::= | [<] until-0-01 | [L] until-0-06 | [^<L] until-0\n"
    "until-0-06 ::= | [<] until-0-01 | [^<\\uFF5C] until-0\n"
)

UNTIL_MULTI = (
    "root ::= until-0\n"
    + SPACE_RULE
    + "until-0 ::= | [a] until-0-01 | [c] until-0-03 | [e] until-0-05 | [^ace] until-0\n"
    "until-0-01 ::= | [a] until-0-01 | [c] until-0-03 | [e] until-0-05 | [^abce] until-0\n"
    "until-0-03 ::= | [a] until-0-01 | [c] until-0-03 | [e] until-0-05 | [^acde] until-0\n"
    "until-0-05 ::= | [a] until-0-01 | [c] until-0-03 | [e] until-0-05 | [^acef] until-0\n"
)

AC_TAG = (
    "ac-3 ::= [<] ac-3-01 | [^<] ac-3\n"
    "ac-3-01 ::= [<] ac-3-01 | [/] ac-3-02 | [^/<] ac-3\n"
    "ac-3-02 ::= [<] ac-3-01 | [t] ac-3-03 | [^<t] ac-3\n"
    "ac-3-03 ::= [<] ac-3-01 | [a] ac-3-04 | [^<a] ac-3\n"
    "ac-3-04 ::= [<] ac-3-01 | [g] ac-3-05 | [^<g] ac-3\n"
    "ac-3-05 ::= [>] | [<] ac-3-01 | [^<>] ac-3\n"
    "root ::= ac-3\n" + SPACE_RULE
)

AC_PARAMETER = (
    "ac-3 ::= [\\n] ac-3-01 | [^\\n] ac-3\n"
    "ac-3-01 ::= [\\n] ac-3-01 | [<] ac-3-02 | [^\\n<] ac-3\n"
    "ac-3-02 ::= [\\n] ac-3-01 | [/] ac-3-03 | [^\\n/] ac-3\n"
    + "".join(
        f"ac-3-{i + 3:02d} ::= [\\n] ac-3-01 | [{c}] ac-3-{i + 4:02d} | [^\\n{c}] ac-3\n"
        for i, c in enumerate(PARAM_LETTERS)
    )
    + "ac-3-13 ::= [\\n] | [^\\n] ac-3\n"
    + "root ::= ac-3\n"
    + SPACE_RULE
)

AC_MULTI = (
    "ac-1 ::= [a] ac-1-01 | [c] ac-1-03 | [e] ac-1-05 | [^ace] ac-1\n"
    "ac-1-01 ::= [b] | [a] ac-1-01 | [c] ac-1-03 | [e] ac-1-05 | [^abce] ac-1\n"
    "ac-1-03 ::= [d] | [a] ac-1-01 | [c] ac-1-03 | [e] ac-1-05 | [^acde] ac-1\n"
    "ac-1-05 ::= [f] | [a] ac-1-01 | [c] ac-1-03 | [e] ac-1-05 | [^acef] ac-1\n"
    "root ::= ac-1\n" + SPACE_RULE
)


def until_then(p: PegBuilder, delimiter: str) -> PegParser:
    # until gets id 0 and the literal id 1, then the sequence (2) and the ac wrapper (3), as in the C++
    return p.ac(p.until(delimiter) + p.literal(delimiter), delimiter)


def trigger_rules(p: PegBuilder) -> PegParser:
    rule1 = p.rule("rule-1", p.literal("a") + p.ref("rule-2"))
    p.rule("rule-2", p.literal("b") + p.ref("rule-3"), True)
    p.rule("rule-3", p.literal("c") + p.ref("rule-4"))
    p.rule("rule-4", p.literal("d"), True)
    return rule1


def orphan_and_child(p: PegBuilder) -> PegParser:
    p.rule("orphan", p.literal("orphan"))
    return p.literal("hello") + p.rule("child", p.literal(" world"))


GBNF_CASES = [
    ("literal", lambda p: p.literal("hello"), 'root ::= "hello"\n' + SPACE_RULE),
    ("char_class", lambda p: p.chars("[a-z]", 1, 1), "root ::= [a-z]\n" + SPACE_RULE),
    (
        "sequence",
        lambda p: p.literal("hello") + p.literal(" ") + p.literal("world"),
        'root ::= "hello" " " "world"\n' + SPACE_RULE,
    ),
    ("choice", lambda p: p.literal("cat") | p.literal("dog"), 'root ::= "cat" | "dog"\n' + SPACE_RULE),
    ("one_or_more", lambda p: p.one_or_more(p.literal("a")), 'root ::= "a"+\n' + SPACE_RULE),
    ("zero_or_more", lambda p: p.zero_or_more(p.literal("a")), 'root ::= "a"*\n' + SPACE_RULE),
    ("optional", hello_world, 'root ::= "hello" " world"?\n' + SPACE_RULE),
    ("until", lambda p: p.until("</tag>"), UNTIL_TAG),
    ("until_overlapping_delimiter", lambda p: p.until("\n</parameter>\n"), UNTIL_PARAMETER),
    ("until_unicode_delimiter", lambda p: p.until("<｜DSML｜"), UNTIL_DSML),
    ("until_multiple_delimiters", lambda p: p.until_one_of(["ab", "cd", "ef"]), UNTIL_MULTI),
    ("ac", lambda p: until_then(p, "</tag>"), AC_TAG),
    ("ac_terminates_at_first_delimiter", lambda p: until_then(p, "\n</parameter>\n"), AC_PARAMETER),
    ("ac_multiple_delimiters", lambda p: p.ac(p.eps(), ["ab", "cd", "ef"]), AC_MULTI),
    (
        "choice_in_repetition_parenthesized",
        lambda p: p.one_or_more(p.literal("a") | p.literal("b")),
        'root ::= ("a" | "b")+\n' + SPACE_RULE,
    ),
    (
        "rule_reference",
        lambda p: p.one_or_more(p.rule("digit", p.chars("[0-9]", 1, 1))),
        "digit ::= [0-9]\nroot ::= digit+\n" + SPACE_RULE,
    ),
    (
        "literal_escaping",
        lambda p: p.literal("hello\nworld\n!"),
        'root ::= "hello\\nworld\\n!"\n' + SPACE_RULE,
    ),
    (
        "shift_inserts_space",
        lambda p: p.literal("hello") << p.literal("world"),
        'root ::= "hello" space "world"\n' + SPACE_RULE,
    ),
    ("only_reachable_rules", orphan_and_child, 'child ::= " world"\nroot ::= "hello" child\n' + SPACE_RULE),
    (
        "tagged_choice_in_sequence_parenthesized",
        lambda p: p.literal("a") + p.tag("t", p.literal("b") | p.literal("c")),
        'root ::= "a" ("b" | "c")\n' + SPACE_RULE,
    ),
    (
        "tagged_sequence_in_choice_bare",
        lambda p: p.tag("t", p.literal("a") + p.literal("b")) | p.literal("c"),
        'root ::= "a" "b" | "c"\n' + SPACE_RULE,
    ),
    (
        "atomic_choice_in_repetition_parenthesized",
        lambda p: p.one_or_more(p.atomic(p.literal("a") | p.literal("b"))),
        'root ::= ("a" | "b")+\n' + SPACE_RULE,
    ),
    (
        "silent_gbnf_emits_nothing",
        lambda p: p.literal("hello") + p.gbnf(p.literal("world"), ""),
        'root ::= "hello"\n' + SPACE_RULE,
    ),
    (
        "silent_choice_in_sequence",
        lambda p: p.literal("a") + p.gbnf(p.literal("b") | p.literal("c"), "") + p.literal("d"),
        'root ::= "a" "d"\n' + SPACE_RULE,
    ),
    (
        "silent_in_tag",
        lambda p: p.literal("a") + p.tag("t", p.gbnf(p.literal("b"), "")),
        'root ::= "a"\n' + SPACE_RULE,
    ),
    (
        "custom_gbnf",
        lambda p: p.literal("a") + p.gbnf(p.literal("b"), "[a-z]+"),
        'root ::= "a" [a-z]+\n' + SPACE_RULE,
    ),
    (
        "nested_wrappers_parenthesized",
        lambda p: p.literal("x") + p.tag("outer", p.atomic(p.literal("a") | p.literal("b"))),
        'root ::= "x" ("a" | "b")\n' + SPACE_RULE,
    ),
    (
        "rules_from_root",
        trigger_rules,
        'root ::= rule-1\nrule-1 ::= "a" rule-2\nrule-2 ::= "b" rule-3\nrule-3 ::= "c" rule-4\nrule-4 ::= "d"\n'
        + SPACE_RULE,
    ),
]


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in GBNF_CASES], ids=[c[0] for c in GBNF_CASES])
def test_gbnf_generation(build: Build, expected: str) -> None:
    assert gbnf(build) == expected


def test_lazy_gbnf_emits_trigger_rules_and_what_they_reach() -> None:
    expected = 'root ::= rule-2 | rule-4\nrule-2 ::= "b" rule-3\nrule-3 ::= "c" rule-4\nrule-4 ::= "d"\n' + SPACE_RULE
    assert gbnf(trigger_rules, lazy=True) == expected


# --- GBNF details pinned from the C++ ---------------------------------------------------------------


def test_gbnf_of_json_rules() -> None:
    expected = (
        'json-array ::= "[" space ("]" | json-value (space "," space json-value)* space "]")\n'
        'json-bool ::= "true" | "false"\n'
        'json-null ::= "null"\n'
        'json-number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?\n'
        'json-object ::= "{" space ("}" | json-string space ":" space json-value '
        '(space "," space json-string space ":" space json-value)* space "}")\n'
        'json-string ::= "\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""\n'
        "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"
        "root ::= json-value\n" + SPACE_RULE
    )
    assert gbnf(lambda p: p.json()) == expected


def test_gbnf_quantifiers_and_empty_until() -> None:
    def build(p: PegBuilder) -> PegParser:
        return p.sequence(
            [
                p.repeat(p.literal("a"), 2),
                p.repeat(p.literal("b"), 2, 4),
                p.repeat(p.literal("c"), 3, -1),
                p.repeat(p.literal("d"), 1, 1),
                p.chars("[x]", 0, 1),
                p.chars("[y]", 2, 3),
                p.any(),
                p.rest(),
                p.until(""),
            ]
        )

    expected = 'root ::= "a"{2} "b"{2,4} "c"{3,} "d" [x]? [y]{2,3} . .* until-12\n' + SPACE_RULE + "until-12 ::= |\n"
    assert gbnf(build) == expected


def test_gbnf_raw_schemas_delegate_for_string_types_only() -> None:
    def build(p: PegBuilder) -> PegParser:
        # created in the order GCC evaluates `a + b + c + d` in the C++: right to left
        d = p.schema(p.until("#"), "d", {"type": "string"}, False)
        c = p.schema(p.until("|"), "c", {"enum": ["x", "y"]}, True)
        b = p.schema(p.until(">"), "b", {"type": "integer"}, True)
        a = p.schema(p.until("<"), "a", {"type": ["string", "null"]}, True)
        return a + b + c + d

    expected = (
        'char ::= [^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})\n'
        'integer ::= ("-"? integral-part)\n'
        "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
        "root ::= until-6 integer until-2 string\n" + SPACE_RULE + 'string ::= "\\"" char* "\\""\n'
        "until-2 ::= | [^|] until-2\n"
        "until-6 ::= | [^<] until-6\n"
    )
    assert gbnf(build) == expected


def test_gbnf_schema_with_refs_through_grammar_builder() -> None:
    schema = {
        "type": "object",
        "properties": {"loc": {"$ref": "#/$defs/place"}, "n": {"type": "integer", "minimum": 1}},
        "required": ["loc"],
        "$defs": {"place": {"type": "string", "enum": ["Paris", "Tōkyō"]}},
    }

    def build(p: PegBuilder) -> PegParser:
        body = p.literal("</call>")
        args = p.schema(p.json(), "tool-get_weather-schema", schema)
        return p.rule("tool-call", p.literal("<call>") + args + body, True)

    arena = build_peg_parser(build)

    def callback(builder: object) -> None:
        builder.resolve_refs(schema)
        arena.build_grammar(builder, True)

    lines = build_grammar(callback).splitlines()
    assert lines[7:] == [
        'ref-defs-place ::= ("\\"Paris\\"" | "\\"Tōkyō\\"")',
        "root ::= tool-call",
        SPACE_RULE.rstrip("\n"),
        'tool-call ::= "<call>" tool-get-weather-schema "</call>"',
        (
            'tool-get-weather-schema ::= "{" space tool-get-weather-schema-loc-kv '
            '( "," space ( tool-get-weather-schema-n-kv ) )? space "}"'
        ),
        "tool-get-weather-schema-loc ::= ref-defs-place",
        'tool-get-weather-schema-loc-kv ::= "\\"loc\\"" space ":" space tool-get-weather-schema-loc',
        "tool-get-weather-schema-n ::= ([1-9] [0-9]{0,15})",
        'tool-get-weather-schema-n-kv ::= "\\"n\\"" space ":" space tool-get-weather-schema-n',
    ]


def test_grammar_builder_names_and_clashes() -> None:
    names = []

    def callback(builder: object) -> None:
        names.append(builder.add_schema("root", {"type": "boolean"}))
        names.append(builder.add_rule("x y", '"é"'))
        names.append(builder.add_rule("x-y", '"z"'))

    text = build_grammar(callback)
    assert names == ["root", "x-y", "x-y0"]
    assert text == 'root ::= ("true" | "false")\n' + SPACE_RULE + 'x-y ::= "é"\nx-y0 ::= "z"\n'


def test_grammar_builder_reports_schema_errors() -> None:
    with pytest.raises(ValueError, match='^JSON schema conversion failed:\nUnrecognized schema: {"type":"nope"}$'):
        build_grammar(lambda builder: builder.add_schema("t", {"type": "nope"}))


def clashing_rules(p: PegBuilder, first: str) -> PegParser:
    schema = {"type": "object", "properties": {"x": {"type": "string", "maxLength": 2}}}
    rules = {
        "clash": lambda: p.rule("a-x", p.literal("clash")),
        "schema": lambda: p.rule("holder", p.schema(p.eps(), "a", schema)),
    }
    rules[first]()
    rules["schema" if first == "clash" else "clash"]()
    return p.choice([p.ref("a-x"), p.ref("holder")])


def test_clashing_rule_names_follow_unordered_map_order() -> None:
    # two rules iterate in reverse insertion order in the C++ unordered_map, so the rule added later
    # reaches the grammar builder first and keeps the plain name
    clash_first = gbnf(lambda p: clashing_rules(p, "clash")).splitlines()
    assert 'a-x ::= "\\"" char{0,2} "\\""' in clash_first
    assert 'a-x0 ::= "clash"' in clash_first
    schema_first = gbnf(lambda p: clashing_rules(p, "schema")).splitlines()
    assert 'a-x ::= "clash"' in schema_first
    assert 'a-x-kv ::= "\\"x\\"" space ":" space a-x0' in schema_first


# --- libstdc++ unordered_map order ------------------------------------------------------------------


def test_string_hash_is_libstdcxx() -> None:
    # std::hash<std::string> on x86-64 libstdc++ (GCC 12)
    assert string_hash("") == 6142509188972423790
    assert string_hash("a") == 4993892634952068459
    assert string_hash("rule-1") == 1468534359721002592
    assert string_hash("json-value-long-name") == 5788933633420472054
    assert string_hash("日本") == 7881330295234927773


CXX_ORDER_TOOL_20 = [
    "tool-19",
    "tool-17",
    "tool-18",
    "tool-15",
    "tool-13",
    "tool-10",
    "tool-1",
    "tool-0",
    "tool-6",
    "tool-4",
    "tool-2",
    "tool-3",
    "tool-5",
    "tool-14",
    "tool-7",
    "tool-16",
    "tool-12",
    "tool-8",
    "tool-11",
    "tool-9",
]


def test_unordered_map_order_matches_libstdcxx() -> None:
    # orders printed by a GCC 12 std::unordered_map<std::string, size_t> after operator[] inserts; the
    # 20 keys go through two rehashes (13 and 29 buckets)
    assert unordered_map_order(["holder", "a-x"]) == ["a-x", "holder"]
    keys = [f"tool-{i}" for i in range(20)]
    assert unordered_map_order(keys) == CXX_ORDER_TOOL_20


def test_unordered_map_order_of_a_vocabulary_sized_map_matches_libstdcxx() -> None:
    # a vocabulary's token_to_id (the EOT search): 20000 keys, bucket counts past 4349; the digest of the
    # order a GCC 12 std::unordered_map<std::string, int> printed, one key a line
    order = unordered_map_order([f"tok{i}" for i in range(20000)])
    assert order[:3] == ["tok19997", "tok19996", "tok19994"]
    digest = hashlib.sha256(("\n".join(order) + "\n").encode()).hexdigest()
    assert digest == "43c1e66e1f0086cce7a9bf5bb8e35c57385406898899dda940031cbdf5191b89"


# --- builder: operators, ids, flattening, rules ------------------------------------------------------


def dump_all(p: PegBuilder) -> list[str]:
    arena = p.build()
    return [arena.dump(i) for i in range(arena.size())]


def test_str_operands_become_literals_created_after_the_parser() -> None:
    p = PegBuilder()
    p.set_root("x" + p.until("y"))
    assert dump_all(p) == ["Until(y)", "Literal(x)", "Sequence(Literal(x), Until(y))"]


def test_shift_creates_space_between_operands() -> None:
    p = PegBuilder()
    a = p.literal("a")
    p.set_root(a << p.until("b"))
    assert dump_all(p) == ["Literal(a)", "Until(b)", "Space", "Sequence(Literal(a), Space, Until(b))"]


def test_choice_or_assign_copies_alternatives_into_a_new_choice() -> None:
    p = PegBuilder()
    choice = p.choice()
    first = choice
    choice |= p.literal("a")
    choice |= p.until("b")
    p.set_root(choice)
    assert first.id == 0 and choice.id == 4
    assert dump_all(p) == [
        "Choice()",
        "Literal(a)",
        "Choice(Literal(a))",
        "Until(b)",
        "Choice(Literal(a), Until(b))",
    ]


def test_sequence_add_assign_flattens() -> None:
    p = PegBuilder()
    seq = p.eps()
    b = p.until("b")
    seq += p.literal("a") + b
    p.set_root(seq)
    assert p.build().dump(seq.id) == "Sequence(Epsilon, Literal(a), Until(b))"


def test_str_on_either_side_of_each_operator() -> None:
    def build(p: PegBuilder) -> PegParser:
        x = p.literal("x")
        return p.sequence([x + "a", "b" + x, x << "c", "d" << x, x | "e", "f" | x])

    assert gbnf(build) == (
        'root ::= "x" "a" "b" "x" "x" space "c" "d" space "x" ("x" | "e") ("f" | "x")\n' + SPACE_RULE
    )


def test_marker_creates_parsers_in_gcc_order() -> None:
    assert dump_all_of(lambda p: p.marker())[:5] == [
        "Literal(>)",
        "Until(>)",
        "Literal(<)",
        "Sequence(Literal(<), Until(>))",
        "Sequence(Literal(<), Until(>), Literal(>))",
    ]


def dump_all_of(build: Build) -> list[str]:
    p = PegBuilder()
    p.set_root(build(p))
    return dump_all(p)


def test_json_member_dump_marks_the_repeated_space_as_cycle() -> None:
    arena = build_peg_parser(lambda p: p.json_member("k", p.until("x")))
    assert arena.dump(arena.root) == 'Sequence(Literal("k"), Space, Literal(:), [cycle], Until(x))'


def test_rule_names_are_cleaned_and_function_rules_are_reused() -> None:
    p = PegBuilder()
    calls = []

    def body() -> PegParser:
        calls.append(1)
        return p.literal("x")

    first = p.rule("tool.get weather", body)
    second = p.rule("tool.get weather", body)
    arena = p.build()
    assert calls == [1]
    assert arena.dump(first.id) == arena.dump(second.id) == "Ref(tool-get-weather)"
    assert arena.has_rule("tool-get-weather")
    assert arena.dump(arena.get_rule("tool-get-weather")) == "Rule(tool-get-weather, Literal(x))"


def test_function_rule_may_refer_to_itself() -> None:
    def build(p: PegBuilder) -> PegParser:
        return p.rule("nest", lambda: p.literal("(") + p.optional(p.ref("nest")) + p.literal(")"))

    assert parse(build, "((()))").end == 6
    assert parse(build, "((", LENIENT).need_more_input()


def test_ac_requires_a_delimiter() -> None:
    with pytest.raises(RuntimeError, match="ac parser requires at least one delimiter"):
        PegBuilder().ac(PegBuilder().eps(), [])


def test_schema_dump_uses_compact_json() -> None:
    arena = build_peg_parser(lambda p: p.schema(p.eps(), "s", {"type": ["string", "null"], "é": 1.5}))
    assert arena.dump(arena.root) == 'Schema(Epsilon, {"type":["string","null"],"é":1.5})'


# --- AST --------------------------------------------------------------------------------------------


def tool_parser(p: PegBuilder) -> PegParser:
    reasoning = p.rule("reasoning", p.literal("<think>") + p.tag("reasoning", p.until("</think>")) + "</think>")
    call = p.rule(
        "call",
        p.literal("<call>") + p.tag("name", p.chars("[a-z_]")) + p.literal(" ") + p.tag("args", p.json()) + "</call>",
    )
    return p.optional(reasoning) + p.tag("content", p.until("<call>")) + p.zero_or_more(p.atomic(call))


COMPLETE_AST = """\
NODE 0 (tag reasoning) ['hm']
NODE 1 (rule reasoning) ['<think>hm</think>']
  NODE 0 (tag reasoning) ['hm']
NODE 2 (tag content) ['hi']
NODE 3 (tag name) ['get_x']
NODE 4 (rule json-string) ['"a"']
NODE 5 (rule json-number) ['1']
NODE 6 (rule json-value) ['1']
  NODE 5 (rule json-number) ['1']
NODE 7 (rule json-object) ['{"a": 1}']
  NODE 4 (rule json-string) ['"a"']
  NODE 6 (rule json-value) ['1']
    NODE 5 (rule json-number) ['1']
NODE 8 (rule json-value) ['{"a": 1}']
  NODE 7 (rule json-object) ['{"a": 1}']
    NODE 4 (rule json-string) ['"a"']
    NODE 6 (rule json-value) ['1']
      NODE 5 (rule json-number) ['1']
NODE 9 (tag args) ['{"a": 1}']
  NODE 8 (rule json-value) ['{"a": 1}']
    NODE 7 (rule json-object) ['{"a": 1}']
      NODE 4 (rule json-string) ['"a"']
      NODE 6 (rule json-value) ['1']
        NODE 5 (rule json-number) ['1']
NODE 10 (rule call) ['<call>get_x {"a": 1}</call>']
  NODE 3 (tag name) ['get_x']
  NODE 9 (tag args) ['{"a": 1}']
    NODE 8 (rule json-value) ['{"a": 1}']
      NODE 7 (rule json-object) ['{"a": 1}']
        NODE 4 (rule json-string) ['"a"']
        NODE 6 (rule json-value) ['1']
          NODE 5 (rule json-number) ['1']
"""


def visit_labels(ctx: ParseContext, result: ParseResult) -> list[str]:
    labels: list[str] = []

    def visitor(node: AstNode) -> None:
        labels.append(f"{node.id}{'p' if node.is_partial else ''}[{node.rule}|{node.tag}]")

    ctx.ast.visit(result, visitor)
    return labels


def test_ast_of_complete_tool_call() -> None:
    ctx = ParseContext('<think>hm</think>hi<call>get_x {"a": 1}</call>')
    result = build_peg_parser(tool_parser).parse(ctx)
    assert (result.type, result.end, result.nodes) == (SUCCESS, 46, [1, 2, 10])
    assert ctx.ast.dump() == COMPLETE_AST
    assert visit_labels(ctx, result) == [
        "1[reasoning|]",
        "0[|reasoning]",
        "2[|content]",
        "10[call|]",
        "3[|name]",
        "9[|args]",
        "8[json-value|]",
        "7[json-object|]",
        "4[json-string|]",
        "6[json-value|]",
        "5[json-number|]",
    ]
    call = ctx.ast.get(result.nodes[-1])
    assert ctx.ast.find_by_tag(call, "name") == 3
    assert ctx.ast.find_by_tag(call, "name", 1) == 3
    assert ctx.ast.find_by_rule(call, "json-value") == 8
    assert ctx.ast.find_by_rule(call, "json-number", 2) == INVALID_AST_ID
    assert ctx.ast.find_by_rule(call, "json-number", 5) == 5


def test_atomic_drops_nodes_of_a_partial_match() -> None:
    ctx = ParseContext('<think>hm</think>hi<call>get_x {"a": ', LENIENT)
    result = build_peg_parser(tool_parser).parse(ctx)
    assert (result.type, result.end, result.nodes) == (NEED_MORE_INPUT, 37, [1, 2])
    # the nodes were still created, only not returned
    assert ctx.ast.size() == 11
    assert ctx.ast.get(10).text == '<call>get_x {"a": '
    assert ctx.ast.get(5).text == ""
    assert visit_labels(ctx, result) == ["1[reasoning|]", "0[|reasoning]", "2[|content]"]


def test_partial_match_marks_nodes_partial() -> None:
    ctx = ParseContext("<think>h", LENIENT)
    result = build_peg_parser(tool_parser).parse(ctx)
    assert (result.type, result.end) == (NEED_MORE_INPUT, 8)
    assert visit_labels(ctx, result) == ["1p[reasoning|]", "0p[|reasoning]"]
    assert (
        ctx.ast.dump() == "NODE 0 (tag reasoning) ['h']\nNODE 1 (rule reasoning) ['<think>h']\n"
        "  NODE 0 (tag reasoning) ['h']\n"
    )


def test_ast_invalid_ids() -> None:
    ctx = ParseContext("x")
    build_peg_parser(lambda p: p.tag("t", p.any())).parse(ctx)
    visited: list[AstNode] = []
    ctx.ast.visit(INVALID_AST_ID, visited.append)
    assert visited == []
    # an invalid id is an error, never the last node
    with pytest.raises(IndexError):
        ctx.ast.get(INVALID_AST_ID)


def test_node_text_is_empty_for_an_empty_match_at_the_end() -> None:
    ctx = ParseContext("ab")
    result = build_peg_parser(lambda p: p.literal("ab") + p.tag("t", p.space())).parse(ctx)
    assert ctx.ast.get(result.nodes[0]).text == ""
    assert (ctx.ast.get(result.nodes[0]).start, ctx.ast.get(result.nodes[0]).end) == (2, 2)


def test_result_type_names() -> None:
    assert [parse_result_type_name(t) for t in (FAIL, SUCCESS, NEED_MORE_INPUT, 7)] == [
        "fail",
        "success",
        "need_more_input",
        "unknown",
    ]
