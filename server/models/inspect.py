"""What a model file holds and what mlxcel does with it, read without loading a weight (`mlxcel inspect`): a GGUF
file's header (gguf-py's reader maps the file; no tensor data is read), an MLX checkpoint's config.json,
tokenizer files and safetensors headers.

The verdict runs the checks the server runs before it converts or loads: a GGUF's architecture, its tensors'
types and its tokenizer (server/models/gguf_import.py), the draft heads a draft-model option loads, an MLX
checkpoint's model type (server/models/architectures.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .architectures import model_classes
from .bert import is_encoder_checkpoint
from .facts import _header, model_facts
from .gguf_arch import ARCHITECTURES
from .gguf_check import DamagedGGUF, check_gguf
from .gguf_import import FTYPE_NAMES, _field, _reader, read_vocab
from .gguf_quants import AFFINE_CONVERTERS, FLOAT32_HELD, KEPT_BLOCKS
from .gguf_tokenizer import UnsupportedTokenizer, tokenizer_json
from .loader import read_config

# GGUF architectures that are not served as a model but loaded beside one (server/cli/startup.py), -> how
DRAFT_HEADS = {
    "eagle3": "an EAGLE-3 draft head: served beside its target with --spec-draft-model (--spec-type draft-eagle3)",
    "dflash": "a DFlash/DSpark draft: served beside its target with --spec-draft-model",
}
ENCODER_ARCHS = {"bert", "nomic-bert", "jina-bert-v2", "modern-bert"}


@dataclass
class TensorKind:
    """The tensors of one storage type: how many, their elements and bytes."""

    dtype: str
    count: int = 0
    elements: int = 0
    nbytes: int = 0


@dataclass
class Report:
    kind: str  # "GGUF file", "MLX checkpoint"
    path: str
    architecture: str
    facts: list[tuple[str, str]] = field(default_factory=list)  # (what, value): dimensions, context, rope ...
    tensors: list[TensorKind] = field(default_factory=list)
    tokenizer: list[tuple[str, str]] = field(default_factory=list)
    template: str | None = None
    verdict: str = ""
    n_params: int = 0  # the model's parameters (a quantized weight counts the values it stands for)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def inspect(path: Path) -> Report:
    """A GGUF file's or an MLX checkpoint directory's report; ValueError when it is neither (or is damaged)."""
    if path.is_dir():
        return inspect_checkpoint(path)
    if path.is_file():
        return inspect_gguf(path)
    raise ValueError(f"'{path}' is neither a GGUF file nor an MLX checkpoint directory")


# --- GGUF -------------------------------------------------------------------------------------------------------


def inspect_gguf(path: Path) -> Report:

    try:
        header = check_gguf(path)
        reader = _reader(path, header, None)
    except DamagedGGUF as exc:
        raise ValueError(str(exc)) from None
    except (ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"unreadable GGUF {path} ({type(exc).__name__}: {exc})") from None

    def key(name: str, default=None):
        return _field(reader, name, default)

    arch = str(key("general.architecture", "?"))
    report = Report("GGUF file", str(path), arch)
    report.facts = _gguf_facts(key, arch)
    kinds: dict[str, TensorKind] = {}
    for t in reader.tensors:
        k = kinds.setdefault(t.tensor_type.name, TensorKind(t.tensor_type.name))
        k.count += 1
        k.elements += int(t.n_elements)
        k.nbytes += int(t.n_bytes)
    report.tensors = sorted(kinds.values(), key=lambda k: -k.nbytes)
    report.n_params = sum(k.elements for k in kinds.values())
    report.tokenizer, report.template, tokenizer_error = _gguf_tokenizer(reader)
    report.verdict = _gguf_verdict(arch, [t.tensor_type.name for t in reader.tensors], tokenizer_error)
    return report


def _gguf_facts(key, arch: str) -> list[tuple[str, str]]:

    facts = [("name", str(key("general.name", "") or "-"))]
    file_type = key("general.file_type")
    if file_type is not None:
        facts.append(("file type", FTYPE_NAMES.get(int(file_type), f"type {file_type}")))
    for label, suffix in (
        ("layers", "block_count"),
        ("embedding", "embedding_length"),
        ("feed-forward", "feed_forward_length"),
        ("heads", "attention.head_count"),
        ("kv heads", "attention.head_count_kv"),
        ("head size", "attention.key_length"),
        ("context (trained)", "context_length"),
        ("rope base", "rope.freq_base"),
        ("experts", "expert_count"),
        ("experts used", "expert_used_count"),
        ("sliding window", "attention.sliding_window"),
    ):
        value = key(f"{arch}.{suffix}")
        if value is not None:
            facts.append((label, _scalar(value)))
    return facts


def _scalar(value) -> str:
    if isinstance(value, list):
        return f"per layer: {', '.join(str(v) for v in value[:8])}{' ...' if len(value) > 8 else ''}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _gguf_tokenizer(reader) -> tuple[list[tuple[str, str]], str | None, str | None]:
    """(the tokenizer's facts, its chat template, why mlxcel cannot build it or None)."""

    if _field(reader, "tokenizer.ggml.tokens") is None:  # (a draft head's, a vocab-less file)
        return [("tokenizer", "none in the file")], None, "no tokenizer in the file"
    try:
        vocab = read_vocab(reader)
    except (KeyError, ValueError, IndexError, TypeError) as exc:
        return [("tokenizer", "unreadable")], None, f"an unreadable tokenizer ({type(exc).__name__}: {exc})"
    facts = [
        ("model", vocab.model or "-"),
        ("pre-tokenizer", vocab.pre or "-"),
        ("tokens", str(len(vocab.tokens))),
        ("merges", str(len(vocab.merges))),
        ("bos", _token(vocab, vocab.bos_id) + (" (added)" if vocab.add_bos else "")),
        ("eos", _token(vocab, vocab.eos_id)),
    ]
    try:
        tokenizer_json(vocab)
        error = None
    except UnsupportedTokenizer as exc:
        error = str(exc)
    return facts, vocab.chat_template, error


def _token(vocab, token_id: int | None) -> str:
    if token_id is None or not 0 <= token_id < len(vocab.tokens):
        return "-"
    return f"{token_id} {vocab.tokens[token_id]!r}"


def _gguf_verdict(arch: str, types: list[str], tokenizer_error: str | None) -> str:

    if arch in DRAFT_HEADS:
        return DRAFT_HEADS[arch]
    if arch in ENCODER_ARCHS:
        return (
            f"refused: mlxcel serves a {arch} encoder from its MLX checkpoint (a bundled one: mlxcel list), "
            "not from a GGUF"
        )
    if arch not in ARCHITECTURES:
        return f"refused: architecture '{arch}' is not supported (supported: {', '.join(ARCHITECTURES)})"
    importable = {"F32", "F16", "BF16", *AFFINE_CONVERTERS, *FLOAT32_HELD, *KEPT_BLOCKS}
    odd = sorted({t for t in types if t not in importable})
    if odd:
        return (
            f"refused: tensor type {', '.join(odd)}, which mlxcel cannot import losslessly (supported: "
            f"{', '.join(sorted(importable))})"
        )
    if tokenizer_error:
        return f"refused: {tokenizer_error}"
    kept = sorted({t for t in types if t in KEPT_BLOCKS})
    how = "; the K-quant and legacy blocks kept as the file stores them" if kept else ""
    return f"served: converted into an MLX checkpoint in the cache on first use (seconds), then reused{how}"


# --- MLX checkpoint --------------------------------------------------------------------------------------------


def inspect_checkpoint(path: Path) -> Report:

    config = read_config(path)
    report = Report("MLX checkpoint", str(path), str(config.get("model_type", "?")))
    quant = config.get("quantization") or {}
    for label, name in (
        ("layers", "num_hidden_layers"),
        ("embedding", "hidden_size"),
        ("feed-forward", "intermediate_size"),
        ("heads", "num_attention_heads"),
        ("kv heads", "num_key_value_heads"),
        ("head size", "head_dim"),
        ("context (trained)", "max_position_embeddings"),
        ("rope base", "rope_theta"),
        ("vocabulary", "vocab_size"),
        ("experts", "num_experts"),
        ("sliding window", "sliding_window"),
    ):
        if config.get(name) is not None:
            report.facts.append((label, _scalar(config[name])))
    if quant:
        report.facts.append(
            ("quantization", f"{quant.get('mode', 'affine')} {quant.get('bits')}-bit, group {quant.get('group_size')}")
        )
    source = config.get("mlxcel") or {}
    if source.get("gguf_name"):
        report.facts.append(("converted from", f"{source['gguf_name']} ({source.get('ftype', '?')})"))
    kinds: dict[str, TensorKind] = {}
    for f in sorted(path.glob("*.safetensors")):
        for name, info in _header(f).items():
            if name == "__metadata__":
                continue
            count = 1
            for d in info["shape"]:
                count *= int(d)
            start, end = info["data_offsets"]
            k = kinds.setdefault(info["dtype"], TensorKind(info["dtype"]))
            k.count += 1
            k.elements += count
            k.nbytes += int(end) - int(start)
    report.tensors = sorted(kinds.values(), key=lambda k: -k.nbytes)
    report.n_params = model_facts(path).n_params
    report.tokenizer, report.template = _checkpoint_tokenizer(path)
    report.verdict = _checkpoint_verdict(path, config, bool(kinds))
    return report


def _checkpoint_tokenizer(path: Path) -> tuple[list[tuple[str, str]], str | None]:
    facts: list[tuple[str, str]] = []
    tok = path / "tokenizer.json"
    if tok.is_file():
        data = json.loads(tok.read_text(encoding="utf-8"))
        model = data.get("model") or {}
        facts.append(("model", str(model.get("type", "-"))))
        ids = set((model.get("vocab") or {}).values()) | {t.get("id") for t in data.get("added_tokens") or []}
        facts.append(("tokens", str(len(ids))))
    else:
        facts.append(("tokenizer", "no tokenizer.json"))
    template = None
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        template = json.loads(config_file.read_text(encoding="utf-8")).get("chat_template")
    jinja = path / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return facts, template


def _checkpoint_verdict(path: Path, config: dict, has_weights: bool) -> str:

    if not has_weights:
        return "refused: no *.safetensors weights in the directory"
    if is_encoder_checkpoint(path):
        return "served with --embedding or --rerank (a BERT encoder)"
    try:
        model_classes(config)
    except (ValueError, KeyError) as exc:
        return f"refused: {exc}"
    return "served as it is (loaded by mlx-lm's architecture)"
