"""Qwen3.5 (dense) on mlx-lm's layers, in either of two layouts of the same weights.

An HF / MLX checkpoint is mlx-lm's qwen3_5 exactly. A checkpoint imported from a GGUF (server/models/gguf_arch.py,
`mlxcel.ggml_delta_net` in its config) holds the Gated DeltaNet tensors as b10621's converter wrote them, and they
are used as such: `ssm_a` (= -exp(A_log), what src/models/qwen35.cpp multiplies the softplus by) in place of A_log,
and the value heads in ggml's tiled order, value head j reading key head j mod Hk (the converter reordered HF's
grouped heads, j // R, so that ggml can repeat q and k by tiling). Converting them back would round ssm_a's log and
cannot reorder the columns of a quantized ssm_out, so the layer reads them as they are.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import qwen3_5
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.gated_delta import gated_delta_kernel, gated_delta_ops, normalize_qk
from mlx_lm.models.qwen3_next import Qwen3NextAttention

from .. import blas, cpu_kernels
from .cpu_layers import KernelAttention
from .gguf_arch import GGML_LAYOUT
from .kv_numerics import KVNumerics, stored

ModelArgs = qwen3_5.ModelArgs


class StepStatesDeltaNet(qwen3_5.GatedDeltaNet):
    """mlx-lm's Gated DeltaNet that, on a cache marked `keep_steps` (a verify pass: backends/mlx_backend.py), runs
    its rows one at a time, each as a decode step computes it, and keeps the state after each (`cache.steps`, the
    state before them first): a rejected draft's positions are forgotten by going back to one of them, as b10621's
    recurrent memory keeps n_rs_seq states per sequence for its drafts (llama-memory-recurrent.cpp)."""

    def __call__(self, inputs: mx.array, mask: mx.array | None = None, cache: Any | None = None) -> mx.array:
        if cache is None or not getattr(cache, "keep_steps", False):
            return self.rows(inputs, mask, cache)
        outs = []
        for t in range(inputs.shape[1]):
            outs.append(self.rows(inputs[:, t : t + 1], None if mask is None else mask[:, t : t + 1], cache))
            cache.steps.append((cache[0], cache[1]))
        return mx.concatenate(outs, axis=1)

    def rows(self, inputs: mx.array, mask: mx.array | None, cache: Any | None) -> mx.array:
        return super().__call__(inputs, mask, cache)


class GgmlGatedDeltaNet(StepStatesDeltaNet):
    """mlx-lm's Gated DeltaNet over ggml's tensors: ssm_a, and tiled value heads."""

    def __init__(self, config: qwen3_5.TextModelArgs):
        super().__init__(config)
        del self.A_log
        self.ssm_a = mx.zeros(self.num_v_heads)

    def rows(self, inputs: mx.array, mask: mx.array | None, cache: Any | None) -> mx.array:
        B, S, _ = inputs.shape
        qkv = self.in_proj_qkv(inputs)
        z = self.in_proj_z(inputs).reshape(B, S, self.num_v_heads, self.head_v_dim)
        b = self.in_proj_b(inputs)
        a = self.in_proj_a(inputs)
        if cache is not None and cache[0] is not None:
            conv_state = cache[0]
        else:
            conv_state = mx.zeros((B, self.conv_kernel_size - 1, self.conv_dim), dtype=inputs.dtype)
        if mask is not None:
            qkv = mx.where(mask[..., None], qkv, 0)
        conv_input = mx.concatenate([conv_state, qkv], axis=1)
        if cache is not None:
            cache[0] = mx.contiguous(conv_input[:, -(self.conv_kernel_size - 1) :, :])
        conv_out = nn.silu(self.conv1d(conv_input))
        q, k, v = (
            t.reshape(B, S, h, d)
            for t, h, d in zip(
                mx.split(conv_out, [self.key_dim, 2 * self.key_dim], -1),
                [self.num_k_heads, self.num_k_heads, self.num_v_heads],
                [self.head_k_dim, self.head_k_dim, self.head_v_dim],
                strict=True,
            )
        )
        q, k = normalize_qk(q, k, inv_scale=self.head_k_dim**-0.5, eps=1e-6)
        if (r := self.num_v_heads // self.num_k_heads) > 1:  # ggml_repeat_4d: value head j reads key head j % Hk
            q, k = mx.tile(q, (1, 1, r, 1)), mx.tile(k, (1, 1, r, 1))
        # mlx-lm's compute_g with ssm_a for -exp(A_log) (its log would round)
        g = mx.exp(self.ssm_a * nn.softplus(a + self.dt_bias))
        beta = mx.sigmoid(b)
        state = cache[1] if cache else None
        if state is None:
            state = mx.zeros((B, self.num_v_heads, self.head_v_dim, self.head_k_dim), dtype=mx.float32)
        delta = gated_delta_kernel if mx.default_device() == mx.gpu and mx.metal.is_available() else gated_delta_ops
        out, state = delta(q, k, v, g, beta, state, mask)
        if cache is not None:
            cache[1] = state
            cache.advance(S)
        out = self.norm(out, z)
        return self.out_proj(out.reshape(B, S, -1))


class CacheTypedAttention(Qwen3NextAttention):
    """mlx-lm's gated attention over a cache of b10621's types (models/kv_numerics.py; set by kv_numerics.apply,
    None: float32): keys and values stored as ggml writes them and, on the CPU, read by ggml-cpu's attention
    (mlxcel's kernel), with ggml's rope angles, as cpu_layers.KernelAttention reads a llama's."""

    kv_numerics: KVNumerics | None = None

    def __call__(self, x: mx.array, mask: mx.array | None = None, cache: Any | None = None) -> mx.array:
        B, L, _ = x.shape
        queries, gate = mx.split(self.q_proj(x).reshape(B, L, self.num_attention_heads, -1), 2, axis=-1)
        keys, values = self.k_proj(x), self.v_proj(x)
        queries = self.q_norm(queries).transpose(0, 2, 1, 3)
        keys = self.k_norm(keys.reshape(B, L, self.num_key_value_heads, -1)).transpose(0, 2, 1, 3)
        values = values.reshape(B, L, self.num_key_value_heads, -1).transpose(0, 2, 1, 3)
        first = KernelAttention._kernel_rows(x, mask, cache) if _kernels_on() else None
        offset = cache.offset if cache is not None else 0
        if first is not None and type(self.rope) is nn.RoPE and not self.rope.traditional:  # ggml's angles
            rope = self.rope
            queries = cpu_kernels.rope(queries, rope.dims, rope.base, rope.scale, [offset] * B)
            keys = cpu_kernels.rope(keys, rope.dims, rope.base, rope.scale, [offset] * B)
        else:
            queries, keys = self.rope(queries, offset=offset), self.rope(keys, offset=offset)
        kv = self.kv_numerics
        if kv is not None:
            keys, values = stored(keys, kv.k_type), stored(values, kv.v_type)  # as the cache holds them
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        keys, values = keys.astype(mx.float32), values.astype(mx.float32)
        if first is not None:  # ggml-cpu's attention over the cache's types (server/native/attention_ggml.c)
            out = cpu_kernels.attention(queries, keys, values, self.scale, first or None, kv)
        else:
            out = scaled_dot_product_attention(queries, keys, values, cache=cache, scale=self.scale, mask=mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1) * mx.sigmoid(gate.reshape(B, L, -1)))


def _kernels_on() -> bool:
    """mlxcel's CPU kernels are loaded (the server's BLAS activated) and MLX computes on the CPU."""
    return blas.STATE.native is not None and mx.default_device() == mx.cpu


class Model(qwen3_5.Model):
    step_states = True  # its recurrent layers keep a verify pass's states (StepStatesDeltaNet)

    def __init__(self, args: ModelArgs):
        super().__init__(args)
        text_args = self.language_model.args
        ggml = (args.text_config.get("mlxcel") or {}).get(GGML_LAYOUT)
        for layer in self.language_model.model.layers:
            if layer.is_linear:
                layer.linear_attn = (GgmlGatedDeltaNet if ggml else StepStatesDeltaNet)(text_args)
            else:
                layer.self_attn = CacheTypedAttention(text_args)

    def trunk_and_head(self) -> tuple[nn.Module, Any]:
        """The trunk (its output the final norm's: what the head and an MTP block read) and the output head."""
        lm = self.language_model
        return lm.model, (lm.model.embed_tokens.as_linear if lm.args.tie_word_embeddings else lm.lm_head)
