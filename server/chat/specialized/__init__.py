"""b10621's specialized chat handlers (common_chat_try_specialized_template() in common/chat.cpp): the
template families its autoparser does not read, each with a hand-written prompt, parser and grammar.

`try_specialized()` dispatches on the family `specialized_template_kind()` names, in b10621's detection
order (the order lives in that function); a family without a ported handler returns None, like a template
no handler claims, and goes to the autoparser.
"""

from __future__ import annotations

from importlib import import_module

from ..autoparser import ChatParams, GenerationParams, prepare_inputs, specialized_template_kind
from ..autoparser.helpers import Template

# specialized_template_kind() name -> "module:function" in this package, the function taking
# (tmpl: Template, inputs: GenerationParams) -> ChatParams. One line per family.
HANDLERS: dict[str, str] = {
    "Ministral/Magistral Large 3": "ministral_3:params_init",
    "GPT-OSS": "gpt_oss:params_init",
    "Muse Glimmer": "muse_glimmer:params_init",
    "Functionary v3.2": "functionary_v3_2:params_init",
    "Kimi K2 Thinking": "kimi_k2:params_init",
    "Kimi K3": "kimi_k3:params_init",
    "Cohere2 MoE": "cohere2moe:params_init",
    "LFM2": "lfm2:params_init_lfm2",
    "LFM2.5": "lfm2:params_init_lfm25",
    "GigaChatV3": "gigachat_v3:params_init",
    "MiniMax-M3": "minimax_m3:params_init",
    "DeepSeek V3.2/V4": "deepseek_v3_2:params_init",
    "Gemma4": "gemma4:params_init",
    "MiniCPM5": "minicpm5:params_init",
    "Qwen3-Coder": "qwen3_coder:params_init",
}


def try_specialized(template_source: str, tmpl: Template, inputs: GenerationParams) -> ChatParams | None:
    """common_chat_try_specialized_template(): the chat params of the family's handler, or None when the
    template is left to the autoparser. `inputs` as common_chat_templates_apply_jinja() prepares them
    (template workarounds applied; when continuing, the continued message out of the messages)."""
    kind = specialized_template_kind(template_source)
    target = HANDLERS.get(kind) if kind is not None else None
    if target is None:
        return None
    module, function = target.split(":")
    handler = getattr(import_module(f"{__name__}.{module}"), function)
    return handler(tmpl, prepare_inputs(inputs))
