"""LLaVA-1.5's image encoder (mmproj projector type "mlp") as b10621's mtmd runs it on the CPU.

tools/mtmd/models/llava.cpp's graph, step for step, in numpy float32, with ggml-cpu's rounding points where they
move a value: the patch convolution's im2col in F16 (pixels and kernel rounded, products summed in float32), the
tower's flash attention with K and V cast to F16 and its output accumulated in F16 (the one-chunk path, taken
below 64 query rows), quick-GELU and GELU read from ggml's F16 tables, and the F16 projector matrices rounding
their input rows to F16. Two quirks of b10621's graph are kept as it has them: the class embedding is appended
after the patches (position n_patches), and the rows kept for the projector are 1..n_patches, so the first
patch's row is dropped and the class row is kept.

Pixels are prepared as mtmd's fixed-size preprocessor does for LLaVA: resized with its Pillow-port bicubic
filter onto a square canvas of (122, 116, 104), aspect kept (server/media/resample.py), then scaled and
normalized in float32. docs/media-plan.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..media import resample
from .ggml_ops import GgmlOps

LLAVA_PAD = (122, 116, 104)  # clip.cpp's image_pad_color for the llava projectors
GELU_QUICK_COEF = np.float32(-1.702)
SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)
GELU_COEF_A = np.float32(0.044715)


def _f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _table(fn) -> np.ndarray:
    """ggml's F16 lookup table of a unary function: every F16 value in, F16 out (ggml-cpu.c's init)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return fn(x).astype(np.float16)


def _gelu_quick(x: np.ndarray) -> np.ndarray:
    return (x * (np.float32(1.0) / (np.float32(1.0) + np.exp(GELU_QUICK_COEF * x)))).astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    inner = SQRT_2_OVER_PI * x * (np.float32(1.0) + GELU_COEF_A * x * x)
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32)


_TABLES: dict[str, np.ndarray] = {}


def _by_table(name: str, fn, x: np.ndarray) -> np.ndarray:
    table = _TABLES.get(name)
    if table is None:
        table = _TABLES[name] = _table(fn)
    return table[x.astype(np.float16).view(np.uint16)].astype(np.float32)


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """ggml_vec_gelu_quick_f32 (GGML_GELU_QUICK_FP16): the input rounded to F16, the table's F16 answer."""
    return _by_table("gelu_quick", _gelu_quick, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml_vec_gelu_f32 (GGML_GELU_FP16): 0 at or below -10, x at or above 10, else the F16 table."""
    out = _by_table("gelu", _gelu, x)
    return np.where(x <= -10.0, np.float32(0.0), np.where(x >= 10.0, x, out)).astype(np.float32)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """ggml_norm (mean and variance summed in double), then the weight and the bias in float32."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    centred = (x64 - mean).astype(np.float32)
    variance = (centred.astype(np.float64) ** 2).mean(axis=-1, keepdims=True)
    scale = np.float32(1.0) / np.sqrt((variance + eps).astype(np.float32))
    return (centred * scale * w + b).astype(np.float32)


def _mm(x: np.ndarray, w: np.ndarray, f16: bool) -> np.ndarray:
    """x @ w.T as ggml's mul_mat: an F16 matrix rounds the input rows to F16 (vec_dot_type F16)."""
    if f16:
        x = _f16(x)
    return (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)


def flash_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk for one head, no mask: Q and K as F16 dot products,
    the online softmax in float32, V summed into an F16 accumulator (each scale and multiply-add rounded)."""
    qh, kh, vh = _f16(q), _f16(k), _f16(v)
    out = np.empty_like(q)
    scale32 = np.float32(scale)
    for i in range(q.shape[0]):
        acc = np.zeros(v.shape[1], dtype=np.float16)
        m, s_sum = np.float32(-np.inf), np.float32(0.0)
        scores = (kh.astype(np.float64) @ qh[i].astype(np.float64)).astype(np.float32) * scale32
        for j in range(k.shape[0]):
            s = scores[j]
            ms, vs = np.float32(1.0), np.float32(1.0)
            if s > m:
                m_old, m = m, s
                ms = np.float32(math.exp(float(m_old - m))) if np.isfinite(m_old) else np.float32(0.0)
                acc = (acc.astype(np.float32) * ms).astype(np.float16)
            else:
                vs = np.float32(math.exp(float(s - m)))
            # ggml_vec_mad_f16: one fused multiply-add in float32 (a single rounding), stored as F16
            acc = (acc.astype(np.float64) + vh[j].astype(np.float64) * np.float64(vs)).astype(np.float32)
            acc = acc.astype(np.float16)
            s_sum = np.float32(s_sum * ms + vs)
        out[i] = acc.astype(np.float32) / s_sum
    return out


CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # the legacy converter's defaults (CLIP's)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def hf_tensor_name(hf: str) -> str:
    """convert_image_encoder_to_gguf.py's get_tensor_name: a CLIP tower's and LLaVA projector's HF names as the
    GGUF names them (fc1 stored as ffn_down, fc2 as ffn_up: clip.cpp swaps them back by shape)."""
    if hf.startswith("multi_modal_projector"):
        return hf.replace("multi_modal_projector", "mm").replace("linear_1", "0").replace("linear_2", "2")
    for a, b in (
        ("vision_model", "v"),
        ("encoder.layers", "blk"),
        ("embeddings.", ""),
        ("_proj", ""),
        ("self_attn.", "attn_"),
        ("layer_norm", "ln"),
        ("mlp.fc1", "ffn_down"),
        ("mlp.fc2", "ffn_up"),
        ("embedding", "embd"),
        ("layrnorm", "ln"),
    ):
        hf = hf.replace(a, b)
    return hf


@dataclass(frozen=True)
class ClipArgs:
    image_size: int
    patch_size: int
    hidden: int
    n_head: int
    n_layer: int  # the blocks run (llava.cpp's max_feature_layer)
    eps: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    use_gelu: bool

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def gguf_fields(path: Path):
    """An mmproj GGUF's key reader (key, default -> value), its tensors as float32 numpy arrays (numpy order:
    ggml's ne reversed) and the names stored in F16."""
    import gguf  # deferred: read only when a projector is given

    reader = gguf.GGUFReader(str(path))
    fields = {f.name: f for f in reader.fields.values()}

    def value(key: str, default=None):
        f = fields.get(key)
        if f is None:
            return default
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            return [f.parts[i][0].item() for i in f.data]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[-1]).decode()
        return f.parts[-1][0].item()

    tensors, f16 = {}, set()
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        tensors[t.name] = np.asarray(t.data).astype(np.float32).reshape(shape)
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            f16.add(t.name)
    return value, tensors, frozenset(f16)


class LlavaEncoder:
    """An mmproj GGUF of projector type "mlp": pixels in, one row a image token out (width: the text model's)."""

    begin = end = ""  # LLaVA adds no text around an image
    non_causal = False

    def __init__(self, args: ClipArgs, tensors: dict[str, np.ndarray], f16: frozenset[str], native: bool = True):
        self.args, self.t, self.f16 = args, tensors, f16
        self.ops = GgmlOps.load() if native else None  # ggml's own sums; None: numpy's (a few ulps apart)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """x @ W.T + b as ggml: an F16 matrix rounds the input rows to F16 (its vec_dot_type) first."""
        w, f16 = self.t[name + ".weight"], name + ".weight" in self.f16
        if self.ops is None:
            y = _mm(x, w, f16)
        else:
            y = self.ops.mul_mat(_f16(w) if f16 else w, _f16(x) if f16 else x)
        bias = self.t.get(name + ".bias")
        return y if bias is None else (y + bias).astype(np.float32)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w, b, eps = self.t[name + ".weight"], self.t[name + ".bias"], self.args.eps
        return layer_norm(x, w, b, eps) if self.ops is None else self.ops.norm(x, w, b, eps)

    def _act(self, x: np.ndarray, quick: bool) -> np.ndarray:
        if self.ops is None:
            return gelu_quick(x) if quick else gelu(x)
        return self.ops.gelu_quick(x) if quick else self.ops.gelu(x)

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        a = self.args
        d = a.hidden // a.n_head
        if self.ops is not None:
            return self.ops.attention(q, k, v, a.n_head, 1.0 / math.sqrt(d))
        heads = [
            flash_attention(
                q[:, j * d : (j + 1) * d], k[:, j * d : (j + 1) * d], v[:, j * d : (j + 1) * d], 1.0 / math.sqrt(d)
            )
            for j in range(a.n_head)
        ]
        return np.concatenate(heads, axis=1)

    @classmethod
    def from_hf(cls, path: Path, config: dict) -> "LlavaEncoder":
        """An integrated LLaVA checkpoint's tower and projector (config.json model_type llava; the weights in HF
        names, vision_tower.* and multi_modal_projector.*, in its safetensors), computed as the projector GGUF
        b10621's legacy converter would write from it: the patch embedding and the projector's matrices F16."""
        from safetensors.numpy import load_file  # deferred: read only for an integrated vision checkpoint

        vision = config.get("vision_config") or {}
        tensors: dict[str, np.ndarray] = {}
        for file in sorted(path.glob("*.safetensors")):
            for name, data in load_file(str(file)).items():
                name = name.removeprefix("model.")
                if name.startswith(("vision_tower.", "multi_modal_projector.")):
                    tensors[hf_tensor_name(name.removeprefix("vision_tower."))] = data.astype(np.float32)
        if "v.patch_embd.weight" not in tensors or "mm.0.weight" not in tensors:
            raise ValueError("no LLaVA vision tower and projector in its safetensors")
        kernel = tensors["v.patch_embd.weight"]
        if kernel.shape[-1] == 3 and kernel.shape[1] != 3:  # (mlx-vlm's layout: out, kh, kw, in)
            tensors["v.patch_embd.weight"] = np.ascontiguousarray(kernel.transpose(0, 3, 1, 2))
        n_layer = int(vision.get("num_hidden_layers", 0))
        feature = config.get("vision_feature_layer", -1)
        feature = feature[-1] if isinstance(feature, list) else int(feature)
        preprocessor = {}
        if (path / "preprocessor_config.json").is_file():
            preprocessor = json.loads((path / "preprocessor_config.json").read_text())
        args = ClipArgs(
            image_size=int(vision.get("image_size", 336)),
            patch_size=int(vision.get("patch_size", 14)),
            hidden=int(vision.get("hidden_size", 1024)),
            n_head=int(vision.get("num_attention_heads", 16)),
            n_layer=feature if feature >= 0 else n_layer + feature + 1,  # (the legacy converter's feature_layer)
            eps=float(np.float32(vision.get("layer_norm_eps", 1e-5))),
            mean=tuple(float(np.float32(x)) for x in preprocessor.get("image_mean", CLIP_MEAN)),  # type: ignore[arg-type]
            std=tuple(float(np.float32(x)) for x in preprocessor.get("image_std", CLIP_STD)),  # type: ignore[arg-type]
            use_gelu=vision.get("hidden_act", "quick_gelu") != "quick_gelu",
        )
        f16 = frozenset(
            n for n in tensors if n == "v.patch_embd.weight" or (n.startswith("mm.") and n.endswith("weight"))
        )
        return cls(args, tensors, f16)

    @classmethod
    def from_gguf(cls, path: Path) -> "LlavaEncoder":
        value, tensors, f16 = gguf_fields(path)
        projector = value("clip.projector_type", "mlp")
        if projector != "mlp":
            raise ValueError(f"projector type '{projector}' is not served yet (mlxcel runs LLaVA-1.5's, type mlp)")
        if value("clip.vision.image_grid_pinpoints", []):  # LLaVA-1.6: tiles (mtmd's llava_uhd preprocessor)
            raise ValueError("LLaVA-1.6's tiled images (clip.vision.image_grid_pinpoints) are not served yet")
        block_count = int(value("clip.vision.block_count"))
        feature = [int(x) for x in value("clip.vision.feature_layer", [])]
        args = ClipArgs(
            image_size=int(value("clip.vision.image_size")),
            patch_size=int(value("clip.vision.patch_size")),
            hidden=int(value("clip.vision.embedding_length")),
            n_head=int(value("clip.vision.attention.head_count")),
            n_layer=max(feature) if feature and max(feature) >= 0 else block_count - 1,
            eps=float(value("clip.vision.attention.layer_norm_epsilon", 1e-5)),
            mean=tuple(float(x) for x in value("clip.vision.image_mean")),  # type: ignore[arg-type]
            std=tuple(float(x) for x in value("clip.vision.image_std")),  # type: ignore[arg-type]
            use_gelu=bool(value("clip.use_gelu", False)),
        )
        return cls(args, tensors, f16)

    @property
    def n_tokens(self) -> int:
        return self.args.n_patches

    @property
    def n_embd(self) -> int:
        """The rows' width: the text model's it must be (clip_n_mmproj_embd)."""
        last = "mm.2.weight" if "mm.2.weight" in self.t else "mm.0.weight"
        return int(self.t[last].shape[0])

    def pixels(self, rgb: np.ndarray) -> np.ndarray:
        """mtmd's float image (3, S, S): the fixed-size square (bicubic, padded), u8 / 255, (x - mean) / std."""
        a = self.args
        square = resample.resize_padded(rgb, a.image_size, resample.Resize.BICUBIC, LLAVA_PAD)
        x = square.astype(np.float32) / np.float32(255.0)
        mean, std = np.array(a.mean, np.float32), np.array(a.std, np.float32)
        return ((x - mean) / std).transpose(2, 0, 1).astype(np.float32)

    def _ffn(self, x: np.ndarray, i: int) -> np.ndarray:
        """fc1 then the activation then fc2; the converter stores fc1 as ffn_down and fc2 as ffn_up, and clip.cpp
        takes the one whose output is the wider as the first (its swap by shape)."""
        t, p = self.t, f"v.blk.{i}."
        first, second = "ffn_up", "ffn_down"
        if t[p + "ffn_up.weight"].shape[0] == self.args.hidden:  # (ffn_up maps back to the hidden width)
            first, second = second, first
        h = self._act(self._linear(x, p + first), quick=not self.args.use_gelu)
        return self._linear(h, p + second)

    def _block(self, x: np.ndarray, i: int) -> np.ndarray:
        p = f"v.blk.{i}."
        h = self._norm(x, p + "ln1")
        q, k, v = (self._linear(h, p + f"attn_{n}") for n in "qkv")
        attn = self._linear(self._attention(q, k, v), p + "attn_out")
        x = (attn + x).astype(np.float32)
        h = self._norm(x, p + "ln2")
        return (x + self._ffn(h, i)).astype(np.float32)

    def encode(self, rgb: np.ndarray) -> np.ndarray:
        """The image's token rows (n_patches x the text model's width), float32."""
        a, t = self.args, self.t
        img = _f16(self.pixels(rgb))  # im2col in F16
        ps, side = a.patch_size, a.image_size // a.patch_size
        cols = img.reshape(3, side, ps, side, ps).transpose(1, 3, 0, 2, 4).reshape(side * side, 3 * ps * ps)
        kernel = _f16(t["v.patch_embd.weight"]).reshape(a.hidden, 3 * ps * ps)
        if self.ops is None:
            x = (cols.astype(np.float64) @ kernel.astype(np.float64).T).astype(np.float32)
        else:  # ggml_conv_2d: mul_mat(im2col, kernel), the patches as its first operand
            x = self.ops.mul_mat(cols, kernel).T.copy()
        if "v.patch_embd.bias" in t:
            x = x + t["v.patch_embd.bias"]
        if "v.class_embd" in t:  # appended after the patches, as llava.cpp's ggml_concat puts it
            x = np.concatenate([x, t["v.class_embd"][None, :]], axis=0)
        x = (x + t["v.position_embd.weight"][: x.shape[0]]).astype(np.float32)
        if "v.pre_ln.weight" in t:
            x = self._norm(x, "v.pre_ln")
        for i in range(a.n_layer):
            x = self._block(x, i)
        if "v.post_ln.weight" in t:
            x = self._norm(x, "v.post_ln")
        offset = 1 if "v.class_embd" in t else 0
        x = x[offset : offset + a.n_patches]  # rows 1..n_patches (clip.cpp's "patches" input)
        x = self._act(self._linear(x, "mm.0"), quick=False)
        if "mm.2.weight" in t:
            x = self._linear(x, "mm.2")
        return x.astype(np.float32)
