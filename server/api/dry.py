"""DRY sequence breakers as b10621 prepares them (get_overlapping_token_sequences): every token whose text
holds a breaker is a one-token breaker; a token whose text ends with the start of a breaker heads a
multi-token one, its tail the rest of the breaker tokenized (at most 20 tokens)."""

from __future__ import annotations

from functools import lru_cache

MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20


def _overlaps(pieces: list[bytes], tokenize, brk: bytes, out: dict[int, list[tuple[int, ...]]]) -> None:
    for tid, word in enumerate(pieces):
        if brk in word:
            out.setdefault(tid, []).append(())
            continue
        pos = word.find(brk[:1])
        while pos != -1:
            i = 1
            while i < len(brk) and pos + i < len(word) and word[pos + i] == brk[i]:
                i += 1
            if i == len(brk) or pos + i >= len(word):  # the word ends inside the breaker
                tail = tuple(tokenize(brk[i:])[:MAX_SEQ_LEN])
                tails = out.setdefault(tid, [])
                if tail not in tails:
                    tails.append(tail)
            pos = word.find(brk[:1], pos + 1)


@lru_cache(maxsize=16)
def _processed(tok, breakers: tuple[str, ...]) -> tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]:
    pieces = [tok.piece(i, special=True) for i in range(tok.vocab_size)]

    def tokenize(b: bytes) -> list[int]:
        return tok.tokenize(b.decode("utf-8", "replace"), add_special=False, parse_special=False)

    out: dict[int, list[tuple[int, ...]]] = {}
    for s in breakers:
        brk = s.encode("utf-8")[:MAX_CHAR_LEN]
        if brk:
            _overlaps(pieces, tokenize, brk, out)
    return tuple((h, tuple(tails)) for h, tails in sorted(out.items()))


def processed_breakers(tok, breakers: list[str]) -> tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]:
    return _processed(tok, tuple(breakers))
