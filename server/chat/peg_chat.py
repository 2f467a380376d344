"""The chat PEG builder of b10621 (common/chat-peg-parser.h and .cpp: common_chat_peg_builder,
build_chat_peg_parser, tagged_peg_parser) and common_chat_peg_parse() of common/chat.cpp.

Parser ids name some grammar rules (`until-<id>`, `ac-<id>`), so the helpers create their parsers in the
order upstream's binary does: GCC builds both operands of a C++ `a + b` (or `a | b`) right operand first,
which server.peg.plus() reproduces for chains of `+` whose operands create parsers; `<<` and braced lists go
left to right, as Python does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..peg import ParseContext, ParseFlags, ParseResult, PegArena, PegBuilder, PegParser, plus
from . import peg_mapper as m
from .messages import ChatMsg

COMMON_CHAT_MAX_PERMUTE = 6

FORMAT_PEG_NATIVE = "peg-native"  # common_chat_format_name(COMMON_CHAT_FORMAT_PEG_NATIVE)
FORMAT_PEG_GEMMA4 = "peg-gemma4"
FORMAT_PEG_MINIMAX_M3 = "peg-minimax-m3"


class ChatPegBuilder(PegBuilder):
    """common_chat_peg_builder: the PEG builder plus the tags the chat mappers read and the tool-call
    layouts shared by the chat formats."""

    REASONING_BLOCK = "reasoning-block"
    REASONING = m.REASONING
    CONTENT = m.CONTENT
    TOOL = m.TOOL
    TOOL_OPEN = m.TOOL_OPEN
    TOOL_CLOSE = m.TOOL_CLOSE
    TOOL_ID = m.TOOL_ID
    TOOL_NAME = m.TOOL_NAME
    TOOL_ARGS = m.TOOL_ARGS
    TOOL_ARG = m.TOOL_ARG
    TOOL_ARG_OPEN = m.TOOL_ARG_OPEN
    TOOL_ARG_CLOSE = m.TOOL_ARG_CLOSE
    TOOL_ARG_NAME = m.TOOL_ARG_NAME
    TOOL_ARG_VALUE = m.TOOL_ARG_VALUE
    TOOL_ARG_STRING_VALUE = m.TOOL_ARG_STRING_VALUE  # schema-declared strings: never read as JSON

    def reasoning_block(self, p: PegParser) -> PegParser:
        return self.tag(self.REASONING_BLOCK, p)

    def reasoning(self, p: PegParser) -> PegParser:
        return self.tag(self.REASONING, p)

    def content(self, p: PegParser) -> PegParser:
        return self.tag(self.CONTENT, p)

    def tag_with_safe_content(self, tag_name: str, marker: str, p: PegParser) -> PegParser:
        """Any number of `p`, with the text between them kept as content (in chunks starting at
        `marker`)."""
        if not marker:
            return self.zero_or_more(self.choice([p, self.rule(tag_name, self.content(self.any()))]))
        chunk = plus(lambda: self.negate(self.literal(marker)), self.any, lambda: self.until(marker))
        content_chunk = self.rule(tag_name, self.content(chunk))
        return self.zero_or_more(self.choice([p, content_chunk]))

    def tool(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL, p)

    def tool_open(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_OPEN, p))

    def tool_close(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_CLOSE, p))

    def tool_id(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_ID, p))

    def tool_name(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_NAME, p))

    def tool_args(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL_ARGS, p)

    def tool_arg(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL_ARG, p)

    def tool_arg_open(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_ARG_OPEN, p))

    def tool_arg_close(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_ARG_CLOSE, p))

    def tool_arg_name(self, p: PegParser) -> PegParser:
        return self.atomic(self.tag(self.TOOL_ARG_NAME, p))

    def tool_arg_value(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL_ARG_VALUE, p)

    def tool_arg_string_value(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL_ARG_STRING_VALUE, p)

    def tool_arg_json_value(self, p: PegParser) -> PegParser:
        return self.tag(self.TOOL_ARG_VALUE, p)

    def permute(self, rule_prefix: str, parsers: Sequence[PegParser]) -> PegParser:
        """Every parser exactly once, in any order: one rule per subset still to match (keyed by its
        bitmask), so the orderings share their tails. Past COMMON_CHAT_MAX_PERMUTE parsers, the given
        order only."""
        if not parsers:
            return self.eps()
        if len(parsers) == 1 or len(parsers) > COMMON_CHAT_MAX_PERMUTE:
            return self.sequence(list(parsers))
        rules: dict[int, PegParser] = {}

        def remaining_of(remaining: int) -> PegParser:
            if remaining == 0:
                return self.eps()
            if remaining in rules:
                return rules[remaining]
            alternatives = self.choice()
            for i, parser in enumerate(parsers):
                bit = 1 << i
                if remaining & bit:
                    alternatives = alternatives | (parser + remaining_of(remaining & ~bit))
            rules[remaining] = self.rule(f"{rule_prefix}-{remaining}", alternatives)
            return rules[remaining]

        return remaining_of((1 << len(parsers)) - 1)

    def required_then_any_optional(self, required: Sequence[PegParser], optional: Sequence[PegParser]) -> PegParser:
        """The required parsers in their order with space() between them, then any number of the optional
        ones, in any order, each after space() (the arguments of the tagged tool-call formats)."""
        parser = self.eps()
        for i, element in enumerate(required):
            if i > 0:
                parser = parser + self.space()
            parser = parser + element
        if optional:
            any_optional = self.choice_of(optional)
            parser = parser + self.repeat(self.space() + any_optional, 0, -1)
        return parser

    def prefix(self, s: str, delimiter: str = "") -> PegParser:
        """A literal of `s` up to `delimiter` (all of it when absent)."""
        if not s:
            return self.eps()
        if not delimiter:
            return self.literal(s)
        at = s.find(delimiter)
        return self.literal(s if at < 0 else s[:at])

    def optspace(self, tag: str) -> PegParser:
        """`tag` with each of its leading and trailing whitespace characters optional."""
        core = tag.strip(m._C_SPACE)
        start = len(tag) - len(tag.lstrip(m._C_SPACE)) if core else len(tag)
        end = start + len(core)
        parser = self.eps()
        for c in tag[:start]:
            parser = parser + self.optional(self.literal(c))
        parser = parser + self.literal(core)
        for c in tag[end:]:
            parser = parser + self.optional(self.literal(c))
        return parser

    def standard_json_tools(
        self,
        section_start: str,
        section_end: str,
        tools,
        parallel_tool_calls: bool,
        force_tool_calls: bool,
        name_key: str = "",
        args_key: str = "",
        array_wrapped: bool = False,
        function_is_key: bool = False,
        call_id_key: str = "",
        gen_call_id_key: str = "",
        parameters_order: Sequence[str] = (),
        accept_openai_wrapper: bool = False,
    ) -> PegParser:
        """JSON tool calls between `section_start` and `section_end`, optional unless forced.

        name_key/args_key default to "name"/"arguments"; a dotted key ("function.name") nests the call in
        that object. array_wrapped: the calls are in a JSON array. function_is_key: {"<name>": {...}}.
        call_id_key: a string id field; gen_call_id_key: a string or number id field. parameters_order:
        the order of the fields. accept_openai_wrapper: an optional leading "type": "function"."""
        if not isinstance(tools, list) or not tools:
            return self.eps()
        effective_name_key = name_key or "name"
        effective_args_key = args_key or "arguments"
        self.eps()  # upstream's placeholder for the tool choices, kept for the parser ids
        if function_is_key:
            tool_choices = self._build_json_tools_function_is_key(
                tools, args_key, effective_args_key, call_id_key, gen_call_id_key
            )
        elif _key_spec(effective_name_key)[0] or _key_spec(effective_args_key)[0]:
            tool_choices = self._build_json_tools_nested_keys(
                tools, effective_name_key, effective_args_key, call_id_key, gen_call_id_key
            )
        else:
            tool_choices = self._build_json_tools_flat_keys(
                tools,
                effective_name_key,
                effective_args_key,
                call_id_key,
                gen_call_id_key,
                parameters_order,
                accept_openai_wrapper,
            )
        tool_calls = tool_choices
        if parallel_tool_calls:
            more = plus(self.space, lambda: self.literal(","), self.space, tool_choices)
            tool_calls = tool_calls + self.zero_or_more(more)
        if array_wrapped:
            tool_calls = plus(lambda: self.literal("["), self.space, tool_calls, self.space, lambda: self.literal("]"))
        section = self.trigger_rule(
            "tool-call",
            plus(
                lambda: self.literal(section_start),
                self.space,
                tool_calls,
                self.space,
                lambda: self.literal(section_end),
            ),
        )
        return section if force_tool_calls else self.optional(section)

    def _id_field(self, key: str, numbers: bool) -> PegParser:
        """`"<key>": "<id>"` (or, with `numbers`, a JSON number id too), all or nothing."""
        key_parts = (lambda: self.literal(f'"{key}"'), self.space, lambda: self.literal(":"), self.space)
        quoted = (lambda: self.literal('"'), lambda: self.tool_id(self.string_content('"')), lambda: self.literal('"'))
        if not numbers:
            return self.atomic(plus(*key_parts, *quoted))
        return self.atomic(plus(*key_parts, lambda: self.choice([plus(*quoted), self.tool_id(self.json_number())])))

    def _args_schema(self, name: str, params) -> PegParser:
        return self.tool_args(self.schema(self.json(), f"tool-{name}-schema", params))

    def _build_json_tools_function_is_key(
        self, tools: list, args_key: str, effective_args_key: str, call_id_key: str, gen_call_id_key: str
    ) -> PegParser:
        """{"<name>": {ids..., "<args_key>": {...}}}, or {"<name>": {...}} without args_key nor ids."""
        return self._tool_rules(
            tools,
            lambda name, params: self._json_tool_function_is_key(
                name, params, args_key, effective_args_key, call_id_key, gen_call_id_key
            ),
        )

    def _tool_rules(self, tools: list, tool_parser: Callable[[str, object], PegParser]) -> PegParser:
        """foreach_function: the choice of a rule `tool-<name>` per function, around tool_parser(name,
        parameters)."""
        return self.choice_of(_functions(tools), lambda f: self.rule(f"tool-{f[0]}", tool_parser(*f)))

    def _optional_id_field(self, key: str, numbers: bool) -> PegParser:
        """An id field and its comma, all optional (function_is_key layout)."""
        id_parser = self._id_field(key, numbers)
        return self.optional(
            plus(id_parser, self.space, lambda: self.optional(plus(lambda: self.literal(","), self.space)))
        )

    def _json_tool_function_is_key(
        self, name: str, params, args_key: str, effective_args_key: str, call_id_key: str, gen_call_id_key: str
    ) -> PegParser:
        inner_fields = []
        if call_id_key:
            inner_fields.append(self._optional_id_field(call_id_key, numbers=False))
        if gen_call_id_key:
            inner_fields.append(self._optional_id_field(gen_call_id_key, numbers=True))
        self.eps()  # upstream's placeholder for the arguments, kept for the parser ids
        if not args_key:
            inner_fields.append(self._args_schema(name, params))
        else:
            inner_fields.append(
                plus(
                    lambda: self.literal(f'"{effective_args_key}"'),
                    self.space,
                    lambda: self.literal(":"),
                    self.space,
                    lambda: self._args_schema(name, params),
                )
            )
        self.eps()  # and for the inner object
        if not args_key and len(inner_fields) == 1:
            inner_object = inner_fields[0]
        else:
            inner_object = plus(lambda: self.literal("{"), self.space)
            for i, field_ in enumerate(inner_fields):
                inner_object = inner_object + field_
                if i < len(inner_fields) - 1:
                    inner_object = inner_object + self.space()
            inner_object = plus(inner_object, self.space, lambda: self.literal("}"))
        return self.tool(
            plus(
                lambda: self.tool_open(self.literal("{")),
                self.space,
                lambda: self.literal('"'),
                lambda: self.tool_name(self.literal(name)),
                lambda: self.literal('"'),
                self.space,
                lambda: self.literal(":"),
                self.space,
                inner_object,
                self.space,
                lambda: self.tool_close(self.literal("}")),
            )
        )

    def _build_json_tools_nested_keys(
        self, tools: list, effective_name_key: str, effective_args_key: str, call_id_key: str, gen_call_id_key: str
    ) -> PegParser:
        """{ids..., "<prefix>": {"<name field>": "<name>", "<args field>": {...}}} for dotted keys."""
        name_spec, args_spec = _key_spec(effective_name_key), _key_spec(effective_args_key)
        nested_prefix = name_spec[0] or args_spec[0]
        name_field = name_spec[1] if name_spec[0] else effective_name_key
        args_field = args_spec[1] if args_spec[0] else effective_args_key
        return self._tool_rules(
            tools,
            lambda name, params: self._json_tool_nested(
                name, params, nested_prefix, name_field, args_field, call_id_key, gen_call_id_key
            ),
        )

    def _json_tool_nested(
        self,
        name: str,
        params,
        nested_prefix: str,
        name_field: str,
        args_field: str,
        call_id_key: str,
        gen_call_id_key: str,
    ) -> PegParser:
        nested_name = plus(
            lambda: self.literal(f'"{name_field}"'),
            self.space,
            lambda: self.literal(":"),
            self.space,
            lambda: self._quoted_name(name),
        )
        nested_args = plus(
            lambda: self.literal(f'"{args_field}"'),
            self.space,
            lambda: self.literal(":"),
            self.space,
            lambda: self._args_schema(name, params),
        )
        nested_object = plus(
            lambda: self.literal("{"),
            self.space,
            nested_name,
            self.space,
            lambda: self.literal(","),
            self.space,
            nested_args,
            self.space,
            lambda: self.literal("}"),
        )
        body = plus(lambda: self.tool_open(self.literal("{")), self.space)
        # only top-level id keys: a dotted one is not looked for
        for key, numbers in ((call_id_key, False), (gen_call_id_key, True)):
            if key and not _key_spec(key)[0]:
                id_parser = self._id_field(key, numbers)
                body = body + self.optional(plus(id_parser, self.space, lambda: self.literal(","), self.space))
        nested_field = plus(
            lambda: self.literal(f'"{nested_prefix}"'), self.space, lambda: self.literal(":"), self.space, nested_object
        )
        return self.tool(plus(body, nested_field, self.space, lambda: self.tool_close(self.literal("}"))))

    def _quoted_name(self, name: str) -> PegParser:
        return self.atomic(
            plus(lambda: self.literal('"'), lambda: self.tool_name(self.literal(name)), lambda: self.literal('"'))
        )

    def _build_json_tools_flat_keys(
        self,
        tools: list,
        effective_name_key: str,
        effective_args_key: str,
        call_id_key: str,
        gen_call_id_key: str,
        parameters_order: Sequence[str],
        accept_openai_wrapper: bool,
    ) -> PegParser:
        """{"<name key>": "<name>", "<args key>": {...}, ids...}, the fields in `parameters_order`."""
        tool_choices = self.choice()
        name_key_parser = self.literal(f'"{effective_name_key}"')
        args_key_parser = self.literal(f'"{effective_args_key}"')
        for name, params in _functions(tools):
            tool_parser = self._json_tool_flat(
                name,
                params,
                name_key_parser,
                args_key_parser,
                effective_name_key,
                effective_args_key,
                call_id_key,
                gen_call_id_key,
                list(parameters_order),
                accept_openai_wrapper,
            )
            tool_choices = tool_choices | self.rule(f"tool-{name}", tool_parser)
        return tool_choices

    def _json_tool_flat(
        self,
        name: str,
        params,
        name_key_parser: PegParser,
        args_key_parser: PegParser,
        name_key: str,
        args_key: str,
        call_id_key: str,
        gen_call_id_key: str,
        order: list[str],
        accept_openai_wrapper: bool,
    ) -> PegParser:
        tool_name_ = plus(
            name_key_parser, self.space, lambda: self.literal(":"), self.space, lambda: self._quoted_name(name)
        )
        tool_args_ = plus(
            args_key_parser, self.space, lambda: self.literal(":"), self.space, lambda: self._args_schema(name, params)
        )
        # upstream builds a placeholder eps for each id field first; kept for the parser ids
        id_parser = self.eps()
        if call_id_key:
            id_parser = self._id_field(call_id_key, numbers=True)
        gen_id_parser = self.eps()
        if gen_call_id_key:
            gen_id_parser = self._id_field(gen_call_id_key, numbers=True)
        pairs = [(tool_name_, name_key), (tool_args_, args_key)]
        if call_id_key:
            pairs.append((self.optional(id_parser), call_id_key))
        if gen_call_id_key:
            pairs.append((self.optional(gen_id_parser), gen_call_id_key))
        # std::sort of at most four fields is an insertion sort, hence stable like list.sort()
        pairs.sort(key=lambda pair: order.index(pair[1]) if pair[1] in order else len(order))
        type_field = self.eps()
        if accept_openai_wrapper:
            type_field = self.optional(
                plus(
                    lambda: self.literal('"type"'),
                    self.space,
                    lambda: self.literal(":"),
                    self.space,
                    lambda: self.literal('"function"'),
                    self.space,
                    lambda: self.literal(","),
                    self.space,
                )
            )
        body = plus(lambda: self.tool_open(self.literal("{")), self.space, type_field)
        for i, (parser, _key) in enumerate(pairs):
            body = body + parser
            if i < len(pairs) - 1:
                body = plus(body, self.space, lambda: self.literal(","), self.space)
        return self.tool(plus(body, self.space, lambda: self.tool_close(self.literal("}"))))

    def standard_constructed_tools(
        self, markers: dict[str, str], tools, parallel_tool_calls: bool, force_tool_calls: bool
    ) -> PegParser:
        """XML-like tool calls: <tool_call><function=name><param=key>value</param></function></tool_call>
        by default, each marker replaceable through `markers`."""
        if not isinstance(tools, list) or not tools:
            return self.eps()
        section_start = markers.get("tool_call_start_marker", "<tool_call>")
        section_end = markers.get("tool_call_end_marker", "</tool_call>")
        tool_choices = self._tool_rules(tools, lambda name, params: self._constructed_tool(name, params, markers))
        if parallel_tool_calls:
            body = plus(
                lambda: self.literal(section_start),
                self.space,
                lambda: self.one_or_more(tool_choices + self.space()),
                lambda: self.literal(section_end),
            )
        else:
            body = plus(
                lambda: self.literal(section_start),
                self.space,
                tool_choices,
                self.space,
                lambda: self.literal(section_end),
            )
        section = self.trigger_rule("tool-call", body)
        return section if force_tool_calls else self.optional(section)

    def _constructed_tool(self, name: str, params, markers: dict[str, str]) -> PegParser:
        args = self.eps()
        if _properties(params):
            arg_choice = self.choice_of(_properties(params), lambda key: self._constructed_arg(key, markers))
            args = self.zero_or_more(arg_choice + self.space())
        return self.tool(
            plus(
                lambda: self.tool_open(
                    plus(
                        lambda: self.literal(markers.get("function_opener", "<function=")),
                        lambda: self.tool_name(self.literal(name)),
                        lambda: self.literal(markers.get("function_name_suffix", ">")),
                    )
                ),
                self.space,
                lambda: self.tool_args(args),
                self.space,
                lambda: self.tool_close(self.literal(markers.get("function_closer", "</function>"))),
            )
        )

    def _constructed_arg(self, prop_name: str, markers: dict[str, str]) -> PegParser:
        closer = markers.get("parameter_closer", "</param>")
        # the name may come bare, double- or single-quoted
        arg_name_parser = self.choice(
            [self.literal(prop_name), self.literal(f'"{prop_name}"'), self.literal(f"'{prop_name}'")]
        )
        return self.tool_arg(
            plus(
                lambda: self.tool_arg_open(self.literal(markers.get("parameter_key_prefix", "<param="))),
                lambda: self.tool_arg_name(arg_name_parser),
                lambda: self.literal(markers.get("parameter_key_suffix", ">")),
                lambda: self.tool_arg_value(self.until(closer)),
                lambda: self.tool_arg_close(self.literal(closer)),
            )
        )

    def _python_or_json_value(self) -> PegParser:
        """python_value() whose leaves also take JSON's true/false/null (LFM2, LFM2.5)."""

        def build() -> PegParser:
            ws = self.space()
            value = self._python_or_json_value()
            members = self._members(ws, self.python_string, lambda: value)
            dict_ = self.rule("python-or-json-dict", lambda: self._bracketed(ws, "{", members, "}", True))
            elements = self.sequence([value, self.zero_or_more(self.sequence([self.literal(","), ws, value]))])
            array = self.rule("python-or-json-array", lambda: self._bracketed(ws, "[", elements, "]", True))
            return self.choice(
                [
                    dict_,
                    array,
                    self.python_string(),
                    self.python_number(),
                    self.python_bool(),
                    self.python_null(),
                    self.json_bool(),
                    self.json_null(),
                ]
            )

        return self.rule("python-or-json-value", build)

    def python_style_tool_calls(self, tools, parallel_tool_calls: bool, allow_json_literals: bool) -> PegParser:
        """[name(arg1="value1", arg2=123), ...] (LFM2); allow_json_literals also takes true/false/null."""
        if not isinstance(tools, list) or not tools:
            return self.eps()
        tool_choices = self._tool_rules(
            tools, lambda name, params: self._python_style_tool(name, params, allow_json_literals)
        )
        if parallel_tool_calls:
            return plus(
                "[",
                self.space,
                tool_choices,
                lambda: self.zero_or_more("," + self.space() + tool_choices),
                self.space,
                "]",
            )
        return plus("[", self.space, tool_choices, self.space, "]")

    def _python_style_tool(self, name: str, params, allow_json_literals: bool) -> PegParser:
        args = self.eps()
        if _properties(params):
            arg_choice = self.choice_of(
                _properties(params).items(), lambda prop: self._python_style_arg(*prop, allow_json_literals)
            )
            args = arg_choice + self.zero_or_more("," + self.space() + arg_choice)
        return self.tool(
            plus(
                lambda: self.tool_open(plus(lambda: self.tool_name(self.literal(name)), lambda: self.literal("("))),
                self.space,
                lambda: self.tool_args(args),
                self.space,
                lambda: self.tool_close(self.literal(")")),
            )
        )

    def _python_style_arg(self, prop_name: str, prop_def, allow_json_literals: bool) -> PegParser:
        is_string_type = isinstance(prop_def, dict) and prop_def.get("type") == "string"
        arg_name_parser = self.literal(prop_name)
        self.eps()  # upstream's placeholder value parser, kept for the parser ids
        # a quoted value keeps its escapes: normalize_quotes_to_json reads them
        string_value_parser = self.tool_arg_value(
            self.choice(
                [
                    plus(lambda: self.literal('"'), lambda: self.string_content('"'), lambda: self.literal('"')),
                    plus(lambda: self.literal("'"), lambda: self.string_content("'"), lambda: self.literal("'")),
                ]
            )
        )
        if is_string_type:
            arg_value_parser = string_value_parser
        else:
            arg_value_parser = self.tool_arg_value(
                self._python_or_json_value() if allow_json_literals else self.python_value()
            )
        return self.tool_arg(
            plus(
                lambda: self.tool_arg_open(
                    plus(lambda: self.tool_arg_name(arg_name_parser), lambda: self.literal("="))
                ),
                arg_value_parser,
                lambda: self.tool_arg_close(self.eps()),
            )
        )


def _functions(tools: list) -> list[tuple[str, object]]:
    """(name, parameters) of each tool that has a function; no parameters reads as {}."""
    return [
        (t["function"]["name"], t["function"].get("parameters", {}))
        for t in tools
        if isinstance(t, dict) and "function" in t
    ]


def _properties(params) -> dict:
    return (params.get("properties") or {}) if isinstance(params, dict) else {}


def _key_spec(key: str) -> tuple[str, str]:
    """parse_key_spec(): "a.b" -> ("a", "b"), "b" -> ("", "b")."""
    prefix, dot, rest = key.partition(".")
    return (prefix, rest) if dot else ("", key)


def build_chat_peg_parser(fn: Callable[[ChatPegBuilder], PegParser]) -> PegArena:
    builder = ChatPegBuilder()
    builder.set_root(fn(builder))
    return builder.build()


@dataclass
class TaggedParseResult:
    result: ParseResult
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class TaggedPegParser:
    """tagged_peg_parser: a parser whose tagged texts are read by tag name."""

    arena: PegArena
    flags: int = ParseFlags.NONE

    def with_debug(self) -> TaggedPegParser:
        self.flags |= ParseFlags.DEBUG
        return self

    def without_debug(self) -> TaggedPegParser:
        self.flags &= ~ParseFlags.DEBUG
        return self

    def parse_and_extract(self, text: str, extra_flags: int = ParseFlags.NONE) -> TaggedParseResult:
        ctx = ParseContext(text, self.flags | extra_flags)
        result = self.arena.parse(ctx)
        mapper = m.TagBasedPegMapper()
        mapper.from_ast(ctx.ast, result)
        return TaggedParseResult(result, mapper.tags)

    def parse_anywhere_and_extract(self, text: str) -> TaggedParseResult:
        """The first match starting anywhere in `text` (the last attempt's result when none)."""
        if not text:
            return self.parse_and_extract(text)
        for start in range(len(text)):
            ctx = ParseContext(text, self.flags)
            result = self.arena.parse(ctx, start)
            if result.success() or start == len(text) - 1:
                mapper = m.TagBasedPegMapper()
                mapper.from_ast(ctx.ast, result)
                return TaggedParseResult(result, mapper.tags)
        raise AssertionError("unreachable")


def build_tagged_peg_parser(fn: Callable[[PegBuilder], PegParser]) -> TaggedPegParser:
    builder = PegBuilder()
    builder.set_root(fn(builder))
    return TaggedPegParser(builder.build())


def _mapper_for(fmt: str, msg: ChatMsg) -> m.ChatPegMapper:
    if fmt == FORMAT_PEG_GEMMA4:
        return m.ChatPegGemma4Mapper(msg)
    if fmt == FORMAT_PEG_MINIMAX_M3:
        return m.ChatPegMinimaxM3Mapper(msg)
    return m.ChatPegMapper(msg)


_content_only: PegArena | None = None


def _content_only_parser() -> PegArena:
    """What upstream parses with when the format brings no parser: everything is content."""
    global _content_only
    if _content_only is None:
        _content_only = build_chat_peg_parser(lambda p: plus(lambda: p.content(p.rest()), p.end))
    return _content_only


def chat_peg_parse(
    parser_arena: PegArena | None,
    input: str,
    is_partial: bool,
    generation_prompt: str = "",
    fmt: str = FORMAT_PEG_NATIVE,
) -> ChatMsg:
    """common_chat_peg_parse(): the model's output (after the generation prompt, which the parser sees
    first) as an assistant message. Parsing is always lenient; a failed parse of a partial output still
    gives what was mapped so far, otherwise ValueError with upstream's message."""
    parser = _content_only_parser() if parser_arena is None or parser_arena.empty() else parser_arena
    ctx = ParseContext(generation_prompt + input, ParseFlags.LENIENT)
    mismatch = f"The model produced output that does not match the expected {fmt} format"
    try:
        result = parser.parse(ctx)
    except RecursionError:  # nesting past Python's stack (b10621's recursive parser has a deeper limit)
        raise ValueError(mismatch) from None
    if result.fail() and not (is_partial and result.end > 0):
        raise ValueError(mismatch)
    msg = ChatMsg(role="assistant")
    _mapper_for(fmt, msg).from_ast(ctx.ast, result)
    return msg
