"""Gemma 3's image encoder (mmproj projector type "gemma3") as b10621's mtmd runs it on the CPU.

tools/mtmd/models/siglip.cpp's graph: the SigLIP tower (patch convolution with its bias, the learned position
embedding, pre-norm blocks with GELU, the post-layernorm), then Gemma 3's projector: the patches averaged over
n_merge x n_merge squares (ggml_pool_2d: float32 sums in row order, then the division), RMSNorm times
soft_emb_norm, and the F16 input projection. The sums are ggml-cpu's through server/models/ggml_ops.py (as for
LLaVA); the pool and the RMSNorm are exact in numpy (ggml's sums are plain loops there).

Pixels: mtmd's fixed-size preprocessor with bilinear resizing on a black square. In the prompt an image is
`<start_of_image>`, its tokens, `<end_of_image>`, and b10621 decodes its tokens non-causally (each sees the whole
image): `non_causal`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..media import resample
from .clip_llava import ClipArgs, _f16, _mm, flash_attention, gelu, gguf_fields, layer_norm
from .ggml_ops import GgmlOps


def rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """ggml_rms_norm: the squares (float32) summed in order in double, the mean as float, 1 / sqrtf(mean + eps)."""
    out = np.empty_like(x, dtype=np.float32)
    for r, row in enumerate(np.asarray(x, np.float32)):
        total = np.cumsum((row * row).astype(np.float64))[-1]
        mean = np.float32(total / row.size)
        scale = np.float32(1.0) / np.sqrt(mean + np.float32(eps))
        out[r] = row * scale
    return out


def avg_pool(x: np.ndarray, side: int, k: int) -> np.ndarray:
    """ggml_pool_2d(AVG, k, k, stride k) over patches in row-major order (n x width): per output, 0 plus each input
    in ky, kx order in float32, then divided by k * k; the pooled rows in row-major order."""
    grid = np.asarray(x, np.float32).reshape(side, side, -1)
    out_side = side // k
    acc = np.zeros((out_side, out_side, grid.shape[2]), np.float32)
    for ky in range(k):
        for kx in range(k):
            acc = (acc + grid[ky : out_side * k : k, kx : out_side * k : k]).astype(np.float32)
    return (acc / np.float32(k * k)).reshape(out_side * out_side, -1).astype(np.float32)


_SIGLIP_NAMES = (
    ("embeddings.patch_embedding", "v.patch_embd"),
    ("embeddings.position_embedding", "v.position_embd"),
    ("post_layernorm", "v.post_ln"),
    ("encoder.layers.", "v.blk."),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.out_proj", "attn_out"),
    ("layer_norm1", "ln1"),
    ("layer_norm2", "ln2"),
    ("mlp.fc1", "ffn_up"),
    ("mlp.fc2", "ffn_down"),
)


def gguf_tensor_name(hf: str) -> str:
    """Gemma3ForConditionalGeneration's tower and projector names as convert_hf_to_gguf.py --mmproj names them
    (gguf-py's MODEL_TENSOR.V_* map)."""
    if hf.startswith("multi_modal_projector."):
        return "mm." + hf.removeprefix("multi_modal_projector.").removeprefix("mm_").replace("_weight", ".weight")
    name = hf.removeprefix("vision_tower.vision_model.")
    for a, b in _SIGLIP_NAMES:
        name = name.replace(a, b)
    return name


def _hf_tensors(path: Path) -> dict[str, np.ndarray]:
    """The tower's and projector's tensors of an integrated checkpoint's safetensors, under their GGUF names and
    as the converter stores them (soft_emb_norm as 1 + w, the input projection F16)."""
    from safetensors.numpy import load_file  # deferred: read only for an integrated vision checkpoint

    out: dict[str, np.ndarray] = {}
    for file in sorted(path.glob("*.safetensors")):
        for name, data in load_file(str(file)).items():
            name = name.removeprefix("model.")  # (newer HF layouts: model.vision_tower.*)
            if not name.startswith(("vision_tower.", "multi_modal_projector.")) or "vision_model.head." in name:
                continue
            data = np.asarray(data, np.float32)
            if name.endswith("soft_emb_norm.weight"):
                data = data + np.float32(1.0)  # Gemma3VisionModel.modify_tensors
            if "input_projection" in name:
                data = _f16(data)  # tensor_force_quant: F16
            out[gguf_tensor_name(name)] = data
    return out


class Gemma3Encoder:
    """An mmproj GGUF of projector type "gemma3": pixels in, one row an image token out (the text model's width)."""

    begin, end = "<start_of_image>", "<end_of_image>"  # mtmd's img_beg / img_end, tokenized as text
    non_causal = True

    def __init__(self, args: ClipArgs, tensors: dict[str, np.ndarray], merge: int, native: bool = True):
        self.args, self.t, self.merge = args, tensors, merge
        self.ops = GgmlOps.load() if native else None

    @classmethod
    def from_gguf(cls, path: Path) -> "Gemma3Encoder":
        value, tensors, _ = gguf_fields(path)
        args = ClipArgs(
            image_size=int(value("clip.vision.image_size")),
            patch_size=int(value("clip.vision.patch_size")),
            hidden=int(value("clip.vision.embedding_length")),
            n_head=int(value("clip.vision.attention.head_count")),
            n_layer=int(value("clip.vision.block_count")),
            eps=float(value("clip.vision.attention.layer_norm_epsilon", 1e-6)),
            mean=tuple(float(x) for x in value("clip.vision.image_mean")),  # type: ignore[arg-type]
            std=tuple(float(x) for x in value("clip.vision.image_std")),  # type: ignore[arg-type]
            use_gelu=bool(value("clip.use_gelu", True)),
        )
        return cls(args, tensors, int(value("clip.vision.projector.scale_factor", 4)))

    @classmethod
    def from_hf(cls, path: Path, config: dict) -> "Gemma3Encoder":
        """An integrated Gemma 3 checkpoint's tower and projector (config.json model_type gemma3), computed as the
        projector GGUF `convert_hf_to_gguf.py --mmproj` writes from it (Gemma3VisionModel: its defaults, its
        scale factor from preprocessor_config's image_seq_length)."""
        vision = config.get("vision_config") or {}
        file = path / "preprocessor_config.json"
        pre = json.loads(file.read_text()) if file.is_file() else {}
        tensors = _hf_tensors(path)
        if "v.patch_embd.weight" not in tensors or "mm.input_projection.weight" not in tensors:
            raise ValueError("no Gemma 3 vision tower and projector in its safetensors")
        image, patch = int(vision.get("image_size", 896)), int(vision.get("patch_size", 14))
        args = ClipArgs(
            image_size=image,
            patch_size=patch,
            hidden=int(vision.get("hidden_size", 1152)),
            n_head=int(vision.get("num_attention_heads", 16)),
            n_layer=int(vision.get("num_hidden_layers", 27)),
            eps=float(np.float32(vision.get("layer_norm_eps", 1e-6))),
            mean=tuple(float(np.float32(x)) for x in pre.get("image_mean", (0.5, 0.5, 0.5))),  # type: ignore[arg-type]
            std=tuple(float(np.float32(x)) for x in pre.get("image_std", (0.5, 0.5, 0.5))),  # type: ignore[arg-type]
            use_gelu=True,
        )
        merge = (image // patch) // int(int(pre.get("image_seq_length", 256)) ** 0.5)
        return cls(args, tensors, merge if merge > 0 else 4)

    @property
    def side(self) -> int:
        return self.args.image_size // self.args.patch_size

    @property
    def n_tokens(self) -> int:
        return (self.side // self.merge) ** 2

    @property
    def n_embd(self) -> int:
        return int(self.t["mm.input_projection.weight"].shape[1])

    def pixels(self, rgb: np.ndarray) -> np.ndarray:
        a = self.args
        square = resample.resize_padded(rgb, a.image_size, resample.Resize.BILINEAR, (0, 0, 0))
        x = square.astype(np.float32) / np.float32(255.0)
        mean, std = np.array(a.mean, np.float32), np.array(a.std, np.float32)
        return ((x - mean) / std).transpose(2, 0, 1).astype(np.float32)

    def _mm(self, x: np.ndarray, w: np.ndarray, f16: bool) -> np.ndarray:
        if self.ops is None:
            return _mm(x, w, f16)
        return self.ops.mul_mat(_f16(w) if f16 else w, _f16(x) if f16 else x)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return (self._mm(x, self.t[name + ".weight"], False) + self.t[name + ".bias"]).astype(np.float32)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w, b, eps = self.t[name + ".weight"], self.t[name + ".bias"], self.args.eps
        return layer_norm(x, w, b, eps) if self.ops is None else self.ops.norm(x, w, b, eps)

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        return gelu(x) if self.ops is None else self.ops.gelu(x)

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        a = self.args
        d = a.hidden // a.n_head
        if self.ops is not None:
            return self.ops.attention(q, k, v, a.n_head, 1.0 / math.sqrt(d))
        cols = [slice(j * d, (j + 1) * d) for j in range(a.n_head)]
        return np.concatenate([flash_attention(q[:, c], k[:, c], v[:, c], 1.0 / math.sqrt(d)) for c in cols], axis=1)

    def _block(self, x: np.ndarray, i: int) -> np.ndarray:
        p = f"v.blk.{i}."
        h = self._norm(x, p + "ln1")
        q, k, v = (self._linear(h, p + f"attn_{n}") for n in "qkv")
        x = (self._linear(self._attention(q, k, v), p + "attn_out") + x).astype(np.float32)
        h = self._norm(x, p + "ln2")
        h = self._linear(self._gelu(self._linear(h, p + "ffn_up")), p + "ffn_down")
        return (x + h).astype(np.float32)

    def encode(self, rgb: np.ndarray) -> np.ndarray:
        """The image's token rows (n_tokens x the text model's width), float32."""
        a, t = self.args, self.t
        img = _f16(self.pixels(rgb))  # im2col in F16, the kernel converted to F16 for the product
        ps, side = a.patch_size, self.side
        cols = img.reshape(3, side, ps, side, ps).transpose(1, 3, 0, 2, 4).reshape(side * side, 3 * ps * ps)
        kernel = _f16(t["v.patch_embd.weight"]).reshape(a.hidden, 3 * ps * ps)
        if self.ops is None:
            x = (cols.astype(np.float64) @ kernel.astype(np.float64).T).astype(np.float32)
        else:
            x = self.ops.mul_mat(cols, kernel).T.copy()
        x = (x + t["v.patch_embd.bias"]).astype(np.float32)
        x = (x + t["v.position_embd.weight"][: x.shape[0]]).astype(np.float32)
        for i in range(a.n_layer):
            x = self._block(x, i)
        x = self._norm(x, "v.post_ln")
        x = avg_pool(x, side, self.merge)
        x = (rms_norm(x, a.eps) * t["mm.soft_emb_norm.weight"]).astype(np.float32)
        # ggml_mul_mat(cont(transpose(input_projection)), x): the F16 matrix's columns as rows
        return self._mm(x, np.ascontiguousarray(t["mm.input_projection.weight"].T), True)
