"""b10621's differential chat-template autoparser (common/chat-auto-parser*.{h,cpp}, chat-diff-analyzer.cpp and
the autoparser path of common_chat_templates_apply_jinja() in common/chat.cpp).

`generate_chat_params()` is the jinja chat path for a template no specialized handler claims: the prompt,
the generation prompt, the PEG parser that reads the model's answer back, and the grammar, triggers and
preserved tokens that constrain it. `specialized_template_kind()` says which handler b10621 would use
instead (those are not ported).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import lru_cache

from ..caps import template_caps
from ..peg_chat import build_chat_peg_parser
from .analysis import Autoparser, ReasoningMode
from .generator import GRAMMAR_TRIGGER_TYPE_WORD, ChatParams, GenerationParams, generate_parser
from .helpers import Template, direct_apply, generation_prompt, trim_whitespace

log = logging.getLogger("mlxcel.chat")

__all__ = [
    "GRAMMAR_TRIGGER_TYPE_WORD",
    "ChatParams",
    "GenerationParams",
    "analyze",
    "generate_chat_params",
    "prepare_inputs",
    "pure_content_params",
    "specialized_template_kind",
    "template_supports_thinking",
]


@lru_cache(maxsize=16)
def analyze(source: str, bos_token: str = "", eos_token: str = "") -> Autoparser:
    """The template's analysis (pure, so cached): what b10621 computes for each request. Do not modify it."""
    analysis = Autoparser()
    analysis.analyze_template(Template(source, bos_token, eos_token, template_caps(source)))
    return analysis


def prepare_inputs(inputs: GenerationParams) -> GenerationParams:
    """What common_chat_templates_apply_jinja() settles before any template path: a grammar next to tools is
    refused (RuntimeError: its std::runtime_error), continue_final_message "auto" becomes "reasoning" (a
    continued message with reasoning only) or "content"."""
    if inputs.tools and inputs.tool_choice != "none" and inputs.grammar:
        raise RuntimeError("Cannot specify grammar with tools")
    if inputs.continue_final_message == "auto" and inputs.continue_msg is not None:
        msg = inputs.continue_msg
        reasoning_only = bool(msg.reasoning_content) and not msg.content and not msg.content_parts
        inputs = replace(inputs, continue_final_message="reasoning" if reasoning_only else "content")
    return inputs


def generate_chat_params(template_source: str, inputs: GenerationParams) -> ChatParams:
    """common_chat_templates_apply_jinja() past force_pure_content: the family's specialized handler where
    b10621 has one, else the autoparser. `inputs` as that function prepares them (messages with the template
    workarounds applied and, when continuing, without the continued message; the BOS/EOS strings, date and
    template kwargs in extra_context).

    Raises ValueError("Unable to generate parser for this template. Automatic parser generation failed: ...")
    as b10621 throws std::invalid_argument, RuntimeError (its std::runtime_error) for a grammar next to tools.
    """
    # deferred: chat.specialized's handlers build on this package (a cycle inside server.chat)
    from ..specialized import try_specialized

    inputs = prepare_inputs(inputs)
    bos, eos = inputs.extra_context.get("bos_token", ""), inputs.extra_context.get("eos_token", "")
    special = try_specialized(
        template_source, Template(template_source, bos, eos, template_caps(template_source)), inputs
    )
    if special is not None:
        return special
    bos, eos = inputs.extra_context.get("bos_token", ""), inputs.extra_context.get("eos_token", "")
    try:
        analysis = analyze(template_source, bos, eos)
        tmpl = Template(template_source, bos, eos, analysis.jinja_caps)
        params = generate_parser(tmpl, inputs, analysis)
    except Exception as e:
        raise ValueError(f"Unable to generate parser for this template. Automatic parser generation failed: {e}") from e
    if analysis.assistant_start:
        params.message_delimiters["assistant"] = analysis.assistant_start
    if analysis.user_start:
        params.message_delimiters["user"] = analysis.user_start
    params.supports_thinking = analysis.reasoning.mode != ReasoningMode.NONE
    if params.supports_thinking:
        params.thinking_start_tag = trim_whitespace(analysis.reasoning.start)
        end_tag = trim_whitespace(analysis.reasoning.end)
        if end_tag:
            params.thinking_end_tags = [end_tag]
    return params


def pure_content_params(template_source: str, inputs: GenerationParams) -> ChatParams:
    """--skip-chat-parsing (force_pure_content): the plain render with reasoning_format none, and a parser
    that takes everything after the generation prompt as content; no grammar, no tool calls."""
    bos, eos = inputs.extra_context.get("bos_token", ""), inputs.extra_context.get("eos_token", "")
    tmpl = Template(template_source, bos, eos, template_caps(template_source))
    args = (inputs.messages, inputs.tools, inputs.enable_thinking, inputs.extra_context, inputs.add_bos, inputs.add_eos)
    prompt = direct_apply(tmpl, args[0], args[1], inputs.add_generation_prompt, *args[2:])
    gen = generation_prompt(tmpl, *args)
    parser = build_chat_peg_parser(lambda p: p.literal(gen) << p.content(p.rest()))
    return ChatParams(prompt=prompt, generation_prompt=gen, parser=parser)


def template_supports_thinking(source: str, bos_token: str = "", eos_token: str = "") -> bool:
    """common_chat_templates_support_enable_thinking(): the template's chat params for one user message
    (deepseek format, thinking on) support thinking. A template that cannot be rendered has no thinking
    markers, as b10621 then fails to start (logged here)."""
    inputs = GenerationParams(
        messages=[{"role": "user", "content": "test"}],
        add_generation_prompt=True,
        reasoning_format="deepseek",
        enable_thinking=True,
        extra_context={"bos_token": bos_token, "eos_token": eos_token},
    )
    try:
        return generate_chat_params(source, inputs).supports_thinking
    except Exception as e:  # noqa: BLE001 - any failure of the template leaves it without thinking
        log.warning("chat template: the template analysis failed (%s); answers are read as plain content", e)
        return False


def _is_lfm2(src: str) -> bool:
    return "<|tool_list_start|>" in src and "<|tool_list_end|>" in src


def specialized_template_kind(source: str) -> str | None:  # noqa: C901
    """The specialized handler common_chat_try_specialized_template() picks for a template, in its order and
    with its detection substrings; None when the template goes to the autoparser."""
    s = source

    def has(*needles: str) -> bool:
        return all(n in s for n in needles)

    # Mistral Small 3.2 has [CALL_ID], Ministral does not
    if has("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]") and "[CALL_ID]" not in s:
        return "Ministral/Magistral Large 3"
    if has("<|channel|>"):
        return "GPT-OSS"
    if has("<atem:function_calls>", "<|eom|>"):
        return "Muse Glimmer"
    if has(">>>all", ">>>${recipient}"):
        return "Functionary v3.2"
    if has("<|tool_calls_section_begin|>", "<|tool_call_begin|>"):
        return "Kimi K2 Thinking"
    if has("<|open|>", "<|close|>", "<|end_of_msg|>"):
        return "Kimi K3"
    if has("<|START_TEXT|>", "<|START_ACTION|>"):
        return "Cohere2 MoE"
    if _is_lfm2(s):
        return "LFM2"
    if has("List of tools: [") and "<|tool_list_start|>" not in s:
        return "LFM2.5"
    if has("<|role_sep|>", "<|message_sep|>") and "<|function_call|>" not in s:
        return "GigaChatV3"
    if has("]<]minimax[>[", "<tool_call>", "<invoke name="):
        return "MiniMax-M3"
    if has("dsml_token", "DSML") and ("function_calls" in s or "tool_calls" in s):
        return "DeepSeek V3.2/V4"
    if has("'<|tool_call>call:'"):
        return "Gemma4"
    if has("Tool usage guidelines:", '<function name="', '<param name="'):
        return "MiniCPM5"
    if has("<tool_call>", "<function=", "<parameter="):
        return "Qwen3-Coder"
    return None
