"""Rebuild a Hugging Face `tokenizers` tokenizer from a GGUF vocabulary, the way llama.cpp reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from .vocab_rules import (
    EOG_TEXTS,
    FIM_EOG_KINDS,
    FIM_TEXTS,
    IGNORE_MERGES,
    PRE_TOKENIZER_REGEXES,
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_USER_DEFINED,
    rstrip_tokens,
)


class UnsupportedTokenizer(ValueError):
    """The GGUF's tokenizer cannot be rebuilt faithfully; never fall back silently."""


@dataclass(frozen=True)
class GGUFVocab:
    model: str  # tokenizer.ggml.model
    pre: str  # tokenizer.ggml.pre
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None
    fim_declared: dict[str, int] = field(default_factory=dict)  # tokenizer.ggml.fim_*_token_id
    eot_declared: int | None = None  # tokenizer.ggml.eot_token_id
    scores: list[float] = field(default_factory=list)  # tokenizer.ggml.scores (SentencePiece's merge order)
    add_space_prefix: bool = True  # tokenizer.ggml.add_space_prefix (SentencePiece only)
    general_name: str = ""  # general.name: llama-vocab.cpp sets some tokens' attributes by the model's name

    def fim_ids(self) -> dict[str, int]:
        """The FIM tokens llama-vocab.cpp finds: declared in the GGUF, else by their spelling."""
        out = {}
        for kind, texts in FIM_TEXTS.items():
            if kind in self.fim_declared:
                out[kind] = self.fim_declared[kind]
            else:
                found = next((i for i, t in enumerate(self.tokens) if t in texts), None)
                if found is not None:
                    out[kind] = found
        return out

    def eog_ids(self) -> list[int]:
        ids = {i for i, t in enumerate(self.tokens) if t in EOG_TEXTS}
        fim = self.fim_ids()
        ids.update(fim[k] for k in FIM_EOG_KINDS if k in fim)
        if self.eos_id is not None:
            ids.add(self.eos_id)
        return sorted(ids)

    def token_text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokens[token_id]


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    regexes = PRE_TOKENIZER_REGEXES.get(pre)
    if regexes is None:
        known = ", ".join(sorted(PRE_TOKENIZER_REGEXES))
        raise UnsupportedTokenizer(f"unknown pre-tokenizer '{pre}' (known: {known})")
    steps: list[pre_tokenizers.PreTokenizer] = []
    for rx in regexes:
        if rx == r"\p{N}":
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        else:
            steps.append(pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)


SPM_SPACE = "\u2581"  # SentencePiece's escaped space


def build_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    if vocab.model == "gpt2":
        tok = _byte_level_bpe(vocab)
    elif vocab.model == "llama":
        tok = _sentencepiece_bpe(vocab)
    else:
        raise UnsupportedTokenizer(
            f"tokenizer model '{vocab.model}' is not supported (only byte-level BPE 'gpt2' and SentencePiece 'llama')"
        )
    added = []
    rstrip = rstrip_tokens(vocab.general_name)
    for text, ttype in zip(vocab.tokens, vocab.token_types, strict=False):
        if ttype in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED):
            # control tokens are matched only when parse_special is on; user-defined ones always
            strip = rstrip(text)
            added.append(AddedToken(text, special=ttype == TOKEN_TYPE_CONTROL, normalized=False, rstrip=strip))
    tok.add_tokens(added)
    return tok


def _byte_level_bpe(vocab: GGUFVocab) -> Tokenizer:
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(vocab.tokens)},
        merges=[tuple(m.split(" ", 1)) for m in vocab.merges],
        unk_token=None,
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=vocab.pre in IGNORE_MERGES,
    )
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = _pre_tokenizer(vocab.pre)
    tok.decoder = decoders.ByteLevel()
    return tok


def spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece's vocabulary as ranked BPE merges (transformers' SentencePieceExtractor, from which
    llama.cpp's test pairs were made): every split of a token into two tokens, ranked by the token's score,
    highest first, ties in vocabulary order."""
    ids = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for token, score in zip(tokens, scores, strict=True):
        local = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in ids and token[k:] in ids]
        local.sort(key=lambda pair: (ids[pair[0]], ids[pair[1]]))
        ranked.extend((score, pair) for pair in local)
    ranked.sort(key=lambda item: -item[0])  # stable: equal scores keep vocabulary order
    return [pair for _, pair in ranked]


def _sentencepiece_bpe(vocab: GGUFVocab) -> Tokenizer:
    """llama.cpp's SPM tokenizer (llm_tokenizer_spm): a space prefixed to each run of text (add_space_prefix),
    spaces escaped as U+2581, the highest-scoring merges first, bytes of what forms no token as <0xXX>."""
    if len(vocab.scores) != len(vocab.tokens):
        raise UnsupportedTokenizer("a SentencePiece vocabulary without tokenizer.ggml.scores")
    unk = vocab.token_text(vocab.unk_id)
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(vocab.tokens)},
        merges=spm_merges(vocab.tokens, vocab.scores),
        unk_token=unk,
        fuse_unk=True,
        byte_fallback=True,
    )
    tok = Tokenizer(bpe)
    steps = [normalizers.Prepend(SPM_SPACE)] if vocab.add_space_prefix else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPM_SPACE)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return tok


def tokenizer_config(vocab: GGUFVocab) -> dict:
    """tokenizer_config.json for transformers / mlx-lm, plus the flags llama.cpp reads from GGUF."""
    added_decoder = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": tt == TOKEN_TYPE_CONTROL,
        }
        for i, (t, tt) in enumerate(zip(vocab.tokens, vocab.token_types, strict=False))
        if tt in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        "bos_token": vocab.token_text(vocab.bos_id),
        "eos_token": vocab.token_text(vocab.eos_id),
        "unk_token": vocab.token_text(vocab.unk_id),
        "pad_token": vocab.token_text(vocab.pad_id),
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 30,
        "added_tokens_decoder": added_decoder,
        # mlxcel: the GGUF facts the server needs at run time
        "gguf_pre_tokenizer": vocab.pre,
        "gguf_tokenizer_model": vocab.model,
        "gguf_eog_token_ids": vocab.eog_ids(),
        "gguf_fim_token_ids": vocab.fim_ids(),
    }
    if vocab.eot_declared is not None:
        cfg["gguf_eot_token_id"] = vocab.eot_declared
    if vocab.chat_template is not None:
        cfg["chat_template"] = vocab.chat_template
    return cfg


def tokenizer_json(vocab: GGUFVocab) -> str:
    return json.dumps(json.loads(build_tokenizer(vocab).to_str()), ensure_ascii=False)
