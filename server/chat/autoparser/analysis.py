"""b10621's differential template analysis (common/chat-diff-analyzer.cpp, the structures of
common/chat-auto-parser.h): the template is rendered with synthetic conversations that differ in one
respect, and the diffs of the renders give the reasoning markers, the content wrappers and the tool-call
syntax the parser generator turns into a PEG parser and a grammar.

The small tagged PEG parsers it runs over the renders are peg_chat's port of tagged_peg_parser.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from enum import Enum

from ..peg_chat import build_tagged_peg_parser
from .helpers import (
    CompareVariantsResult,
    SegmentType,
    Template,
    TemplateParams,
    calculate_diff_split,
    compare_variants,
    prune_whitespace_segments,
    segmentize_markers,
    trim_leading_whitespace,
    trim_whitespace,
    until_common_prefix,
)

NPOS = sys.maxsize  # std::string::npos where positions are compared or sorted


class ReasoningMode(Enum):
    NONE = "NONE"
    TAG_BASED = "TAG_BASED"  # <think>...</think>; the start may be empty (delimiter style)
    TOOLS_ONLY = "TOOLS_ONLY"  # reasoning rendered only next to tool calls


class ContentMode(Enum):
    PLAIN = "PLAIN"
    ALWAYS_WRAPPED = "ALWAYS_WRAPPED"
    WRAPPED_WITH_REASONING = "WRAPPED_WITH_REASONING"


class CallIdPosition(Enum):
    NONE = "NONE"
    PRE_FUNC_NAME = "PRE_FUNC_NAME"  # [CALL_ID]id[FUNC]name{args}
    BETWEEN_FUNC_AND_ARGS = "BETWEEN_FUNC_AND_ARGS"  # [FUNC]name[CALL_ID]id{args}
    POST_ARGS = "POST_ARGS"  # [FUNC]name{args}[CALL_ID]id


class ToolFormat(Enum):
    NONE = "NONE"
    JSON_NATIVE = "JSON_NATIVE"  # {"name": "X", "arguments": {...}}
    TAG_WITH_JSON = "TAG_WITH_JSON"  # <function=X>{...}</function>
    TAG_WITH_TAGGED = "TAG_WITH_TAGGED"  # <param=key>value</param>


FUN_FIRST = "FFF_FIRST_FUN_F"
FUN_SECOND = "SSS_SECOND_FUN_S"
ARG_FIRST = "AA_ARG_FST_AA"
ARG_SECOND = "BB_ARG_SND_BB"
USER_MSG = "U_USER_MSG Hello END_U"
USER_MSG_TWO = "V_USER_MSG Hello END_V"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
THINKING_CONTENT = "REASON_PART I am thinking END_R"
CALL_ID_001 = "call00001"
CALL_ID_002 = "call00002"
CALL_ID_999 = "call99999"

_PARAMS_SCHEMA = {
    "type": "object",
    "properties": {
        ARG_FIRST: {"type": "string", "description": "First argument"},
        ARG_SECOND: {"type": "string", "description": "Second argument"},
    },
    "required": [],
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": FUN_FIRST, "description": "Test function foo", "parameters": _PARAMS_SCHEMA},
    },
    {
        "type": "function",
        "function": {"name": FUN_SECOND, "description": "Test function bar", "parameters": _PARAMS_SCHEMA},
    },
]
_USER = {"role": "user", "content": USER_MSG}


def _call(name: str, args: dict, call_id: str = CALL_ID_001) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


_CALL_ZERO_ARGS = _call(FUN_FIRST, {})
_CALL_ONE_ARG = _call(FUN_FIRST, {ARG_FIRST: "XXXX"})
_CALL_ONE_ARG_OTHER_VAL = _call(FUN_FIRST, {ARG_FIRST: "YYYY"})
_CALL_OTHER_ARG = _call(FUN_FIRST, {ARG_SECOND: "YYYY"})
_CALL_FIRST = _call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"})
_CALL_SECOND = _call(FUN_SECOND, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_002)
_CALL_FIRST_ALT_ID = _call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_999)


def _assistant(content: str | None = ASSISTANT_MSG, **fields) -> dict:
    return {"role": "assistant", "content": content, **fields}


def _with_calls(*calls: dict) -> dict:
    return _assistant("", tool_calls=list(calls))


def _until(s: str, needle: str) -> str:
    """s.substr(0, s.find(needle)): all of s when the needle is absent."""
    pos = s.find(needle)
    return s if pos < 0 else s[:pos]


def _ascii_lower(s: str) -> str:
    return "".join(c.lower() if c < "\x80" else c for c in s)


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8"))


def _compare_messages(tmpl: Template, a: list, b: list, tools: list | None = None) -> CompareVariantsResult | None:
    """The common comparison of the analysis: two conversations, generation prompt off, thinking on."""

    def modify(p: TemplateParams) -> None:
        p.messages = b

    return compare_variants(tmpl, TemplateParams(messages=a, tools=tools), modify)


def _last_marker_parser(p, tag: str):
    """The last marker of a string, with everything after it: b10621's `last_marker` idiom."""
    last = p.marker() + p.zero_or_more(p.negate(p.marker()) + p.any()) + p.end()
    return p.zero_or_more(p.negate(last) + p.any()) + p.tag(tag, last)


def _find_last_marker(s: str) -> str:
    def build(p):
        last = p.marker() + p.zero_or_more(p.negate(p.marker()) + p.any()) + p.end()
        return p.zero_or_more(p.negate(last) + p.any()) + p.tag("m", p.marker())

    res = build_tagged_peg_parser(build).parse_anywhere_and_extract(s)
    return res.tags.get("m", "") if res.result.success() else ""


def _find_first_marker(s: str) -> str:
    res = build_tagged_peg_parser(lambda p: p.tag("m", p.marker())).parse_anywhere_and_extract(s)
    return res.tags.get("m", "") if res.result.success() else ""


# ---------------------------------------------------------------------------------------------------------------
# Reasoning


@dataclass
class AnalyzeReasoning:
    mode: ReasoningMode = ReasoningMode.NONE
    start: str = ""  # "<think>", "[THINK]", "<|START_THINKING|>", ""
    end: str = ""  # "</think>", "[BEGIN FINAL RESPONSE]", "<|END_THINKING|>"

    @classmethod
    def analyze(cls, tmpl: Template, supports_tools: bool) -> AnalyzeReasoning:
        r = cls()
        r._compare_reasoning_presence(tmpl)
        r._compare_thinking_enabled(tmpl)
        if supports_tools:
            r._compare_reasoning_scope(tmpl)
        return r

    def _compare_reasoning_presence(self, tmpl: Template) -> None:
        """Reasoning markers from an assistant message rendered with and without reasoning_content."""
        with_reasoning = _assistant(reasoning_content=THINKING_CONTENT)
        cmp = _compare_messages(tmpl, [_USER, _assistant()], [_USER, with_reasoning])
        if cmp is None or not cmp.diff.right or THINKING_CONTENT not in cmp.diff.right:
            return

        def delimiter(p):
            return (
                p.literal(THINKING_CONTENT) + p.space() + p.optional(p.tag("post", p.marker() + p.space()) + p.rest())
            )

        def wrapped(p):
            return (
                p.tag("pre", p.marker() + p.space())
                + p.literal(THINKING_CONTENT)
                + p.tag("post", p.space() + p.marker() + p.space())
                + p.rest()
            )

        # the wrapped form first, the delimiter form when it does not match
        res = build_tagged_peg_parser(wrapped).parse_anywhere_and_extract(cmp.output_B)
        if not res.result.success():
            res = build_tagged_peg_parser(delimiter).parse_anywhere_and_extract(cmp.output_B)
        if res.result.success():
            pre, post = res.tags.get("pre", ""), res.tags.get("post", "")
            if pre and post:
                self.mode, self.start, self.end = ReasoningMode.TAG_BASED, pre, post
            elif post:
                self.mode, self.end = ReasoningMode.TAG_BASED, post

    def _compare_thinking_enabled(self, tmpl: Template) -> None:  # noqa: C901
        """Markers the generation prompt gains or loses when enable_thinking flips."""

        def enable(p: TemplateParams) -> None:
            p.enable_thinking = True

        params = TemplateParams(messages=[_USER], add_generation_prompt=True, enable_thinking=False)
        cmp = compare_variants(tmpl, params, enable)
        if cmp is None:
            return
        diff = cmp.diff
        left_trimmed, right_trimmed = trim_whitespace(diff.left), trim_whitespace(diff.right)

        if not left_trimmed and diff.right:
            if right_trimmed and cmp.output_B.endswith(right_trimmed) and not self.start:
                self.start, self.mode = diff.right, ReasoningMode.TAG_BASED
        elif not right_trimmed and diff.left:
            if left_trimmed and cmp.output_A.endswith(left_trimmed) and not self.end:
                seg = prune_whitespace_segments(segmentize_markers(cmp.output_A))
                if len(seg) >= 2 and seg[-1].value == left_trimmed and seg[-2].type == SegmentType.MARKER:
                    self.start = seg[-2].value
                self.end, self.mode = diff.left, ReasoningMode.TAG_BASED
        elif left_trimmed and right_trimmed:
            # The whole-output diff is noisy (SmolLM3 rewrites its system message when enable_thinking flips):
            # anchor on one generation prompt's tail and look for two markers appended after it in the other.
            anchor_len = 64
            for base, extended in ((cmp.output_B, cmp.output_A), (cmp.output_A, cmp.output_B)):
                anchor = base[max(0, len(base) - anchor_len) :]
                pos = extended.rfind(anchor)
                if pos < 0 or pos + len(anchor) >= len(extended):
                    continue
                extra = trim_whitespace(extended[pos + len(anchor) :])
                if not extra:
                    continue
                seg = prune_whitespace_segments(segmentize_markers(extra))
                if len(seg) == 2 and seg[0].type == SegmentType.MARKER and seg[1].type == SegmentType.MARKER:
                    if not self.start:
                        self.start = seg[0].value
                    if not self.end:
                        self.end = seg[1].value
                    self.mode = ReasoningMode.TAG_BASED
                    break

        if self.mode == ReasoningMode.NONE and not self.start and self.end:
            self.mode = ReasoningMode.TAG_BASED

    def _compare_reasoning_scope(self, tmpl: Template) -> None:
        """TOOLS_ONLY when reasoning_content is rendered next to a tool call but not next to content."""
        with_content = _assistant(reasoning_content=THINKING_CONTENT)
        with_tools = _assistant(
            None,
            reasoning_content=THINKING_CONTENT,
            tool_calls=[_call(FUN_FIRST, {ARG_FIRST: "VVVV", ARG_SECOND: "XXXX"})],
        )
        cmp = _compare_messages(tmpl, [_USER, with_content], [_USER, with_tools], TOOLS)
        if cmp is None:
            return
        if THINKING_CONTENT in cmp.output_A or THINKING_CONTENT not in cmp.output_B:
            return
        self.mode = ReasoningMode.TOOLS_ONLY

        def wrapped(p):
            return (
                p.tag("pre", p.marker() + p.space())
                + p.literal(THINKING_CONTENT)
                + p.space()
                + p.tag("post", p.marker() + p.space())
            )

        def delimiter(p):
            return p.literal(THINKING_CONTENT) + p.space() + p.optional(p.tag("post", p.marker() + p.space()))

        res = build_tagged_peg_parser(wrapped).parse_anywhere_and_extract(cmp.output_B)
        if res.result.success():
            self.start, self.end = res.tags.get("pre", ""), res.tags.get("post", "")
            return
        res = build_tagged_peg_parser(delimiter).parse_anywhere_and_extract(cmp.output_B)
        if res.result.success():
            self.end = res.tags.get("post", "")
        else:
            self.mode = ReasoningMode.NONE


# ---------------------------------------------------------------------------------------------------------------
# Content


@dataclass
class AnalyzeContent:
    mode: ContentMode = ContentMode.PLAIN
    start: str = ""  # "<response>", ""
    end: str = ""  # "</response>", ""

    @classmethod
    def analyze(cls, tmpl: Template, reasoning: AnalyzeReasoning) -> AnalyzeContent:  # noqa: C901
        c = cls()
        with_tools = _with_calls(_call("test_func", {"arg1": "value1"}))
        with_reasoning = _assistant("", reasoning_content=THINKING_CONTENT)
        base = [_USER, _assistant()]
        cmp_tools = _compare_messages(tmpl, base, [_USER, with_tools], TOOLS)
        cmp_reasoning = _compare_messages(tmpl, base, [_USER, with_reasoning], TOOLS)
        if cmp_tools is None or cmp_reasoning is None:
            return c
        diff_tools, diff_reasoning = cmp_tools.diff, cmp_reasoning.diff

        found_plain = False
        if trim_whitespace(diff_tools.left) == ASSISTANT_MSG:

            def plain(p):
                return (
                    p.space()
                    + p.literal(diff_reasoning.left)
                    + p.space()
                    + p.optional(p.marker())
                    + p.space()
                    + p.end()
                )

            if build_tagged_peg_parser(plain).parse_and_extract(diff_reasoning.left).result.success():
                # only the content text in the diff (maybe with a stray end-of-turn marker): no wrappers
                found_plain = True
            elif reasoning.mode != ReasoningMode.NONE and reasoning.end:

                def post_reasoning(p):
                    return p.literal(reasoning.end) + p.space() + p.literal(ASSISTANT_MSG)

                res = build_tagged_peg_parser(post_reasoning).parse_anywhere_and_extract(diff_reasoning.left)
                found_plain = res.result.success()
        if not found_plain:
            rdiff = diff_reasoning.left
            if reasoning.end and reasoning.end in rdiff:
                rdiff = rdiff[rdiff.find(reasoning.end) + len(reasoning.end) :]
            # the more promising diff (longer, in bytes as b10621 measures)
            pure = rdiff if _utf8_len(rdiff) > _utf8_len(diff_tools.left) else diff_tools.left

            def wrapped(p):
                return (
                    p.tag("pre", p.marker() + p.space())
                    + p.literal(ASSISTANT_MSG)
                    + p.space()
                    + p.tag("post", p.marker() + p.space())
                    + p.rest()
                )

            res = build_tagged_peg_parser(wrapped).parse_anywhere_and_extract(pure)
            c.start, c.end = res.tags.get("pre", ""), res.tags.get("post", "")
        if c.start or c.end:
            c.mode = ContentMode.ALWAYS_WRAPPED
        return c

    def is_always_wrapped(self) -> bool:
        return self.mode == ContentMode.ALWAYS_WRAPPED and bool(self.start) and bool(self.end)


# ---------------------------------------------------------------------------------------------------------------
# Tools


@dataclass
class ToolFormatAnalysis:
    mode: ToolFormat = ToolFormat.NONE
    section_start: str = ""  # "<tool_call>", "[TOOL_CALLS]", ""
    section_end: str = ""  # "</tool_call>", ""
    per_call_start: str = ""  # "<|tool_call_begin|>", "" (multi-call templates)
    per_call_end: str = ""  # "<|tool_call_end|>", ""
    fun_name_is_key: bool = False  # {"<funname>": {...arguments...}}
    tools_array_wrapped: bool = False  # calls in a JSON array
    openai_wrapper_trigger: bool = False  # the model writes the OpenAI function wrapper: trigger on it
    function_field: str = "function"
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str = ""
    gen_id_field: str = ""
    parameter_order: list[str] = field(default_factory=list)


@dataclass
class ToolFunctionAnalysis:
    name_prefix: str = ""  # "<function=", "\"name\": \"", "functions."
    name_suffix: str = ""  # ">", "\"", ":0"
    args_separator: str = ""  # "<tool_sep>"
    close: str = ""  # "</function>", ""


@dataclass
class ToolArgumentsAnalysis:
    start: str = ""  # "<|tool_call_argument_begin|>", "<args>"
    end: str = ""  # "<|tool_call_argument_end|>", "</args>"
    name_prefix: str = ""  # "<param=", "<arg_key>", "\""
    name_suffix: str = ""  # ">", "</arg_key>", "\":"
    value_prefix: str = ""  # "", "<arg_value>", ""
    value_suffix: str = ""  # "</param>", "</arg_value>", ""
    separator: str = ""  # "", "\n", ","
    tolerate_intertag_whitespace: bool = False  # Laguna: whitespace between argument tags


@dataclass
class ToolIdAnalysis:
    pos: CallIdPosition = CallIdPosition.NONE
    prefix: str = ""  # "[CALL_ID]"
    suffix: str = ""


@dataclass
class AnalyzeTools:
    format: ToolFormatAnalysis = field(default_factory=ToolFormatAnalysis)
    function: ToolFunctionAnalysis = field(default_factory=ToolFunctionAnalysis)
    arguments: ToolArgumentsAnalysis = field(default_factory=ToolArgumentsAnalysis)
    call_id: ToolIdAnalysis = field(default_factory=ToolIdAnalysis)

    @classmethod
    def analyze(cls, tmpl: Template, caps: dict[str, bool], reasoning: AnalyzeReasoning) -> AnalyzeTools:
        t = cls()
        parallel = caps["supports_parallel_tool_calls"]
        t._analyze_tool_calls(tmpl, reasoning, parallel)
        if t.format.mode not in (ToolFormat.NONE, ToolFormat.JSON_NATIVE):
            if parallel:
                t._check_per_call_markers(tmpl)
            t._extract_function_markers(tmpl)
            if t.format.mode == ToolFormat.TAG_WITH_TAGGED:
                t._extract_argument_name_markers(tmpl)
                t._extract_argument_value_markers(tmpl)
            t._extract_argument_separator(tmpl)
            # b10621's extract_args_markers() acts on JSON_NATIVE only, which never gets here: args start/end
            # stay empty
            t._extract_call_id_markers(tmpl)
        return t

    def _analyze_tool_calls(self, tmpl: Template, reasoning: AnalyzeReasoning, parallel: bool) -> None:
        cmp = _compare_messages(tmpl, [_USER, _assistant()], [_USER, _with_calls(_CALL_FIRST)], TOOLS)
        if cmp is None or not cmp.diff.right:
            return
        self._analyze_tool_call_format(cmp.diff.right, FUN_FIRST, ARG_FIRST, reasoning, parallel, tmpl)

    def _analyze_tool_call_format(
        self,
        haystack: str,
        fun_needle: str,
        arg_needle: str,
        reasoning: AnalyzeReasoning,
        parallel: bool,
        tmpl: Template,
    ) -> None:
        def in_json(needle: str) -> bool:
            def build(p):
                quoted = p.tag("dq", p.literal('"') + p.literal(needle) + p.literal('"'))
                return p.choice([p.literal("{"), p.literal(":")]) << p.choice([quoted])

            return build_tagged_peg_parser(build).parse_anywhere_and_extract(haystack).result.success()

        if in_json(fun_needle):
            self.format.mode = ToolFormat.JSON_NATIVE
        elif in_json(arg_needle):
            self.format.mode = ToolFormat.TAG_WITH_JSON
        else:
            self.format.mode = ToolFormat.TAG_WITH_TAGGED

        # the reasoning markers out of the way first
        clean = haystack
        if reasoning.start and reasoning.start in haystack:
            pos = haystack.find(reasoning.start)
            clean = haystack[:pos] + haystack[pos + len(reasoning.start) :]
        if reasoning.end and reasoning.end in clean:
            pos = clean.find(reasoning.end)
            clean = clean[:pos] + clean[pos + len(reasoning.end) :]

        if self.format.mode == ToolFormat.JSON_NATIVE:
            self._analyze_tool_call_format_json_native(clean, fun_needle, arg_needle)
            if parallel:
                self._analyze_json_native_parallel_calls(tmpl)
        else:
            self._analyze_tool_call_format_non_json(clean, fun_needle)
        # whitespace never matters on the end markers
        self.format.section_end = trim_whitespace(self.format.section_end)
        self.format.per_call_end = trim_whitespace(self.format.per_call_end)

    def _analyze_json_native_parallel_calls(self, tmpl: Template) -> None:
        """A section marker that repeats for the second call is a per-call marker."""
        cmp = _compare_messages(
            tmpl, [_USER, _with_calls(_CALL_FIRST)], [_USER, _with_calls(_CALL_FIRST, _CALL_SECOND)], TOOLS
        )
        if cmp is None:
            return
        fmt = self.format
        if fmt.section_start and fmt.section_start in cmp.diff.right:
            fmt.per_call_start, fmt.per_call_end = fmt.section_start, fmt.section_end
            fmt.section_start = fmt.section_end = ""

    def _analyze_tool_call_format_json_native(self, clean: str, fun_needle: str, arg_needle: str) -> None:  # noqa: C901
        fmt = self.format
        json_start, json_end = clean.find("{"), clean.rfind("}")
        if json_start < 0:  # std::string::substr(npos) throws
            raise ValueError("basic_string::substr: the tool call has no JSON object")
        cut = clean[json_start : json_end + 1] if json_end >= 0 else clean[json_start:]
        try:
            call_struct = json.loads(cut)
        except json.JSONDecodeError as e:
            raise ValueError(f"[json.exception.parse_error.101] {e}") from None
        if not isinstance(call_struct, dict):
            raise TypeError("[json.exception.type_error.302] the tool call is not a JSON object")

        def register(prefix: str, key: str, value) -> None:
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, str) and "call0000" in value:
                fmt.id_field = path
            elif isinstance(value, str) and value == fun_needle:
                fmt.name_field = path
            elif arg_needle in json.dumps(value, ensure_ascii=False):  # the arguments, as a string or an object
                fmt.args_field = path
            elif "id" in key:  # heuristics for a generated id field
                fmt.gen_id_field = path

        for key, value in call_struct.items():
            if key == fun_needle:
                # the function name is the key: no name field, the arguments are its value
                fmt.fun_name_is_key = True
                fmt.name_field = fmt.args_field = ""
                continue
            if isinstance(value, dict) and arg_needle not in json.dumps(value, ensure_ascii=False):
                fmt.function_field = key
                for sub_key, sub_value in value.items():
                    register(key, sub_key, sub_value)
            register("", key, value)

        def array(p):
            return p.tag("pre", p.literal("[") + p.space()) + p.literal(cut) + p.tag("post", p.space() + p.literal("]"))

        res = build_tagged_peg_parser(array).parse_anywhere_and_extract(clean)
        if res.result.success():
            fmt.tools_array_wrapped = True
            json_start -= len(res.tags.get("pre", ""))
            json_end += len(res.tags.get("post", ""))
        json_end += 1  # past the closing character

        located = []
        for name in (fmt.name_field, fmt.args_field, fmt.id_field, fmt.gen_id_field):
            if name:
                pos = clean.find(name)
                located.append((NPOS if pos < 0 else pos, name))
        fmt.parameter_order.extend(name for _, name in sorted(located))
        fmt.section_start = trim_leading_whitespace(clean[:json_start])
        fmt.section_end = trim_whitespace(clean[json_end:])
        # the closing bracket of a wrapping array is no section end of its own
        if fmt.tools_array_wrapped and fmt.section_end == "]":
            fmt.section_end = ""

    def _analyze_tool_call_format_non_json(self, clean: str, fun_needle: str) -> None:
        def fun_marker_parser(p):
            angle = (
                p.tag("fun_pre", p.literal("<") + p.until_one_of([">", fun_needle]))
                + p.literal(fun_needle)
                + p.tag("fun_post", p.negate(p.space() + p.literal("<")) + p.until(">") + p.literal(">"))
                + p.space()
            )
            square = (
                p.tag("fun_pre", p.literal("[") + p.until_one_of(["]", fun_needle]))
                + p.literal(fun_needle)
                + p.tag("fun_post", p.negate(p.space() + p.literal("[") + p.until("]") + p.literal("]")) + p.space())
            )
            return p.tag("fun_marker", p.choice([angle, square]))

        # is the function name inside a tag, or on its own?
        fun_res = build_tagged_peg_parser(fun_marker_parser).parse_anywhere_and_extract(clean)
        fun_marker = fun_res.tags.get("fun_marker", "") if fun_res.result.success() else fun_needle

        # up to two markers, then everything up to the function marker is the name prefix
        def per_tool(p):
            return (
                p.tag("sec_start", p.marker() + p.space())
                + p.tag("call_start", p.marker() + p.space())
                + p.tag("fun_pre", p.until(fun_marker))
                + p.literal(fun_marker)
                + p.tag("rest", p.rest())
            )

        def section(p):
            return p.tag("sec_start", p.marker() + p.space()) + p.literal(fun_marker) + p.tag("rest", p.rest())

        res = build_tagged_peg_parser(per_tool).parse_anywhere_and_extract(clean)
        if res.result.success():

            def double_closer(p):
                return p.tag("call_end", p.marker() + p.space()) + p.tag("sec_end", p.marker() + p.space()) + p.end()

            res_end = build_tagged_peg_parser(double_closer).parse_anywhere_and_extract(res.tags.get("rest", ""))
            self.function.name_prefix = fun_res.tags.get("fun_pre", "") + self.function.name_prefix
        else:
            res = build_tagged_peg_parser(section).parse_anywhere_and_extract(clean)

            def single_closer(p):
                return p.tag("sec_end", p.marker() + p.space()) + p.end()

            res_end = build_tagged_peg_parser(single_closer).parse_anywhere_and_extract(res.tags.get("rest", ""))
        self.format.per_call_start = res.tags.get("call_start", "")
        self.format.per_call_end = res_end.tags.get("call_end", "")
        self.format.section_start = res.tags.get("sec_start", "")
        self.format.section_end = res_end.tags.get("sec_end", "")

    def _check_per_call_markers(self, tmpl: Template) -> None:
        """Section markers repeated for a second call are per-call markers; a per-call end marker that does not
        repeat is a section end."""
        cmp = _compare_messages(
            tmpl, [_USER, _with_calls(_CALL_FIRST)], [_USER, _with_calls(_CALL_FIRST, _CALL_SECOND)], TOOLS
        )
        if cmp is None:
            return
        fmt = self.format
        second = trim_leading_whitespace(calculate_diff_split(cmp.diff.suffix, cmp.diff.right).right)
        if fmt.section_start and second.startswith(fmt.section_start):
            fmt.per_call_start, fmt.per_call_end = fmt.section_start, fmt.section_end
            fmt.section_start = fmt.section_end = ""
        if fmt.per_call_end:
            one, two = cmp.output_A.count(fmt.per_call_end), cmp.output_B.count(fmt.per_call_end)
            if one > 0 and one == two:
                fmt.section_end, fmt.per_call_end = fmt.per_call_end, ""

    def _extract_function_markers(self, tmpl: Template) -> None:  # noqa: C901
        params = TemplateParams(messages=[_USER, _with_calls(_CALL_FIRST)], tools=TOOLS)

        def to_second(p: TemplateParams) -> None:
            p.messages = [_USER, _with_calls(_CALL_SECOND)]

        cmp = compare_variants(tmpl, params, to_second)
        if cmp is None:
            return
        diff, fmt, fn = cmp.diff, self.format, self.function
        if FUN_FIRST not in diff.left or FUN_SECOND not in diff.right:
            return

        prefix_marker = fmt.per_call_start or fmt.section_start
        if prefix_marker and prefix_marker in diff.prefix:
            fn.name_prefix = diff.prefix[diff.prefix.rfind(prefix_marker) + len(prefix_marker) :]

        # the name's prefix and suffix, up to the next marker
        def name_parser(p):
            return (
                p.tag("pre", p.until(FUN_FIRST))
                + p.literal(FUN_FIRST)
                + p.tag("post", p.zero_or_more(p.negate(p.marker()) + p.any()))
            )

        res = build_tagged_peg_parser(name_parser).parse_and_extract(diff.left)
        if res.result.success():
            fn.name_prefix += res.tags.get("pre", "")
            fn.name_suffix = res.tags.get("post", "")

        # the name suffix runs on into the common suffix, up to where the arguments begin
        if fmt.mode == ToolFormat.TAG_WITH_JSON:
            # up to the first { or [ outside a marker, markers included, when a marker follows the JSON
            def json_suffix(p):
                non_json = p.marker() | (p.negate(p.literal("{")) + p.negate(p.literal("[")) + p.any())
                after_json = p.zero_or_more(p.negate(p.marker()) + p.any()) + p.marker()
                return p.tag("ext", p.zero_or_more(non_json)) + after_json

            res = build_tagged_peg_parser(json_suffix).parse_and_extract(diff.suffix)
            if res.result.success():
                fn.name_suffix += res.tags.get("ext", "")
        else:
            res = build_tagged_peg_parser(
                lambda p: p.tag("ext", p.zero_or_more(p.negate(p.marker()) + p.any()))
            ).parse_and_extract(diff.suffix)
            if res.result.success():
                ext = res.tags.get("ext", "")
                fn.name_suffix += ext

                def arg_start(p):
                    return p.marker() + p.space() + p.choice([p.literal(ARG_FIRST), p.literal(ARG_SECOND)])

                def sep_parser(p):
                    return p.tag("sep", p.zero_or_more(p.negate(arg_start(p)) + p.any())) + arg_start(p)

                res = build_tagged_peg_parser(sep_parser).parse_and_extract(diff.suffix[len(ext) :])
                if res.result.success():
                    fn.args_separator = trim_whitespace(res.tags.get("sep", ""))

        # the closer: between the last argument and the call or section end marker
        suffix_marker = fmt.per_call_end or fmt.section_end
        closer_suffix = ""
        if not suffix_marker:
            # no end marker: diff against a message without calls instead
            def no_call(p: TemplateParams) -> None:
                p.messages = [_USER, _assistant()]

            notool = compare_variants(tmpl, params, no_call)
            if notool is not None:
                left = notool.diff.left
                pos = left.find("YYYY")
                start = pos + 4 if pos >= 0 else 3  # npos + 4 wraps around to 3 in b10621
                if start > len(left):
                    raise ValueError("basic_string::substr: __pos > this->size()")
                closer_suffix = left[start:]
        else:
            closer_suffix = _until(diff.suffix, suffix_marker)
        if closer_suffix:
            if fmt.mode == ToolFormat.TAG_WITH_TAGGED:
                # past the last value and its closing marker, the rest closes the function
                def closer(p):
                    return (
                        p.until("YYYY")
                        + p.literal("YYYY")
                        + p.space()
                        + p.marker()
                        + p.space()
                        + p.tag("close", p.rest())
                    )

                res = build_tagged_peg_parser(closer).parse_and_extract(closer_suffix)
                if res.result.success():
                    fn.close = res.tags.get("close", "")
            elif fmt.mode == ToolFormat.TAG_WITH_JSON:
                # past the end of the JSON arguments, the rest closes the function
                def closer(p):
                    return p.until("YYYY") + p.literal("YYYY") + p.tag("post_val", p.rest())

                res = build_tagged_peg_parser(closer).parse_and_extract(closer_suffix)
                if res.result.success():
                    post = res.tags.get("post_val", "")
                    pos = max(post.rfind("}"), post.rfind("]"))
                    if 0 <= pos < len(post) - 1:
                        fn.close = trim_leading_whitespace(post[pos + 1 :])
        fn.close = trim_leading_whitespace(fn.close)

    def _extract_argument_name_markers(self, tmpl: Template) -> None:
        cmp = _compare_messages(tmpl, [_USER, _with_calls(_CALL_ONE_ARG)], [_USER, _with_calls(_CALL_OTHER_ARG)], TOOLS)
        if cmp is None:
            return
        diff, args = cmp.diff, self.arguments
        if not diff.left or not diff.right:
            return

        def named(name: str, stop: str):
            return lambda p: (
                p.tag("pre", p.until(name)) + p.literal(name) + p.tag("suffix", p.until_one_of(['"', stop]))
            )

        left = build_tagged_peg_parser(named(ARG_FIRST, "X")).parse_anywhere_and_extract(diff.left)
        right = build_tagged_peg_parser(named(ARG_SECOND, "Y")).parse_anywhere_and_extract(diff.right)
        if (
            left.result.success()
            and right.result.success()
            and left.tags.get("pre", "")
            and left.tags.get("pre", "") == right.tags.get("pre", "")
            and left.tags.get("suffix", "") == right.tags.get("suffix", "")
        ):
            # the name sits inside a structure (a JSON key): the shared wrapper is the prefix
            args.name_prefix, args.name_suffix = left.tags.get("pre", ""), left.tags.get("suffix", "")
        elif diff.left.startswith(ARG_FIRST) and diff.right.startswith(ARG_SECOND):
            # the name opens the diff: the prefix is the last marker of the common prefix
            res = build_tagged_peg_parser(lambda p: _last_marker_parser(p, "name_prefix")).parse_and_extract(
                diff.prefix
            )
            args.name_prefix = res.tags.get("name_prefix", "") if res.result.success() else diff.prefix

            # the suffix runs from the name to the first marker (and whitespace), in the diff or after it
            after_first = diff.left[len(ARG_FIRST) :] + diff.suffix

            def suffix(p):
                return p.tag("suffix", p.zero_or_more(p.negate(p.marker()) + p.any()) + p.marker() + p.space())

            res = build_tagged_peg_parser(suffix).parse_anywhere_and_extract(after_first)
            if res.result.success():
                args.name_suffix = res.tags.get("suffix", "")

    def _extract_argument_value_markers(self, tmpl: Template) -> None:
        cmp = _compare_messages(
            tmpl, [_USER, _with_calls(_CALL_ONE_ARG)], [_USER, _with_calls(_CALL_ONE_ARG_OTHER_VAL)], TOOLS
        )
        if cmp is None:
            return
        diff, args, fmt = cmp.diff, self.arguments, self.format
        if diff.left != "XXXX" or diff.right != "YYYY":
            return
        name_ending = ARG_FIRST + args.name_suffix
        prefix = diff.prefix
        if name_ending in prefix:
            prefix = prefix[prefix.rfind(name_ending) + len(name_ending) :]
        if prefix:
            # the last marker and any text after it
            res = build_tagged_peg_parser(lambda p: _last_marker_parser(p, "val_prefix")).parse_and_extract(prefix)
            args.value_prefix = res.tags.get("val_prefix", "") if res.result.success() else prefix

        value_suffix = diff.suffix
        if self.function.close:
            value_suffix = _until(value_suffix, self.function.close)
        elif fmt.per_call_end or fmt.section_end:
            value_suffix = _until(value_suffix, fmt.per_call_end or fmt.section_end)
        if trim_whitespace(value_suffix):
            args.value_suffix = value_suffix

    def _extract_argument_separator(self, tmpl: Template) -> None:
        cmp = _compare_messages(tmpl, [_USER, _with_calls(_CALL_ONE_ARG)], [_USER, _with_calls(_CALL_FIRST)], TOOLS)
        if cmp is not None and cmp.diff.right:
            # ARG_FIRST and ARG_SECOND share no prefix, so b10621 always finds "" here
            self.arguments.separator = until_common_prefix(cmp.diff.right, ARG_FIRST, ARG_SECOND)

    def _extract_call_id_markers(self, tmpl: Template) -> None:  # noqa: C901
        cmp = _compare_messages(
            tmpl, [_USER, _with_calls(_CALL_FIRST)], [_USER, _with_calls(_CALL_FIRST_ALT_ID)], TOOLS
        )
        if cmp is None:
            return
        diff, cid = cmp.diff, self.call_id
        if not diff.left and not diff.right:
            return

        n = 0
        while n < min(len(CALL_ID_001), len(CALL_ID_999)) and CALL_ID_001[n] == CALL_ID_999[n]:
            n += 1
        common_id = CALL_ID_001[:n]

        # the function name in the prefix: the id follows it (between name and arguments, or after them);
        # in the suffix: the id comes first
        fn_in_prefix = diff.prefix.rfind(FUN_FIRST)
        fn_in_suffix = diff.suffix.find(FUN_FIRST)
        if fn_in_prefix >= 0 and fn_in_suffix < 0:
            args_in_prefix = diff.prefix.find("{", fn_in_prefix)
            args_in_suffix = diff.suffix.find("{")
            if args_in_suffix >= 0 and args_in_prefix < 0:
                cid.pos = CallIdPosition.BETWEEN_FUNC_AND_ARGS
                after_func = diff.prefix[fn_in_prefix + len(FUN_FIRST) :]

                # the marker right before the id, no other marker in between
                def id_prefix(p):
                    return (
                        p.tag("prefix", p.marker())
                        + p.zero_or_more(p.negate(p.marker()) + p.negate(p.literal(common_id)) + p.any())
                        + p.literal(common_id)
                    )

                res = build_tagged_peg_parser(id_prefix).parse_anywhere_and_extract(after_func)
                cid.prefix = res.tags.get("prefix", "") if res.result.success() else _find_last_marker(after_func)

                # the first marker of the suffix before the arguments' {
                def id_suffix(p):
                    return p.zero_or_more(p.negate(p.marker()) + p.negate(p.literal("{")) + p.any()) + p.tag(
                        "suffix", p.marker()
                    )

                res = build_tagged_peg_parser(id_suffix).parse_anywhere_and_extract(diff.suffix)
                if res.result.success():
                    cid.suffix = res.tags.get("suffix", "")
            elif args_in_prefix >= 0:
                cid.pos = CallIdPosition.POST_ARGS
                after_args = diff.prefix[args_in_prefix:]
                closing = after_args.rfind("}")
                if closing >= 0:
                    cid.prefix = _find_last_marker(after_args[closing + 1 :])
                cid.suffix = _find_first_marker(diff.suffix)
        elif fn_in_suffix >= 0 and fn_in_prefix < 0:
            cid.pos = CallIdPosition.PRE_FUNC_NAME
            cid.prefix = _find_last_marker(diff.prefix)
            cid.suffix = _find_first_marker(diff.suffix[:fn_in_suffix])

        if cid.prefix == self.arguments.end:
            cid.prefix = ""
        if cid.suffix == self.arguments.start:
            cid.suffix = ""
        # with an id, the per-call end marker may have swallowed the id suffix and sample arguments
        if cid.pos != CallIdPosition.NONE and cid.suffix and self.format.per_call_end.startswith(cid.suffix):
            self.format.per_call_end = ""


# ---------------------------------------------------------------------------------------------------------------
# The whole analysis


@dataclass
class Autoparser:
    jinja_caps: dict[str, bool] = field(default_factory=dict)
    user_start: str = ""
    assistant_start: str = ""
    reasoning: AnalyzeReasoning = field(default_factory=AnalyzeReasoning)
    content: AnalyzeContent = field(default_factory=AnalyzeContent)
    tools: AnalyzeTools = field(default_factory=AnalyzeTools)
    preserved_tokens: list[str] = field(default_factory=list)  # every marker, for the tokenizer
    additional_stops: list[str] = field(default_factory=list)  # literal stop strings (Laguna's </assistant>)
    analysis_complete: bool = False

    def analyze_template(self, tmpl: Template) -> None:
        self.jinja_caps = tmpl.caps
        self.reasoning = AnalyzeReasoning.analyze(tmpl, tmpl.caps["supports_tool_calls"])
        self.content = AnalyzeContent.analyze(tmpl, self.reasoning)
        self.tools = (
            AnalyzeTools.analyze(tmpl, tmpl.caps, self.reasoning)
            if tmpl.caps["supports_tool_calls"]
            else AnalyzeTools()
        )
        self.assistant_start = self.detect_assistant_start_marker(tmpl)
        self.user_start = self.detect_user_start_marker(tmpl)
        self._collect_preserved_tokens()
        for workaround in WORKAROUNDS:
            workaround(tmpl.source, self)
        self.analysis_complete = True

    def _collect_preserved_tokens(self) -> None:
        r, c, t = self.reasoning, self.content, self.tools
        for token in (
            r.start,
            r.end,
            c.start,
            c.end,
            t.format.section_start,
            t.format.section_end,
            t.format.per_call_start,
            t.format.per_call_end,
            t.function.name_prefix,
            t.function.name_suffix,
            t.function.args_separator,
            t.function.close,
            t.arguments.start,
            t.arguments.end,
            t.arguments.name_prefix,
            t.arguments.name_suffix,
            t.arguments.separator,
            t.arguments.value_prefix,
            t.arguments.value_suffix,
            t.call_id.prefix,
            t.call_id.suffix,
        ):
            token = trim_whitespace(token)
            if token and token not in self.preserved_tokens:
                self.preserved_tokens.append(token)

    def detect_assistant_start_marker(self, tmpl: Template) -> str:
        cmp = _compare_messages(tmpl, [_USER], [_USER, _assistant()])
        if cmp is None:
            return ""
        prefix = _until(cmp.diff.right, ASSISTANT_MSG)
        for marker in (self.reasoning.start, self.reasoning.end):
            if marker and trim_whitespace(marker) in prefix:
                prefix = prefix[: prefix.find(trim_whitespace(marker))]
        return trim_whitespace(prefix)

    def detect_user_start_marker(self, tmpl: Template) -> str:
        cmp = _compare_messages(tmpl, [], [_USER])
        if cmp is None:  # templates that refuse an empty conversation
            user_two, assistant = {"role": "user", "content": USER_MSG_TWO}, _assistant()
            cmp = _compare_messages(tmpl, [user_two, assistant], [user_two, assistant, _USER])
            if cmp is None:
                return ""
        usermsg = cmp.diff.right
        if ASSISTANT_MSG in usermsg:
            usermsg = usermsg[usermsg.find(ASSISTANT_MSG) + len(ASSISTANT_MSG) :]
        out, seen_marker = [], False
        for seg in segmentize_markers(_until(usermsg, USER_MSG)):
            lower = _ascii_lower(seg.value)
            # leading end-of-turn markers belong to the previous message
            if seg.type == SegmentType.MARKER and not seen_marker and ("end" in lower or "close" in lower):
                continue
            if seg.type == SegmentType.TEXT and not seen_marker and not trim_whitespace(seg.value):
                continue
            seen_marker |= seg.type == SegmentType.MARKER
            out.append(seg.value)
        return trim_whitespace("".join(out))


# ---------------------------------------------------------------------------------------------------------------
# Per-template corrections b10621 applies after the analysis, in its order


def _old_qwen_thinking(src: str, a: Autoparser) -> None:
    # old reasoning Qwen/DeepSeek templates strip reasoning from history but the models still think
    if (
        "content.split('</think>')" in src
        and "reasoning_content" not in src
        and "<SPECIAL_12>" not in src
        and a.reasoning.mode == ReasoningMode.NONE
    ):
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = ReasoningMode.TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]


def _granite_3_3(src: str, a: Autoparser) -> None:
    if "Write your thoughts between <think></think> and write your response between <response></response>" in src:
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = ReasoningMode.TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]
        a.content.mode, a.content.start, a.content.end = (
            ContentMode.WRAPPED_WITH_REASONING,
            "<response>",
            "</response>",
        )
        a.preserved_tokens += ["<response>", "</response>"]


def _command_r_plus(src: str, a: Autoparser) -> None:
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not a.content.start:
        a.content.mode, a.content.start, a.content.end = (
            ContentMode.ALWAYS_WRAPPED,
            "<|CHATBOT_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        )
        a.preserved_tokens += ["<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"]
        a.user_start = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>"


def _functionary_3_1(src: str, a: Autoparser) -> None:
    # no tool call section delimiter
    if (
        'set has_code_interpreter = tools | selectattr("type", "equalto", "code_interpreter") | list | length > 0'
        in src
    ):
        a.content.mode, a.content.end = ContentMode.PLAIN, ""
        a.tools.function.name_prefix = ""
        a.tools.format.section_start = a.tools.format.section_end = ""
        a.tools.format.per_call_start, a.tools.format.per_call_end = "<function=", "</function>"
        a.tools.function.close = ""
        a.preserved_tokens[:] = ["<|eot_id|>", "<|eom_id|>", "<function=", ">", "</function>"]


def _deepseek_r1_distill_qwen(src: str, a: Autoparser) -> None:
    if "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'" in src:
        fmt, fn = a.tools.format, a.tools.function
        fmt.section_start, fmt.section_end = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
        fmt.per_call_start, fmt.per_call_end = "<｜tool▁call▁begin｜>function", "<｜tool▁call▁end｜>"
        fn.name_prefix, fn.close = "<｜tool▁sep｜>", "```"


def _nemotron_nano_v2(src: str, a: Autoparser) -> None:
    if all(m in src for m in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        fmt = a.tools.format
        fmt.mode = ToolFormat.JSON_NATIVE
        fmt.section_start = fmt.section_end = ""
        fmt.per_call_start, fmt.per_call_end = "<TOOLCALL>", "</TOOLCALL>"
        fmt.tools_array_wrapped = True
        a.content.mode, a.content.start, a.content.end = ContentMode.PLAIN, "", ""
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = ReasoningMode.TAG_BASED, "<think>\n", "</think>"
        a.assistant_start, a.user_start = "<SPECIAL_11>Assistant", "<SPECIAL_11>User"
        a.preserved_tokens[:] = ["<SPECIAL_11>", "</think>", "<TOOLCALL>", "</TOOLCALL>"]


def _fireworks(src: str, a: Autoparser) -> None:
    if (
        "{%- set system_prompt = '<|start_header_id|>' + 'system' + '<|end_header_id|>\\n\\n' + message['content'] "
        "| trim + '\\n' + system_prompt_suffix + '<|eot_id|>' -%}" in src
    ):
        a.assistant_start = "<|start_header_id|>assistant<|end_header_id|>"
        a.user_start = "<|start_header_id|>user<|end_header_id|>"


def _solar_open(src: str, a: Autoparser) -> None:
    if "<|begin|>assistant<|think|><|end|>" in src:
        a.assistant_start = "<|begin|>assistant"


def _apriel_1_6(src: str, a: Autoparser) -> None:
    if "if not loop.last and '[BEGIN FINAL RESPONSE]' in asst_text" in src:
        a.user_start, a.assistant_start = "<|begin_user|>", "<|begin_assistant|>"


def _json_name_parameters(src: str, a: Autoparser) -> None:
    # the template asks for {name, parameters} JSON but the model writes the OpenAI function wrapper
    if 'Respond in the format {"name": function name' in src and "Do not use variables." in src:
        a.tools.format.openai_wrapper_trigger = True


def _laguna(src: str, a: Autoparser) -> None:
    # the template renders delimiters with formatting whitespace the model does not write
    if "laguna_glm_thinking" in src:
        args = a.tools.arguments
        a.reasoning.start, a.reasoning.end = trim_whitespace(a.reasoning.start), trim_whitespace(a.reasoning.end)
        args.value_prefix, args.value_suffix = trim_whitespace(args.value_prefix), trim_whitespace(args.value_suffix)
        args.separator = trim_whitespace(args.separator)
        args.tolerate_intertag_whitespace = True
        # </assistant> stops generation only as its single token; the model may spell it out after tool calls
        a.additional_stops.append("</assistant>")


def _bailing_v3(src: str, a: Autoparser) -> None:
    if "Bailing V3 chat template" in src:
        a.tools.arguments.value_suffix = trim_whitespace(a.tools.arguments.value_suffix)
        a.tools.arguments.tolerate_intertag_whitespace = True


WORKAROUNDS = (
    _old_qwen_thinking,
    _granite_3_3,
    _command_r_plus,
    _functionary_3_1,
    _deepseek_r1_distill_qwen,
    _nemotron_nano_v2,
    _fireworks,
    _solar_open,
    _apriel_1_6,
    _json_name_parameters,
    _laguna,
    _bailing_v3,
)
