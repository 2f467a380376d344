"""BERT-family encoders (BERT, MiniLM, BERT cross-encoders) in MLX, computed as b10621's llm_build_bert is.

The checkpoint is the HF / sentence-transformers layout (config.json, model.safetensors, tokenizer.json,
1_Pooling/config.json). What follows llama.cpp rather than transformers, so that both servers give the same
numbers from the same weights:
- every token has token type 0 ("Sentence A"), a query and a document alike, as b10621 hardcodes;
- GELU is ggml's: the tanh form, looked up through fp16 (the input rounded to fp16, the result too), and
  x itself above 10, 0 below -10 (ggml-cpu/vec.h, GGML_GELU_FP16);
- a rank head is RoBERTa's (dense, tanh, out_proj), applied to the first token, as build_pooling does.
"""

from __future__ import annotations

import ctypes
import json
import math
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

GELU_COEF_A = 0.044715
SQRT_2_OVER_PI = 0.79788456080286535587989211986876


@dataclass(frozen=True)
class BertArgs:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_config(cls, cfg: dict) -> "BertArgs":
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


def is_encoder_checkpoint(checkpoint: Path) -> bool:
    try:
        cfg = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return cfg.get("model_type") == "bert"


def declared_pooling(checkpoint: Path) -> str | None:
    """The pooling a sentence-transformers checkpoint declares in 1_Pooling/config.json, as llama.cpp's
    converter reads it (mean, then cls, then last token); None when it declares none."""
    path = checkpoint / "1_Pooling" / "config.json"
    if not path.is_file():
        return None
    p = json.loads(path.read_text())
    if p.get("pooling_mode_mean_tokens"):
        return "mean"
    if p.get("pooling_mode_cls_token"):
        return "cls"
    if p.get("pooling_mode_lasttoken"):
        return "last"
    return {"mean": "mean", "cls": "cls", "lasttoken": "last"}.get(p.get("pooling_mode"))


def encoder_ftype(checkpoint: Path) -> str:
    """GET /props's model_ftype, as llama.cpp names the GGUF file type of the same weights."""
    header_size = int.from_bytes((checkpoint / "model.safetensors").open("rb").read(8), "little")
    with (checkpoint / "model.safetensors").open("rb") as f:
        f.seek(8)
        header = json.loads(f.read(header_size))
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"} & {"F32", "F16", "BF16"}  # no buffers
    return {
        frozenset({"F32"}): "all F32",
        frozenset({"F16"}): "mostly F16",
        frozenset({"BF16"}): "mostly BF16",
        frozenset({"F16", "F32"}): "mostly F16",
        frozenset({"BF16", "F32"}): "mostly BF16",
    }.get(frozenset(dtypes), "unknown")


def ggml_gelu(x: mx.array) -> mx.array:
    h = x.astype(mx.float16).astype(mx.float32)
    g = 0.5 * h * (1.0 + mx.tanh(SQRT_2_OVER_PI * h * (1.0 + GELU_COEF_A * h * h)))
    g = g.astype(mx.float16).astype(mx.float32)
    return mx.where(x <= -10.0, mx.zeros_like(x), mx.where(x >= 10.0, x, g))


class BertEncoder:
    """The weights as plain arrays under their HF names; `hidden` runs the encoder, `rank_head` the head."""

    def __init__(self, args: BertArgs, weights: dict[str, mx.array]):
        self.args = args
        self.w = {k.removeprefix("bert."): v.astype(mx.float32) for k, v in weights.items()}
        self.has_rank_head = "classifier.dense.weight" in self.w or "classifier.out_proj.weight" in self.w
        n_out = self.w["classifier.out_proj.weight"].shape[0] if "classifier.out_proj.weight" in self.w else None
        self.n_cls_out = n_out or args.hidden_size

    @classmethod
    def load(cls, checkpoint: Path) -> "BertEncoder":
        cfg = json.loads((checkpoint / "config.json").read_text())
        weights = mx.load(str(checkpoint / "model.safetensors"))
        model = cls(BertArgs.from_config(cfg), weights)
        mx.eval(list(model.w.values()))
        return model

    def _linear(self, x: mx.array, name: str) -> mx.array:
        y = x @ self.w[f"{name}.weight"].T
        bias = self.w.get(f"{name}.bias")
        return y if bias is None else y + bias

    def _norm(self, x: mx.array, name: str) -> mx.array:
        return mx.fast.layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.args.layer_norm_eps)

    def hidden(self, tokens: mx.array, lengths: list[int]) -> mx.array:
        """The last layer's output for a [batch, time] block of token ids, each row valid up to its length."""
        a = self.args
        n_batch, n_time = tokens.shape
        x = self.w["embeddings.word_embeddings.weight"][tokens]
        types = self.w.get("embeddings.token_type_embeddings.weight")
        if types is not None:
            x = x + types[0]
        x = self.w["embeddings.position_embeddings.weight"][:n_time] + x
        x = self._norm(x, "embeddings.LayerNorm")
        valid = mx.arange(n_time)[None, :] < mx.array(lengths)[:, None]
        mask = mx.where(valid, 0.0, -math.inf)[:, None, None, :].astype(mx.float32)
        n_head = a.num_attention_heads
        d_head = a.hidden_size // n_head
        scale = 1.0 / math.sqrt(d_head)
        for i in range(a.num_hidden_layers):
            p = f"encoder.layer.{i}."

            def heads(t: mx.array) -> mx.array:
                return t.reshape(n_batch, n_time, n_head, d_head).transpose(0, 2, 1, 3)

            q = heads(self._linear(x, p + "attention.self.query"))
            k = heads(self._linear(x, p + "attention.self.key"))
            v = heads(self._linear(x, p + "attention.self.value"))
            scores = mx.softmax((q @ k.transpose(0, 1, 3, 2)) * scale + mask, axis=-1)
            att = (scores @ v).transpose(0, 2, 1, 3).reshape(n_batch, n_time, a.hidden_size)
            x = self._norm(self._linear(att, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            ff = self._linear(ggml_gelu(self._linear(x, p + "intermediate.dense")), p + "output.dense")
            x = self._norm(ff + x, p + "output.LayerNorm")
        return x

    def rank_head(self, first: mx.array) -> mx.array:
        """build_pooling's rank head on the first token's hidden state: dense, tanh, then out_proj."""
        y = first
        if "classifier.dense.weight" in self.w:
            y = mx.tanh(self._linear(y, "classifier.dense"))
        if "classifier.out_proj.weight" in self.w:
            y = self._linear(y, "classifier.out_proj")
        return y


# ---- the same encoder through server/native/encoder_ggml.c: b10621's CPU arithmetic, bit for bit -------------

POOL_CODES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_LAYER_PARTS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
)


class _Bert(ctypes.Structure):
    _fields_ = [
        ("n_vocab", ctypes.c_int),
        ("n_pos", ctypes.c_int),
        ("hidden", ctypes.c_int),
        ("n_layer", ctypes.c_int),
        ("n_head", ctypes.c_int),
        ("n_ff", ctypes.c_int),
        ("n_cls_out", ctypes.c_int),
        ("eps", ctypes.c_float),
        *(
            (name, ctypes.c_void_p)
            for name in ("tok", "pos", "type0", "norm_w", "norm_b", "layers", "cls_w", "cls_b", "out_w", "out_b")
        ),
    ]


class NativeBert:
    """BertEncoder's interface (hidden, pool) over the native kernels; numpy weights, one sequence a call."""

    def __init__(self, args: BertArgs, weights: dict[str, np.ndarray], native):
        self.args = args
        self.native = native
        self.w = {k.removeprefix("bert."): np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
        self.has_rank_head = "classifier.dense.weight" in self.w or "classifier.out_proj.weight" in self.w
        out_w = self.w.get("classifier.out_proj.weight")
        self.n_cls_out = out_w.shape[0] if out_w is not None else args.hidden_size
        types = self.w.get("embeddings.token_type_embeddings.weight")
        self._type0 = None if types is None else np.ascontiguousarray(types[0])
        parts = []
        for i in range(args.num_hidden_layers):
            for part in _LAYER_PARTS:
                for kind in ("weight", "bias"):
                    parts.append(self._ptr(f"encoder.layer.{i}.{part}.{kind}"))
        self._layers = (ctypes.c_void_p * len(parts))(*parts)
        self._struct = _Bert(
            args.vocab_size,
            args.max_position_embeddings,
            args.hidden_size,
            args.num_hidden_layers,
            args.num_attention_heads,
            args.intermediate_size,
            self.n_cls_out,
            args.layer_norm_eps,
            self._ptr("embeddings.word_embeddings.weight"),
            self._ptr("embeddings.position_embeddings.weight"),
            None if self._type0 is None else self._type0.ctypes.data,
            self._ptr("embeddings.LayerNorm.weight"),
            self._ptr("embeddings.LayerNorm.bias"),
            ctypes.cast(self._layers, ctypes.c_void_p),
            self._ptr("classifier.dense.weight"),
            self._ptr("classifier.dense.bias"),
            self._ptr("classifier.out_proj.weight"),
            self._ptr("classifier.out_proj.bias"),
        )
        native.mlxcel_bert_hidden.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        native.mlxcel_bert_pool.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
        ]

    def _ptr(self, name: str) -> int | None:
        a = self.w.get(name)
        return None if a is None else a.ctypes.data

    @classmethod
    def load(cls, checkpoint: Path, native) -> "NativeBert":
        from safetensors.numpy import load_file  # deferred: safetensors (~3 ms) only for the native encoder

        cfg = json.loads((checkpoint / "config.json").read_text())
        return cls(BertArgs.from_config(cfg), load_file(str(checkpoint / "model.safetensors")), native)

    def hidden(self, tokens: list[int]) -> np.ndarray:
        ids = np.asarray(tokens, dtype=np.int32)
        out = np.empty((len(tokens), self.args.hidden_size), np.float32)
        rc = self.native.mlxcel_bert_hidden(ctypes.byref(self._struct), ids.ctypes.data, len(tokens), out.ctypes.data)
        if rc != 0:
            raise ValueError(f"the native encoder refused {len(tokens)} tokens ({rc})")
        return out

    def pool(self, hidden: np.ndarray, kind: str) -> np.ndarray:
        if kind == "none":
            return hidden
        out = np.empty(max(self.args.hidden_size, self.n_cls_out), np.float32)
        rc = self.native.mlxcel_bert_pool(
            ctypes.byref(self._struct), hidden.ctypes.data, len(hidden), POOL_CODES[kind], out.ctypes.data
        )
        if rc != 0:
            raise ValueError(f"the native encoder could not pool ({rc})")
        return out[: self.n_cls_out] if kind == "rank" and self.has_rank_head else out[: self.args.hidden_size]
