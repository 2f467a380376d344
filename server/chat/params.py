"""A chat-completions body turned into native completion parameters, as b10621's oaicompat_chat_params_parse()
does: the messages, tools and options checked in its order and wording, then the template analysed by the
autoparser (server/chat/autoparser/) for the prompt, the grammar and the parser that reads the answer back.

The result is the body b10621 hands to its native schema: the rendered prompt, stop list, grammar and
triggers, the reasoning-budget fields, the chat echo fields (chat_format, generation_prompt), with every
other request field copied through; and the ChatInfo the response side parses the output with.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from dataclasses import dataclass, field

from ..errors import ErrorKind, UpstreamError
from ..grammar.json_schema import SchemaInvalid, json_schema_to_grammar
from ..peg import PegArena
from .autoparser import ChatParams, GenerationParams, generate_chat_params, pure_content_params
from .autoparser.helpers import trim_whitespace
from .caps import template_caps
from .formats import CHAT_FORMATS, REASONING_FORMATS
from .legacy import apply_legacy, legacy_content
from .messages import ChatMsg, apply_workarounds, dump, normalize, parse_messages, to_template_json
from .template import TemplateError

log = logging.getLogger("mlxcel.chat")


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
    add_bos: bool = False  # the vocabulary adds BOS itself: a rendered leading BOS is dropped
    add_eos: bool = False
    allow_image: bool = False  # a projector is loaded (--mmproj): image parts become media markers
    allow_audio: bool = False  # an audio projector is loaded: input_audio parts become media markers
    media_marker: str = ""  # the process's marker (build.media_marker())

    @property
    def caps(self) -> dict[str, bool]:
        return _caps(self.template)


_CAPS: dict[str, dict[str, bool]] = {}


def _caps(source: str) -> dict[str, bool]:
    if source not in _CAPS:
        _CAPS[source] = template_caps(source)
    return _CAPS[source]


def _context(settings: ChatSettings, kwargs: dict) -> dict:
    """common_chat_extra_context() and the template kwargs; the BOS/EOS strings the template may use."""
    now = datetime.datetime.now()
    ctx = {
        "bos_token": settings.bos_token,
        "eos_token": settings.eos_token,
        "datetime": now.strftime("%b %d %Y"),
        "date_string": now.strftime("%d %b %Y"),
    }
    ctx.update(kwargs)
    return ctx


def _value(body: dict, key: str, default):
    """json_value(): a missing or null key is the default."""
    v = body.get(key)
    return default if v is None else v


def _tools(body: dict) -> list | None:
    """common_chat_tools_parse_oaicompat() then common_chat_tools_to_json_oaicompat(): each tool as the
    template sees it (description "" when absent); None for no tools."""
    tools = body.get("tools")
    if tools is None:
        return None
    try:
        if not isinstance(tools, list):
            raise ValueError(f"Expected 'tools' to be an array, got {dump(tools)}")  # noqa: TRY004
        out = []
        for tool in tools:
            if not isinstance(tool, dict) or "type" not in tool:
                raise ValueError(f"Missing tool type: {dump(tool)}")
            if tool["type"] != "function":
                raise ValueError(f"Unsupported tool type: {dump(tool)}")
            if "function" not in tool:
                raise ValueError(f"Missing tool function: {dump(tool)}")
            fn = tool["function"]
            if not isinstance(fn, dict) or "name" not in fn:
                raise ValueError("[json.exception.out_of_range.403] key 'name' not found")
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": fn["name"],
                        "description": fn.get("description", ""),
                        "parameters": fn.get("parameters", {}),
                    },
                }
            )
    except ValueError as e:
        pretty = json.dumps(tools, indent=2, ensure_ascii=False)
        raise _fails(f"Failed to parse tools: {e}; tools = {pretty}") from None
    return out or None


@dataclass(frozen=True)
class ChatInfo:
    """What the response side needs to read the model's output back (b10621's chat parser inputs)."""

    generation_prompt: str = ""  # what the parser reads before the output (a continued message included)
    parser: PegArena | None = None  # b10621's chat parser for this request; None: content only
    fmt: str = "peg-native"
    # the body's own continue_final_message (not a prefill the server inferred): b10621 then keeps the
    # continued text out of the streamed deltas unless the body also asks for echo
    is_continuation: bool = False
    echo: bool = False
    # the media parts' URLs, in the order of the prompt's media markers, each with whether a data: URI is taken
    # (handle_media's accept_base64_uri: image parts yes, audio parts no: their data is bare base64)
    media: tuple[tuple[str, bool], ...] = ()


def continuation_mode(value) -> str:
    """common_chat_continuation_parse(): "auto", "content", "reasoning", or "" for none."""
    if value is True:
        return "auto"
    return {"reasoning_content": "reasoning", "content": "content"}.get(value, "") if isinstance(value, str) else ""


def chat_params(body: dict, settings: ChatSettings) -> dict:
    """oaicompat_chat_params_parse(): the native completion body for a chat-completions body."""
    return chat_request(body, settings)[0]


def chat_request(body: dict, settings: ChatSettings) -> tuple[dict, ChatInfo]:  # noqa: C901
    """The native completion body for a chat-completions body, and how to read the answer back."""
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and bool(tools)
    tool_choice = _value(body, "tool_choice", "auto")
    if not isinstance(tool_choice, str):  # json_value(): a wrong type is the default (an object form included)
        tool_choice = "auto"
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
    media: list[tuple[str, bool]] = []  # the media parts' URLs, in order (b10621's out_files)
    if settings.allow_image or settings.allow_audio:  # (parts are rewritten: the caller's body stays as it came)
        raw = [
            {**m, "content": list(m["content"])} if isinstance(m, dict) and isinstance(m.get("content"), list) else m
            for m in raw
        ]
    for m in raw:
        role = _value(m, "role", "") if isinstance(m, dict) else ""
        if role != "assistant" and not (isinstance(m, dict) and "content" in m):
            raise _bad("All non-assistant messages must contain 'content'")
        if role == "assistant" and "content" not in m and "tool_calls" not in m:
            raise _bad("Assistant message must contain either 'content' or 'tool_calls'!")
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for i, part in enumerate(content):
                kind = _value(part, "type", "") if isinstance(part, dict) else ""
                if kind == "image_url" and settings.allow_image:  # the part becomes the marker; the URL is read
                    image_url = _value(part, "image_url", {})
                    media.append((_value(image_url, "url", "") if isinstance(image_url, dict) else "", True))
                    content[i] = {"type": "media_marker", "text": settings.media_marker}
                    continue
                if kind == "input_audio" and settings.allow_audio:  # its data (or url), bare base64 or a URL
                    audio = _value(part, "input_audio", {})
                    audio = audio if isinstance(audio, dict) else {}
                    media.append((_value(audio, "data", _value(audio, "url", "")), False))
                    content[i] = {"type": "media_marker", "text": settings.media_marker}
                    continue
                if kind in ("image_url", "input_audio", "input_video"):
                    what = {"image_url": "image", "input_audio": "audio", "input_video": "video"}[kind]
                    raise _fails(
                        f"{what} input is not supported - hint: if this is unexpected, you may "
                        "need to provide the mmproj"
                    )
                if kind != "text":
                    raise _bad("unsupported content[].type")
        elif content is not None and not isinstance(content, str):
            raise _bad("Expected 'content' to be a string or an array")

    caps = settings.caps
    try:
        messages = parse_messages(raw)
    except ValueError as e:
        raise _fails(str(e)) from None
    tool_list = _tools(body)
    if tool_choice not in ("auto", "none", "required"):
        raise _bad(f"Invalid tool_choice: {tool_choice}")
    parallel = _value(body, "parallel_tool_calls", caps["supports_parallel_tool_calls"])

    add_generation_prompt = bool(_value(body, "add_generation_prompt", True))
    mode = continuation_mode(body["continue_final_message"]) if "continue_final_message" in body else ""
    if not mode and settings.prefill_assistant and messages and messages[-1].role == "assistant":
        if len(messages) >= 2 and messages[-2].role == "assistant":
            raise _bad("Cannot have 2 or more assistant messages at the end of the list.")
        mode, add_generation_prompt = "auto", False
    if mode and add_generation_prompt:
        raise _bad("Cannot set both add_generation_prompt and continue_final_message to true.")
    reasoning_format = settings.reasoning_format
    if "reasoning_format" in body:
        reasoning_format = body["reasoning_format"] if isinstance(body["reasoning_format"], str) else ""
        if reasoning_format not in REASONING_FORMATS:
            raise _bad(f"Unknown reasoning format: {reasoning_format}")
    if tool_list and tool_choice != "none" and "grammar" in body:
        raise _bad("Cannot use custom grammar constraints with tools.")

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

    # render_message_to_json(): typed content flattened (or wrapped) for the template before any workaround
    rendered = normalize(
        [to_template_json(m) for m in (_trimmed(messages) if STEPFUN_MARKER in settings.template else messages)], caps
    )
    continue_msg = None
    if mode and rendered:
        continue_msg, rendered = messages[-1], rendered[:-1]
    rendered = apply_workarounds(rendered, caps, settings.template)
    inputs = GenerationParams(
        messages=rendered,
        tools=tool_list,
        tool_choice=tool_choice,
        json_schema=json_schema if isinstance(json_schema, dict) else None,
        parallel_tool_calls=bool(parallel),
        reasoning_format=reasoning_format,
        grammar=grammar if isinstance(grammar, str) else "",
        add_generation_prompt=add_generation_prompt and not mode,
        continue_final_message=mode or "none",
        continue_msg=continue_msg,
        enable_thinking=enable_thinking,
        extra_context=_context(settings, kwargs),
        add_bos=settings.add_bos,
        add_eos=settings.add_eos,
    )
    try:
        if not settings.use_jinja:
            params = legacy_params(settings.template, messages, add_generation_prompt, json_schema, grammar)
        elif settings.skip_chat_parsing:
            params = pure_content_params(settings.template, inputs)
        else:
            params = generate_chat_params(settings.template, inputs)
    except TemplateError as e:
        raise _fails(str(e)) from None
    except RuntimeError as e:  # "Cannot specify grammar with tools": std::runtime_error upstream
        raise _fails(str(e)) from None
    except ValueError as e:  # std::invalid_argument: a 400
        raise _bad(str(e)) from None

    out["chat_format"] = CHAT_FORMATS.index(params.format)
    out["prompt"] = params.prompt
    if params.grammar:
        out["grammar"] = params.grammar
        out["grammar_type"] = "tool_calls"
    out["grammar_lazy"] = params.grammar_lazy
    out["grammar_triggers"] = [{"type": kind, "value": value} for kind, value in params.grammar_triggers]
    out["preserved_tokens"] = list(params.preserved_tokens)
    out["generation_prompt"] = params.generation_prompt
    delimiters = getattr(params, "message_delimiters", None) or {}
    out["message_delimiters"] = [{"role": role, "delimiter": text} for role, text in delimiters.items()]
    out["stop"] = list(out["stop"]) + list(params.additional_stops) if params.additional_stops else out["stop"]
    if tool_list and tool_choice != "none":
        out["parse_tool_calls"] = True
    if params.thinking_end_tags:
        out.update(reasoning_budget_fields(body, params, settings))

    if _value(body, "logprobs", False):
        if tool_list and body.get("stream") is True:
            raise _bad("logprobs is not supported with tools + stream")
        out["n_probs"] = _value(body, "top_logprobs", 20)
    elif body.get("top_logprobs") is not None:
        raise _bad("top_logprobs requires logprobs to be set to true")
    for key, value in body.items():  # llama.cpp-specific fields pass through; n_predict beats max_tokens
        if key not in out or key == "n_predict":
            out[key] = value
    return out, ChatInfo(
        params.generation_prompt,
        params.parser,
        params.format,
        is_continuation="continue_final_message" in body and bool(continuation_mode(body["continue_final_message"])),
        echo=body.get("echo") is True,
        media=tuple(media),
    )


# StepFun's templates: b10621 trims every message's text before rendering (stray whitespace drives the model
# into reasoning loops, llama.cpp #24181); the continued message keeps its own
STEPFUN_MARKER = "You have access to the following functions in JSONSchema format"


def _trimmed(messages: list[ChatMsg]) -> list[ChatMsg]:
    """workaround::trim_all_content."""
    return [
        dataclasses.replace(
            m,
            content=trim_whitespace(m.content),
            reasoning_content=trim_whitespace(m.reasoning_content),
            content_parts=[(k, trim_whitespace(t) if k == "text" else t) for k, t in m.content_parts],
        )
        for m in messages
    ]


def legacy_params(template: str, messages: list, add_generation_prompt: bool, json_schema, grammar) -> ChatParams:
    """common_chat_templates_apply_legacy() (--no-jinja): the built-in formatting of every message's text
    (a trailing assistant turn stays closed), the response-format schema or the body's grammar, the
    content-only parser. An unformattable template is its std::runtime_error."""
    turns = [(m.role, legacy_content(m.content, m.content_parts)) for m in messages]
    try:
        prompt = apply_legacy(template, turns, add_generation_prompt)
    except ValueError as e:
        raise _fails(str(e)) from None
    if json_schema is not None:  # any schema, {} included: json_schema_to_grammar() of it
        try:
            grammar = json_schema_to_grammar(json_schema)
        except SchemaInvalid as e:  # std::invalid_argument: ex_wrapper's 400
            raise _bad(str(e)) from None
        except ValueError as e:
            raise _fails(str(e)) from None
    return ChatParams(prompt=prompt, format=CHAT_FORMATS[0], grammar=grammar if isinstance(grammar, str) else "")


def reasoning_budget_fields(body: dict, params: ChatParams, settings: ChatSettings) -> dict:
    """The reasoning-budget task fields oaicompat_chat_params_parse sets from the template's thinking tags
    (they override the body's own)."""

    def as_int(v, default: int) -> int:
        return int(v) if isinstance(v, int | float) else default

    budget = as_int(body.get("reasoning_budget_tokens"), as_int(body.get("thinking_budget_tokens"), -1))
    if budget == -1:
        budget = settings.reasoning_budget
    message, control = body.get("reasoning_budget_message"), body.get("reasoning_control")
    return {
        "reasoning_budget_tokens": budget,
        "reasoning_budget_start_tag": params.thinking_start_tag,
        "reasoning_budget_end_tags": list(params.thinking_end_tags),
        "reasoning_budget_message": message if isinstance(message, str) else settings.reasoning_budget_message,
        "reasoning_control": control if isinstance(control, bool) else False,
    }
