"""String helpers of b10621's differential autoparser (common/chat-auto-parser-helpers.{h,cpp}): whitespace
trimming, marker segmentation, the marker-aware diff of two renders, and the template renders it compares.

b10621 works on UTF-8 bytes and std::isspace; these work on str with the same ASCII whitespace set, which
gives the same substrings.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from ..messages import normalize
from ..template import TemplateError, render

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
            out.append(Segment(SegmentType.MARKER, text[last:pos + 1]))
            last, opener = pos + 1, ""
    if last < len(text):
        out.append(Segment(SegmentType.TEXT, text[last:]))
    return out


def prune_whitespace_segments(segments: list[Segment]) -> list[Segment]:
    return [s for s in segments if trim_whitespace(s.value)]


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _common_suffix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


def calculate_diff_split(left: str, right: str) -> DiffSplit:
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
        if ls[l0] == rs[r1]:
            result.suffix = rs[r1].value + result.suffix
            r1 -= 1
            left_done = True
        elif ls[l0] == rs[r0]:
            result.prefix += rs[r0].value
            r0 += 1
            left_done = True
    elif r0 == r1 and l0 != l1:
        if ls[l1] == rs[r0]:
            result.suffix = ls[l1].value + result.suffix
            l1 -= 1
            right_done = True
        elif ls[l0] == rs[r0]:
            result.prefix += ls[l0].value
            l0 += 1
            right_done = True
    elif l0 == l1 and r0 == r1 and ls[l0] == rs[r0] and ls[l0].type == SegmentType.MARKER:
        result.prefix += rs[r0].value
        left_done = right_done = True

    # C++ dereferences these iterators even when they were stepped past the first segment
    can_text_suffix = ls[l1].type == SegmentType.TEXT and rs[r1].type == SegmentType.TEXT
    can_text_prefix = rs[r0].type == SegmentType.TEXT and ls[l0].type == SegmentType.TEXT

    rem_left = "".join(s.value for s in ls[l0:l1 if left_done else l1 + 1])
    rem_right = "".join(s.value for s in rs[r0:r1 if right_done else r1 + 1])

    suffix_len = _common_suffix_len(rem_left, rem_right) if can_text_suffix else 0
    # the prefix may not overlap the suffix
    prefix_len = (_common_prefix_len(rem_left[:len(rem_left) - suffix_len], rem_right[:len(rem_right) - suffix_len])
                  if can_text_prefix else 0)

    result.prefix += rem_left[:prefix_len]
    result.suffix = rem_left[len(rem_left) - suffix_len:] + result.suffix
    result.left = rem_left[prefix_len:len(rem_left) - suffix_len]
    result.right = rem_right[prefix_len:len(rem_right) - suffix_len]

    if not result.left and not result.right:  # no difference: all of it is the prefix
        result.prefix, result.suffix = left, ""

    # left wholly contained at the start of right: the segment matching above can rotate trailing text of left
    # into the suffix; the plain split is the right one
    if not result.left and result.right and right.startswith(left):
        result.prefix, result.suffix, result.right = left, "", right[len(left):]
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
    suffix = left[len(left) - n:]
    pos = full.rfind(suffix)
    return "" if pos < 0 else full[pos + n:]


# ---------------------------------------------------------------------------------------------------------------
# Rendering


@dataclass
class Template:
    """What b10621's common_chat_template carries: the source, its BOS/EOS strings and its capabilities."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    caps: dict[str, bool] = field(default_factory=dict)


def direct_apply(tmpl: Template, messages: list, tools: list | None, add_generation_prompt: bool,
                 enable_thinking: bool, extra_context: dict | None = None, add_bos: bool = False,
                 add_eos: bool = False) -> str:
    """common_chat_template_direct_apply_impl(): the template rendered with b10621's context variables
    (the extra context overrides them). Raises TemplateError when the template fails."""
    ctx: dict = {"messages": normalize(messages, tmpl.caps), "bos_token": tmpl.bos_token,
                 "eos_token": tmpl.eos_token, "enable_thinking": enable_thinking}
    if tools:
        ctx["tools"] = tools
    ctx.update(extra_context or {})
    if add_generation_prompt:
        ctx["add_generation_prompt"] = True
    preserve = ctx.get("preserve_reasoning")
    if isinstance(preserve, bool):  # jinja::caps_apply_preserve_reasoning
        ctx.update(preserve_thinking=preserve, clear_thinking=not preserve, truncate_history_thinking=not preserve,
                   drop_thinking=not preserve)
    effort = ctx.get("reasoning_effort")
    if isinstance(effort, str) and effort:  # jinja::caps_apply_reasoning_effort
        ctx["reasoning_strength"] = effort
    out = render(tmpl.source, ctx.pop("messages"), add_generation_prompt=ctx.pop("add_generation_prompt", False),
                 tools=ctx.pop("tools", None), **ctx)
    # the tokenizer adds BOS/EOS itself: not twice
    if add_bos and tmpl.bos_token and out.startswith(tmpl.bos_token):
        out = out[len(tmpl.bos_token):]
    if add_eos and tmpl.eos_token and out.endswith(tmpl.eos_token):
        out = out[:len(out) - len(tmpl.eos_token)]
    return out


def generation_prompt(tmpl: Template, messages: list, tools: list | None, enable_thinking: bool,
                      extra_context: dict | None = None, add_bos: bool = False, add_eos: bool = False) -> str:
    """common_chat_template_generation_prompt(): what add_generation_prompt appends to the render."""
    without = direct_apply(tmpl, messages, tools, False, enable_thinking, extra_context, add_bos, add_eos)
    with_prompt = direct_apply(tmpl, messages, tools, True, enable_thinking, extra_context, add_bos, add_eos)
    n = 0
    for a, b in zip(without, with_prompt):
        if a != b:
            break
        n += 1
    return with_prompt[n:]


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
        return direct_apply(tmpl, params.messages, params.tools, params.add_generation_prompt,
                            params.enable_thinking, extra)
    except TemplateError:
        return ERR_TMPL


@dataclass
class CompareVariantsResult:
    diff: DiffSplit
    output_A: str  # upstream's field names
    output_B: str


def compare_variants(tmpl: Template, params_a: TemplateParams,
                     modifier: Callable[[TemplateParams], None] | None) -> CompareVariantsResult | None:
    """Render params_a and a modified copy of it; their diff, or None when either render fails."""
    params_b = copy.deepcopy(params_a)
    if modifier is not None:
        modifier(params_b)
    out_a = apply_template(tmpl, params_a)
    out_b = apply_template(tmpl, params_b)
    if out_a == ERR_TMPL or out_b == ERR_TMPL:
        return None
    return CompareVariantsResult(calculate_diff_split(out_a, out_b), out_a, out_b)
