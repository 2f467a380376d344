"""Parser and grammar generation of b10621's autoparser (common/chat-auto-parser-generator.cpp): the analysis
of a template turned into the PEG parser that reads the model's answer back (reasoning, content, tool calls)
and the grammar, triggers and preserved tokens that constrain generation.

Parser ids name grammar rules (`until-N`, `ac-N`), so every parser is created in the order b10621's binary
creates it: GCC builds the operands of a C++ `a + b` right to left (see server.peg.plus), `<<` and braced
lists left to right.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ...grammar.json_schema import build_grammar
from ...peg import PegArena, PegParser, plus
from ..diffs import is_empty
from ..messages import ChatMsg
from ..peg_chat import FORMAT_PEG_NATIVE, ChatPegBuilder, build_chat_peg_parser
from .analysis import Autoparser, CallIdPosition, ReasoningMode, ToolFormat
from .helpers import (
    Template,
    apply,
    functions,
    generation_prompt_of,
    render_content,
    resolves_to_string,
    trim_whitespace,
)

GRAMMAR_TRIGGER_TYPE_WORD = 1  # common_grammar_trigger_type


@dataclass
class GenerationParams:
    """autoparser::generation_params: the request as the template sees it."""

    messages: list = field(default_factory=list)  # template JSON, workarounds applied
    tools: list | None = None
    tool_choice: str = "auto"  # "auto" | "required" | "none"
    json_schema: dict | None = None
    parallel_tool_calls: bool = True
    reasoning_format: str = "auto"  # "none" | "auto" | "deepseek" | "deepseek-legacy"
    grammar: str = ""  # the request's own grammar: refused next to tools
    add_generation_prompt: bool = False
    continue_final_message: str = "none"  # "none" | "content" | "reasoning" | "auto"
    continue_msg: ChatMsg | None = None
    enable_thinking: bool = True
    extra_context: dict = field(default_factory=dict)  # bos_token, eos_token, datetime, template kwargs...
    add_bos: bool = False  # the vocabulary adds BOS itself: a rendered leading BOS is dropped
    add_eos: bool = False

    def has_continuation(self) -> bool:
        return (
            self.continue_final_message != "none" and self.continue_msg is not None and not is_empty(self.continue_msg)
        )

    def has_tools(self) -> bool:
        return isinstance(self.tools, list) and bool(self.tools)

    def has_response_format(self) -> bool:
        """`json_schema.is_object() && !json_schema.empty()`."""
        return isinstance(self.json_schema, dict) and bool(self.json_schema)


@dataclass
class ChatParams:
    """common_chat_params of the autoparser path."""

    prompt: str = ""
    generation_prompt: str = ""
    format: str = FORMAT_PEG_NATIVE
    parser: PegArena | None = None
    grammar: str = ""
    grammar_lazy: bool = False
    grammar_triggers: list[tuple[int, str]] = field(default_factory=list)  # (common_grammar_trigger_type, value)
    preserved_tokens: list[str] = field(default_factory=list)
    additional_stops: list[str] = field(default_factory=list)
    supports_thinking: bool = False
    thinking_start_tag: str = ""
    thinking_end_tags: list[str] = field(default_factory=list)
    message_delimiters: dict[str, str] = field(default_factory=dict)  # role -> the marker opening its turn


@dataclass
class _Context:
    """parser_build_context."""

    p: ChatPegBuilder
    inputs: GenerationParams
    analysis: Autoparser
    reasoning_parser: PegParser
    extracting_reasoning: bool = False


# ---------------------------------------------------------------------------------------------------------------
# Reasoning and content


def _reasoning_parser(ctx: _Context) -> PegParser:
    p, r = ctx.p, ctx.analysis.reasoning
    if not ctx.extracting_reasoning:
        return p.eps()
    if r.mode in (ReasoningMode.TAG_BASED, ReasoningMode.TOOLS_ONLY) and r.end:
        end = trim_whitespace(r.end)
        if r.start:
            return p.optional(
                plus(lambda: p.optspace(r.start), lambda: p.reasoning(p.until(end)), lambda: p.optspace(r.end))
            )
        # delimiter style: no start marker
        return p.optional(plus(lambda: p.reasoning(p.until(end)), lambda: p.optspace(r.end)))
    return p.eps()


def _content_parser(ctx: _Context) -> PegParser:
    p, c = ctx.p, ctx.analysis.content
    if c.is_always_wrapped():
        if ctx.extracting_reasoning:
            return plus(ctx.reasoning_parser, c.start, lambda: p.content(p.until(c.end)), c.end, p.end)
        return plus(lambda: p.content(p.until(c.start)), c.start, lambda: p.content(p.until(c.end)), c.end, p.end)
    return plus(ctx.reasoning_parser, lambda: p.content(p.rest()), p.end)


def _optional_wrapped_content(ctx: _Context) -> PegParser:
    """analyze_content::build_optional_wrapped()."""
    p, c = ctx.p, ctx.analysis.content
    if c.is_always_wrapped():
        return p.optional(plus(c.start, lambda: p.content(p.until(c.end)), c.end))
    return p.eps()


# ---------------------------------------------------------------------------------------------------------------
# Tool calls


def _tools_parser(ctx: _Context) -> PegParser:
    mode = ctx.analysis.tools.format.mode
    if mode == ToolFormat.JSON_NATIVE:
        return _json_native_parser(ctx)
    if mode == ToolFormat.TAG_WITH_JSON:
        return _tag_json_parser(ctx)
    if mode == ToolFormat.TAG_WITH_TAGGED:
        return _tag_tagged_parser(ctx)
    # b10621 logs an error (tool calling will not work with this template) and parses nothing
    return ctx.p.eps()


def _json_native_parser(ctx: _Context) -> PegParser:
    p, inputs, fmt = ctx.p, ctx.inputs, ctx.analysis.tools.format
    name_field, args_field = fmt.name_field, fmt.args_field
    if fmt.function_field and fmt.function_field != "function" and "." not in name_field:
        name_field, args_field = f"{fmt.function_field}.{name_field}", f"{fmt.function_field}.{args_field}"
    required = inputs.tool_choice == "required"

    def tools(start: str, end: str) -> PegParser:
        return p.standard_json_tools(
            start,
            end,
            inputs.tools,
            inputs.parallel_tool_calls,
            required,
            name_field,
            args_field,
            fmt.tools_array_wrapped,
            fmt.fun_name_is_key,
            fmt.id_field,
            fmt.gen_id_field,
            fmt.parameter_order,
            fmt.openai_wrapper_trigger,
        )

    p.eps()  # upstream's tools_parser placeholder, kept for the parser ids
    if not fmt.section_start and fmt.per_call_start:
        single = tools(fmt.per_call_start, fmt.per_call_end)
        tools_parser = p.trigger_rule("tool-calls", p.one_or_more(single + p.space()))
    else:
        tools_parser = tools(fmt.section_start, fmt.section_end)

    if ctx.analysis.content.is_always_wrapped():
        wrapped = _optional_wrapped_content(ctx)
        return plus(ctx.reasoning_parser, wrapped, tools_parser, p.end)
    tool_start = fmt.section_start or fmt.per_call_start or "{"
    return plus(ctx.reasoning_parser, lambda: p.optional(p.content(p.until(tool_start))), tools_parser, p.end)


def _func_parser(
    ctx: _Context,
    name: str,
    call_id_section: PegParser,
    have_call_id: bool,
    args: PegParser,
    atomic_peek: PegParser | None,
) -> PegParser:
    """analyze_tools::build_func_parser(): open + call id + args, atomic where a partial open must not show,
    and the close."""
    p, t = ctx.p, ctx.analysis.tools
    fn, fmt = t.function, t.format
    tool_open = p.tool_open(plus(fn.name_prefix, lambda: p.tool_name(p.literal(name)), fn.name_suffix))
    p.eps()  # upstream's func_parser placeholder, kept for the parser ids
    if fn.args_separator:
        tool_open = plus(tool_open, p.space, lambda: p.literal(fn.args_separator))

    matched_atomic = True
    if fn.name_suffix:
        func = plus(tool_open, call_id_section, p.space, args)
    elif have_call_id:
        func = plus(lambda: p.atomic(tool_open + call_id_section), p.space, args)
    elif atomic_peek is not None:
        func = p.atomic(plus(tool_open, call_id_section, p.space, atomic_peek)) + args
    else:
        func = plus(tool_open, call_id_section, p.space, args)
        matched_atomic = False

    if fn.close:
        func = plus(func, p.space, lambda: p.tool_close(p.literal(fn.close)))
    elif fmt.per_call_end:
        # close only once the end marker is in sight: a partial "</" may yet turn out to be an argument tag
        if t.arguments.tolerate_intertag_whitespace:
            close_peek = p.peek(plus(p.space, lambda: p.literal(fmt.per_call_end)))
        else:
            close_peek = p.peek(p.literal(fmt.per_call_end))
        func = func + p.tool_close(close_peek)
    else:
        func = func + p.tool_close(p.space())  # the mapper's tool-closing callback needs the node
    return func if matched_atomic else p.atomic(func)


def _call_id_between(ctx: _Context, suffix_inside: bool) -> tuple[PegParser, bool]:
    """The optional call id between the function name and the arguments, when the analysis found one.
    TAG_WITH_JSON leaves the id suffix outside the optional part, TAG_WITH_TAGGED puts it inside."""
    p, t = ctx.p, ctx.analysis.tools
    cid, args = t.call_id, t.arguments
    none = p.eps()
    if not (cid.pos == CallIdPosition.BETWEEN_FUNC_AND_ARGS and cid.prefix and (cid.suffix or args.start)):
        return none, False
    if not cid.suffix:
        return p.optional(plus(cid.prefix, lambda: p.tool_id(p.until(args.start)))), True
    if suffix_inside:
        return p.optional(plus(cid.prefix, lambda: p.tool_id(p.until(cid.suffix)), cid.suffix)), True
    return plus(lambda: p.optional(plus(cid.prefix, lambda: p.tool_id(p.until(cid.suffix)))), cid.suffix), True


def _with_args_markers(ctx: _Context, args: PegParser) -> PegParser:
    start, end = ctx.analysis.tools.arguments.start, ctx.analysis.tools.arguments.end
    if start:
        args = ctx.p.literal(start) + args
    if end:
        args = args + ctx.p.literal(end)
    return args


def _tool_calls_section(ctx: _Context, tool_choice: PegParser, tagged: bool) -> PegParser:  # noqa: C901
    """The calls between the section / per-call markers, repeated when parallel calls are on, optional unless
    required, after optional content (the tail shared by the two tag formats)."""
    p, inputs, fmt = ctx.p, ctx.inputs, ctx.analysis.tools.format
    parallel = inputs.parallel_tool_calls
    p.eps()  # upstream's tool_calls placeholder, kept for the parser ids
    if fmt.per_call_start:
        if tagged:
            wrapped = plus(fmt.per_call_start, p.space, tool_choice, p.space, fmt.per_call_end)
            if parallel:
                body = plus(wrapped, lambda: p.zero_or_more(p.space() + wrapped), p.space)
            else:
                body = wrapped + p.space()
        else:
            wrapped = plus(fmt.per_call_start, tool_choice, fmt.per_call_end)
            body = wrapped + p.zero_or_more(p.space() + wrapped) if parallel else wrapped
        tool_calls = p.trigger_rule("tool-call", body)
        if fmt.section_start:
            if not fmt.section_end:
                section_end = p.end
            elif tagged:
                section_end = lambda: plus(lambda: p.literal(fmt.section_end), p.space)
            else:
                section_end = lambda: p.literal(fmt.section_end)
            tool_calls = p.trigger_rule(
                "tool-calls", plus(lambda: p.literal(fmt.section_start), p.space, tool_calls, p.space, section_end)
            )
    else:
        separator = ", "
        more = lambda: p.zero_or_more(separator + tool_choice)
        if tagged and parallel:
            body = plus(fmt.section_start, p.space, tool_choice, more, p.space, fmt.section_end)
        elif tagged:
            body = plus(fmt.section_start, p.space, tool_choice, p.space, fmt.section_end)
        elif parallel:
            body = plus(fmt.section_start, tool_choice, more, fmt.section_end)
        else:
            body = plus(fmt.section_start, tool_choice, fmt.section_end)
        tool_calls = p.trigger_rule("tool-call", body)

    if inputs.tool_choice != "required":
        tool_calls = p.optional(tool_calls)
    trigger_marker = fmt.section_start or fmt.per_call_start
    content_before_tools = p.until(trigger_marker) if trigger_marker else p.eps()
    return plus(ctx.reasoning_parser, lambda: p.optional(p.content(content_before_tools)), tool_calls, p.end)


def _tag_json_parser(ctx: _Context) -> PegParser:
    p, t = ctx.p, ctx.analysis.tools

    def tool_rule(func: dict) -> PegParser:
        name = func["name"]
        schema = func.get("parameters", {})
        call_id_section, have_call_id = _call_id_between(ctx, suffix_inside=False)
        args = _with_args_markers(ctx, p.tool_args(p.schema(p.json(), f"tool-{name}-schema", schema)))
        atomic_peek = p.peek(p.literal(t.arguments.start)) if t.arguments.start else None
        func_parser = _func_parser(ctx, name, call_id_section, have_call_id, args, atomic_peek)
        return p.rule(f"tool-{name}", func_parser)

    return _tool_calls_section(ctx, p.choice_of(functions(ctx.inputs.tools), tool_rule), tagged=False)


def _tagged_arg(
    ctx: _Context, name: str, param_name: str, param_schema: object, is_string: bool, until_suffix: PegParser
) -> PegParser:
    """One <name>value</name> argument: a string-typed value is raw text up to the value suffix, any other a
    JSON value."""
    p, a = ctx.p, ctx.analysis.tools.arguments

    def close() -> PegParser:
        return p.tool_arg_close(p.literal(a.value_suffix))

    if is_string:

        def value() -> PegParser:
            return p.ac(plus(lambda: p.tool_arg_string_value(until_suffix), close), a.value_suffix)
    else:

        def value() -> PegParser:
            schema = p.schema(p.json(), f"tool-{name}-arg-{param_name}-schema", param_schema, False)
            return plus(lambda: p.tool_arg_json_value(schema), close)

    def arg_open() -> PegParser:
        return p.tool_arg_open(plus(a.name_prefix, lambda: p.tool_arg_name(p.literal(param_name)), a.name_suffix))

    return p.tool_arg(plus(arg_open, a.value_prefix, value))


def _tag_tagged_parser(ctx: _Context) -> PegParser:
    p, args_a = ctx.p, ctx.analysis.tools.arguments
    until_suffix = p.rule("until-suffix", p.until(args_a.value_suffix))

    def tool_rule(func: dict) -> PegParser:
        name = func["name"]
        params = func.get("parameters", {})
        properties = params.get("properties", {})
        required = set(params.get("required", []))

        required_parsers, optional_parsers = [], []
        for param_name, param_schema in properties.items():
            arg = _tagged_arg(
                ctx, name, param_name, param_schema, resolves_to_string(param_schema, params), until_suffix
            )
            named = p.rule(f"tool-{name}-arg-{param_name}", arg)
            (required_parsers if param_name in required else optional_parsers).append(named)

        args = _with_args_markers(ctx, p.required_then_any_optional(required_parsers, optional_parsers))

        call_id_section, have_call_id = _call_id_between(ctx, suffix_inside=True)
        # peek for an argument tag only when required arguments must follow: with all of them optional the
        # model may write none
        atomic_peek = p.peek(p.literal(args_a.name_prefix)) if args_a.name_prefix and required_parsers else None
        func_parser = _func_parser(ctx, name, call_id_section, have_call_id, args, atomic_peek)
        return p.rule(f"tool-{name}", func_parser)

    return _tool_calls_section(ctx, p.choice_of(functions(ctx.inputs.tools), tool_rule), tagged=True)


# ---------------------------------------------------------------------------------------------------------------
# The whole parser, and the chat parameters


def build_parser(analysis: Autoparser, inputs: GenerationParams, generation_prompt: str) -> PegArena:
    """autoparser::build_parser(): the generation prompt, then reasoning, then a response-format JSON, tool
    calls or content."""
    if not analysis.analysis_complete:
        raise ValueError(
            "Cannot call build_parser on autoparser without performing analysis first, call analyze_template(...)"
        )

    def build(p: ChatPegBuilder) -> PegParser:
        ctx = _Context(p, inputs, analysis, p.eps())
        ctx.extracting_reasoning = inputs.reasoning_format != "none" and analysis.reasoning.mode != ReasoningMode.NONE
        ctx.reasoning_parser = _reasoning_parser(ctx)
        p.eps()  # upstream's `parser` placeholder, kept for the parser ids
        pure_content = analysis.reasoning.mode == ReasoningMode.NONE
        if inputs.has_response_format():
            response_format = p.rule(
                "response-format", p.content(p.schema(p.json(), "response-format-schema", inputs.json_schema))
            )
            fenced = lambda: plus(
                lambda: p.literal("```json"), p.space, response_format, p.space, lambda: p.literal("```")
            )
            bare = lambda: plus(p.space, response_format, p.space)
            parser = plus(ctx.reasoning_parser, p.space, lambda: p.choice([fenced(), bare()]), p.end)
            pure_content = False
        elif inputs.has_tools() and inputs.tool_choice != "none" and analysis.jinja_caps["supports_tool_calls"]:
            parser = _tools_parser(ctx)
            pure_content = False
        else:
            parser = _content_parser(ctx)
        prefix = p.prefix(generation_prompt, trim_whitespace(analysis.reasoning.start))
        return prefix + parser if pure_content else prefix << parser

    return build_chat_peg_parser(build)


def generate_parser(tmpl: Template, inputs: GenerationParams, analysis: Autoparser) -> ChatParams:
    """peg_generator::generate_parser(): prompt, generation prompt, parser and grammar for one request."""
    data = ChatParams(
        prompt=apply(tmpl, inputs),
        generation_prompt=generation_prompt_of(tmpl, inputs),
        preserved_tokens=list(analysis.preserved_tokens),
        additional_stops=list(analysis.additional_stops),
    )
    parser_generation_prompt = data.generation_prompt
    if inputs.has_continuation():
        # the generation prompt rebuilt up to where the continued message stops
        msg, reasoning = inputs.continue_msg, analysis.reasoning
        if reasoning.start:
            gp = data.generation_prompt
            at = gp.find(reasoning.start)
            gp = (gp if at < 0 else gp[:at]) + reasoning.start + msg.reasoning_content
            if inputs.continue_final_message == "content":
                gp += reasoning.end
            data.generation_prompt = gp
        if inputs.continue_final_message == "content":
            data.generation_prompt += render_content(msg)
        data.prompt += data.generation_prompt

    data.parser = build_parser(analysis, inputs, parser_generation_prompt)

    fmt = analysis.tools.format
    has_tools = fmt.mode != ToolFormat.NONE and inputs.has_tools()
    trigger_marker = fmt.section_start or fmt.per_call_start
    has_response_format = inputs.has_response_format()
    if has_response_format or (
        has_tools and ((inputs.tool_choice == "auto" and trigger_marker) or inputs.tool_choice == "required")
    ):
        lazy = not has_response_format and inputs.tool_choice == "auto"
        triggers = []
        if lazy:
            triggers.append((GRAMMAR_TRIGGER_TYPE_WORD, trigger_marker))
            if fmt.openai_wrapper_trigger:  # the model writes the OpenAI function wrapper
                triggers.append((GRAMMAR_TRIGGER_TYPE_WORD, '{"type": "function",'))
        add_grammar(
            data,
            lazy,
            [f.get("parameters", {}) for f in functions(inputs.tools)],
            triggers,
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data


def add_grammar(
    data: ChatParams,
    lazy: bool,
    schemas: Iterable[object],
    triggers: list[tuple[int, str]],
    *,
    response_format: object = None,
) -> None:
    """The grammar of `data.parser` (tool_grammar() of the tool schemas, then of the response format's when
    there is one), lazy or not, and the triggers that start it."""
    schemas = list(schemas)
    if response_format is not None:
        schemas.append(response_format)
    data.grammar_lazy = lazy
    data.grammar = tool_grammar(data.parser, lazy, schemas)
    data.grammar_triggers = triggers


def tool_grammar(parser: PegArena, lazy: bool, schemas: Iterable[object]) -> str:
    """build_grammar() around a chat parser: the tool (and response-format) schemas' refs resolved, in
    order, then the parser's grammar, lazy or not."""
    schemas = list(schemas)

    def add_rules(builder) -> None:
        for schema in schemas:
            builder.resolve_refs(schema)
        parser.build_grammar(builder, lazy)

    return build_grammar(add_rules)
