"""Qwen2-Audio's audio encoder (mmproj projector type "qwen2a") as b10621's mtmd runs it on the CPU.

tools/mtmd/models/whisper-enc.cpp: a log-mel chunk (n_mel x 3000 frames, server/media/mel.py) through two 1-D
convolutions (ggml_conv_1d_ph: the input and the F16 kernel in F16 im2col rows, the product in ggml's order, the
bias, GELU with erf; the second of stride 2), transposed to one row a position, the learned positions added, the
pre-norm blocks of build_vit (LayerNorm; q and v biased, k not; flash attention over F16-cast K and V, tiled from
64 rows as ggml tiles it; GELU-erf MLP), a 2-wide average pool (ggml_pool_1d: 0 + x0 + x1, then / 2), the
post-layernorm, then the projector's matrix and bias. 3000 frames are 1500 positions and 750 audio tokens; the
text model sees `<|audio_bos|>`, one span per 30-second chunk, `<|audio_eos|>`, decoded causally.

The sums are ggml-cpu's through server/models/ggml_ops.py (the towers' shared ops); without them (no compiler)
the numpy forms run, a few float32 ulps apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .clip_llava import _f16, _mm, flash_attention, gguf_fields, layer_norm
from .ggml_ops import GgmlOps

FRAMES = 3000  # mtmd's frames per mel chunk (30 s at a 160-sample hop)


@dataclass(frozen=True)
class AudioArgs:
    hidden: int
    n_head: int
    n_layer: int
    n_mel: int
    eps: float


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """ggml_gelu_erf in double-rounded numpy (the fallback without the native kernels: erf in double)."""
    x = np.asarray(x, np.float32)
    erf = np.vectorize(math.erf, otypes=[np.float64])(x * np.float32(0.70710678118654752440))
    return (np.float32(0.5) * x * (np.float32(1.0) + erf.astype(np.float32))).astype(np.float32)


def im2col_1d(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """ggml_im2col for a 1-D convolution, F16 out: x is channels x length; row ol holds x[c, ol*stride + j - pad]
    for c, then j (zero outside), as the kernel's (C, K) flattening orders them."""
    c, n = x.shape
    out_len = (n + 2 * pad - k) // stride + 1
    padded = np.zeros((c, n + 2 * pad), np.float32)
    padded[:, pad : pad + n] = _f16(x)
    idx = np.arange(out_len)[:, None] * stride + np.arange(k)[None, :]  # out_len x k
    cols = padded[:, idx]  # c x out_len x k
    return np.ascontiguousarray(cols.transpose(1, 0, 2).reshape(out_len, c * k))


class Qwen2AudioEncoder:
    """An mmproj GGUF of projector type "qwen2a": a mel chunk in, one row an audio token out (the text model's
    width)."""

    begin, end = "<|audio_bos|>", "<|audio_eos|>"  # mtmd's aud_beg / aud_end, tokenized as text
    non_causal = False
    modality = "audio"

    def __init__(self, args: AudioArgs, tensors: dict[str, np.ndarray], native: bool = True):
        self.args, self.t = args, tensors
        self.ops = GgmlOps.load() if native else None

    @classmethod
    def from_gguf(cls, path: Path) -> Qwen2AudioEncoder:
        value, tensors, _ = gguf_fields(path)
        args = AudioArgs(
            hidden=int(value("clip.audio.embedding_length")),
            n_head=int(value("clip.audio.attention.head_count")),
            n_layer=int(value("clip.audio.block_count")),
            n_mel=int(value("clip.audio.num_mel_bins")),
            eps=float(value("clip.audio.attention.layer_norm_epsilon", 1e-5)),
        )
        return cls(args, tensors)

    @property
    def n_tokens(self) -> int:
        """Tokens per 30-second chunk (clip_n_output_tokens: frames / 2, then / 2 for the pool)."""
        return FRAMES // 2 // 2

    @property
    def n_embd(self) -> int:
        return int(self.t["mm.a.fc.weight"].shape[0])

    def _mm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return _mm(x, w, False) if self.ops is None else self.ops.mul_mat(w, x)

    def _linear(self, x: np.ndarray, name: str, bias: bool = True) -> np.ndarray:
        y = self._mm(x, self.t[name + ".weight"])
        return (y + self.t[name + ".bias"]).astype(np.float32) if bias else y

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w, b, eps = self.t[name + ".weight"], self.t[name + ".bias"], self.args.eps
        return layer_norm(x, w, b, eps) if self.ops is None else self.ops.norm(x, w, b, eps)

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        return _gelu_erf(x) if self.ops is None else self.ops.gelu_erf(x)

    def _conv(self, x: np.ndarray, name: str, stride: int) -> np.ndarray:
        """ggml_conv_1d_ph (padding k / 2), its bias and GELU: channels x length in, channels x length out."""
        w = _f16(self.t[name + ".weight"])  # out x in x k (F16 in the GGUF)
        oc, ic, k = w.shape
        cols = im2col_1d(x, k, stride, k // 2)
        kernel = w.reshape(oc, ic * k)
        if self.ops is None:
            y = (kernel.astype(np.float64) @ cols.astype(np.float64).T).astype(np.float32)
        else:
            y = self.ops.mul_mat(cols, kernel)  # mul_mat(im2col, kernel): out channels x positions
        return self._gelu((y + self.t[name + ".bias"].reshape(oc, 1)).astype(np.float32))

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        a = self.args
        d = a.hidden // a.n_head
        if self.ops is None:
            cols = [slice(j * d, (j + 1) * d) for j in range(a.n_head)]
            return np.concatenate(
                [flash_attention(q[:, c], k[:, c], v[:, c], 1.0 / math.sqrt(d)) for c in cols], axis=1
            )
        return self.ops.attention(q, k, v, a.n_head, 1.0 / math.sqrt(d))

    def _block(self, x: np.ndarray, i: int) -> np.ndarray:
        p = f"a.blk.{i}."
        h = self._norm(x, p + "ln1")
        q = self._linear(h, p + "attn_q")
        k = self._linear(h, p + "attn_k", bias=False)
        v = self._linear(h, p + "attn_v")
        x = (self._linear(self._attention(q, k, v), p + "attn_out") + x).astype(np.float32)
        h = self._norm(x, p + "ln2")
        h = self._linear(self._gelu(self._linear(h, p + "ffn_up")), p + "ffn_down")
        return (x + h).astype(np.float32)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """A mel chunk's token rows (n_tokens x the text model's width), float32."""
        a, t = self.args, self.t
        x = self._conv(np.asarray(mel, np.float32), "a.conv1d.1", 1)
        x = self._conv(x, "a.conv1d.2", 2)
        x = np.ascontiguousarray(x.T)  # one row a position
        x = (x + t["a.position_embd.weight"][: x.shape[0]]).astype(np.float32)
        for i in range(a.n_layer):
            x = self._block(x, i)
        n = x.shape[0] // 2
        x = ((np.float32(0.0) + x[0 : 2 * n : 2] + x[1 : 2 * n : 2]) / np.float32(2.0)).astype(np.float32)
        x = self._norm(x, "a.post_ln")
        return self._linear(x, "mm.a.fc")
