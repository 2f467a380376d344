"""`mlxcel generate -m MODEL -p PROMPT [llama-server's options]`: one completion of a raw prompt, streamed to
stdout as it is generated (the prompt itself is not echoed: the output pipes), its speeds on stderr at the end.

The request is /completion's {"prompt", "stream": true}, answered in process by the server's own handler over
the server's state built from the same command line (server/cli/local.py): the sampling flags (--temp, -s,
--top-k, -n, -r, ...) are the request defaults they are on llama-server, so the tokens are the ones
`curl /completion` gets from `mlxcel-server` started with the same flags."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ..errors import UpstreamError
from .local import Local, Own, command_line, load, speeds, sse_objects
from .parse import process_escapes

PROG = "mlxcel generate"


OWN = (
    Own("prompt", ("-p", "--prompt")),
    Own("file", ("-f", "--file")),
    Own("help", ("-h", "--help"), value=False),
)


USAGE = f"""usage: {PROG} -m MODEL (-p PROMPT | -f FILE) [llama-server's options]

Continue a prompt with the model, streamed to stdout; the speeds go to stderr at the end.
  -p, --prompt PROMPT   the prompt
  -f, --file FILE       a file holding the prompt (less one trailing newline)
escapes such as \\n in the prompt are processed unless --no-escape, as llama.cpp's tools do.
llama-server's options set the request (mlxcel serve --help lists them): -n N tokens, --temp, -s SEED,
--top-k, --top-p, -r STOP, -c, --grammar, --json-schema ...; -v shows the loader's log.
"""


def main(argv: list[str]) -> int:
    parsed = command_line(argv, OWN, PROG, USAGE)
    if isinstance(parsed, int):
        return parsed
    own, rest = parsed
    if (own["prompt"] is None) == (own["file"] is None):
        print(f"{PROG}: error: give the prompt with -p PROMPT or -f FILE", file=sys.stderr)
        return 2
    try:
        prompt = read_prompt(own["file"]) if own["file"] else own["prompt"]
    except OSError as exc:
        print(f"{PROG}: error: cannot read the prompt: {exc}", file=sys.stderr)
        return 1
    local = load(rest, PROG)
    if isinstance(local, int):
        return local
    if local.args.escape:  # (common_params_parse: -p's or -f's prompt, unless --no-escape)
        prompt = process_escapes(prompt)
    try:
        return asyncio.run(generate(local, prompt))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    finally:
        local.stop()


def read_prompt(path: str) -> str:
    """-f FILE as llama.cpp reads it: the file's text less one trailing newline."""
    text = Path(path).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


async def generate(local: Local, prompt: str, out=None) -> int:
    """Stream the completion of `prompt` to `out` (stdout); 0, or 1 after the error the server answers."""
    from ..api.native import complete  # deferred: the handlers import FastAPI

    out = out or sys.stdout
    try:
        response = await complete(local.state, {"prompt": prompt, "stream": True})
    except UpstreamError as exc:
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return 1
    final: dict = {}
    async for obj in sse_objects(response):
        if "error" in obj:
            print(f"\n{PROG}: error: {obj['error'].get('message', obj['error'])}", file=sys.stderr)
            return 1
        out.write(obj.get("content", ""))
        out.flush()
        if obj.get("stop"):
            final = obj
    out.write("\n")
    out.flush()
    print(speeds(final.get("timings", {})), file=sys.stderr)
    return 0
