"""String helpers of b10621's differential autoparser (common/chat-auto-parser-helpers.{h,cpp}): whitespace
trimming, marker segmentation, the marker-aware diff of two renders, and the template renders it compares.
Also what the autoparser's generator and the specialized handlers (server/chat/specialized) share from
common/chat.cpp: a request's renders, foreach_function, common_chat_msg::render_content and
common_schema_info::resolves_to_string.

b10621 works on UTF-8 bytes and std::isspace; these work on str with the same ASCII whitespace set, which
gives the same substrings.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from ..caps import template_caps
from ..messages import ChatMsg, normalize
from ..template import TemplateError, render

if TYPE_CHECKING:
    from .generator import GenerationParams

WHITESPACE = " \t\n\v\f\r"  # std::isspace in the C locale


def trim_whitespace(s: str) -> str:
    return s.strip(WHITESPACE)


def trim_leading_whitespace(s: str) -> str:
    return s.lstrip(WHITESPACE)


def trim_trailing_whitespace(s: str) -> str:
    return s.rstrip(WHITESPACE)


def trim_trailing_newlines(s: str) -> str:
    return s.rstrip("\n")


class SegmentType(Enum):
    TEXT = "TEXT"
    MARKER = "MARKER"


@dataclass(frozen=True)
class Segment:
    type: SegmentType
    value: str


@dataclass
class DiffSplit:
    prefix: str = ""
    suffix: str = ""
    left: str = ""
    right: str = ""


def segmentize_markers(text: str) -> list[Segment]:
    """Text cut into markers (<...> or [...]) and the text between them."""
    out: list[Segment] = []
    opener = ""
    last = 0
    for pos, ch in enumerate(text):
        if not opener and ch in "<[":
            if last < pos:
                out.append(Segment(SegmentType.TEXT, text[last:pos]))
            last, opener = pos, ch
        elif opener and ch == (">" if opener == "<" else "]"):
            out.append(Segment(SegmentType.MARKER, text[last : pos + 1]))
            last, opener = pos + 1, ""
    if last < len(text):
        out.append(Segment(SegmentType.TEXT, text[last:]))
    return out


def prune_whitespace_segments(segments: list[Segment]) -> list[Segment]:
    return [s for s in segments if trim_whitespace(s.value)]


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        n += 1
    return n


def _match_lone_segment(
    lone: Segment, other: list[Segment], first: int, last: int, result: DiffSplit
) -> tuple[int, int, bool]:
    """One side is down to one segment: when it is the other side's last unconsumed segment, that one joins
    the suffix, else when it is the other side's first, the prefix. The other side's new range, and whether
    the lone segment was matched."""
    if lone == other[last]:
        result.suffix = other[last].value + result.suffix
        return first, last - 1, True
    if lone == other[first]:
        result.prefix += other[first].value
        return first + 1, last, True
    return first, last, False


def calculate_diff_split(left: str, right: str) -> DiffSplit:  # noqa: C901
    """The common prefix and suffix of two strings and what differs between them, cut on marker boundaries
    where the difference starts or ends inside a marker."""
    result = DiffSplit()
    ls, rs = segmentize_markers(left), segmentize_markers(right)
    if not ls:
        result.right = right
        return result
    if not rs:
        result.left = left
        return result

    # indices of the first and last unconsumed segment on each side (the C++ iterators)
    l0, l1, r0, r1 = 0, len(ls) - 1, 0, len(rs) - 1
    left_done = right_done = False
    while l0 != l1 and r0 != r1:
        advanced = False
        if ls[l0] == rs[r0]:
            result.prefix += ls[l0].value
            l0 += 1
            r0 += 1
            advanced = True
        if ls[l1] == rs[r1]:
            result.suffix = ls[l1].value + result.suffix
            if l0 != l1:
                l1 -= 1
            else:
                left_done = True
            if r0 != r1:
                r1 -= 1
            else:
                right_done = True
            advanced = True
        if not advanced:
            break

    if l0 == l1 and r0 != r1:
        r0, r1, matched = _match_lone_segment(ls[l0], rs, r0, r1, result)
        left_done = left_done or matched
    elif r0 == r1 and l0 != l1:
        l0, l1, matched = _match_lone_segment(rs[r0], ls, l0, l1, result)
        right_done = right_done or matched
    elif l0 == l1 and r0 == r1 and ls[l0] == rs[r0] and ls[l0].type == SegmentType.MARKER:
        result.prefix += rs[r0].value
        left_done = right_done = True

    # C++ dereferences these iterators even when they were stepped past the first segment
    can_text_suffix = ls[l1].type == SegmentType.TEXT and rs[r1].type == SegmentType.TEXT
    can_text_prefix = rs[r0].type == SegmentType.TEXT and ls[l0].type == SegmentType.TEXT

    rem_left = "".join(s.value for s in ls[l0 : l1 if left_done else l1 + 1])
    rem_right = "".join(s.value for s in rs[r0 : r1 if right_done else r1 + 1])

    suffix_len = _common_suffix_len(rem_left, rem_right) if can_text_suffix else 0
    # the prefix may not overlap the suffix
    prefix_len = (
        _common_prefix_len(rem_left[: len(rem_left) - suffix_len], rem_right[: len(rem_right) - suffix_len])
        if can_text_prefix
        else 0
    )

    result.prefix += rem_left[:prefix_len]
    result.suffix = rem_left[len(rem_left) - suffix_len :] + result.suffix
    result.left = rem_left[prefix_len : len(rem_left) - suffix_len]
    result.right = rem_right[prefix_len : len(rem_right) - suffix_len]

    if not result.left and not result.right:  # no difference: all of it is the prefix
        result.prefix, result.suffix = left, ""

    # left wholly contained at the start of right: the segment matching above can rotate trailing text of left
    # into the suffix; the plain split is the right one
    if not result.left and result.right and right.startswith(left):
        result.prefix, result.suffix, result.right = left, "", right[len(left) :]
    return result


def until_common_prefix(full: str, left: str, right: str) -> str:
    """`full` up to the first occurrence of the common prefix of `left` and `right` ("" when there is none)."""
    n = _common_prefix_len(left, right)
    if n == 0:
        return ""
    pos = full.find(left[:n])
    return "" if pos < 0 else full[:pos]


def after_common_suffix(full: str, left: str, right: str) -> str:
    """`full` after the last occurrence of the common suffix of `left` and `right` ("" when there is none)."""
    n = _common_suffix_len(left, right)
    if n == 0:
        return ""
    suffix = left[len(left) - n :]
    pos = full.rfind(suffix)
    return "" if pos < 0 else full[pos + n :]


# ---------------------------------------------------------------------------------------------------------------
# Rendering


@dataclass
class Template:
    """What b10621's common_chat_template carries: the source, its BOS/EOS strings and its capabilities."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    caps: dict[str, bool] = field(default_factory=dict)


def direct_apply(
    tmpl: Template,
    messages: list,
    tools: list | None,
    add_generation_prompt: bool,
    enable_thinking: bool,
    extra_context: dict | None = None,
    add_bos: bool = False,
    add_eos: bool = False,
    normalize_messages: bool = True,
) -> str:
    """common_chat_template_direct_apply_impl(): the template rendered with b10621's context variables
    (the extra context overrides them). `normalize_messages` False: the messages are a messages override,
    already in the template's shape, handed over as they are. Raises TemplateError when the template fails."""
    if normalize_messages:
        messages = normalize(messages, tmpl.caps or template_caps(tmpl.source))
    ctx: dict = {
        "messages": messages,
        "bos_token": tmpl.bos_token,
        "eos_token": tmpl.eos_token,
        "enable_thinking": enable_thinking,
    }
    if tools:
        ctx["tools"] = tools
    ctx.update(extra_context or {})
    if add_generation_prompt:
        ctx["add_generation_prompt"] = True
    preserve = ctx.get("preserve_reasoning")
    if isinstance(preserve, bool):  # jinja::caps_apply_preserve_reasoning
        ctx.update(
            preserve_thinking=preserve,
            clear_thinking=not preserve,
            truncate_history_thinking=not preserve,
            drop_thinking=not preserve,
        )
    effort = ctx.get("reasoning_effort")
    if isinstance(effort, str) and effort:  # jinja::caps_apply_reasoning_effort
        ctx["reasoning_strength"] = effort
    out = render(
        tmpl.source,
        ctx.pop("messages"),
        add_generation_prompt=ctx.pop("add_generation_prompt", False),
        tools=ctx.pop("tools", None),
        **ctx,
    )
    # the tokenizer adds BOS/EOS itself: not twice
    if add_bos and tmpl.bos_token and out.startswith(tmpl.bos_token):
        out = out[len(tmpl.bos_token) :]
    if add_eos and tmpl.eos_token and out.endswith(tmpl.eos_token):
        out = out[: len(out) - len(tmpl.eos_token)]
    return out


def generation_prompt(
    tmpl: Template,
    messages: list,
    tools: list | None,
    enable_thinking: bool,
    extra_context: dict | None = None,
    add_bos: bool = False,
    add_eos: bool = False,
    normalize_messages: bool = True,
) -> str:
    """common_chat_template_generation_prompt(): what add_generation_prompt appends to the render."""
    args = (enable_thinking, extra_context, add_bos, add_eos, normalize_messages)
    without = direct_apply(tmpl, messages, tools, False, *args)
    with_prompt = direct_apply(tmpl, messages, tools, True, *args)
    return with_prompt[_common_prefix_len(without, with_prompt) :]


def _request_render(inputs: GenerationParams, messages: list | None, additional_context: dict | None) -> dict:
    """The render arguments of a request: its messages, or a messages override (as it is), and its extra
    context with `additional_context` over it."""
    return {
        "messages": inputs.messages if messages is None else messages,
        "tools": inputs.tools,
        "enable_thinking": inputs.enable_thinking,
        "extra_context": {**(inputs.extra_context or {}), **(additional_context or {})},
        "add_bos": inputs.add_bos,
        "add_eos": inputs.add_eos,
        "normalize_messages": messages is None,
    }


def apply(
    tmpl: Template, inputs: GenerationParams, messages: list | None = None, additional_context: dict | None = None
) -> str:
    """common_chat_template_direct_apply_impl(tmpl, inputs, messages_override, additional_context): the
    request rendered with its own add_generation_prompt."""
    return direct_apply(
        tmpl,
        add_generation_prompt=inputs.add_generation_prompt,
        **_request_render(inputs, messages, additional_context),
    )


def generation_prompt_of(
    tmpl: Template, inputs: GenerationParams, messages: list | None = None, additional_context: dict | None = None
) -> str:
    """common_chat_template_generation_prompt_impl(): what add_generation_prompt appends to the request's
    render."""
    return generation_prompt(tmpl, **_request_render(inputs, messages, additional_context))


@dataclass
class TemplateParams:
    """template_params: one synthetic render of the analysis."""

    messages: list = field(default_factory=list)
    tools: list | None = None
    add_generation_prompt: bool = False
    enable_thinking: bool = True
    extra_context: dict | None = None


ERR_TMPL = "#**ERROR**#"  # b10621's marker for a failed render


def apply_template(tmpl: Template, params: TemplateParams) -> str:
    extra = dict(params.extra_context or {})
    extra["enable_thinking"] = params.enable_thinking
    try:
        return direct_apply(
            tmpl, params.messages, params.tools, params.add_generation_prompt, params.enable_thinking, extra
        )
    except TemplateError:
        return ERR_TMPL


@dataclass
class CompareVariantsResult:
    diff: DiffSplit
    output_A: str  # upstream's field names
    output_B: str


def compare_variants(
    tmpl: Template, params_a: TemplateParams, modifier: Callable[[TemplateParams], None] | None
) -> CompareVariantsResult | None:
    """Render params_a and a modified copy of it; their diff, or None when either render fails."""
    params_b = copy.deepcopy(params_a)
    if modifier is not None:
        modifier(params_b)
    out_a = apply_template(tmpl, params_a)
    out_b = apply_template(tmpl, params_b)
    if out_a == ERR_TMPL or out_b == ERR_TMPL:
        return None
    return CompareVariantsResult(calculate_diff_split(out_a, out_b), out_a, out_b)


# ---------------------------------------------------------------------------------------------------------------
# Messages, tools and schemas


def render_content(msg: ChatMsg) -> str:
    """common_chat_msg::render_content(): the content, or its text parts joined by blank lines."""
    if msg.content and msg.content_parts:
        raise RuntimeError("Cannot specify both content and content_parts")
    if msg.content:
        return msg.content
    return "\n\n".join(text for kind, text in msg.content_parts if kind == "text")


def functions(tools: list | None) -> list[dict]:
    """foreach_function(): the `function` objects of the tools of type "function"."""
    return [
        t["function"] for t in tools or [] if isinstance(t, dict) and t.get("type") == "function" and "function" in t
    ]


def parameters(function: dict) -> list[tuple[str, object, bool]]:
    """foreach_parameter(): (name, schema, required) of each property, in the schema's order."""
    params = function.get("parameters")
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return []
    required = params.get("required")
    required = set(required) if isinstance(required, list) else set()
    return [(name, prop, name in required) for name, prop in params["properties"].items()]


_STRING_FORMATS = ("date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6", "uuid")


def resolves_to_string(schema: object, root: object) -> bool:  # noqa: C901
    """common_schema_info::resolves_to_string() after resolve_refs(root): some branch of the schema permits a
    string (its type, a oneOf/anyOf alternative, all of an allOf, a string const or enum value, a string
    keyword, a string format, a local $ref into `root`)."""
    visited: set[str] = set()

    def resolve(ref: str) -> object:
        if not ref.startswith("#/"):
            return None  # nothing fetched: b10621 resolves no remote schema here
        target = root
        for sel in ref[2:].split("/"):
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list) and sel.isdigit() and int(sel) < len(target):
                target = target[int(sel)]
            else:
                return None
        return target

    def check(s: object) -> bool:
        if not isinstance(s, dict):
            return False
        if "$ref" in s:
            ref = s["$ref"]
            if ref in visited:  # circular: assume not a string
                return False
            visited.add(ref)
            return check(resolve(ref))
        kind = s.get("type")
        if kind == "string" or (isinstance(kind, list) and "string" in kind):
            return True
        if any(check(option) for key in ("oneOf", "anyOf") for option in s.get(key) or []):
            return True
        if "allOf" in s and all(check(c) for c in s["allOf"]):
            return True
        if isinstance(s.get("const"), str):
            return True
        if any(isinstance(v, str) for v in s.get("enum") or []):
            return True
        if "pattern" in s or "minLength" in s or "maxLength" in s:
            return True
        fmt = s.get("format")
        return isinstance(fmt, str) and (fmt in _STRING_FORMATS or fmt.startswith("uuid"))

    return check(schema)
