"""What b10621's specialized handlers (common/chat.cpp) share: the request renders with their overrides
(common_chat_template_direct_apply_impl / common_chat_template_generation_prompt_impl), foreach_function /
foreach_parameter, common_chat_msg::render_content and common_schema_info::resolves_to_string (all of them
shared with the autoparser: server/chat/autoparser/helpers.py), the continued message, the grammar trigger
types and the tool-call grammar built around a handler's parser.

Parsers are created in the order of b10621's GCC build: the operands of a C++ `a + b` or `a | b` right to
left (server.peg.plus / alt), of `<<` and braced lists left to right.
"""

from __future__ import annotations

from ...peg import alt, plus
from ..autoparser.generator import ChatParams, GenerationParams, tool_grammar
from ..autoparser.helpers import (
    Template,
    apply,
    functions,
    generation_prompt_of,
    parameters,
    render_content,
    resolves_to_string,
)

# common_grammar_trigger_type
TRIGGER_TOKEN = 0
TRIGGER_WORD = 1
TRIGGER_PATTERN = 2
TRIGGER_PATTERN_FULL = 3

__all__ = ["TRIGGER_PATTERN", "TRIGGER_PATTERN_FULL", "TRIGGER_TOKEN", "TRIGGER_WORD", "ChatParams",
           "GenerationParams", "Template", "alt", "apply", "continue_message", "functions",
           "generation_prompt_of", "parameters", "plus", "render_content", "resolves_to_string",
           "tool_grammar"]


def continue_message(data: ChatParams, inputs: GenerationParams, reasoning_prefix: str,
                     content_prefix: str) -> None:
    """The continued message (continue_final_message) written after the prompt as the model would have
    written it: `reasoning_prefix` and its reasoning, then, when its content is continued too,
    `content_prefix` and its content; the generation prompt becomes all of that."""
    if not inputs.has_continuation():
        return
    msg = inputs.continue_msg
    data.generation_prompt = reasoning_prefix + msg.reasoning_content
    if inputs.continue_final_message == "content":
        data.generation_prompt += content_prefix + render_content(msg)
    data.prompt += data.generation_prompt
