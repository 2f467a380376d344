"""Stop strings and the withholding rule, as b10621's process_token applies them (on bytes).

Text is released only when it cannot be part of a stop string: a partial match at the end is withheld
until the next token decides it, a full match truncates the text there (what precedes it is sent), and an
incomplete UTF-8 sequence at the end is withheld too. As upstream, text still withheld when generation
ends on a limit is in the final content but was never streamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def valid_utf8_prefix(data: bytes) -> int:
    """Length of `data` without a trailing incomplete UTF-8 sequence (b10621's validate_utf8)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        c = data[n - back]
        if c & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if c < 0x80 else 2 if c >> 5 == 0x6 else 3 if c >> 4 == 0xE else 4 if c >> 3 == 0x1E else 1
            return n - back if need > back else n
    return n


def find_partial_stop(text: bytes, stop: bytes) -> int:
    """Start of the longest suffix of `text` that is a proper prefix of `stop`, or -1."""
    if not text or not stop:
        return -1
    for length in range(min(len(stop), len(text)), 0, -1):
        if text.endswith(stop[:length]):
            return len(text) - length
    return -1


@dataclass
class TextStream:
    stops: list[bytes] = field(default_factory=list)
    generated: bytearray = field(default_factory=bytearray)
    n_sent: int = 0
    stopping_word: str = ""
    stopped_by_word: bool = False

    def _find(self, text: bytes, last_size: int, full: bool) -> int:
        best = -1
        for word in self.stops:
            if full:
                start = max(len(text) - (len(word) + last_size), 0)
                pos = text.find(word, start)
            else:
                pos = find_partial_stop(text, word)
            if pos != -1 and (best == -1 or pos < best):
                if full:
                    self.stopped_by_word = True
                    self.stopping_word = word.decode("utf-8", "replace")
                best = pos
        return best

    def push(self, piece: bytes, is_eog: bool = False) -> bytes:
        """Add one token's bytes; returns the bytes that may be sent now (b10621's process_token)."""
        self.generated += piece
        if valid_utf8_prefix(bytes(self.generated)) < len(self.generated):
            return b""
        pos = min(self.n_sent, len(self.generated))
        test = bytes(self.generated[pos:])
        send = True
        stop_pos = self._find(test, len(piece), True)
        if stop_pos != -1:
            del self.generated[pos + stop_pos :]
            pos = min(self.n_sent, len(self.generated))
        elif not is_eog:
            send = self._find(test, len(piece), False) == -1  # a possible stop string's start: withhold
        if not send:
            return b""
        out = bytes(self.generated[pos:])
        self.n_sent += len(out)
        return out

    @property
    def content(self) -> bytes:
        return bytes(self.generated)
