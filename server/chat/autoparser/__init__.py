"""b10621's differential chat-template autoparser (common/chat-auto-parser*.{h,cpp}, chat-diff-analyzer.cpp and
the autoparser path of common_chat_templates_apply_jinja() in common/chat.cpp).

`generate_chat_params()` is the jinja chat path for a template no specialized handler claims: the prompt,
the generation prompt, the PEG parser that reads the model's answer back, and the grammar, triggers and
preserved tokens that constrain it. `specialized_template_kind()` says which handler b10621 would use
instead (those are not ported).
"""

from __future__ import annotations


def _is_lfm2(src: str) -> bool:
    return "<|tool_list_start|>" in src and "<|tool_list_end|>" in src


def specialized_template_kind(source: str) -> str | None:
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
