"""Grammar-constrained decoding through llguidance, with b10621's grammar sampler semantics.

`compile_grammar` runs on the HTTP side (errors become the request's 400); `GrammarMatcher` lives on the
engine thread, one per sequence. The vocabulary llguidance sees is llama.cpp's: every token's piece with
control tokens spelled out (vocab.token_to_piece), so a control token matches its text as upstream's
grammar sampler lets it, end-of-generation tokens are allowed exactly when the grammar is complete, and
tokens whose piece is empty or starts with a NUL byte are never allowed (llama_grammar_apply_impl).
"""

from __future__ import annotations

import re
from functools import lru_cache

import llguidance
import numpy as np

from .gbnf import Grammar, GrammarError, GrammarTooDeep, parse_gbnf
from .spec import GrammarSpec

# b10621's sampler-init failure for a grammar it cannot parse (common_sampler_init)
PARSE_FAILED = "failed to parse grammar"
# mlxcel's bound on GBNF source (b10621 has none): it keeps parsing and lowering to a fraction of a second
MAX_GRAMMAR_SOURCE = 256 * 1024
# llguidance's per-step guards, widened so any grammar under the source cap runs as b10621 runs it (its
# defaults stop a rule with more than 2000 alternatives, which b10621 walks without a limit)
LIMITS = dict(max_items_in_row=MAX_GRAMMAR_SOURCE // 4, step_max_items=1_000_000)


def _limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(**LIMITS)


class GrammarRefused(ValueError):
    """The grammar cannot be used; str() is the sentence after b10621's "Failed to initialize samplers: "."""


@lru_cache(maxsize=64)
def _parse_cached(source: str, vocab_key: int) -> Grammar:
    vocab = _VOCABS[vocab_key]
    return parse_gbnf(source, vocab.tokenize_special, n_vocab=vocab.n_vocab)


_VOCABS: dict[int, "GrammarVocab"] = {}


class GrammarVocab:
    """llguidance's view of one model's vocabulary, built once per model."""

    def __init__(self, tokenizer, eog_ids: frozenset[int]):
        self.tokenizer = tokenizer
        self.eog_ids = eog_ids
        n = tokenizer.vocab_size
        pieces = [tokenizer.piece(i, special=True) for i in range(n)]
        self.n_vocab = n
        self.banned = np.array([not p or p[0] == 0 for p in pieces], dtype=bool)
        self.banned[list(eog_ids)] = False
        self.ll = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(_Wrapped(tokenizer, pieces, eog_ids)),
            n_vocab=n,
            eos_token=sorted(eog_ids) or None,
        )
        _VOCABS[id(self)] = self

    def tokenize_special(self, text: str) -> list[int]:
        return self.tokenizer.tokenize(text, add_special=False, parse_special=True)

    def compile(
        self, source: str, lazy: bool = False, trigger_tokens=(), trigger_patterns=(), prefill: tuple[int, ...] = ()
    ) -> GrammarSpec:
        """Parse GBNF as b10621 would and lower it; GrammarRefused where b10621's sampler init fails."""
        if len(source.encode("utf-8")) > MAX_GRAMMAR_SOURCE:
            raise GrammarRefused(
                f"{PARSE_FAILED} (the grammar is larger than mlxcel's limit of {MAX_GRAMMAR_SOURCE} bytes)"
            )
        try:
            grammar = _parse_cached(source, id(self))
        except GrammarError:
            raise GrammarRefused(PARSE_FAILED) from None
        except GrammarTooDeep as e:
            raise GrammarRefused(f"{PARSE_FAILED} ({e})") from None
        # a grammar b10621 takes that llguidance cannot serve (its 65535-symbol bound, for one) is refused,
        # never run unconstrained; building a matcher is the only check that sees every such bound
        matcher = llguidance.LLMatcher(
            self.ll, llguidance.LLMatcher.grammar_from_lark(grammar.lark), log_level=0, limits=_limits()
        )
        if matcher.is_error():
            reason = matcher.get_error().split("\n", 1)[0]
            if "symbols.len()" in reason:
                reason = "more than 65535 grammar symbols once lowered to one terminal per character"
            raise GrammarRefused(f"{PARSE_FAILED} (mlxcel's grammar engine cannot take it: {reason})")
        for token in prefill:  # b10621 rethrows the failure sliced to a bare std::exception
            if token not in self.eog_ids and not matcher.consume_token(token):
                raise GrammarRefused("std::exception")
        for pattern in trigger_patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise GrammarRefused(f"invalid trigger pattern '{pattern}': {e}") from None
        return GrammarSpec(grammar.lark, lazy, tuple(trigger_tokens), tuple(trigger_patterns), tuple(prefill))


class _Wrapped:
    """The duck-typed tokenizer llguidance.TokenizerWrapper reads."""

    def __init__(self, tokenizer, pieces: list[bytes], eog_ids: frozenset[int]):
        self._tok = tokenizer
        self.tokens = pieces
        self.eos_token_id = min(eog_ids) if eog_ids else 0
        self.bos_token_id = None
        self.special_token_ids = []  # control tokens are text to llama.cpp's grammar sampler

    def __call__(self, text) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tok.tokenize(text, add_special=False, parse_special=False)


class GrammarMatcher:
    """One sequence's grammar state: llama_sampler_grammar's apply/accept, lazy triggers included."""

    def __init__(self, spec: GrammarSpec, vocab: GrammarVocab):
        self.vocab = vocab
        self.spec = spec
        self.m = llguidance.LLMatcher(
            vocab.ll, llguidance.LLMatcher.grammar_from_lark(spec.lark), log_level=0, limits=_limits()
        )
        self.awaiting_trigger = spec.lazy
        self._buffer = b""
        self._positions: list[tuple[int, int, int]] = []  # (token, start, end) in the buffer
        self._patterns = [re.compile(p.encode("utf-8"), re.S) for p in spec.trigger_patterns]
        self._bits = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
        for token in spec.prefill:  # the template already wrote these: the grammar starts after them
            self.accept(token)

    @property
    def active(self) -> bool:
        return not self.awaiting_trigger

    def allows(self, token: int) -> bool:
        """The single-candidate check of common_sampler_sample's rejection path."""
        if self.awaiting_trigger:
            return True
        if self.vocab.banned[token]:
            return False
        if token in self.vocab.eog_ids:
            return self.m.is_accepting()
        return self.m.validate_tokens([token]) == 1

    def mask(self) -> np.ndarray:
        """Allowed tokens as a boolean vector (llama_grammar_apply_impl)."""
        self.m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.vocab.n_vocab].astype(bool)
        allowed &= ~self.vocab.banned
        eog = list(self.vocab.eog_ids)
        allowed[eog] = self.m.is_accepting()
        return allowed

    def accept(self, token: int) -> None:
        """llama_grammar_accept_impl: consume a generated token (or buffer it until a trigger fires)."""
        if self.awaiting_trigger:
            self._await(token)
            return
        if token in self.vocab.eog_ids:
            return
        self.m.consume_token(token)

    def _await(self, token: int) -> None:
        if token in self.spec.trigger_tokens:
            self.awaiting_trigger = False
            self._buffer, self._positions = b"", []
            self.m.consume_token(token)
            return
        piece = self.vocab.tokenizer.piece(token, special=True)
        self._positions.append((token, len(self._buffer), len(self._buffer) + len(piece)))
        self._buffer += piece
        for pattern in self._patterns:
            start = _trigger_start(pattern, self._buffer)
            if start is None:
                continue
            self.awaiting_trigger = False
            for tok, t_start, t_end in self._positions:
                if t_end <= start:
                    continue
                if t_start >= start:
                    self.m.consume_token(tok)
                else:  # the match starts inside this token: replay the bytes from the match on
                    for t in self.vocab.tokenizer.tokenize(
                        self._buffer[start:t_end].decode("utf-8", errors="replace"), False, False
                    ):
                        self.m.consume_token(t)
            self._buffer, self._positions = b"", []
            return


def _trigger_start(pattern: re.Pattern, buffer: bytes) -> int | None:
    """llama_grammar_trigger_pattern::find: the first non-empty group's start, else the match's."""
    src = pattern.pattern.decode("utf-8")
    match = pattern.fullmatch(buffer) if src.startswith("^") and src.endswith("$") else None
    if match is None:
        match = pattern.search(buffer)
    if match is None:
        return None
    for i in range(1, (match.re.groups or 0) + 1):
        if match.group(i):
            return match.start(i)
    return match.start(0)
