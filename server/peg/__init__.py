"""Port of b10621's generic PEG parser (common/peg-parser.{h,cpp}): build parsers with PegBuilder,
parse complete or streaming (LENIENT) input with PegArena.parse, emit GBNF with
PegArena.build_grammar."""

from .arena import PegArena
from .builder import Part, PegBuilder, PegParser, alt, build_peg_parser, plus
from .context import (
    DEBUG,
    FAIL,
    INVALID_AST_ID,
    LENIENT,
    NEED_MORE_INPUT,
    NONE,
    SUCCESS,
    AstArena,
    AstNode,
    ParseContext,
    ParseFlags,
    ParseResult,
    ParseResultType,
    parse_result_type_name,
)
from .parsers import INVALID_PARSER_ID
from .serialize import arena_from_json, arena_to_json, load, save

__all__ = [
    "DEBUG",
    "FAIL",
    "INVALID_AST_ID",
    "INVALID_PARSER_ID",
    "LENIENT",
    "NEED_MORE_INPUT",
    "NONE",
    "SUCCESS",
    "AstArena",
    "AstNode",
    "ParseContext",
    "ParseFlags",
    "ParseResult",
    "ParseResultType",
    "Part",
    "PegArena",
    "PegBuilder",
    "PegParser",
    "alt",
    "arena_from_json",
    "arena_to_json",
    "build_peg_parser",
    "load",
    "parse_result_type_name",
    "plus",
    "save",
]
