"""YaRN and the rest of ggml's rope_ext parameters: --rope-scaling yarn and the --yarn-* knobs.

llama_context resolves them (src/llama-context.cpp): ext_factor from --yarn-ext-factor, else 1 under YaRN
scaling and 0 otherwise; attn_factor from --yarn-attn-factor, else 1, recomputed from the scale whenever
ext_factor is not 0 (so the flag acts only with ext_factor 0); the betas from their flags, else 32 and 1;
the original context from --yarn-orig-ctx, else the model's training context. ggml then mixes each pair's
interpolated and extrapolated angle by a ramp between the correction dims and scales cos and sin by the
magnitude (rope_yarn). `YarnRoPE` is a plain rope carrying those four numbers; the native steps and the
rope kernel compute its angles as ggml does (server/native/cpu_kernels.c rope_angles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx import nn

from .. import cpu_kernels

HPARAMS_BETA_FAST, HPARAMS_BETA_SLOW = 32.0, 1.0  # llama_hparams' yarn_beta_fast / yarn_beta_slow


@dataclass(frozen=True)
class YarnFlags:
    """The --yarn-* values as given (their sentinels: -1, and 0 for the original context) and whether the
    rope scaling type is YaRN."""

    scaling_yarn: bool = False
    ext_factor: float = -1.0
    attn_factor: float = -1.0
    beta_fast: float = -1.0
    beta_slow: float = -1.0
    orig_ctx: int = 0

    @property
    def given(self) -> bool:
        return self != YarnFlags()


def _f32(x: float) -> float:
    return float(np.float32(x))


def resolve(flags: YarnFlags, freq_scale: float, n_ctx_train: int) -> tuple[float, float, float, float, int]:
    """llama_context's (ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig_yarn)."""
    ext = flags.ext_factor if flags.ext_factor >= 0 else (1.0 if flags.scaling_yarn else 0.0)
    attn = flags.attn_factor if flags.attn_factor >= 0 else 1.0
    if ext != 0:
        factor = _f32(1.0 / freq_scale)
        attn = 1.0 if factor <= 1.0 else _f32(0.1 * math.log(factor) + 1.0)
        attn = _f32(attn * _f32(1.0 / _f32(1.0 + 0.1 * math.log(factor))))
    beta_fast = flags.beta_fast if flags.beta_fast >= 0 else HPARAMS_BETA_FAST
    beta_slow = flags.beta_slow if flags.beta_slow >= 0 else HPARAMS_BETA_SLOW
    orig = flags.orig_ctx if flags.orig_ctx != 0 else n_ctx_train
    return _f32(ext), _f32(attn), beta_fast, beta_slow, orig


def corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims."""

    def dim(n_rot: float) -> float:
        return float(np.float32(n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))))

    start, end = math.floor(dim(beta_fast)), math.ceil(dim(beta_slow))
    return float(max(0, start)), float(min(n_dims - 1, end))


class YarnRoPE(nn.RoPE):
    """nn.RoPE (rotate-half) with ggml's ext_factor, attn_factor and correction dims (`yarn`)."""

    def __init__(self, dims: int, base: float, scale: float, yarn: tuple[float, float, float, float]):
        super().__init__(dims, traditional=False, base=base, scale=scale)
        self.__dict__["yarn"] = tuple(float(np.float32(v)) for v in yarn)  # numbers, not parameters

    def _angles(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin (positions x dims / 2), as rope_angles computes them in float32."""
        ext, mscale, low, high = (np.float32(v) for v in self.yarn)
        half = self.dims // 2
        scale = np.float32(self.scale)
        theta_scale = np.float32(np.power(np.float32(self.base), np.float32(-2.0) / np.float32(self.dims)))
        theta = positions.astype(np.float32)[:, None] * np.cumprod(
            np.concatenate([[np.float32(1)], np.full(half - 1, theta_scale, np.float32)]), dtype=np.float32
        )
        angle = scale * theta
        if ext != 0:
            j = np.arange(half, dtype=np.float32)
            y = (j - low) / max(np.float32(0.001), high - low)
            mix = (np.float32(1) - np.clip(y, 0, 1)) * ext
            angle = angle * (np.float32(1) - mix) + theta * mix
            mscale = mscale * np.float32(1 + np.float32(0.1) * np.log(np.float32(1) / scale))
        return (np.cos(angle) * mscale).astype(np.float32), (np.sin(angle) * mscale).astype(np.float32)

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        batch, length = x.shape[0], x.shape[-2]
        offsets = offset.tolist() if isinstance(offset, mx.array) else [int(offset)] * batch
        if isinstance(offsets, int):
            offsets = [offsets] * batch
        if cpu_kernels.available() and x.ndim == 4:
            return cpu_kernels.rope(x.astype(mx.float32), self.dims, self.base, self.scale, offsets, self.yarn).astype(
                x.dtype
            )
        return rotate_half(x, self.dims, [self._angles(np.arange(o, o + length)) for o in offsets])


def rotate_half(x: mx.array, dims: int, angles: list[tuple[np.ndarray, np.ndarray]]) -> mx.array:
    """x (batch, heads, length, head_dim) turned by per-row (cos, sin) tables (length x dims / 2), rotate-half
    pairs (element i with i + dims / 2), the dimensions past `dims` left as they are."""
    half = dims // 2
    cos, sin = zip(*angles, strict=True)
    c = mx.array(np.stack(cos))[:, None].astype(x.dtype)
    s = mx.array(np.stack(sin))[:, None].astype(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half:dims], x[..., dims:]
    return mx.concatenate([x1 * c - x2 * s, x1 * s + x2 * c, rest], axis=-1)


def install(model: nn.Module, flags: YarnFlags, n_ctx_train: int) -> int:
    """Every plain rope whose resolved parameters are not the plain ones (ext_factor 0, attn_factor 1) becomes
    a YarnRoPE. Returns how many were replaced, 0 when none needed it, and -1 when one would have and no
    rope of the model could take it (a scaled variant computes its own angles): refused, not ignored."""
    replaced, needed = 0, False
    for _, module in model.named_modules():
        for name, child in list(module.children().items()):
            if "rope" not in type(child).__name__.lower():
                continue
            ext, attn, beta_fast, beta_slow, orig = resolve(flags, getattr(child, "scale", 1.0), n_ctx_train)
            if ext == 0 and attn == 1:
                continue
            needed = True
            if type(child) is nn.RoPE and not child.traditional:
                low, high = corr_dims(child.dims, orig, child.base, beta_fast, beta_slow)
                setattr(module, name, YarnRoPE(child.dims, child.base, child.scale, (ext, attn, low, high)))
                replaced += 1
    return -1 if needed and not replaced else replaced
