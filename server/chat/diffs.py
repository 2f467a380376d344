"""The parsed assistant message as it grows, and what each step adds: b10621's task_result_state
(server-task.cpp update_chat_msg), common_chat_msg_diff::compute_diffs (common/chat.cpp) and the OpenAI
shapes of a message and of a delta (common_chat_msg::to_json_oaicompat, server_chat_msg_diff_to_json_oaicompat).

Every response type reads the model's output through one `MessageState` per task: it re-parses the whole
text at each step and sends only the difference, so the streamed deltas concatenate to the final message.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .messages import ChatMsg, ToolCall

NO_INDEX = -1  # std::string::npos: the diff is not about a tool call


def random_string(n: int = 32) -> str:
    """random_string(): the alphabet of b10621's ids."""
    chars = string.ascii_letters + string.digits
    return "".join(secrets.choice(chars) for _ in range(n))


class DiffError(RuntimeError):
    """b10621 throws std::runtime_error when a re-parse contradicts what was already streamed."""


@dataclass
class MsgDiff:
    reasoning_content_delta: str = ""
    content_delta: str = ""
    tool_call_index: int = NO_INDEX
    tool_call_delta: ToolCall = field(default_factory=lambda: ToolCall("", ""))


def _string_diff(last: str, current: str) -> str:
    if not last:
        return current
    if not current.startswith(last):
        if last.startswith(current):  # the last step ended on a partial stop word the final one erased
            return ""
        raise DiffError(f"Invalid diff: '{last}' not found at start of '{current}'")
    return current[len(last) :]


def compute_diffs(prv: ChatMsg, new: ChatMsg) -> list[MsgDiff]:
    diffs: list[MsgDiff] = []
    if prv.reasoning_content != new.reasoning_content:
        diffs.append(MsgDiff(reasoning_content_delta=_string_diff(prv.reasoning_content, new.reasoning_content)))
    if prv.content != new.content:
        diffs.append(MsgDiff(content_delta=_string_diff(prv.content, new.content)))
    if len(new.tool_calls) < len(prv.tool_calls):
        raise DiffError("Invalid diff: now finding less tool calls!")
    if prv.tool_calls:
        idx = len(prv.tool_calls) - 1
        pref, newf = prv.tool_calls[idx], new.tool_calls[idx]
        if pref.name != newf.name and pref.name and newf.name and not newf.name.startswith(pref.name):
            raise DiffError("Invalid diff: tool call mismatch!")
        args_diff = _string_diff(pref.arguments, newf.arguments)
        if args_diff or pref.id != newf.id or pref.name != newf.name:
            delta = ToolCall("", args_diff)
            if pref.id != newf.id or pref.name != newf.name:
                delta = ToolCall(newf.name, args_diff, newf.id)
            diffs.append(MsgDiff(tool_call_index=idx, tool_call_delta=delta))
    for idx in range(len(prv.tool_calls), len(new.tool_calls)):
        diffs.append(MsgDiff(tool_call_index=idx, tool_call_delta=replace(new.tool_calls[idx])))
    return diffs


def is_empty(msg: ChatMsg) -> bool:
    return not (
        msg.content or msg.content_parts or msg.tool_calls or msg.reasoning_content or msg.tool_name or msg.tool_call_id
    )


def message_json(msg: ChatMsg) -> dict:
    """common_chat_msg::to_json_oaicompat() for an answer: content "" rather than absent."""
    out: dict = {"role": msg.role, "content": msg.content}
    if msg.reasoning_content:
        out["reasoning_content"] = msg.reasoning_content
    if msg.tool_calls:
        calls = []
        for tc in msg.tool_calls:
            call: dict = {"type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
            if tc.id:
                call["id"] = tc.id
            calls.append(call)
        out["tool_calls"] = calls
    return out


def delta_json(diff: MsgDiff) -> dict:
    """server_chat_msg_diff_to_json_oaicompat()."""
    delta: dict = {}
    if diff.reasoning_content_delta:
        delta["reasoning_content"] = diff.reasoning_content_delta
    if diff.content_delta:
        delta["content"] = diff.content_delta
    if diff.tool_call_index != NO_INDEX:
        tc = diff.tool_call_delta
        call: dict = {"index": diff.tool_call_index}
        if tc.id:
            call["id"], call["type"] = tc.id, "function"
        if tc.name or tc.arguments:
            fn: dict = {}
            if tc.name:
                fn["name"] = tc.name
            if tc.arguments:
                fn["arguments"] = tc.arguments
            call["function"] = fn
        delta["tool_calls"] = [call]
    return delta


Parse = Callable[[str, bool], ChatMsg]


class MessageState:
    """task_result_state: the text so far, the message parsed from it, the tool-call ids handed out."""

    def __init__(self, parse: Parse, is_continuation: bool = False, echo: bool = False) -> None:
        self._parse = parse
        self.generated_text = ""
        self.chat_msg = ChatMsg(role="")
        self._ids: list[str] = []
        if is_continuation and not echo:  # so the assistant prefill is not sent again as a delta
            self.chat_msg = parse("", True)

    def update(self, text_added: str, is_partial: bool) -> list[MsgDiff]:
        """update_chat_msg(): re-parse the whole text, hand out ids to new tool calls, return the difference.
        (b10621's filter_tool_calls branch is never taken by its server, so it has no counterpart here.)"""
        self.generated_text += text_added
        new = self._parse(self.generated_text, is_partial)
        if is_empty(new):
            return []
        for i, tc in enumerate(new.tool_calls):  # set_tool_call_ids(): an id once handed out stays
            if len(self._ids) <= i:
                self._ids.append(tc.id or random_string())
            tc.id = self._ids[i]
        prv, self.chat_msg = self.chat_msg, new
        return compute_diffs(prv, new)
