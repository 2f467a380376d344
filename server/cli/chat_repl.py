"""`mlxcel chat -m MODEL [llama-server's options]`: an interactive chat in the terminal, as b10621's llama-cli
(tools/cli/cli-context.cpp) runs one: the history as OpenAI messages, each turn /v1/chat/completions streamed
(so the model's own chat template, reasoning shown apart), answered in process by the server's handler over the
state the same command line builds (server/cli/local.py).

Input as llama-cli's console reads it without its line editor (common/console.cpp readline_simple): a line
ending in `\\` goes on to the next line (with -mli, every line does and `\\` ends the message), one ending in `/`
sends at once. Commands: /exit, /regen, /clear, /read FILE. Ctrl-C stops a generation and keeps what came (the
chat goes on); at the prompt, Ctrl-C or Ctrl-D leaves."""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass, field
from typing import TextIO

from ..errors import UpstreamError
from .local import Local, Own, command_line, load, speeds, sse_objects
from .parse import process_escapes

PROG = "mlxcel chat"

COMMANDS = """available commands:
  /exit or Ctrl+C     stop or exit
  /regen              regenerate the last response
  /clear              clear the chat history
  /read <file>        add a text file
"""


OWN = (
    Own("prompt", ("-p", "--prompt")),
    Own("system_prompt", ("-sys", "--system-prompt")),
    Own("multiline_input", ("-mli", "--multiline-input"), value=False),
    Own("single_turn", ("-st", "--single-turn"), value=False),
    Own("no_show_timings", ("--no-show-timings",), value=False),
    Own("help", ("-h", "--help"), value=False),
)


USAGE = f"""usage: {PROG} -m MODEL [-sys SYSTEM] [-p FIRST] [-mli] [-st] [llama-server's options]

Chat with the model in its own chat template.
  -sys, --system-prompt TEXT  the system message
  -p, --prompt TEXT           the first user message
  -mli, --multiline-input     Enter continues the message; a line ending in \\ sends it
  -st, --single-turn          answer once, then leave
  --no-show-timings           no speeds after each answer
llama-server's options set the requests and the model (mlxcel serve --help lists them); -v shows the loader's log.
"""


@dataclass
class Chat:
    """The conversation: the messages sent with each turn, and a text file's contents waiting for the next."""

    system: str = ""
    messages: list[dict] = field(default_factory=list)
    pending: str = ""

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.pending = ""


def read_message(stdin: TextIO, out: TextIO, multiline: bool) -> str | None:
    """One user message (None at the end of input), read as readline_simple reads lines."""
    out.write("\n> ")
    out.flush()
    buffer = ""
    while True:
        line = stdin.readline()
        if not line:
            return None if not buffer else buffer
        line = line.rstrip("\n")
        more = multiline
        if line.endswith("/"):  # always returns control
            return buffer + line[:-1]
        if line.endswith("\\"):  # flips the default for this line
            line, more = line[:-1], not multiline
        buffer += line + "\n"
        if not more:
            return buffer


def main(argv: list[str]) -> int:
    parsed = command_line(argv, OWN, PROG, USAGE)
    if isinstance(parsed, int):
        return parsed
    own, rest = parsed
    local = load(rest, PROG)
    if isinstance(local, int):
        return local
    try:
        if local.state.settings.chat is None:
            print(f"{PROG}: error: this model serves no chat", file=sys.stderr)
            return 1
        return run(local, own, sys.stdin, sys.stdout)
    finally:
        local.stop()


def run(local: Local, own: dict, stdin: TextIO, out: TextIO) -> int:
    escape, system = local.args.escape, own["system_prompt"] or ""
    chat = Chat(process_escapes(system) if escape else system)
    out.write(f"\nmodel      : {local.state.model_name}\n")
    if chat.system:
        out.write("using custom system prompt\n")
    out.write("\n" + COMMANDS)
    first = own["prompt"]
    while True:
        if first is not None:
            text, first = (process_escapes(first) if escape else first), None
            out.write(f"\n> {text}\n")
        else:
            try:
                text = read_message(stdin, out, own["multiline_input"])
            except KeyboardInterrupt:
                text = None
            if text is None:
                break
        action = command(chat, text.removesuffix("\n"), out)
        if action == "exit":
            break
        if action == "answer":
            turn = answer(local, chat.messages, out)
            chat.messages.append(turn.message())
            if not own["no_show_timings"] and turn.timings:
                out.write(f"\n{speeds(turn.timings)}\n")
            if own["single_turn"]:
                break
    out.write("\n\nExiting...\n")
    out.flush()
    return 0


def command(chat: Chat, text: str, out: TextIO) -> str:
    """What a message asks: "exit", "answer" (the history ready for the next turn) or "" (nothing to answer)."""
    if not text:
        return ""
    if text.startswith("/exit"):
        return "exit"
    if text.startswith("/regen"):
        if len(chat.messages) < 2 or chat.messages[-1]["role"] != "assistant":
            out.write("No message to regenerate.\n")
            return ""
        chat.messages.pop()
        return "answer"
    if text.startswith("/clear"):
        chat.clear()
        out.write("Chat history cleared.\n")
        return ""
    if text.startswith("/read "):
        read_file(chat, text[6:].strip(), out)
        return ""
    chat.messages.append({"role": "user", "content": chat.pending + text})
    chat.pending = ""
    return "answer"


def read_file(chat: Chat, path: str, out: TextIO) -> None:
    """/read FILE: the file's text goes before the next message, headed by its name (llama-cli's add_text_file)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            content = f.read()
    except OSError:
        out.write(f"error: file does not exist or cannot be opened: '{path}'\n")
        return
    chat.pending += f"--- File: {path} ---\n{content}"
    out.write(f"Loaded text from '{path}'\n")


@dataclass
class Turn:
    """One assistant answer as it streams: its content and reasoning (shown apart), the last timings."""

    out: TextIO
    content: str = ""
    reasoning: str = ""
    timings: dict = field(default_factory=dict)
    mode: str = "content"

    def push(self, chunk: dict) -> None:
        self.timings = chunk.get("timings", self.timings)
        for choice in chunk.get("choices", [])[:1]:
            delta = choice.get("delta", {})
            for key, mode in (("reasoning_content", "reasoning"), ("content", "content")):
                text = delta.get(key)
                if not isinstance(text, str) or not text:
                    continue
                if mode != self.mode:
                    self.out.write("\n" if self.mode == "reasoning" else "[Start thinking]\n")
                    self.mode = mode
                setattr(self, mode, getattr(self, mode) + text)
                self.out.write(text)
                self.out.flush()

    def message(self) -> dict:
        message = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message


def answer(local: Local, messages: list[dict], out: TextIO) -> Turn:
    """One assistant turn streamed to `out`. Ctrl-C (SIGINT) stops the generation and keeps what came; the chat
    goes on."""
    turn = Turn(out)

    async def stream() -> None:
        from ..api.chat import chat_answer  # deferred: the handlers import FastAPI

        body = {"messages": messages, "stream": True, "timings_per_token": True}
        try:
            response = await chat_answer(local.state, body)
        except UpstreamError as exc:
            out.write(f"error: {exc.message}\n")
            return
        async for chunk in sse_objects(response):
            if "error" in chunk:
                out.write(f"\nerror: {chunk['error'].get('message', chunk['error'])}\n")
                return
            turn.push(chunk)
        out.write("\n")

    async def interruptible() -> None:
        task = asyncio.ensure_future(stream())
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        try:
            await task
        except asyncio.CancelledError:  # Ctrl-C: the generation stops (the stream's end frees the slot)
            out.write("\n")
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    asyncio.run(interruptible())
    return turn
