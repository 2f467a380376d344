"""From a PEG parse tree to an assistant message: the mappers of b10621's common/chat-peg-parser.cpp
(common_chat_peg_mapper, common_chat_peg_gemma4_mapper, common_chat_peg_minimax_m3_mapper and
tag_based_peg_mapper) with their string helpers.

The tag names are those of common_chat_peg_builder (server/chat/peg_chat.py), repeated here so that the
builder can import this module without a cycle.
"""

from __future__ import annotations

import json

from ..peg import INVALID_AST_ID
from .messages import ChatMsg, ToolCall

REASONING = "reasoning"
CONTENT = "content"
TOOL = "tool"
TOOL_OPEN = "tool-open"
TOOL_CLOSE = "tool-close"
TOOL_ID = "tool-id"
TOOL_NAME = "tool-name"
TOOL_ARGS = "tool-args"
TOOL_ARG = "tool-arg"
TOOL_ARG_OPEN = "tool-arg-open"
TOOL_ARG_CLOSE = "tool-arg-close"
TOOL_ARG_NAME = "tool-arg-name"
TOOL_ARG_VALUE = "tool-arg-value"
TOOL_ARG_STRING_VALUE = "tool-arg-string-value"

# std::isspace in the C locale
_C_SPACE = " \t\n\v\f\r"


def _trim_trailing_space(s: str) -> str:
    return s.rstrip(_C_SPACE)


def _trim(s: str) -> str:
    """trim(): at most one leading space, every trailing one."""
    if s and s[0] in _C_SPACE:
        s = s[1:]
    return s.rstrip(_C_SPACE)


def _dump(value) -> str:
    """nlohmann's dump() of a JSON value: UTF-8 kept, only the JSON escapes."""
    return json.dumps(value, ensure_ascii=False)


def escape_json_string_inner(s: str) -> str:
    """A string JSON-escaped, without its quotes."""
    return _dump(s)[1:-1]


def json_brace_depth(s: str) -> int:
    """How many '{' are still open, braces inside strings left out."""
    depth, in_string, escaped = 0, False, False
    for c in s:
        if escaped:
            escaped = False
        elif c == "\\" and in_string:
            escaped = True
        elif c == '"':
            in_string = not in_string
        elif not in_string:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
    return depth


def _is_word_char(c: str) -> bool:
    return (c.isascii() and c.isalnum()) or c == "_"


_PY_LITERALS = (("True", "true"), ("False", "false"), ("None", "null"))


def normalize_quotes_to_json(text: str) -> str:  # noqa: C901
    """Python-style values to JSON: single-quoted strings become double-quoted (escapes adjusted) and
    True/False/None become true/false/null; a prefix of those words maps to the same prefix of the JSON
    word, so that streamed partial values only grow."""
    out: list[str] = []
    in_single = in_double = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if in_single:
                # \' needs no escape between double quotes; \" and the other escapes stay as they are
                out.append("'" if nxt == "'" else c + nxt)
                i += 2
            elif in_double:
                out.append(c + nxt)
                i += 2
            else:
                out.append(c)
                i += 1
            continue
        if c == '"':
            if in_single:
                out.append('\\"')
            else:
                in_double = not in_double
                out.append(c)
        elif c == "'":
            if in_double:
                out.append(c)
            else:
                in_single = not in_single
                out.append('"')
        elif not in_single and not in_double and c in "TFN" and (i == 0 or not _is_word_char(text[i - 1])):
            end = i
            while end < n and _is_word_char(text[end]):
                end += 1
            token = text[i:end]
            for py, js in _PY_LITERALS:
                if py[: len(token)] == token:
                    out.append(js[: len(token)])
                    i = end - 1
                    break
            else:
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


class ChatPegMapper:
    """common_chat_peg_mapper: fills `result` from the tagged nodes of a parse, in document order.

    Arguments met before the tool's name are buffered and handed over once the name is known; a tool call
    joins `result.tool_calls` as soon as it is named, so that streaming sees it grow."""

    def __init__(self, result: ChatMsg) -> None:
        self.result = result
        self._pending_tool_call: ToolCall | None = None  # opened, not named yet
        self._current_tool: ToolCall | None = None
        self._arg_count = 0
        self._closing_quote_pending = False
        self._args_buffer = ""

    def _args_named(self) -> bool:
        """Whether argument text goes to the current tool (named) rather than to the buffer."""
        return self._current_tool is not None and bool(self._current_tool.name)

    def _args_get(self) -> str:
        return self._current_tool.arguments if self._args_named() else self._args_buffer

    def _args_set(self, value: str) -> None:
        if self._args_named():
            self._current_tool.arguments = value
        else:
            self._args_buffer = value

    def normalize_container_value(self, text: str) -> str:
        return normalize_quotes_to_json(text)

    def from_ast(self, arena, parse_result) -> None:
        arena.visit(parse_result, self.map)
        # A partial parse can stop inside a tool call that has no name yet
        pending = self._pending_tool_call
        if pending is not None and pending.name:
            if self._args_buffer:
                pending.arguments = self._args_buffer
            if self._closing_quote_pending and pending.arguments:
                pending.arguments += '"'
            self.result.tool_calls.append(pending)
            self._pending_tool_call = None
        # e.g. the empty reasoning of a <think></think> prefill
        if self.result.reasoning_content and not self.result.reasoning_content.strip(" \n\r\t"):
            self.result.reasoning_content = ""

    def map(self, node) -> None:  # noqa: C901
        tag = node.tag
        if tag == REASONING:  # GPT-OSS can have several reasoning blocks
            self.result.reasoning_content += node.text
        if tag == CONTENT:
            self.result.content += node.text

        current = self._current_tool
        if tag == TOOL_OPEN:
            self._pending_tool_call = current = self._current_tool = ToolCall(name="", arguments="")
            self._arg_count = 0
            self._args_buffer = ""
            self._closing_quote_pending = False

        if tag == TOOL_ID and current is not None:
            text = _trim_trailing_space(node.text)
            if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
                text = text[1:-1]
            current.id = text

        if tag == TOOL_NAME and current is not None:
            current.name = _trim_trailing_space(node.text)
            if self._args_buffer:
                current.arguments = self._args_buffer
                self._args_buffer = ""
            elif not current.arguments:
                current.arguments = "{"
            if self._pending_tool_call is not None:
                self.result.tool_calls.append(self._pending_tool_call)
                self._current_tool = current = self._pending_tool_call
                self._pending_tool_call = None

        if tag == TOOL_ARGS and current is not None:
            # JSON arguments come whole; tagged ones are built from the arg name/value nodes instead
            text = _trim_trailing_space(node.text)
            if text.startswith("{"):
                self._args_set(text)

        if tag == TOOL_ARG_OPEN:
            self._closing_quote_pending = False

        if tag == TOOL_ARG_NAME and current is not None:
            entry = ("," if self._arg_count > 0 else "") + _dump(_trim(node.text)) + ":"
            self._arg_count += 1
            self._args_set((self._args_get() or "{") + entry)

        if tag in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE) and current is not None:
            value = node.text
            added = ""
            if tag == TOOL_ARG_STRING_VALUE and not value:
                # upstream opens a quote here even when one is already pending
                added = '"'
                self._closing_quote_pending = True
            elif tag == TOOL_ARG_STRING_VALUE:
                # a schema string: always a literal string, closed by the arg close (or the tool close)
                if not self._closing_quote_pending:
                    added = '"'
                    self._closing_quote_pending = True
                added += escape_json_string_inner(value)
            elif value:
                added = self.normalize_container_value(value)
            self._args_set(self._args_get() + added)

        if tag == TOOL_ARG_CLOSE and current is not None and self._closing_quote_pending:
            self._args_set(self._args_get() + '"')
            self._closing_quote_pending = False

        if tag == TOOL_CLOSE and current is not None:
            if not current.name and self._args_buffer:
                current.arguments = self._args_buffer
                self._args_buffer = ""
            if self._closing_quote_pending:
                current.arguments += '"'
                self._closing_quote_pending = False
            current.arguments += "}" * max(0, json_brace_depth(current.arguments))
            # a tool call that never got its name is dropped
            if self._pending_tool_call is not None:
                if current.name:
                    self.result.tool_calls.append(self._pending_tool_call)
                self._pending_tool_call = None


def _gemma4_to_json(arena, node_id: int) -> str:  # noqa: C901
    """gemma4_to_json(): Gemma 4's tool-call values (its own string quotes, bare keys) as JSON; a partial
    container or string stays open."""
    node = arena.get(node_id)
    if not node.text:
        return ""
    rule = node.rule
    if rule in ("gemma4-number", "gemma4-bool", "gemma4-null", "gemma4-dict-key-name"):
        return node.text
    if rule == "gemma4-string-content":
        return escape_json_string_inner(node.text)
    if rule == "gemma4-string":
        out = '"'
        if node.children:
            out += _gemma4_to_json(arena, node.children[0])
            if not node.is_partial:
                out += '"'
        return out
    if rule in ("gemma4-array", "gemma4-dict"):
        opening, closing = ("[", "]") if rule == "gemma4-array" else ("{", "}")
        return (
            opening + ",".join(_gemma4_to_json(arena, c) for c in node.children) + ("" if node.is_partial else closing)
        )
    if rule == "gemma4-dict-key":
        out = '"'
        if node.children:
            out += escape_json_string_inner(_gemma4_to_json(arena, node.children[0]))
        return out if node.is_partial else out + '":'
    if rule == "gemma4-dict-kv":
        return "".join(_gemma4_to_json(arena, c) for c in node.children)
    if rule == "gemma4-value":
        return _gemma4_to_json(arena, node.children[0]) if node.children else ""
    return ""


class _WholeToolCallMapper(ChatPegMapper):
    """The mappers that read reasoning and content from their tagged nodes and take each tool call whole
    from its `tool` node (tool_call(): the call, or None while there is none yet)."""

    def from_ast(self, arena, parse_result) -> None:
        for node_id in parse_result.nodes:
            self._visit(arena, node_id)

    def _visit(self, arena, node_id: int) -> None:
        node = arena.get(node_id)
        if node.tag == REASONING:
            self.result.reasoning_content += node.text
            return
        if node.tag == CONTENT:
            self.result.content += node.text
            return
        if node.tag == TOOL:
            call = self.tool_call(arena, node)
            if call is not None:
                self.result.tool_calls.append(call)
            return
        for child in node.children:
            self._visit(arena, child)

    def tool_call(self, arena, node) -> ToolCall | None:
        raise NotImplementedError


class ChatPegGemma4Mapper(_WholeToolCallMapper):
    """common_chat_peg_gemma4_mapper: a tool call is taken whole from its `tool` node, once its name is
    complete."""

    def tool_call(self, arena, node) -> ToolCall | None:
        name_id = arena.find_by_tag(node, TOOL_NAME)
        args_id = arena.find_by_tag(node, TOOL_ARGS)
        if name_id == INVALID_AST_ID or args_id == INVALID_AST_ID:
            return None
        name_node, args_node = arena.get(name_id), arena.get(args_id)
        if name_node.is_partial:
            return None
        call = ToolCall(name=name_node.text, arguments="")
        if args_node.children:
            call.arguments = _gemma4_to_json(arena, args_node.children[0])
        return call


TOOL_ARG_OBJECT = "tool-arg-object"
TOOL_ARG_ARRAY = "tool-arg-array"
TOOL_ARG_ITEM = "tool-arg-item"


def _minimax_m3_collect(arena, node, tag: str, out: list[int]) -> None:
    """The nearest descendants tagged `tag`, not looking inside them."""
    for child_id in node.children:
        child = arena.get(child_id)
        if child.tag == tag:
            out.append(child_id)
        else:
            _minimax_m3_collect(arena, child, tag, out)


def _minimax_m3_value_of(arena, node) -> int:
    for child_id in node.children:
        if arena.get(child_id).tag in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE, TOOL_ARG_OBJECT, TOOL_ARG_ARRAY):
            return child_id
    return INVALID_AST_ID


def _minimax_m3_member_to_json(arena, node) -> str:
    name_id = arena.find_by_tag(node, TOOL_ARG_NAME)
    if name_id == INVALID_AST_ID:
        return ""
    return (
        _dump(arena.get(name_id).text)
        + ":"
        + _minimax_m3_value_to_json(arena, _minimax_m3_value_of(arena, node), not node.is_partial)
    )


def _minimax_m3_container_to_json(arena, node, is_object: bool, closed: bool) -> str:
    entries: list[int] = []
    _minimax_m3_collect(arena, node, TOOL_ARG if is_object else TOOL_ARG_ITEM, entries)
    texts = []
    for entry_id in entries:
        entry = arena.get(entry_id)
        if is_object:
            text = _minimax_m3_member_to_json(arena, entry)
        else:
            text = _minimax_m3_value_to_json(arena, _minimax_m3_value_of(arena, entry), not entry.is_partial)
        if text:
            texts.append(text)
    opening, closing = ("{", "}") if is_object else ("[", "]")
    return opening + ",".join(texts) + (closing if closed else "")


def _minimax_m3_value_to_json(arena, node_id: int, closed: bool) -> str:
    if node_id == INVALID_AST_ID:
        return ""
    node = arena.get(node_id)
    if node.tag == TOOL_ARG_OBJECT:
        return _minimax_m3_container_to_json(arena, node, True, closed)
    if node.tag == TOOL_ARG_ARRAY:
        return _minimax_m3_container_to_json(arena, node, False, closed)
    if node.tag == TOOL_ARG_STRING_VALUE:
        return '"' + escape_json_string_inner(node.text) + ('"' if closed else "")
    return node.text  # numbers and booleans, as the template writes them


class ChatPegMinimaxM3Mapper(_WholeToolCallMapper):
    """common_chat_peg_minimax_m3_mapper: MiniMax M3's XML-nested arguments rebuilt as a JSON object."""

    TOOL_ARG_OBJECT = TOOL_ARG_OBJECT
    TOOL_ARG_ARRAY = TOOL_ARG_ARRAY
    TOOL_ARG_ITEM = TOOL_ARG_ITEM

    def tool_call(self, arena, node) -> ToolCall | None:
        name_id = arena.find_by_tag(node, TOOL_NAME)
        if name_id == INVALID_AST_ID:
            return None
        return ToolCall(
            name=arena.get(name_id).text,
            arguments=_minimax_m3_container_to_json(arena, node, True, not node.is_partial),
        )


class TagBasedPegMapper:
    """tag_based_peg_mapper: the text of every tagged node by tag, the last one winning."""

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}

    def from_ast(self, arena, parse_result) -> None:
        def keep(node) -> None:
            if node.tag:
                self.tags[node.tag] = node.text

        arena.visit(parse_result, keep)
