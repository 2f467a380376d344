"""A chat-completions body turned into native completion parameters, as b10621's oaicompat_chat_params_parse()
does for a template without tool or reasoning syntax of its own (the content-only path of its autoparser).

The result is the body b10621 hands to its native schema: the rendered prompt, stop list, grammar, the
chat echo fields (chat_format, generation_prompt), with every other request field copied through.
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass, field

from ..errors import ErrorKind, UpstreamError
from ..grammar.json_schema import json_schema_to_grammar
from .caps import template_caps
from .messages import _concat_parts as _concat_text
from .messages import apply_workarounds, normalize, parse_messages, to_template_json
from .template import TemplateError, render

log = logging.getLogger("mlxcel.chat")

PEG_NATIVE = 2  # common_chat_format index b10621 reports for templates its autoparser handles

# The JSON rules b10621's PEG grammar builder always emits next to a response-format schema
_JSON_RULES = {
    "json-array": '"[" space ("]" | json-value (space "," space json-value)* space "]")',
    "json-bool": '"true" | "false"',
    "json-null": '"null"',
    "json-number": '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?',
    "json-object": '"{" space ("}" | json-string space ":" space json-value (space "," space json-string space ":" '
                   'space json-value)* space "}")',
    "json-string": '"\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""',
    "json-value": "json-object | json-array | json-string | json-number | json-bool | json-null",
}


def _bad(message: str) -> UpstreamError:
    """std::invalid_argument upstream: a 400."""
    return UpstreamError(message, ErrorKind.INVALID_REQUEST)


def _fails(message: str) -> UpstreamError:
    """std::runtime_error upstream: ex_wrapper answers it as a 500 server error."""
    return UpstreamError(message, ErrorKind.SERVER)


@dataclass(frozen=True)
class ChatSettings:
    """The server's chat configuration (b10621's server_chat_params)."""

    template: str
    bos_token: str = ""
    eos_token: str = ""
    use_jinja: bool = True
    prefill_assistant: bool = True
    reasoning_format: str = "deepseek"
    enable_thinking: bool = True
    template_kwargs: dict = field(default_factory=dict)  # --chat-template-kwargs, values as JSON text
    skip_chat_parsing: bool = False  # --skip-chat-parsing: b10621's forced pure-content template path
    reasoning_budget: int = -1  # --reasoning-budget
    reasoning_budget_message: str = ""  # --reasoning-budget-message

    @property
    def caps(self) -> dict[str, bool]:
        return _caps(self.template)


_CAPS: dict[str, dict[str, bool]] = {}


def _caps(source: str) -> dict[str, bool]:
    if source not in _CAPS:
        _CAPS[source] = template_caps(source)
    return _CAPS[source]


def _gbnf_literal(text: str) -> str:
    out = []
    for ch in text:
        out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}.get(ch, ch))
    return '"' + "".join(out) + '"'


def response_format_grammar(schema: dict, generation_prompt: str) -> str:
    """The grammar b10621's autoparser builds for a response-format schema: the generation prompt, then the
    JSON, bare or in a ```json fence, the schema's rules under response-format-schema."""
    rules: dict[str, str] = dict(_JSON_RULES)
    for line in json_schema_to_grammar(schema, "response-format-schema").splitlines():
        if " ::= " in line:
            name, body = line.split(" ::= ", 1)
            rules[name] = body
    rules["response-format"] = "response-format-schema"
    rules["root"] = (f"{_gbnf_literal(generation_prompt)} space space (\"```json\" space response-format space "
                     f"\"```\" | space response-format space)")
    return "".join(f"{name} ::= {rules[name]}\n" for name in sorted(rules, key=lambda n: n.encode()))


def _context(settings: ChatSettings, kwargs: dict, enable_thinking: bool) -> dict:
    now = datetime.datetime.now()
    ctx = {"bos_token": settings.bos_token, "eos_token": settings.eos_token, "enable_thinking": enable_thinking,
           "datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}
    ctx.update(kwargs)
    return ctx


def _render(settings: ChatSettings, messages: list[dict], add_generation_prompt: bool, ctx: dict,
            tools: list | None) -> str:
    try:
        out = render(settings.template, messages, add_generation_prompt=add_generation_prompt, tools=tools, **ctx)
    except TemplateError as e:
        raise _fails(str(e)) from None
    return out


def _value(body: dict, key: str, default):
    """json_value(): a missing or null key is the default."""
    v = body.get(key)
    return default if v is None else v


@dataclass(frozen=True)
class ChatInfo:
    """What the response side needs to read the model's output back (b10621's chat parser inputs)."""

    generation_prompt: str = ""
    continuation: str = ""  # a continued assistant message's text: the answer's content starts with it
    response_format: bool = False  # a response-format grammar: the content is the JSON it lets through
    # the body's own continue_final_message (not a prefill the server inferred): b10621 then keeps the
    # continued text out of the streamed deltas unless the body also asks for echo
    is_continuation: bool = False
    echo: bool = False


def continuation_mode(value) -> str:
    """common_chat_continuation_parse(): "auto", "content", "reasoning", or "" for none."""
    if value is True:
        return "auto"
    return {"reasoning_content": "reasoning", "content": "content"}.get(value, "") if isinstance(value, str) else ""


def chat_params(body: dict, settings: ChatSettings) -> dict:
    """oaicompat_chat_params_parse(): the native completion body for a chat-completions body."""
    return chat_request(body, settings)[0]


def chat_request(body: dict, settings: ChatSettings) -> tuple[dict, ChatInfo]:
    """The native completion body for a chat-completions body, and how to read the answer back."""
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and bool(tools)
    tool_choice = _value(body, "tool_choice", "auto")
    if not settings.use_jinja:
        if has_tools:
            raise _fails("tools param requires --jinja flag")
        if tool_choice != "auto":
            raise _fails("tool_choice param requires --jinja flag")
    out: dict = {}
    stop = body.get("stop")
    out["stop"] = [stop] if isinstance(stop, str) else _value(body, "stop", [])

    json_schema = body.get("json_schema")
    grammar = _value(body, "grammar", "")
    if json_schema is not None and grammar:
        raise _fails("Cannot use both json_schema and grammar")
    if "response_format" in body:
        fmt = _value(body, "response_format", {})
        kind = _value(fmt, "type", "") if isinstance(fmt, dict) else ""
        if kind == "json_object":
            if "schema" in fmt or not json_schema:
                json_schema = _value(fmt, "schema", {})
        elif kind == "json_schema":
            wrapper = _value(fmt, "json_schema", {})
            json_schema = _value(wrapper, "schema", {}) if isinstance(wrapper, dict) else {}
        elif kind and kind != "text":
            raise _bad(f'response_format type must be one of "text" or "json_object", but got: {kind}')

    if "messages" not in body:
        raise _bad("'messages' is required")
    raw = body["messages"]
    if not isinstance(raw, list):
        raise _bad("Expected 'messages' to be an array")
    for m in raw:
        role = _value(m, "role", "") if isinstance(m, dict) else ""
        if role != "assistant" and not (isinstance(m, dict) and "content" in m):
            raise _bad("All non-assistant messages must contain 'content'")
        if role == "assistant" and "content" not in m and "tool_calls" not in m:
            raise _bad("Assistant message must contain either 'content' or 'tool_calls'!")
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for part in content:
                kind = _value(part, "type", "") if isinstance(part, dict) else ""
                if kind in ("image_url", "input_audio", "input_video"):
                    what = {"image_url": "image", "input_audio": "audio", "input_video": "video"}[kind]
                    raise _fails(f"{what} input is not supported - hint: if this is unexpected, you may "
                                           "need to provide the mmproj")
                if kind != "text":
                    raise _bad("unsupported content[].type")
        elif content is not None and not isinstance(content, str):
            raise _bad("Expected 'content' to be a string or an array")

    try:
        messages = parse_messages(raw)
    except ValueError as e:
        raise _fails(str(e)) from None

    add_generation_prompt = bool(_value(body, "add_generation_prompt", True))
    continuing = False
    if "continue_final_message" in body:
        continuing = bool(continuation_mode(body["continue_final_message"]))
    if not continuing and settings.prefill_assistant and messages and messages[-1].role == "assistant":
        if len(messages) >= 2 and messages[-2].role == "assistant":
            raise _bad("Cannot have 2 or more assistant messages at the end of the list.")
        continuing, add_generation_prompt = True, False
    if continuing and add_generation_prompt:
        raise _bad("Cannot set both add_generation_prompt and continue_final_message to true.")

    kwargs = {k: json.loads(v) for k, v in settings.template_kwargs.items()}
    request_kwargs = _value(body, "chat_template_kwargs", {})
    if isinstance(request_kwargs, dict):
        kwargs.update(request_kwargs)
    enable_thinking = settings.enable_thinking
    if kwargs.get("enable_thinking") is True:
        enable_thinking = True
    elif kwargs.get("enable_thinking") is False:
        enable_thinking = False
    elif isinstance(kwargs.get("enable_thinking"), str):
        raise _bad('invalid type for "enable_thinking" (expected boolean, got string)')
    effort = body.get("reasoning_effort")
    if isinstance(effort, str) and effort:
        if effort == "none":
            enable_thinking = False
            kwargs.pop("reasoning_effort", None)
        else:
            kwargs["reasoning_effort"] = effort

    caps = settings.caps
    if has_tools and tool_choice != "none" and caps["supports_tool_calls"]:
        # never silently: b10621's autoparser would turn this template's tool-call syntax into tool_calls
        log.warning("chat: the template writes tool calls, but mlxcel does not parse them into tool_calls yet; "
                    "they stay in the message content")
    rendered = [to_template_json(m) for m in messages]
    continue_msg = None
    if continuing and rendered:
        continue_msg, rendered = messages[-1], rendered[:-1]
    rendered = normalize(apply_workarounds(rendered, caps, settings.template), caps)
    ctx = _context(settings, kwargs, enable_thinking)
    tool_list = tools if has_tools else None
    no_prompt = _render(settings, rendered, False, ctx, tool_list)
    with_prompt = _render(settings, rendered, True, ctx, tool_list)
    n = 0
    while n < min(len(no_prompt), len(with_prompt)) and no_prompt[n] == with_prompt[n]:
        n += 1
    generation_prompt = with_prompt[n:]
    continuation = ""
    if settings.skip_chat_parsing:  # force_pure_content: the plain render, no continuation, no format grammar
        prompt = with_prompt if add_generation_prompt and continue_msg is None else no_prompt
        json_schema = None
    elif continue_msg is not None:
        continuation = continue_msg.content or _concat_text(continue_msg.content_parts)
        prompt = with_prompt + continuation
    else:
        prompt = with_prompt if add_generation_prompt else no_prompt

    out["chat_format"] = PEG_NATIVE
    out["prompt"] = prompt
    if json_schema:  # an empty schema (json_object without one) adds no response-format grammar
        try:
            out["grammar"] = response_format_grammar(json_schema, generation_prompt)
        except ValueError as e:
            raise _bad(f'"json_schema": {e}') from None
        out["grammar_type"] = "tool_calls"
    out["grammar_lazy"] = False
    out["grammar_triggers"] = []
    out["preserved_tokens"] = []
    out["generation_prompt"] = generation_prompt

    if _value(body, "logprobs", False):
        out["n_probs"] = _value(body, "top_logprobs", 20)
    elif body.get("top_logprobs") is not None:
        raise _bad("top_logprobs requires logprobs to be set to true")
    for key, value in body.items():  # llama.cpp-specific fields pass through; n_predict beats max_tokens
        if key not in out or key == "n_predict":
            out[key] = value
    explicit = continuation_mode(body.get("continue_final_message")) if "continue_final_message" in body else ""
    return out, ChatInfo(generation_prompt, continuation, "grammar_type" in out and "grammar" in out
                         and out.get("grammar_type") == "tool_calls", is_continuation=bool(explicit),
                         echo=body.get("echo") is True)
