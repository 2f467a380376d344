"""b10621's legacy (non-Jinja) chat templates: src/llama-chat.cpp, as llama-server uses them under --no-jinja.

- template_from_name() is llm_chat_template_from_str() (LLM_CHAT_TEMPLATES, the 54 built-in names);
- detect_template() is llm_chat_detect_template(): a built-in name, else substring tests on a Jinja
  template's source, in upstream's order (first match wins);
- apply_legacy() is llama_chat_apply_template() -> llm_chat_apply_template(): the C++ formatting of each
  built-in, raising common_chat_templates_apply_legacy()'s error for an unknown template.

Strings cross upstream's C API as `const char *`: a role, a content or a template source ends at its first
NUL byte, which is kept here. trim() is C isspace() (ASCII whitespace only), and role capitalisation is
C toupper() (ASCII letters only), as upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# LLM_CHAT_TEMPLATES in source order, each name with the llm_chat_template it selects. Names that select
# the same formatting family still differ in detail (see _FORMATTERS).
LEGACY_TEMPLATES: tuple[str, ...] = (
    "chatml",
    "llama2",
    "llama2-sys",
    "llama2-sys-bos",
    "llama2-sys-strip",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
    "phi3",
    "phi4",
    "falcon3",
    "zephyr",
    "monarch",
    "gemma",
    "orion",
    "openchat",
    "vicuna",
    "vicuna-orca",
    "deepseek",
    "deepseek2",
    "deepseek3",
    "deepseek-ocr",
    "command-r",
    "llama3",
    "chatglm3",
    "chatglm4",
    "glmedge",
    "minicpm",
    "exaone3",
    "exaone4",
    "exaone-moe",
    "rwkv-world",
    "granite",
    "granite-4.0",
    "granite-4.1",
    "gigachat",
    "megrez",
    "yandex",
    "bailing",
    "bailing-think",
    "bailing2",
    "llama4",
    "smolvlm",
    "hunyuan-moe",
    "gpt-oss",
    "hunyuan-dense",
    "hunyuan-vl",
    "kimi-k2",
    "seed_oss",
    "grok-2",
    "pangu-embedded",
    "solar-open",
)

# LLM_CHAT_TEMPLATE_DOTS1 is detected from a template's source but has no name in LLM_CHAT_TEMPLATES:
# detect_template() reports it as "dots1", which template_from_name() does not accept.
DOTS1 = "dots1"

# llama_chat_builtin_templates() walks a std::map, so --help lists the names sorted (byte order).
BUILTIN_LIST = ", ".join(sorted(LEGACY_TEMPLATES))

# common/chat.cpp CHATML_TEMPLATE_SRC: the template used when none is given or "chatml" is (see
# default_template_source()).
CHATML_TEMPLATE_SRC = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)

# common_chat_templates_apply_legacy()'s errors (std::runtime_error: HTTP 500 "server_error"). The second
# follows a second llama_chat_apply_template() call that cannot fail where the first succeeded.
UNSUPPORTED_TEMPLATE_ERROR = "this custom template is not supported, try using --jinja"
APPLY_FAILED_ERROR = "failed to apply chat template, try using --jinja"


def _c_str(s: str) -> str:
    """What a `const char *` made from `s` holds: everything before the first NUL."""
    i = s.find("\0")
    return s if i < 0 else s[:i]


def _trim(s: str) -> str:
    """llama-chat.cpp trim(): C isspace() on both ends (space, \\t, \\n, \\v, \\f, \\r)."""
    return s.strip(" \t\n\v\f\r")


def _ascii_upper(s: str) -> str:
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in s)


def template_from_name(name: str) -> str | None:
    """llm_chat_template_from_str(): the built-in `name` (exact, case-sensitive), or None."""
    return name if name in _NAMES else None


def detect_template(source: str) -> str | None:  # noqa: C901
    """llm_chat_detect_template(): which built-in a name or a Jinja template's source selects (DOTS1 is
    "dots1"), or None (LLM_CHAT_TEMPLATE_UNKNOWN)."""
    tmpl = _c_str(source)
    if tmpl in _NAMES:
        return tmpl

    def has(*needles: str) -> bool:
        return all(n in tmpl for n in needles)

    if has("<|im_start|>"):
        if has("<|im_sep|>"):
            return "phi4"
        # SmolVLM uses <|im_start|> as BOS, but it is NOT chatml
        return "smolvlm" if has("<end_of_utterance>") else "chatml"
    if tmpl.startswith("mistral") or has("[INST]"):
        if has("[SYSTEM_PROMPT]"):
            return "mistral-v7"
        if has("' [INST] ' + system_message") or has("[AVAILABLE_TOOLS]"):
            if has(" [INST]"):
                return "mistral-v1"
            if has('"[INST]"'):
                return "mistral-v3-tekken"
            return "mistral-v3"
        if has("content.strip()"):
            return "llama2-sys-strip"
        if has("bos_token + '[INST]"):
            return "llama2-sys-bos"
        if has("<<SYS>>"):
            return "llama2-sys"
        return "llama2"
    if has("<|assistant|>", "<|end|>"):
        return "phi3"
    if has("[gMASK]<sop>"):
        return "chatglm4"
    if has("<|assistant|>", "<|user|>"):
        if has("<|tool_declare|>"):
            return "exaone-moe"
        return "falcon3" if has("</s>") else "glmedge"
    for needles, name in _DETECT_RULES:
        if has(*needles):
            return name
    if has("rwkv-world") or has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"):
        return "rwkv-world"
    if has("<|start_of_role|>"):
        if has("<tool_call>") or has("<tools>"):
            return "granite-4.0" if has("g4_default_system_message") else "granite-4.1"
        return "granite"
    for needles, name in _DETECT_RULES_LATE:
        if has(*needles):
            return name
    return None


# The flat part of llm_chat_detect_template(), in order: (all these substrings, built-in).
_DETECT_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|{{ item['role'] }}|>", "<|begin_of_image|>"), "glmedge"),
    (("<|user|>", "<|endoftext|>"), "zephyr"),
    (("bos_token + message['role']",), "monarch"),
    (("<start_of_turn>",), "gemma"),
    (("'\\n\\nAssistant: ' + eos_token",), "orion"),  # OrionStarAI/Orion-14B-Chat
    (("GPT4 Correct ",), "openchat"),  # openchat/openchat-3.5-0106
    (("USER: ", "ASSISTANT: ", "SYSTEM: "), "vicuna-orca"),
    (("USER: ", "ASSISTANT: "), "vicuna"),  # eachadea/vicuna-13b-1.1
    (("### Instruction:", "<|EOT|>"), "deepseek"),  # deepseek-ai/deepseek-coder-33b-instruct
    (("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"), "command-r"),  # CohereForAI/c4ai-command-r-plus
    (("<|start_header_id|>", "<|end_header_id|>"), "llama3"),
    (("[gMASK]sop",), "chatglm3"),  # chatglm3-6b
    (("<用户>",), "minicpm"),  # MiniCPM-3B-OpenHermes-2.5-v2-GGUF
    (("'Assistant: ' + message['content'] + eos_token",), "deepseek2"),
    (("<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"), "deepseek3"),
    (("[|system|]", "[|assistant|]", "[|endofturn|]", "[|tool|]"), "exaone4"),
    (("[|system|]", "[|assistant|]", "[|endofturn|]"), "exaone3"),  # EXAONE-3.0-7.8B-Instruct
)

_DETECT_RULES_LATE: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]",),
        "gigachat",
    ),
    (("<|role_start|>",), "megrez"),
    ((" Ассистент:",), "yandex"),
    (("<role>ASSISTANT</role>", "'HUMAN'"), "bailing"),
    (("<role>ASSISTANT</role>", '"HUMAN"', "<think>"), "bailing-think"),
    (("<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"), "bailing2"),
    (("<|header_start|>", "<|header_end|>"), "llama4"),
    (("<|endofuserprompt|>",), DOTS1),
    (("<|extra_0|>", "<|extra_4|>"), "hunyuan-moe"),
    (("<|start|>", "<|channel|>"), "gpt-oss"),
    (("<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"), "hunyuan-vl"),
    (("<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"), "hunyuan-dense"),
    (("<|im_assistant|>assistant<|im_middle|>",), "kimi-k2"),
    (("<seed:bos>",), "seed_oss"),
    (("'Assistant: '  + message['content'] + '<|separator|>",), "grok-2"),
    (("[unused9]系统：[unused10]",), "pangu-embedded"),
    (("<|begin|>", "<|end|>", "<|content|>"), "solar-open"),
)


def apply_legacy(name_or_source: str, messages: Sequence[tuple[str, str]], add_generation_prompt: bool) -> str:
    """llama_chat_apply_template(): the prompt the built-in named by, or detected from, `name_or_source`
    gives `messages` ((role, content) pairs). ValueError(UNSUPPORTED_TEMPLATE_ERROR) where none is."""
    kind = detect_template(name_or_source)
    if kind is None:
        raise ValueError(UNSUPPORTED_TEMPLATE_ERROR)
    chat = [(_c_str(role), _c_str(content)) for role, content in messages]
    return _FORMATTERS[kind](chat, add_generation_prompt)


def verify_legacy(template: str) -> bool:
    """common_chat_verify_template(tmpl, use_jinja=false): whether the built-ins handle `template`."""
    return detect_template(template) is not None


def unsupported_template_message(template: str, use_jinja: bool) -> str:
    """The text llama-server prints to stderr (then exits with status 1) when --chat-template or
    --chat-template-file fails common_chat_verify_template() at argument parsing."""
    note = (
        "" if use_jinja else ("\nnote: llama.cpp was started without --jinja, we only support commonly used templates")
    )
    return f"error: the supplied chat template is not supported: {template}{note}\n"


def legacy_content(content: str, parts: Sequence[tuple[str, str]] = ()) -> str:
    """common_chat_templates_apply_legacy(): a message's content with its (type, text) content parts
    appended, "\\n" before each once anything is there; parts other than text/media_marker are skipped."""
    for kind, text in parts:
        if kind not in ("text", "media_marker"):
            continue  # LOG_WRN("Ignoring non-text content part: %s\n", type)
        if content:
            content += "\n"
        content += text
    return content


def default_template_source(override: str, model_template: str = "", model_tool_use_template: str = "") -> str:
    """common_chat_templates_init(): the default template's source. --chat-template/-file text wins (the
    model's templates are then not read); an empty or exactly "chatml" source becomes the model's tool_use
    template, else CHATML_TEMPLATE_SRC. /props "chat_template" reports this source."""
    tool_use = ""
    if override:
        source = override
    else:
        source, tool_use = model_template, model_tool_use_template
    if not source or source == "chatml":
        source = tool_use or CHATML_TEMPLATE_SRC
    return source


# --- llm_chat_apply_template(), one function per family --------------------------------------------------

Chat = list[tuple[str, str]]


def _chatml(chat: Chat, add_ass: bool) -> str:
    out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in chat)
    return out + ("<|im_start|>assistant\n" if add_ass else "")


def _mistral_v7(tekken: bool) -> Callable[[Chat, bool], str]:
    # https://huggingface.co/mistralai/Mistral-Large-Instruct-2411#basic-instruct-template-v7
    sp = "" if tekken else " "

    def fmt(chat: Chat, add_ass: bool) -> str:
        out = []
        for role, content in chat:
            if role == "system":
                out.append(f"[SYSTEM_PROMPT]{sp}{content}[/SYSTEM_PROMPT]")
            elif role == "user":
                out.append(f"[INST]{sp}{content}[/INST]")
            else:
                out.append(f"{sp}{content}</s>")
        return "".join(out)

    return fmt


def _mistral_v1_v3(version: str) -> Callable[[Chat, bool], str]:
    # https://github.com/mistralai/cookbook/blob/main/concept-deep-dive/tokenization/chat_templates.md
    lead = " " if version == "v1" else ""
    trail = "" if version == "v3-tekken" else " "
    trim_assistant = version == "v3"

    def fmt(chat: Chat, add_ass: bool) -> str:
        out, inside = [], False
        for role, content in chat:
            if not inside:
                out.append(f"{lead}[INST]{trail}")
                inside = True
            if role == "system":
                out.append(content + "\n\n")
            elif role == "user":
                out.append(f"{content}{lead}[/INST]")
            else:
                out.append(trail + (_trim(content) if trim_assistant else content) + "</s>")
                inside = False
        return "".join(out)

    return fmt


def _llama2(system: bool, bos_inside: bool, strip: bool) -> Callable[[Chat, bool], str]:
    # https://huggingface.co/blog/llama2#how-to-prompt-llama-2
    def fmt(chat: Chat, add_ass: bool) -> str:
        out, inside = ["[INST] "], True  # no BOS at the beginning
        for role, content in chat:
            if strip:
                content = _trim(content)
            if not inside:
                inside = True
                out.append("<s>[INST] " if bos_inside else "[INST] ")
            if role == "system":
                out.append(f"<<SYS>>\n{content}\n<</SYS>>\n\n" if system else content + "\n")
            elif role == "user":
                out.append(content + " [/INST]")
            else:
                out.append(content + "</s>")
                inside = False
        return "".join(out)

    return fmt


def _each(turn: Callable[[str, str], str], gen: str = "") -> Callable[[Chat, bool], str]:
    """Families that format every message alike, then add `gen` for the generation prompt."""
    return lambda chat, add_ass: "".join(turn(r, c) for r, c in chat) + (gen if add_ass else "")


def _by_role(
    turns: dict[str, Callable[[str], str]], gen: str = "", other: Callable[[str], str] | None = None, prefix: str = ""
) -> Callable[[Chat, bool], str]:
    """Families that format by role; a role not in `turns` uses `other` (or is dropped)."""

    def fmt(chat: Chat, add_ass: bool) -> str:
        out = [prefix]
        for role, content in chat:
            f = turns.get(role, other)
            if f is not None:
                out.append(f(content))
        return "".join(out) + (gen if add_ass else "")

    return fmt


def _monarch(chat: Chat, add_ass: bool) -> str:
    # mlabonne/AlphaMonarch-7B: <s> inside the history, not before the first message
    out = "".join(("" if i == 0 else "<s>") + f"{role}\n{content}</s>\n" for i, (role, content) in enumerate(chat))
    return out + ("<s>assistant\n" if add_ass else "")


def _gemma(chat: Chat, add_ass: bool) -> str:
    # google/gemma-7b-it: no system role; the (trimmed) system text opens the next non-model turn
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += _trim(content)
            continue
        role = "model" if role == "assistant" else role
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(_trim(content) + "<end_of_turn>\n")
    return "".join(out) + ("<start_of_turn>model\n" if add_ass else "")


def _orion(chat: Chat, add_ass: bool) -> str:
    # OrionStarAI/Orion-14B-Chat: the system text opens the next user turn; no generation prompt
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += content
        elif role == "user":
            out.append("Human: ")
            if system:
                out.append(system + "\n\n")
                system = ""
            out.append(content + "\n\nAssistant: </s>")
        else:
            out.append(content + "</s>")
    return "".join(out)


def _openchat_turn(role: str, content: str) -> str:
    if role == "system":
        return content + "<|end_of_turn|>"
    return f"GPT4 Correct {_ascii_upper(role[:1])}{role[1:]}: {content}<|end_of_turn|>"


def _minicpm(chat: Chat, add_ass: bool) -> str:
    return "".join(f"<用户>{_trim(c)}<AI>" if r == "user" else _trim(c) for r, c in chat)


def _rwkv_world(chat: Chat, add_ass: bool) -> str:
    # "\n\n" is the model's EOT; "Assistant:" follows a last user message whatever add_generation_prompt
    out = []
    for i, (role, content) in enumerate(chat):
        if role == "system":
            out.append(f"System: {_trim(content)}\n\n")
        elif role == "user":
            out.append(f"User: {_trim(content)}\n\n")
            if i == len(chat) - 1:
                out.append("Assistant:")
        elif role == "assistant":
            out.append(f"Assistant: {_trim(content)}\n\n")
    return "".join(out)


def _granite_3(role: str, content: str) -> str:
    call = "<|tool_call|>" if role == "assistant_tool_call" else ""
    return f"<|start_of_role|>{role}<|end_of_role|>{call}{content}<|end_of_text|>\n"


def _granite_4(role: str, content: str) -> str:
    if role == "assistant_tool_call":
        return f"<|start_of_role|>assistant<|end_of_role|><|tool_call|>{content}<|end_of_text|>\n"
    return f"<|start_of_role|>{role}<|end_of_role|>{content}<|end_of_text|>\n"


def _gigachat(chat: Chat, add_ass: bool) -> str:
    has_system = bool(chat) and chat[0][0] == "system"
    out = [f"<s>{chat[0][1]}<|message_sep|>" if has_system else "<s>"]
    for role, content in chat[1 if has_system else 0 :]:
        if role == "user":
            out.append(f"user<|role_sep|>{content}<|message_sep|>available functions<|role_sep|>[]<|message_sep|>")
        elif role == "assistant":
            out.append(f"assistant<|role_sep|>{content}<|message_sep|>")
    return "".join(out) + ("assistant<|role_sep|>" if add_ass else "")


def _bailing_role(role: str) -> str:
    return "HUMAN" if role == "user" else _ascii_upper(role)


def _bailing(think: bool) -> Callable[[Chat, bool], str]:
    gen = "<role>ASSISTANT</role>" + ("<think>" if think else "")
    return _each(lambda r, c: f"<role>{_bailing_role(r)}</role>{c}", gen)


def _bailing2(chat: Chat, add_ass: bool) -> str:
    has_system = bool(chat) and chat[0][0] == "system"
    out = [] if has_system else ["<role>SYSTEM</role>detailed thinking off<|role_end|>"]
    out += [f"<role>{_bailing_role(r)}</role>{c}<|role_end|>" for r, c in chat]
    return "".join(out) + ("<role>ASSISTANT</role>" if add_ass else "")


def _hunyuan_dense(chat: Chat, add_ass: bool) -> str:
    # tencent/Hunyuan-4B-Instruct: no generation prompt (the user turn ends with the assistant marker)
    out = []
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        if role == "assistant":
            out.append(f"<｜hy_Assistant｜>{content}<｜hy_place▁holder▁no▁2｜>")
        elif role == "user":
            out.append(f"<｜hy_User｜>{content}<｜hy_Assistant｜>")
    return "".join(out)


def _hunyuan_vl(chat: Chat, add_ass: bool) -> str:
    # tencent/HunyuanOCR, tencent/HunyuanVL: the role marker follows the content; no generation prompt
    out = ["<｜hy_begin▁of▁sentence｜>"]
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        elif role == "user":
            out.append(content + "<｜hy_User｜>")
        elif role == "assistant":
            out.append(content + "<｜hy_Assistant｜>")
    return "".join(out)


_KIMI_HEADERS = {
    "system": "<|im_system|>system<|im_middle|>",
    "user": "<|im_user|>user<|im_middle|>",
    "assistant": "<|im_assistant|>assistant<|im_middle|>",
    "tool": "<|im_system|>tool<|im_middle|>",
}

_PANGU_ROLES = {"system": "系统", "user": "用户", "assistant": "助手", "tool": "工具", "function": "方法"}


def _pangu_embedded(chat: Chat, add_ass: bool) -> str:
    out = []
    for i, (role, content) in enumerate(chat):
        if i == 0 and role != "system":
            out.append("[unused9]系统：[unused10]")
        if role in _PANGU_ROLES:
            out.append(f"[unused9]{_PANGU_ROLES[role]}：{content}[unused10]")
    return "".join(out) + ("[unused9]助手：" if add_ass else "")


def _exaone(moe: bool, roles: tuple[str, ...]) -> Callable[[Chat, bool], str]:
    """exaone3/exaone4: "[|role|]" + text, a user turn closed by "\n" only; exaone-moe: "<|role|>\n" + text +
    "<|endofturn|>\n". The text is trimmed; other roles are dropped."""

    def turn(role: str) -> Callable[[str], str]:
        if moe:
            head, end = f"<|{role}|>\n", "<|endofturn|>\n"
        else:
            head, end = f"[|{role}|]", "\n" if role == "user" else "[|endofturn|]\n"
        return lambda c: head + _trim(c) + end

    return _by_role({r: turn(r) for r in roles}, gen="<|assistant|>\n" if moe else "[|assistant|]")


def _command_r(chat: Chat, add_ass: bool) -> str:
    # CohereForAI/c4ai-command-r-plus
    tokens = {"system": "SYSTEM", "user": "USER", "assistant": "CHATBOT"}
    out = "".join(
        f"<|START_OF_TURN_TOKEN|><|{tokens[r]}_TOKEN|>{_trim(c)}<|END_OF_TURN_TOKEN|>" for r, c in chat if r in tokens
    )
    return out + ("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" if add_ass else "")


_FORMATTERS: dict[str, Callable[[Chat, bool], str]] = {
    "chatml": _chatml,
    "llama2": _llama2(system=False, bos_inside=False, strip=False),
    "llama2-sys": _llama2(system=True, bos_inside=False, strip=False),
    "llama2-sys-bos": _llama2(system=True, bos_inside=True, strip=False),
    "llama2-sys-strip": _llama2(system=True, bos_inside=False, strip=True),
    "mistral-v1": _mistral_v1_v3("v1"),
    "mistral-v3": _mistral_v1_v3("v3"),
    "mistral-v3-tekken": _mistral_v1_v3("v3-tekken"),
    "mistral-v7": _mistral_v7(tekken=False),
    "mistral-v7-tekken": _mistral_v7(tekken=True),
    "phi3": _each(lambda r, c: f"<|{r}|>\n{c}<|end|>\n", "<|assistant|>\n"),
    "phi4": _each(lambda r, c: f"<|im_start|>{r}<|im_sep|>{c}<|im_end|>", "<|im_start|>assistant<|im_sep|>"),
    "falcon3": _each(lambda r, c: f"<|{r}|>\n{c}\n", "<|assistant|>\n"),
    "zephyr": _each(lambda r, c: f"<|{r}|>\n{c}<|endoftext|>\n", "<|assistant|>\n"),
    "monarch": _monarch,
    "gemma": _gemma,
    "orion": _orion,
    "openchat": _each(_openchat_turn, "GPT4 Correct Assistant:"),
    "vicuna": _by_role(
        {
            "system": lambda c: c + "\n\n",
            "user": lambda c: f"USER: {c}\n",
            "assistant": lambda c: f"ASSISTANT: {c}</s>\n",
        },
        gen="ASSISTANT:",
    ),
    "vicuna-orca": _by_role(
        {
            "system": lambda c: f"SYSTEM: {c}\n",
            "user": lambda c: f"USER: {c}\n",
            "assistant": lambda c: f"ASSISTANT: {c}</s>\n",
        },
        gen="ASSISTANT:",
    ),
    "deepseek": _by_role(
        {
            "system": lambda c: c,
            "user": lambda c: f"### Instruction:\n{c}\n",
            "assistant": lambda c: f"### Response:\n{c}\n<|EOT|>\n",
        },
        gen="### Response:\n",
    ),
    "deepseek2": _by_role(
        {
            "system": lambda c: c + "\n\n",
            "user": lambda c: f"User: {c}\n\n",
            "assistant": lambda c: f"Assistant: {c}<｜end▁of▁sentence｜>",
        },
        gen="Assistant:",
    ),
    "deepseek3": _by_role(
        {
            "system": lambda c: c + "\n\n",
            "user": lambda c: "<｜User｜>" + c,
            "assistant": lambda c: f"<｜Assistant｜>{c}<｜end▁of▁sentence｜>",
        },
        gen="<｜Assistant｜>",
    ),
    "deepseek-ocr": lambda chat, add_ass: "".join(c for _, c in chat),
    "command-r": _command_r,
    "llama3": _each(
        lambda r, c: f"<|start_header_id|>{r}<|end_header_id|>\n\n{_trim(c)}<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "chatglm3": lambda chat, add_ass: (
        "[gMASK]sop" + "".join(f"<|{r}|>\n {c}" for r, c in chat) + ("<|assistant|>" if add_ass else "")
    ),
    "chatglm4": lambda chat, add_ass: (
        "[gMASK]<sop>" + "".join(f"<|{r}|>\n{c}" for r, c in chat) + ("<|assistant|>\n" if add_ass else "")
    ),
    "glmedge": _each(lambda r, c: f"<|{r}|>\n{c}", "<|assistant|>"),
    "minicpm": _minicpm,
    "exaone3": _exaone(moe=False, roles=("system", "user", "assistant")),
    "exaone4": _exaone(moe=False, roles=("system", "user", "assistant", "tool")),
    "exaone-moe": _exaone(moe=True, roles=("system", "user", "assistant", "tool")),
    "rwkv-world": _rwkv_world,
    "granite": _each(_granite_3, "<|start_of_role|>assistant<|end_of_role|>"),
    "granite-4.0": _each(_granite_4, "<|start_of_role|>assistant<|end_of_role|>"),
    "granite-4.1": _each(_granite_4, "<|start_of_role|>assistant<|end_of_role|>"),
    "gigachat": _gigachat,
    "megrez": _each(
        lambda r, c: f"<|role_start|>{r}<|role_end|>{c}<|turn_end|>", "<|role_start|>assistant<|role_end|>"
    ),
    # "\n\n" is the model's EOT
    "yandex": _by_role(
        {"user": lambda c: f" Пользователь: {c}\n\n", "assistant": lambda c: f" Ассистент: {c}\n\n"},
        gen=" Ассистент:[SEP]",
    ),
    "bailing": _bailing(think=False),
    "bailing-think": _bailing(think=True),
    "bailing2": _bailing2,
    "llama4": _each(
        lambda r, c: f"<|header_start|>{r}<|header_end|>\n\n{_trim(c)}<|eot|>",
        "<|header_start|>assistant<|header_end|>\n\n",
    ),
    # SmolVLM uses <|im_start|> as BOS, but the content is NOT chatml
    "smolvlm": _by_role(
        {"system": lambda c: c + "\n\n", "user": lambda c: f"User: {c}<end_of_utterance>\n"},
        gen="Assistant:",
        other=lambda c: f"Assistant: {c}<end_of_utterance>\n",
        prefix="<|im_start|>",
    ),
    DOTS1: _by_role(
        {
            "system": lambda c: f"<|system|>{c}<|endofsystem|>",
            "user": lambda c: f"<|userprompt|>{c}<|endofuserprompt|>",
        },
        gen="<|response|>",
        other=lambda c: f"<|response|>{c}<|endofresponse|>",
    ),
    # tencent/Hunyuan-A13B-Instruct: no generation prompt
    "hunyuan-moe": _by_role(
        {"system": lambda c: f"<|startoftext|>{c}<|extra_4|>", "assistant": lambda c: c + "<|eos|>"},
        other=lambda c: f"<|startoftext|>{c}<|extra_0|>",
    ),
    # OpenAI MoE (Harmony)
    "gpt-oss": _each(
        lambda r, c: f"<|start|>{r}<|message|>{c}" + ("<|return|>" if r == "assistant" else "<|end|>"),
        "<|start|>assistant",
    ),
    "hunyuan-dense": _hunyuan_dense,
    "hunyuan-vl": _hunyuan_vl,
    "kimi-k2": _each(lambda r, c: _KIMI_HEADERS.get(r, "") + c + "<|im_end|>", _KIMI_HEADERS["assistant"]),
    "seed_oss": _each(
        lambda r, c: f"<seed:bos>{r}\n{_trim(c) if r == 'assistant' else c}<seed:eos>", "<seed:bos>assistant\n"
    ),
    "grok-2": _by_role(
        {
            "system": lambda c: f"System: {_trim(c)}<|separator|>\n\n",
            "user": lambda c: f"Human: {_trim(c)}<|separator|>\n\n",
            "assistant": lambda c: f"Assistant: {c}<|separator|>\n\n",
        },
        gen="Assistant:",
    ),
    "pangu-embedded": _pangu_embedded,
    "solar-open": _each(lambda r, c: f"<|begin|>{r}<|content|>{c}<|end|>", "<|begin|>assistant"),
}

_NAMES = frozenset(LEGACY_TEMPLATES)
assert len(LEGACY_TEMPLATES) == 54 and set(_FORMATTERS) == _NAMES | {DOTS1}
