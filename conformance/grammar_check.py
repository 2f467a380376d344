"""Does a generation parse under a GBNF grammar? b10621's own pushdown recognizer, in Python.

The conformance suite's independent check on constrained output from either server: it walks llama.cpp's
element vectors (server/grammar/gbnf.py keeps them exactly as upstream builds them) with the stack algorithm
of src/llama-grammar.cpp (advance_stack, accept_chr, accept_token), not with llguidance, so a fault in
mlxcel's lowering cannot hide behind the same lowering. It reads mlxcel's GBNF parser, so it lives here, not
in oracle/ (which imports nothing from server/).
"""

from __future__ import annotations

from server.grammar.gbnf import (
    ALT,
    CHAR,
    CHAR_ALT,
    CHAR_ANY,
    CHAR_NOT,
    CHAR_RNG_UPPER,
    END,
    RULE_REF,
    TOKEN,
    TOKEN_NOT,
    Grammar,
)

Pos = tuple[int, int]  # (rule index, element index)
Stack = tuple[Pos, ...]


class Recognizer:
    def __init__(self, grammar: Grammar):
        self.rules = grammar.rules
        self.stacks: list[Stack] = []
        self._pending = b""
        for start in self._alternatives(grammar.root):
            stack: Stack = () if self._eos(start) else (start,)
            self._advance(stack, self.stacks)

    def _el(self, pos: Pos) -> tuple[int, int]:
        return self.rules[pos[0]][pos[1]]

    def _eos(self, pos: Pos) -> bool:
        return self._el(pos)[0] in (END, ALT)

    def _alternatives(self, rule: int) -> list[Pos]:
        out, i = [(rule, 0)], 0
        elements = self.rules[rule]
        while elements[i][0] != END:
            if elements[i][0] == ALT:
                out.append((rule, i + 1))
            i += 1
        return out

    def _advance(self, stack: Stack, out: list[Stack]) -> None:
        """llama_grammar_advance_stack: expand rule references until every stack tops a terminal."""
        todo, seen = [stack], set()
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            if not cur:
                if cur not in out:
                    out.append(cur)
                continue
            pos = cur[-1]
            kind, value = self._el(pos)
            if kind == RULE_REF:
                after = (pos[0], pos[1] + 1)
                base = cur[:-1] + (() if self._eos(after) else (after,))
                for sub in self._alternatives(value):
                    todo.append(base + (() if self._eos(sub) else (sub,)))
            elif cur not in out:
                out.append(cur)

    def _match_char(self, pos: Pos, chr_: int) -> tuple[bool, Pos]:
        kind = self._el(pos)[0]
        positive = kind in (CHAR, CHAR_ANY)
        found = False
        rule, i = pos
        elements = self.rules[rule]
        while True:
            k, v = elements[i]
            if elements[i + 1][0] == CHAR_RNG_UPPER:
                found = found or v <= chr_ <= elements[i + 1][1]
                i += 2
            elif k == CHAR_ANY:
                found, i = True, i + 1
            else:
                found = found or v == chr_
                i += 1
            if elements[i][0] != CHAR_ALT:
                break
        return found == positive, (rule, i)

    def accept_char(self, chr_: int) -> bool:
        new: list[Stack] = []
        for stack in self.stacks:
            if not stack:
                continue
            pos = stack[-1]
            if self._el(pos)[0] not in (CHAR, CHAR_NOT, CHAR_ANY):
                continue
            ok, after = self._match_char(pos, chr_)
            if ok:
                self._advance(stack[:-1] + (() if self._eos(after) else (after,)), new)
        self.stacks = new
        return bool(new)

    def accept_text(self, text: str) -> bool:
        return all(self.accept_char(ord(c)) for c in text)

    def accept_token(self, token: int, piece: bytes) -> bool:
        """llama_grammar_accept_token: a token terminal matches the id, anything else its text (a UTF-8
        sequence split across tokens is held until it completes, as the partial_utf8 state does)."""
        data = self._pending + piece
        cut = len(data)
        for back in range(1, min(4, len(data)) + 1):  # an incomplete trailing sequence waits
            lead = data[-back]
            if lead & 0xC0 != 0x80:
                if (lead >= 0xF0 and back < 4) or (lead >= 0xE0 and back < 3) or (lead >= 0xC0 and back < 2):
                    cut = len(data) - back
                break
        self._pending = data[cut:]
        text = data[:cut].decode("utf-8", errors="replace")
        new: list[Stack] = []
        for stack in self.stacks:
            if not stack:
                continue
            pos = stack[-1]
            kind, value = self._el(pos)
            if kind in (TOKEN, TOKEN_NOT):
                if (value == token) == (kind == TOKEN):
                    after = (pos[0], pos[1] + 1)
                    self._advance(stack[:-1] + (() if self._eos(after) else (after,)), new)
                continue
            saved, self.stacks = self.stacks, [stack]
            survived = self.accept_text(text)
            for s in self.stacks if survived else []:
                if s not in new:
                    new.append(s)
            self.stacks = saved
        self.stacks = new
        return bool(new)

    @property
    def complete(self) -> bool:
        return any(not s for s in self.stacks)


def parses(grammar: Grammar, text: str, complete: bool) -> bool:
    """`text` is a prefix of a sentence of the grammar (a whole sentence when `complete`)."""
    r = Recognizer(grammar)
    return r.accept_text(text) and (r.complete or not complete)
