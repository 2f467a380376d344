"""Gemma 2 and 3's native steps: the decode and prefill steps of decode_step.py over b10621's Gemma graph.

What b10621 computes beyond llama's (src/models/gemma2.cpp, gemma3.cpp), in the step's C (step_model.h): the
token embeddings scaled by sqrtf(n_embd); RMS norms whose weights are 1 + w (the converter's, here added once in
float32 as the converter adds it); the attention's and the feed-forward's outputs each normed before the residual
add; GeGLU through ggml's float16 GELU table; q scaled by the attention scale after rope, then attention at scale
1 with Gemma 2's capped scores (its flash attention's scale / cap, tanhf, times the cap); the sliding layers'
window (keys p - window + 1 .. p) and, for Gemma 3, their own rope base; Gemma 3's q and k norms; and Gemma 2's
capped logits. Every layer's cache is a plain KVCache (gemma2_swa.py, gemma3_window.py): b10621's sliding cells
hold positions in order up to its SWA cache's size (n_swa + n_ubatch, padded to 256), so its flash attention
visits the window's keys in the order the step does. The products are separate (q, k, v; gate, up) as b10621's
are, in ggml's order over float32 weights where it applies (decode_step._ggml_order_weights' rules)."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import mlx.core as mx
from mlx import nn
from mlx_lm.models import gemma2, gemma3_text

from .. import blas
from . import gemma2_swa, gemma3_window
from .cpu_layers import SOURCE
from .kv_numerics import KVNumerics
from .loader import sliding_layer
from .quant_layers import GGMLEmbedding, KernelQuantEmbedding
from .quantized_twins import drop_panels, pointer
from .step_operands import PRODUCTS, ggml_order_on, in_out, operand

if TYPE_CHECKING:
    from .decode_step import DecodeStep

_VOID_P = ctypes.c_void_p
GEMMA_MODELS = (gemma2_swa.Model, gemma3_window.Model)
_NORMS = (gemma2.RMSNorm, gemma3_text.RMSNorm)


def is_gemma(model: nn.Module) -> bool:
    return type(model) in GEMMA_MODELS


def _gemma_weight(norm) -> mx.array:
    """A Gemma norm's weight as b10621 holds it: 1 + w, in float32 (conversion/gemma.py adds the 1)."""
    return mx.contiguous(norm.weight.astype(mx.float32) + 1.0)


def _layer(layer) -> dict | None:
    """A block's parts as the step takes them, or None where it is not one the step runs."""
    attn, mlp = layer.self_attn, layer.mlp
    linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    if type(mlp).__name__ != "GGMLGeGLU" or not all(type(x) in PRODUCTS and "bias" not in x for x in linears):
        return None
    norms = [layer.input_layernorm, layer.post_attention_layernorm]
    norms += [layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm]
    if "q_norm" in attn:
        norms += [attn.q_norm, attn.k_norm]
    rope = attn.rope
    if not all(type(n) in _NORMS for n in norms) or type(rope) is not nn.RoPE or rope.traditional:
        return None
    return {"linears": linears, "norms": [_gemma_weight(n) for n in norms], "rope": rope, "attn": attn}


def _out_x_in(model: nn.Module, linears: list) -> list[mx.array] | None:
    """The float32 weights out x in for products in ggml's order (the loaded ones where the layers kept them),
    or None where that order does not apply: a quantized weight, shapes tinyBLAS leaves to another order, no
    AVX2, or $MLXCEL_GGML_ORDER=0."""
    native = blas.STATE.native
    if not ggml_order_on(native):
        return None
    weights = [operand(x) for x in linears]
    if any(w is None or w.dtype != mx.float32 for w in weights):
        return None
    if any(native.mlxcel_has_quant_twin(ctypes.c_void_p(pointer(w))) for w in weights):
        return None
    if any(n % 8 or k % 4 for n, k in (in_out(x) for x in linears)):  # (in: a multiple of 8; out: of 4)
        return None
    out = [mx.contiguous(x.__dict__[SOURCE] if SOURCE in x.__dict__ else operand(x).T) for x in linears]
    mx.eval(out)
    return out


def _ggml_copies(model: nn.Module, parts: list[dict], tied: bool) -> tuple[list | None, mx.array | None]:
    """Every layer's weights out x in and the head's (None when tied: the embedding is), for products in ggml's
    order; (None, None) where a layer or the head does not take that order."""
    order = [_out_x_in(model, p["linears"]) for p in parts]
    if any(o is None for o in order):
        return None, None
    if tied:  # (the embedding is the head's weight as it is: float32, vocab x hidden)
        embed = model.model.embed_tokens
        return (order, None) if type(embed) is nn.Embedding and embed.weight.dtype == mx.float32 else (None, None)
    head = _out_x_in(model, [model.lm_head])
    return (order, head[0]) if head is not None else (None, None)


def build(step_cls: type[DecodeStep], model: nn.Module, max_rows: int) -> DecodeStep | None:
    """The Gemma model's native step, or None where the step does not run it (it then runs through MLX)."""
    trunk = model.model
    embed = trunk.embed_tokens
    if type(embed) not in (nn.Embedding, KernelQuantEmbedding, GGMLEmbedding) or type(trunk.norm) not in _NORMS:
        return None
    layers = [_layer(layer) for layer in trunk.layers]
    if not layers or any(x is None for x in layers):
        return None
    parts = [x for x in layers if x is not None]
    tied = "lm_head" not in model
    head = operand(embed) if tied else operand(model.lm_head)
    attn0 = parts[0]["attn"]
    rope = parts[0]["rope"]
    global_rope = next((p["rope"] for i, p in enumerate(parts) if not sliding_layer(model, i)), rope)
    swa_rope = next((p["rope"] for i, p in enumerate(parts) if sliding_layer(model, i)), global_rope)
    hidden, vocab = in_out(embed)
    inter = in_out(parts[0]["linears"][6])[0]
    numerics = {getattr(p["attn"], "kv_numerics", KVNumerics()) for p in parts}  # (kv_numerics.apply's)
    if head is None or len(numerics) != 1 or 2 * inter < hidden:  # (the prefill's post-norm rows sit in gate|up's)
        return None
    arrays = [operand(embed), head, *(operand(x) for p in parts for x in p["linears"])]
    if any(w is None or w.dtype not in (mx.float32, mx.uint32, mx.uint8) for w in arrays):
        return None
    eps = {trunk.norm.eps} | {
        n.eps
        for layer in trunk.layers
        for n in (layer.input_layernorm, layer.post_attention_layernorm, layer.pre_feedforward_layernorm)
    }
    if len(eps) != 1 or any(p["rope"].dims != rope.dims for p in parts):
        return None
    order, head_t = _ggml_copies(model, parts, tied)
    ggml = order is not None
    dims = [
        len(parts),
        hidden,
        attn0.n_heads,
        attn0.n_kv_heads,
        attn0.head_dim,
        inter,
        vocab,
        rope.dims,
        int(tied),
        max_rows,
        *numerics.pop().codes(),
        int(ggml),
    ]
    final_norm = _gemma_weight(trunk.norm)
    weights: list[mx.array | None] = [operand(embed), final_norm, head]
    for p in parts:  # attn norm, q|k|v (separate: set below), o, mlp norm, gate|up (separate), down
        lin, norms = p["linears"], p["norms"]
        weights += [norms[0], None, operand(lin[3]), norms[2], None, operand(lin[6])]
    for o in order or []:
        weights += [None, o[3], None, o[6]]  # (q|k|v and gate|up: the separate ones' below)
    if head_t is not None:
        weights.append(head_t)
    mx.eval([w for w in weights if w is not None], [n for p in parts for n in p["norms"]])
    params = [eps.pop(), global_rope.base, global_rope.scale, attn0.scale, 0.0, 1.0, 0.0, 0.0]
    step = step_cls(dims, params, weights)
    _configure(step, model, parts, order, type(embed) is not nn.Embedding, swa_rope)
    if ggml:
        drop_panels(model)  # the steps no longer read the panels: their copy goes, the out x in one stays
    return step


def _configure(step: DecodeStep, model: nn.Module, parts: list[dict], order, embed_quant: bool, swa_rope) -> None:
    """The step's Gemma parts: separate products (and their ggml-order copies), q and k norms, the family's
    numbers and each layer's post norms and window."""
    native, handle = step.native, step.handle
    native.mlxcel_step_layer_split.argtypes = [_VOID_P, ctypes.c_int] + [_VOID_P] * 5
    native.mlxcel_step_layer_split_t.argtypes = [_VOID_P, ctypes.c_int] + [_VOID_P] * 5
    native.mlxcel_step_layer_extras.argtypes = [_VOID_P, ctypes.c_int, _VOID_P, _VOID_P, _VOID_P, ctypes.c_int]
    native.mlxcel_step_layer_gemma.argtypes = [_VOID_P, ctypes.c_int, _VOID_P, _VOID_P, ctypes.c_int]
    native.mlxcel_step_family.argtypes = [_VOID_P, _VOID_P, ctypes.c_int, ctypes.c_int]
    native.mlxcel_step_gemma.argtypes = [_VOID_P] + [ctypes.c_float] * 3 + [ctypes.c_int] + [ctypes.c_float] * 2
    native.mlxcel_step_embed_quant.argtypes = [_VOID_P, ctypes.c_int]
    kept = []  # arrays the step reads, alive with it
    for i, p in enumerate(parts):
        lin, norms = p["linears"], p["norms"]
        split = [operand(lin[j]) for j in (0, 1, 2, 4, 5)]
        kept += [split, norms]
        native.mlxcel_step_layer_split(handle, i, *(pointer(w) for w in split))
        if order is not None:
            native.mlxcel_step_layer_split_t(handle, i, *(pointer(order[i][j]) for j in (0, 1, 2, 4, 5)))
            kept.append(order[i])
        if len(norms) == 6:  # Gemma 3's q and k norms
            native.mlxcel_step_layer_extras(handle, i, None, pointer(norms[4]), pointer(norms[5]), 0)
        native.mlxcel_step_layer_gemma(handle, i, pointer(norms[1]), pointer(norms[3]), int(sliding_layer(model, i)))
    native.mlxcel_step_embed_quant(handle, int(embed_quant))
    # b10621 scales q by the attention scale after rope, then attends at scale 1 (gemma2.cpp, gemma3.cpp)
    native.mlxcel_step_family(handle, None, 1, 0)
    args = model.args
    softcap = float(getattr(args, "attn_logit_softcapping", 0.0) or 0.0) if type(model) is gemma2_swa.Model else 0.0
    final = float(getattr(args, "final_logit_softcapping", 0.0) or 0.0)
    native.mlxcel_step_gemma(
        handle,
        gemma3_window.embed_scale(args.hidden_size),
        softcap,
        final,
        int(args.sliding_window or 0),
        float(swa_rope.base),
        float(swa_rope.scale),
    )
    step.__dict__["_gemma"] = kept
