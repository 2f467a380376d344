"""Upstream (b10621 src/llama-vocab.cpp) vocabulary facts, kept in one place."""

from __future__ import annotations

from typing import Callable

# GGUF tokenizer.ggml.token_type values
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6

# Token texts that llama-vocab.cpp always treats as end-of-generation.
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    }
)

# The EOT token's spellings, unless the GGUF names it (tokenizer.ggml.eot_token_id): the first of these that
# llama-vocab.cpp's walk of its token_to_id (an unordered_map, so in libstdc++'s order) meets
EOT_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "<｜end▁of▁sentence｜>",
        "<end_of_utterance>",
    }
)

# FIM tokens by their spellings (first found wins), unless the GGUF names them (tokenizer.ggml.fim_*_token_id)
FIM_TEXTS: dict[str, frozenset[str]] = {
    "pre": frozenset(
        {
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        }
    ),
    "suf": frozenset(
        {
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        }
    ),
    "mid": frozenset(
        {
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        }
    ),
    "pad": frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    "rep": frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}),
    "sep": frozenset({"<|file_sep|>"}),
}
FIM_EOG_KINDS = ("pad", "rep", "sep")  # these FIM tokens end generation too

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# DeepSeek LLM's and Coder's splits (llama-vocab.cpp's exact character classes)
_DEEPSEEK_LLM = (
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
)
_DEEPSEEK_CODER = ("[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}")
_QWEN35 = (
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
_GPT2_SPLITS = (r"\p{N}", _GPT2)  # digits alone, then GPT-2's split
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")  # no or an unknown-to-its-converter pre

# tokenizer.ggml.pre -> the ordered regex splits llama.cpp applies before byte-level BPE (llm_tokenizer_bpe's
# regex_exprs, by the pre-tokenizer names llama_vocab::impl::load maps to each). "\p{N}" alone means "split
# every digit off".
PRE_TOKENIZER_REGEXES: dict[str, tuple[str, ...]] = {
    "default": _DEFAULT,
    "gpt-2": (_GPT2,),
    "gpt2": (_GPT2,),
    "mpt": (_GPT2,),
    "olmo": (_GPT2,),
    "phi-2": (_GPT2,),
    "smollm": _GPT2_SPLITS,
    "starcoder": _GPT2_SPLITS,
    "refact": _GPT2_SPLITS,
    "command-r": _GPT2_SPLITS,
    "falcon": _FALCON,
    "llama-bpe": (_LLAMA3,),
    "llama3": (_LLAMA3,),
    "llama-v3": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "deepseek-r1-qwen": (_QWEN2,),
    "qwen35": (_QWEN35,),
    "deepseek-llm": _DEEPSEEK_LLM,
    "deepseek-coder": _DEEPSEEK_CODER,
}
# the pre-tokenizers for which llama.cpp takes a whole split that is itself a token without merging it
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe"})

# add_bos when the GGUF has no tokenizer.ggml.add_bos_token (llama_vocab::impl::load): false for BPE vocabularies
# but these pre-tokenizers', true for SentencePiece and WordPiece, false for Unigram and RWKV
ADD_BOS_PRE = frozenset(
    {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"}
    | {"tekken", "chameleon"}
)


def default_add_bos(model: str, pre: str) -> bool:
    if model == "gpt2":
        return pre in ADD_BOS_PRE
    return model in ("llama", "bert")


def rstrip_tokens(general_name: str) -> Callable[[str], bool]:
    """Which special tokens eat the whitespace after them (LLAMA_TOKEN_ATTR_RSTRIP), by llama_vocab::load's
    name rule: a model whose general.name has "phi-3" or "phi3" in it gets the attribute on every special token
    and </s>, but not on <unk>, <s> and <|endoftext|> (Phi-3's chat template puts a newline after each)."""
    name = general_name.lower()
    if "phi-3" in name or "phi3" in name:
        return lambda text: text not in ("<unk>", "<s>", "<|endoftext|>")
    return lambda text: False
