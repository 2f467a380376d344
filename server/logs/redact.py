"""Secret redaction for every log sink: a line-buffered text stream that never lets a secret through.

A secret is replaced by ``[redacted]`` wherever it occurs, in its raw spelling and in the spellings a log line
is likely to carry it in (JSON/repr escaped, percent-encoded, surrounding whitespace stripped). Text is
released a line at a time: a secret split across two ``write`` calls is reassembled before it is scanned,
and on ``flush`` only the text that cannot be the beginning of a secret is released.
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Iterable
from typing import TextIO
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
_FORCE_RELEASE = 1 << 16  # a buffer without a newline longer than this is released (still redacted)


def _spellings(secret: str) -> set[str]:
    found = {
        secret,
        secret.strip(),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
    }
    return {s for s in found if s}


class Redactor:
    """The set of secret spellings and the one regular expression that finds them."""

    def __init__(self, secrets: Iterable[str] = ()):
        variants: set[str] = set()
        for secret in secrets:
            if isinstance(secret, str) and secret:
                variants |= _spellings(secret)
        # longest first, so a secret that contains another is replaced whole
        self.variants = sorted(variants, key=lambda v: (-len(v), v))
        self._pattern = re.compile("|".join(map(re.escape, self.variants))) if self.variants else None
        self._longest = max((len(v) for v in self.variants), default=0)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text

    def safe_cut(self, text: str, limit: int) -> int:
        """The largest cut <= limit such that redacting text[:cut] now can never release part of a secret:
        no complete occurrence crosses the cut and no occurrence still being written starts before it."""
        if self._pattern is None:
            return limit
        cut = limit
        start = max(0, len(text) - self._longest + 1)
        for j in range(start, len(text)):
            tail = text[j:]
            if any(len(v) > len(tail) and v.startswith(tail) for v in self.variants):
                cut = min(cut, j)
                break
        for m in self._pattern.finditer(text):
            if m.start() < cut < m.end():
                cut = m.start()
            if m.start() >= cut:
                break
        return cut


class RedactingStream(io.TextIOBase):
    """A text stream that redacts secrets and releases whole lines to the stream it wraps."""

    def __init__(self, target: TextIO, redactor: Redactor, *, owns_target: bool = False):
        super().__init__()
        self.target = target
        self.redactor = redactor
        self._owns_target = owns_target
        self._buf = ""
        self._lock = threading.RLock()

    # what the io machinery and callers such as faulthandler and uvicorn look at
    @property
    def encoding(self):  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    @property
    def errors(self):  # type: ignore[override]
        return getattr(self.target, "errors", "strict")

    def isatty(self) -> bool:
        try:
            return self.target.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    def fileno(self) -> int:
        return self.target.fileno()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        with self._lock:
            self._buf += s
            newline = self._buf.rfind("\n")
            if newline >= 0:
                self._release(newline + 1)
            elif len(self._buf) > _FORCE_RELEASE:
                self._release(len(self._buf))
        return len(s)

    def _release(self, limit: int) -> None:
        cut = self.redactor.safe_cut(self._buf, limit)
        if cut <= 0:
            return
        out, self._buf = self.redactor.redact(self._buf[:cut]), self._buf[cut:]
        self.target.write(out)

    def flush(self) -> None:
        with self._lock:
            if self._buf:
                self._release(len(self._buf))
            try:
                self.target.flush()
            except (AttributeError, ValueError, OSError):
                pass

    def drain(self) -> None:
        """Release everything, the possible start of a secret included (still redacted): at shutdown."""
        with self._lock:
            if self._buf:
                out, self._buf = self.redactor.redact(self._buf), ""
                self.target.write(out)
            self.target.flush()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.drain()
        except (ValueError, OSError):
            pass
        if self._owns_target:
            self.target.close()
        super().close()

    def __getattr__(self, name):  # anything else a caller expects from the wrapped stream
        if name == "target":
            raise AttributeError(name)
        return getattr(self.target, name)
