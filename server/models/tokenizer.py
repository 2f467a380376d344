"""Run-time tokenizer with llama.cpp's semantics (add_special, parse_special, token pieces as bytes)."""

from __future__ import annotations

import json
import re
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer

from ..peg.rule_order import unordered_map_order
from .vocab_rules import EOT_TEXTS

_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=False)}


class ModelTokenizer:
    """Two `tokenizers` instances: one matches control-token spellings (parse_special), one does not.

    A WordPiece vocabulary (a BERT-family encoder) follows llama.cpp's WPM rules: add_special wraps a prompt
    in [CLS] ... [SEP] whatever the add_* flags say, and a piece is its word behind a space, or its "##"
    continuation bare.
    """

    def __init__(self, checkpoint: Path):
        self._file = checkpoint / "tokenizer.json"
        self._parse = self._load(special_spellings=True)
        cfg = json.loads((checkpoint / "tokenizer_config.json").read_text(encoding="utf-8"))
        self.wordpiece = type(self._parse.model).__name__ == "WordPiece"
        # SentencePiece pieces: U+2581 for a space, <0xXX> for a byte (else GPT-2's byte-level alphabet)
        self.sentencepiece = cfg.get("gguf_tokenizer_model") == "llama" or bool(
            getattr(self._parse.model, "byte_fallback", False)
        )
        self.add_bos = bool(cfg.get("add_bos_token", False))
        self.add_eos = bool(cfg.get("add_eos_token", False))
        vocab = self._parse.get_vocab(with_added_tokens=True)
        bos, eos = ("cls_token", "sep_token") if self.wordpiece else ("bos_token", "eos_token")
        self.bos_id = vocab.get(cfg[bos]) if cfg.get(bos) else None
        self.eos_id = vocab.get(cfg[eos]) if cfg.get(eos) else None
        added = cfg.get("added_tokens_decoder") or {
            str(a["id"]): a
            for a in json.loads((checkpoint / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens", [])
        }
        self.special_ids = frozenset(int(i) for i, t in added.items() if t.get("special"))
        self.added_ids = frozenset(int(i) for i in added)
        self.eog_ids = frozenset(cfg.get("gguf_eog_token_ids") or ([self.eos_id] if self.eos_id is not None else []))
        self.chat_template = cfg.get("chat_template")
        self.fim_ids: dict[str, int] = {k: int(v) for k, v in (cfg.get("gguf_fim_token_ids") or {}).items()}
        self._eot_declared = cfg.get("gguf_eot_token_id")
        self.vocab_size = self._parse.get_vocab_size(with_added_tokens=True)

    @cached_property
    def _pieces(self) -> dict[int, bytes]:
        """Token bytes, each built on its first use: building all 49k up front cost ~0.3 s of every start-up
        (the chat settings read two of them)."""
        return {}

    @cached_property
    def eot_id(self) -> int | None:
        """llama_vocab's token_eot(): declared in the GGUF, else found by its spelling (in token_to_id's
        order, libstdc++'s: ~0.3 s on a 49k vocabulary, so on first use)."""
        if self._eot_declared is not None:
            return int(self._eot_declared)
        texts = [self._parse.id_to_token(i) or f"[EMPTY_{i}]" for i in range(self.vocab_size)]
        ids = {t: i for i, t in enumerate(texts)}
        return next((ids[t] for t in unordered_map_order(dict.fromkeys(texts)) if t in EOT_TEXTS), None)

    def _load(self, special_spellings: bool) -> Tokenizer:
        t = Tokenizer.from_file(str(self._file))
        t.no_padding()  # a checkpoint's batch padding / truncation is not llama.cpp's
        t.no_truncation()
        t.encode_special_tokens = not special_spellings
        return t

    @cached_property
    def _literal(self) -> Tokenizer:
        """The instance that reads control-token spellings as text: built on first use (parse_special false
        is the rarer case), not at start-up."""
        return self._load(special_spellings=False)

    def _piece_bytes(self, token_id: int) -> bytes:
        text = self._parse.id_to_token(token_id)
        if text is None:
            return b""
        if token_id in self.added_ids:
            return text.encode("utf-8")
        if self.wordpiece:
            return (text[2:] if text.startswith("##") else " " + text).encode("utf-8")
        if self.sentencepiece:
            byte = _SPM_BYTE.fullmatch(text)
            return bytes([int(byte.group(1), 16)]) if byte else text.replace("\u2581", " ").encode("utf-8")
        dec = _byte_decoder()
        return bytes(dec[c] for c in text)

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        tok = self._parse if parse_special else self._literal
        encoding = tok.encode(text, add_special_tokens=False)
        ids = encoding.ids
        if self._gaps and not self._gaps.isdisjoint(text.encode("utf-8", "surrogatepass")):
            ids = self._across_gaps(tok, text, ids, encoding.offsets)
        return self.with_special(ids) if add_special else ids

    @cached_property
    def _gaps(self) -> frozenset[int]:
        """The bytes a byte-level BPE vocabulary has no symbol for (SmolLM2's: six control characters and bytes
        that lead no UTF-8 character): llama.cpp's BPE merges nothing across one, then drops it (its byte has no
        token), where `tokenizers` drops it first and merges its neighbours."""
        if self.wordpiece or self.sentencepiece:
            return frozenset()
        vocab = self._parse.get_vocab(with_added_tokens=False)
        return frozenset(b for c, b in _byte_decoder().items() if c not in vocab)

    def _across_gaps(self, tok: Tokenizer, text: str, ids: list[int], offsets: list) -> list[int]:
        """The text's tokens as llama_vocab's BPE session gives them where it holds a byte without a symbol: the
        added tokens as matched, each stretch between them pre-tokenized, each piece cut at those bytes and its
        parts merged alone."""
        out: list[int] = []
        at = 0
        for token, (start, end) in zip(ids, offsets, strict=True):
            if token in self.added_ids:
                out += self._stretch(tok, text[at:start])
                out.append(token)
                at = end
        return out + self._stretch(tok, text[at:])

    @cached_property
    def _gap_symbols(self) -> re.Pattern[str]:
        """The gap bytes' symbols (GPT-2's byte-level alphabet), as one character class to cut pieces at."""
        gap = sorted(c for c, b in _byte_decoder().items() if b in self._gaps)
        return re.compile(f"[{''.join(map(re.escape, gap))}]")

    def _stretch(self, tok: Tokenizer, text: str) -> list[int]:
        out: list[int] = []
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text) if text else ():
            for part in self._gap_symbols.split(piece):
                if part:
                    out += [t.id for t in tok.model.tokenize(part)]
        return out

    def with_special(self, ids: list[int]) -> list[int]:
        if self.wordpiece:
            return [self.bos_id, *ids, self.eos_id]
        if self.add_bos and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        if self.add_eos and self.eos_id is not None:
            ids = [*ids, self.eos_id]
        return ids

    def tokenize_mixed(self, content, add_special: bool, parse_special: bool) -> list[int]:
        """llama.cpp's tokenize_mixed: a string, or an array of strings and token ids."""
        if isinstance(content, str):
            return self.tokenize(content, add_special, parse_special)
        out: list[int] = []
        first = True
        for part in content:
            if isinstance(part, str):
                out.extend(self.tokenize(part, add_special and first, parse_special))
                first = False
            else:
                out.append(int(part))
                first = False
        return out

    def piece(self, token_id: int, special: bool = True) -> bytes:
        """Bytes of one token, as common_token_to_piece; control tokens only when `special`."""
        if not 0 <= token_id < self.vocab_size:
            return b""
        if token_id in self.special_ids and not special:
            return b""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._piece_bytes(token_id)
        return piece

    def detokenize(self, ids: Iterable[int], special: bool = True) -> str:
        return b"".join(self.piece(i, special) for i in ids).decode("utf-8", errors="replace")
