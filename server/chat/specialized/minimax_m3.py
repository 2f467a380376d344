"""MiniMax-M3 (common_chat_params_init_minimax_m3 of b10621's common/chat.cpp, read back by
ChatPegMinimaxM3Mapper): <mm:think> reasoning, content, then tool calls whose every tag carries the
namespace token "]<]minimax[>[",

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="f">]<]minimax[>[<key>value]<]minimax[>[</key>...]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

with object and array arguments expanded into nested elements (<item> for array entries), as the template's
to_xml() macro writes them.

Parsers are created in the order of b10621's GCC build (the operands of a C++ `a + b` right to left).
"""

from __future__ import annotations

from ..peg_chat import FORMAT_PEG_MINIMAX_M3, ChatPegBuilder, build_chat_peg_parser
from ..peg_mapper import ChatPegMinimaxM3Mapper as Mm3
from . import _handler_kit as kit
from ._handler_kit import ChatParams, GenerationParams, Template, plus

NS = "]<]minimax[>["
THINK_START = "<mm:think>"
THINK_END = "</mm:think>"
FC_START = NS + "<tool_call>"
FC_END = NS + "</tool_call>"
INVOKE_END = NS + "</invoke>"

# upstream lists two system delimiters (developer and system); ChatParams.message_delimiters, keyed by role,
# holds the first
MESSAGE_DELIMITERS = [
    ("assistant", "]~b]ai"),
    ("user", "]~b]user"),
    ("tool", "]~b]tool"),
    ("system", "]~b]developer"),
    ("system", "]~b]system"),
]


def params_init(tmpl: Template, inputs: GenerationParams) -> ChatParams:
    data = kit.chat_params(
        tmpl,
        inputs,
        format=FORMAT_PEG_MINIMAX_M3,
        supports_thinking=True,
        thinking_start_tag=THINK_START,
        thinking_end_tags=[THINK_END],
        preserved_tokens=[NS, "<tool_call>", "</tool_call>", THINK_START, THINK_END],
    )
    for role, delimiter in MESSAGE_DELIMITERS:  # the first of each role: the system message renders under
        data.message_delimiters.setdefault(role, delimiter)  # ]~b]developer
    tools = inputs.has_tools()
    has_response_format = isinstance(inputs.json_schema, dict)
    extract_reasoning = inputs.reasoning_format != "none"
    include_grammar = has_response_format or (tools and inputs.tool_choice != "none")
    gen_prompt = data.generation_prompt

    kit.continue_message(data, inputs, gen_prompt + THINK_START, THINK_END)

    def build(p: ChatPegBuilder):
        generation_prompt = p.prefix(gen_prompt, THINK_START)
        end = p.end()

        reasoning = p.eps()
        if extract_reasoning:
            if inputs.enable_thinking:
                block = plus(
                    lambda: p.literal(THINK_START),
                    p.space,
                    lambda: p.ac(
                        plus(lambda: p.reasoning(p.until(THINK_END)), lambda: p.literal(THINK_END)), THINK_END
                    ),
                )
            else:
                block = plus(
                    lambda: p.literal(THINK_START),
                    lambda: p.ac(plus(lambda: p.until(THINK_END), lambda: p.literal(THINK_END)), THINK_END),
                )
            # a turn without reasoning opens with a bare </mm:think>, from the generation prompt (thinking
            # disabled) or from the model
            reasoning = p.optional(p.choice([block, p.literal(THINK_END)]))

        if has_response_format:
            response_format = kit.fenced_json_response(p, inputs.json_schema)
            return plus(generation_prompt, reasoning, response_format, end)

        if not tools or inputs.tool_choice == "none":
            return plus(generation_prompt, reasoning, lambda: p.content(p.rest()), end)

        tool_choice = p.choice_of(kit.functions(inputs.tools), lambda f: _ToolBuilder(p, f).parser())

        require_tools = inputs.tool_choice == "required"
        tool_calls = kit.spaced_tool_calls(p, FC_START, FC_END, tool_choice, inputs.parallel_tool_calls)
        if not require_tools:
            tool_calls = p.optional(tool_calls)

        content_before_tools = p.content(p.until(FC_START))
        return plus(generation_prompt, reasoning, content_before_tools, tool_calls, end)

    data.parser = build_chat_peg_parser(build)
    if include_grammar:
        kit.add_grammar(
            data,
            not (has_response_format or (tools and inputs.tool_choice == "required")),
            [f.get("parameters", {}) for f in kit.functions(inputs.tools)],
            [(kit.TRIGGER_WORD, FC_START)],
            response_format=inputs.json_schema if has_response_format else None,
        )
    return data


def _alternatives_of(schema: object) -> list | None:
    for keyword in ("oneOf", "anyOf"):
        alternatives = schema.get(keyword) if isinstance(schema, dict) else None
        if isinstance(alternatives, list) and alternatives:
            return alternatives
    return None


class _ToolBuilder:
    """One ]<]minimax[>[<invoke name="..."> call, its arguments expanded recursively in XML (the lambdas
    element_of, value_of and members_of of the C++)."""

    def __init__(self, p: ChatPegBuilder, function: dict) -> None:
        self.p = p
        self.name = function["name"]
        self.params = function.get("parameters", {})

    def parser(self):
        p, name = self.p, self.name
        has_properties = isinstance(self.params, dict) and "properties" in self.params
        invoke_body = self.members_of(self.params, f"tool-{name}-arg") if has_properties else p.eps()
        func_parser = p.tool(
            plus(
                lambda: p.tool_open(
                    plus(
                        lambda: p.literal(NS + '<invoke name="'),
                        lambda: p.tool_name(p.literal(name)),
                        lambda: p.literal('">'),
                    )
                ),
                p.space,
                invoke_body,
                p.space,
                lambda: p.tool_close(p.literal(INVOKE_END)),
            )
        )
        return p.rule(f"tool-{name}", func_parser)

    def element_of(self, tag: str, schema: object, rule_name: str):
        p = self.p
        close = NS + "</" + tag + ">"
        return p.rule(
            rule_name,
            p.tool_arg(
                plus(
                    lambda: p.tool_arg_open(
                        plus(
                            lambda: p.literal(NS + "<"), lambda: p.tool_arg_name(p.literal(tag)), lambda: p.literal(">")
                        )
                    ),
                    lambda: self.value_of(schema, rule_name, close),
                )
            ),
        )

    def value_of(self, schema: object, rule_name: str, close: str):
        p = self.p
        close_tag = p.tool_arg_close(p.literal(close))

        # a string takes anything, so a union with a string alternative is a string
        if kit.resolves_to_string(schema, self.params):
            return p.ac(plus(lambda: p.tool_arg_string_value(p.until(close)), close_tag), close)

        alternatives = _alternatives_of(schema)
        if alternatives is not None:
            choices = [
                self.value_of(alternative, f"{rule_name}-{index}", close)
                for index, alternative in enumerate(alternatives)
            ]
            return p.choice(choices)

        kind = schema.get("type") if isinstance(schema, dict) else None
        kind = kind if isinstance(kind, str) else ""
        if kind == "object" and "properties" in schema:
            return plus(lambda: p.tag(Mm3.TOOL_ARG_OBJECT, self.members_of(schema, rule_name)), p.space, close_tag)
        if kind == "array" and "items" in schema:
            item_close = NS + "</item>"
            item = p.rule(
                f"{rule_name}-item",
                p.tag(
                    Mm3.TOOL_ARG_ITEM,
                    plus(
                        lambda: p.literal(NS + "<item>"),
                        lambda: self.value_of(schema["items"], f"{rule_name}-item", item_close),
                    ),
                ),
            )
            return plus(lambda: p.tag(Mm3.TOOL_ARG_ARRAY, p.repeat(p.space() + item, 0, -1)), p.space, close_tag)
        return plus(lambda: p.tool_arg_json_value(p.schema(p.json(), f"{rule_name}-schema", schema, False)), close_tag)

    def members_of(self, schema: dict, rule_prefix: str):
        """The required properties in schema order, then any number of the optional ones in any order."""
        p = self.p
        props = schema["properties"]
        required = set(schema.get("required", []))
        required_elements, optional_elements = [], []
        for key, key_schema in props.items():
            element = self.element_of(key, key_schema, f"{rule_prefix}-{key}")
            (required_elements if key in required else optional_elements).append(element)

        return p.required_then_any_optional(required_elements, optional_elements)
