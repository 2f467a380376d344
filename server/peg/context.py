"""Parse-time state of b10621's PEG parser (common/peg-parser.h): flags, result types, parse results,
the AST arena and the parse context.

Positions are indices into a Python str (code points), where the C++ counts UTF-8 bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

INVALID_AST_ID = -1


class ParseResultType(enum.IntEnum):
    FAIL = 0
    SUCCESS = 1
    NEED_MORE_INPUT = 2


FAIL = ParseResultType.FAIL
SUCCESS = ParseResultType.SUCCESS
NEED_MORE_INPUT = ParseResultType.NEED_MORE_INPUT

_RESULT_TYPE_NAMES = {FAIL: "fail", SUCCESS: "success", NEED_MORE_INPUT: "need_more_input"}


def parse_result_type_name(result_type: int) -> str:
    return _RESULT_TYPE_NAMES.get(result_type, "unknown")


class ParseFlags(enum.IntFlag):
    NONE = 0
    LENIENT = 1 << 0
    DEBUG = 1 << 1


NONE = ParseFlags.NONE
LENIENT = ParseFlags.LENIENT
DEBUG = ParseFlags.DEBUG
_LENIENT_BIT = int(LENIENT)
_DEBUG_BIT = int(DEBUG)


class ParseResult:
    """common_peg_parse_result: a result type, the span [start, end) and the AST nodes it produced."""

    __slots__ = ("end", "nodes", "start", "type")

    def __init__(
        self, type: int = FAIL, start: int = 0, end: int | None = None, nodes: list[int] | None = None
    ) -> None:
        self.type = type
        self.start = start
        self.end = start if end is None else end
        self.nodes = [] if nodes is None else nodes

    def fail(self) -> bool:
        return self.type == FAIL

    def need_more_input(self) -> bool:
        return self.type == NEED_MORE_INPUT

    def success(self) -> bool:
        return self.type == SUCCESS

    def __repr__(self) -> str:
        name = parse_result_type_name(self.type)
        return f"ParseResult({name}, {self.start}, {self.end}, nodes={self.nodes})"


@dataclass(slots=True)
class AstNode:
    id: int
    rule: str
    tag: str
    start: int
    end: int
    text: str
    children: list[int]
    is_partial: bool = False


AstVisitor = Callable[[AstNode], None]


@dataclass
class AstArena:
    """common_peg_ast_arena: every node a parse created, failed branches included, indexed by id."""

    nodes: list[AstNode] = field(default_factory=list)

    def add_node(
        self,
        rule: str,
        tag: str,
        start: int,
        end: int,
        text: str,
        children: list[int],
        is_partial: bool = False,
    ) -> int:
        node_id = len(self.nodes)
        self.nodes.append(AstNode(node_id, rule, tag, start, end, text, children, is_partial))
        return node_id

    def get(self, node_id: int) -> AstNode:
        # std::vector::at: an invalid id is an error, never a wrap-around to the last node
        if node_id < 0:
            raise IndexError(f"AST node id {node_id} out of range")
        return self.nodes[node_id]

    def find_by_tag(self, parent: AstNode, tag: str, max_depth: int = 3) -> int:
        return self._find(parent, "tag", tag, max_depth)

    def find_by_rule(self, parent: AstNode, rule: str, max_depth: int = 3) -> int:
        return self._find(parent, "rule", rule, max_depth)

    def _find(self, parent: AstNode, field: str, value: str, max_depth: int) -> int:
        """The first node below `parent` (depth first, at most max_depth levels down) whose `field` is
        `value`."""
        for child_id in parent.children:
            child = self.get(child_id)
            if getattr(child, field) == value:
                return child_id
            if max_depth > 1:
                found = self._find(child, field, value, max_depth - 1)
                if found != INVALID_AST_ID:
                    return found
        return INVALID_AST_ID

    def size(self) -> int:
        return len(self.nodes)

    def clear(self) -> None:
        self.nodes.clear()

    def visit(self, target: int | ParseResult, visitor: AstVisitor) -> None:
        """Pre-order walk from one node id, or from each top-level node of a parse result."""
        if isinstance(target, ParseResult):
            for node_id in target.nodes:
                self.visit(node_id, visitor)
            return
        if target == INVALID_AST_ID:
            return
        node = self.get(target)
        visitor(node)
        for child_id in node.children:
            self.visit(child_id, visitor)

    def dump(self) -> str:
        """Every node with its subtree (so children also appear again at top level), as the C++ prints."""
        lines: list[str] = []

        def walk(node: AstNode, indent: int) -> None:
            line = "  " * indent + f"NODE {node.id}"
            if node.rule:
                line += f" (rule {node.rule})"
            if node.tag:
                line += f" (tag {node.tag})"
            lines.append(line + f" ['{node.text}']\n")
            for child_id in node.children:
                walk(self.get(child_id), indent + 1)

        for node in self.nodes:
            walk(node, 0)
        return "".join(lines)


class ParseContext:
    """common_peg_parse_context: the input, the flags and the AST arena one parse fills."""

    def __init__(self, input: str = "", flags: int = NONE) -> None:
        self.input = input
        # a plain int: flag tests run on every sequence, and IntFlag arithmetic is slow
        self.flags = int(flags)
        self.ast = AstArena()
        self.parse_depth = 0

    def is_lenient(self) -> bool:
        return self.flags & _LENIENT_BIT != 0

    def is_debug(self) -> bool:
        return self.flags & _DEBUG_BIT != 0
