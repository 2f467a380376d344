"""A llama-shaped model's decode step in one native call (server/native/decode_step.c), on the CPU.

Through MLX a decode step is ~400 operations dispatched one by one on its CPU stream (~13 ms of a ~35 ms step for
SmolLM2-135M). `DecodeStep` runs the whole step in C over the same weights, on the same kernels, and writes each
layer's new key and value into the sequence's mlx-lm cache in place, at its next position; the cache's bookkeeping
then moves on as `update_and_fetch` would have moved it. Where a cache must grow it grows as mlx-lm grows it (a new
buffer, 256 positions more), so the position written is never one that another array can see: snapshots
(`MLXBackend.snapshot`, `BatchKVCache.extract`) are views of positions before it. Keys and values are written as the
cache's type rounds them, and attention rounds what ggml-cpu rounds over that type (models/kv_numerics.py), as
through MLX. llama-shaped (cpu_layers.llama_shaped): llama, Mistral, DeepSeek-LLM, Llama 3's `rope_freqs`, Qwen2's
q|k|v biases, Qwen3's q and k norms, Phi-3's fused weights and its q scaled before attention, SmolLM3's rope-less
layers, Qwen3-MoE's mixture of experts (in ggml's order only: server/native/moe_ggml.c), each as b10621's graph for
the family computes it. A model the step does not cover (another architecture, a bias elsewhere, a rope of another
kind, a float type other than float32, weights not in the kernel layout) returns None from `DecodeStep.build` and
decodes through MLX."""

from __future__ import annotations

import ctypes
import logging
import weakref

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models import llama, phi3, qwen3_moe, smollm3
from mlx_lm.models.cache import BatchKVCache, KVCache
from mlx_lm.models.smollm3 import NoPE
from mlx_lm.models.switch_layers import SwitchGLU, SwitchLinear

from .. import blas, cpu_kernels
from . import batch_cache, gemma_step, kv_numerics
from .cpu_layers import SOURCE, KernelAttention, KernelMLP, llama_shaped
from .loader import TransposedLinear
from .quant_layers import GGMLEmbedding, GGMLSwitchLinear, KernelQuantEmbedding
from .quantized_twins import drop_panels, pointer
from .rope_factors import FactorRoPE
from .step_operands import PRODUCTS, ggml_order_on, in_out, operand
from .yarn import YarnRoPE

_MX_DTYPES = {np.dtype(np.float16): mx.float16, np.dtype(np.float32): mx.float32, np.dtype(np.uint8): mx.uint8}
MAX_ROWS = 16  # the few-row products' limit (cpu_kernels.c SMALL_M): more rows decode through MLX
# a verify pass's rows where every product is summed in ggml's order (row by row, whatever the row count): a long
# draft (ngram-mod's run to 64) is verified in one pass over the weights, as b10621 verifies it in one ubatch
VERIFY_ROWS = 128
_VOID_P = ctypes.c_void_p


def _moe(mlp) -> list | None:
    """A Qwen3-MoE block as the step takes it (mlxcel_step_layer_moe): the router out x in, the experts' gate,
    up and down (experts, out, in: float32, or a GGUF's blocks, GGMLSwitchLinear) and its counts, then the bytes
    from one expert's blocks to the next's (gate, up, down; none for float32); None for a block of another kind."""
    if type(mlp) is not qwen3_moe.Qwen3MoeSparseMoeBlock or type(mlp.gate) is not TransposedLinear:
        return None
    glu = mlp.switch_mlp
    projections = (glu.gate_proj, glu.up_proj, glu.down_proj)
    kinds = {type(x) for x in projections}
    if type(glu) is not SwitchGLU or len(kinds) != 1 or any("bias" in x for x in projections) or "bias" in mlp.gate:
        return None
    if kinds == {GGMLSwitchLinear}:
        weights = [x.ggml for x in projections]
        strides = [x.out_dims * int(x.ggml.shape[2]) for x in projections]
        experts, ff = glu.gate_proj.num_experts, glu.gate_proj.out_dims
    elif kinds == {SwitchLinear} and all(x.weight.dtype == mx.float32 for x in projections):
        weights, strides = [x.weight for x in projections], []
        experts, ff, _ = glu.gate_proj.weight.shape
    else:
        return None
    router = mlp.gate.__dict__.get(SOURCE)
    router = mx.contiguous(mlp.gate.weight_t.T if router is None else router)
    return [router, *weights, experts, mlp.top_k, ff, int(bool(mlp.norm_topk_prob)), *strides]


def _layer_weights(layer) -> tuple[list[mx.array | None], list[mx.array] | None, list | None] | None:
    """A block's six weights in the step's layout (q|k|v or gate|up None where they are separate layers, gate|up
    and down None for a mixture of experts), the separate ones (q, k, v, gate, up: mlxcel_step_layer_split;
    None when both are fused) and the mixture of experts (_moe; None for a dense block), or None when the block
    is not one the step runs."""
    attn, mlp = layer.self_attn, layer.mlp
    moe = _moe(mlp)
    if not (type(attn) is KernelAttention and (type(mlp) is KernelMLP or moe is not None)):
        return None
    qkv = [attn.qkv_proj] if "qkv_proj" in attn else [attn[n] for n in ("q_proj", "k_proj", "v_proj") if n in attn]
    if moe is not None:
        gu: list = []
    else:
        gu = [mlp.gate_up_proj] if "gate_up_proj" in mlp else [mlp[n] for n in ("gate_proj", "up_proj") if n in mlp]
    linears = [*qkv, attn.o_proj, *gu, *([] if moe is not None else [mlp.down_proj])]
    if len(qkv) not in (1, 3) or len(gu) not in ((0,) if moe else (1, 2)):
        return None
    if not all(type(x) in PRODUCTS for x in linears):
        return None
    if any("bias" in x for x in linears[len(qkv) :]) or (len(qkv) == 3 and any("bias" in x for x in qkv)):
        return None  # (a fused q|k|v's biases are the step's: _layer_extras)
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if not all(type(n) is nn.RMSNorm for n in norms):
        return None
    rope = attn.rope
    if type(rope) is not NoPE and (type(rope) not in (nn.RoPE, YarnRoPE, FactorRoPE) or rope.traditional):
        return None
    if "q_norm" in attn and not all(type(attn[n]) is nn.RMSNorm for n in ("q_norm", "k_norm")):
        return None
    six = [
        layer.input_layernorm.weight,
        operand(qkv[0]) if len(qkv) == 1 else None,
        operand(attn.o_proj),
        layer.post_attention_layernorm.weight,
        operand(gu[0]) if len(gu) == 1 else None,
        None if moe is not None else operand(mlp.down_proj),
    ]
    split = None
    if len(qkv) == 3 or len(gu) == 2:  # q, k, v, gate, up: None for the ones fused above
        split = [operand(x) for x in qkv] if len(qkv) == 3 else [None] * 3
        split += [operand(x) for x in gu] if len(gu) == 2 else [None] * 2
    return six, split, moe


def _layer_extras(layers) -> list[list[mx.array | None]]:
    """Each layer's q|k|v biases (Qwen2) and q and k norm weights (Qwen3), None where it has none."""
    out = []
    for layer in layers:
        attn = layer.self_attn
        bias = attn.qkv_proj.bias if "qkv_proj" in attn and "bias" in attn.qkv_proj else None
        norms = [attn.q_norm.weight, attn.k_norm.weight] if "q_norm" in attn else [None, None]
        out.append([bias, *norms])
    return out


def _shared_numbers(trunk) -> tuple[float, tuple, np.ndarray] | None:
    """The numbers every layer shares, or None where they differ: the norms' eps, the rope (dims, base, scale,
    attention scale, YaRN's four) of the layers that turn one, and its frequency factors (empty: none)."""
    layers = trunk.layers
    norms = {trunk.norm.eps} | {
        n.eps for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)
    }
    norms |= {
        n.eps
        for layer in layers
        if "q_norm" in layer.self_attn
        for n in (layer.self_attn.q_norm, layer.self_attn.k_norm)
    }
    turned = [layer.self_attn for layer in layers if type(layer.self_attn.rope) is not NoPE]
    ropes = {
        (a.rope.dims, a.rope.base, a.rope.scale, a.scale, getattr(a.rope, "yarn", (0.0, 1.0, 0.0, 0.0))) for a in turned
    }
    factors = {tuple(a.rope.factors.tolist()) if type(a.rope) is FactorRoPE else () for a in turned}
    scales = {layer.self_attn.scale for layer in layers}
    if len(norms) != 1 or len(ropes) != 1 or len(factors) != 1 or len(scales) != 1:
        return None
    return norms.pop(), ropes.pop(), np.asarray(factors.pop(), np.float32)


def _ggml_order_weights(
    native, model, layer_weights: list[list[mx.array | None]], dims: list[int], moe: list[bool]
) -> list[mx.array | None] | None:
    """The products' weights out x in (qkv, o, gate|up, down per layer, then the head), for products summed in
    ggml-cpu's order (native/ggml_order.c): a float32 model's activations are then bitwise what b10621's AVX2
    build computes, and its float16 KV cache rounds what b10621's rounds. None where that order does not apply:
    weights read through a quantized twin (b10621 quantizes the activations there), shapes tinyBLAS leaves to
    another order (K not a multiple of 8, a weight's rows not a multiple of 4), no AVX2, or $MLXCEL_GGML_ORDER=0.
    Costs a second copy of those weights (float32, as ggml keeps them), in place of the few-row kernels' panels
    (quantized_twins.register_panels), which are dropped: products through MLX (adapters, steering) then run
    without them."""
    if not ggml_order_on(native):
        return None
    dense = [ws if not m else ws[:4] for ws, m in zip(layer_weights, moe, strict=True)]  # (experts: set_moe)
    if any(w is None or native.mlxcel_has_quant_twin(ctypes.c_void_p(pointer(w))) for ws in dense for w in ws):
        return None  # (None: a layer of separate quantized weights)
    layers, hidden, heads, kv_heads, head_dim, inter, vocab = dims[:7]
    if any(k % 8 for k in (hidden, heads * head_dim, inter)) or any(
        n % 4 for n in (hidden, heads * head_dim, kv_heads * head_dim, inter, vocab)
    ):
        return None
    loaded = {id(m.weight_t): m.__dict__[SOURCE] for _, m in model.named_modules() if SOURCE in m.__dict__}

    def out_x_in(w: mx.array) -> mx.array:  # the weight as loaded where the layer kept it, else transposed back
        source = loaded.get(id(w))
        return mx.contiguous(w.T) if source is None else mx.contiguous(source)

    out: list[mx.array | None] = [
        None if w is None else out_x_in(w) for ws in layer_weights for w in (ws[1], ws[2], ws[4], ws[5])
    ]
    if not model.args.tie_word_embeddings:
        out.append(out_x_in(model.lm_head.weight_t))
    mx.eval([w for w in out if w is not None])
    drop_panels(model)  # the native steps no longer read the panels: their copy goes, this one stays
    return out


class DecodeStep:
    """The native decode step for one loaded model (use `build`)."""

    def __init__(self, dims: list[int], params: list[float], weights: list[mx.array | None]):
        native = blas.STATE.native
        self.native = native
        self._weights = weights  # kept alive with the handle
        # float32, or a kept quantized layer's packed values (checked by build); None: a layer's separate weights
        ptrs = (_VOID_P * len(weights))(*[None if w is None else pointer(w) for w in weights])
        handle = native.mlxcel_step_model(
            (ctypes.c_int * len(dims))(*dims), (ctypes.c_float * len(params))(*params), ptrs
        )
        if not handle:
            raise MemoryError("decode step model")
        self.handle = _VOID_P(handle)
        weakref.finalize(self, native.mlxcel_step_model_free, self.handle)
        self.layers, self.kv_heads, self.head_dim, self.vocab = dims[0], dims[3], dims[4], dims[6]
        self.hidden = dims[1]
        # the layers whose inputs each pass copies out (an EAGLE-3 head's target features: set_capture), and the
        # last pass's copies (rows x (layers x hidden), float32)
        self.capture_layers: tuple[int, ...] = ()
        self.captured: np.ndarray | None = None
        self.max_rows = dims[9]  # (a verify pass's rows at most: VERIFY_ROWS in ggml's order, else MAX_ROWS)
        self.ggml_order = bool(dims[13])
        self.interleaved = False  # (set_family: a llama GGUF's heads in their interleaved order)
        # the caches' storage (kv_numerics.storage_dtype): an f16 cache in 16 bits, a block type's rows in bytes
        # (each head's D values as D / 32 blocks), others in float32; a position's last axis in those units
        names = {code: name for name, code in kv_numerics.TYPES.items()}
        self.k_kind, self.v_kind = names[dims[10]], names[dims[11]]
        self.k_dtype, self.v_dtype = (kv_numerics.storage_dtype(kind) for kind in (self.k_kind, self.v_kind))
        native.mlxcel_kv_row_bytes.restype = ctypes.c_long
        self.k_width, self.v_width = (
            int(native.mlxcel_kv_row_bytes(code, self.head_dim)) if kv_numerics.is_block(kind) else self.head_dim
            for code, kind in zip(dims[10:12], (self.k_kind, self.v_kind), strict=True)
        )
        logging.getLogger("mlxcel").info(
            "native decode step: products summed %s",
            "in ggml-cpu's order (float32 weights: activations as b10621's)"
            if self.ggml_order
            else "in mlxcel's order",
        )

    @property
    def weights(self) -> list[mx.array]:
        """The arrays the step reads (its own ggml-order copies among them)."""
        return [w for w in self._weights if w is not None]

    @classmethod
    def build(cls, model: nn.Module) -> DecodeStep | None:  # noqa: C901
        if not (llama_shaped(model) or gemma_step.is_gemma(model)) or not cpu_kernels.available():
            return None
        native = blas.STATE.native
        if not hasattr(native, "mlxcel_step"):
            return None
        native.mlxcel_step_model.restype = _VOID_P
        native.mlxcel_step_model_free.argtypes = [_VOID_P]
        if gemma_step.is_gemma(model):
            return gemma_step.build(cls, model, MAX_ROWS)
        trunk, args = model.model, model.args
        embed = trunk.embed_tokens
        if type(trunk.norm) is not nn.RMSNorm or type(embed) not in (nn.Embedding, KernelQuantEmbedding, GGMLEmbedding):
            return None
        blocks = [_layer_weights(layer) for layer in trunk.layers]
        if not blocks or any(b is None for b in blocks):
            return None
        layer_weights = [b[0] for b in blocks if b is not None]
        splits = [b[1] for b in blocks if b is not None]
        moes = [b[2] for b in blocks if b is not None]
        head = operand(embed) if args.tie_word_embeddings else operand(getattr(model, "lm_head", None))
        if head is None or (not args.tie_word_embeddings and "bias" in model.lm_head):
            return None
        weights = [operand(embed), trunk.norm.weight, head, *(w for ws in layer_weights for w in ws)]
        arrays = [w for w in [*weights, *(w for ws in splits if ws for w in ws)] if w is not None]
        arrays += [w for moe in moes if moe for w in moe[:4]]
        if any(w.dtype not in (mx.float32, mx.uint32, mx.uint8) for w in arrays):  # (kept quantized: packed, blocks)
            return None
        attn0, mlp0 = trunk.layers[0].self_attn, trunk.layers[0].mlp
        numerics = {layer.self_attn.kv_numerics for layer in trunk.layers}
        numbers = _shared_numbers(trunk)
        if len(numerics) != 1 or numbers is None:
            return None
        eps, (dims_rot, base, scale, attn_scale, yarn), factors = numbers
        q_out = sum(in_out(attn0[n])[1] for n in ("qkv_proj", "q_proj", "k_proj", "v_proj") if n in attn0)
        dims = [
            len(trunk.layers),
            in_out(embed)[0],
            attn0.n_heads,
            attn0.n_kv_heads,
            q_out // (attn0.n_heads + 2 * attn0.n_kv_heads),
            moes[0][6] if moes[0] else in_out(mlp0.down_proj)[0],
            in_out(embed)[1],
            dims_rot,
            int(bool(args.tie_word_embeddings)),
            MAX_ROWS,
            *numerics.pop().codes(),
        ]
        extras = _layer_extras(trunk.layers)
        if any(w.dtype != mx.float32 for ws in extras for w in ws if w is not None):
            return None
        mx.eval(arrays, [w for ws in extras for w in ws if w is not None])
        order = _ggml_order_weights(native, model, layer_weights, dims, [m is not None for m in moes])
        if order is None and any(m is not None and len(m) == 8 for m in moes):  # (float32 experts: ggml's order only)
            return None
        dims.append(int(order is not None))
        if order is not None:
            dims[9] = VERIFY_ROWS
        step = cls(dims, [eps, base, scale, attn_scale, *yarn], weights + (order or []))
        step.set_split(splits, type(embed) in (KernelQuantEmbedding, GGMLEmbedding))
        step.set_moe(moes)
        step.set_family(extras, factors, model)
        return step

    def set_capture(self, layers: tuple[int, ...]) -> None:
        """Each pass from now on copies its rows' residual streams as they enter these layers (() : none)."""
        if any(not 0 <= layer < self.layers for layer in layers) or len(layers) > 4:
            raise ValueError(f"layers {list(layers)} to capture in a {self.layers}-layer model")
        self.native.mlxcel_step_capture.argtypes = [_VOID_P, ctypes.c_int, _VOID_P, _VOID_P]
        self.capture_layers, self.captured = tuple(layers), None

    def _capture_into(self, rows: int) -> np.ndarray | None:
        """The buffer a pass of `rows` copies its captured layers' inputs into (set on the model), or None."""
        n = len(self.capture_layers)
        if not n:
            return None
        buf = np.empty((rows, n * self.hidden), np.float32)
        layers = (ctypes.c_int * n)(*self.capture_layers)
        if self.native.mlxcel_step_capture(self.handle, n, layers, _VOID_P(buf.ctypes.data)) != 0:
            raise ValueError("capture layers the native step refuses")
        return buf

    def _captured(self, buf: np.ndarray | None) -> None:
        if buf is not None:
            self.native.mlxcel_step_capture(self.handle, 0, None, None)
            self.captured = buf

    def set_moe(self, moes: list[list | None]) -> None:
        """The layers whose feed-forward is a mixture of experts (mlxcel_step_layer_moe)."""
        native = self.native
        native.mlxcel_step_layer_moe.argtypes = [_VOID_P, ctypes.c_int] + [_VOID_P] * 4 + [ctypes.c_int] * 4
        self._moe = moes  # (the arrays stay alive with the step)
        native.mlxcel_step_layer_moe_blocks.argtypes = [_VOID_P, ctypes.c_int] + [ctypes.c_long] * 3
        for layer, moe in enumerate(moes):
            if moe is not None:
                status = native.mlxcel_step_layer_moe(self.handle, layer, *(pointer(w) for w in moe[:4]), *moe[4:8])
                if status == 0 and len(moe) > 8:  # (the experts kept as blocks: each one's key, stride bytes on)
                    status = native.mlxcel_step_layer_moe_blocks(self.handle, layer, *moe[8:])
                if status != 0:
                    raise ValueError("a mixture of experts the native step does not take")

    def set_split(self, splits: list[list[mx.array | None] | None], embed_quant: bool) -> None:
        """Layers of separate q, k, v (gate, up) weights, and an embedding kept quantized (its rows dequantized)."""
        native = self.native
        native.mlxcel_step_layer_split.argtypes = [_VOID_P, ctypes.c_int] + [_VOID_P] * 5
        native.mlxcel_step_embed_quant.argtypes = [_VOID_P, ctypes.c_int]
        self._split = splits
        for layer, ws in enumerate(splits):
            if ws is not None:
                native.mlxcel_step_layer_split(self.handle, layer, *(None if w is None else pointer(w) for w in ws))
        native.mlxcel_step_embed_quant(self.handle, int(embed_quant))

    def set_family(self, extras: list[list[mx.array | None]], factors: np.ndarray, model: nn.Module) -> None:
        """What a llama-shaped family adds to llama's graph (mlxcel_step_layer_extras, mlxcel_step_family): the
        arrays stay alive with the step."""
        native = self.native
        native.mlxcel_step_layer_extras.argtypes = [_VOID_P, ctypes.c_int, _VOID_P, _VOID_P, _VOID_P, ctypes.c_int]
        native.mlxcel_step_family.argtypes = [_VOID_P, _VOID_P, ctypes.c_int, ctypes.c_int]
        self._family = (extras, factors)
        # the llama GGUF's heads are interleaved (the converter's permute: llama, SmolLM3): b10621's block keys
        # are quantized in that order (step_model.h, store_key)
        self.interleaved = type(model) in (llama.Model, smollm3.Model)
        no_rope = [type(layer.self_attn.rope) is NoPE for layer in model.layers]
        for layer, (bqkv, q_norm, k_norm) in enumerate(extras):
            if bqkv is None and q_norm is None and not no_rope[layer]:
                continue
            native.mlxcel_step_layer_extras(
                self.handle, layer, *(None if w is None else pointer(w) for w in (bqkv, q_norm, k_norm)), no_rope[layer]
            )
        native.mlxcel_step_family(
            self.handle,
            factors.ctypes.data if factors.size else None,
            int(type(model) is phi3.Model),  # b10621's Phi-3 scales q, then attends at scale 1 (models/phi3.cpp)
            int(self.interleaved),
        )

    def grow(self, cache, index: int, rows: int, positions: int = 1) -> None:
        """Room for `positions` more at index in a layer's buffer (rows sequences), as mlx-lm's update_and_fetch
        makes it: a new buffer of whole steps (256 positions) appended."""
        step = cache.step
        if cache.keys is not None and index + positions <= cache.keys.shape[2]:
            return
        shape = (rows, self.kv_heads, (positions + step - 1) // step * step)
        # (from numpy: mx.zeros alone is a broadcast scalar, no buffer to write in)
        new_k = mx.array(np.zeros((*shape, self.k_width), self.k_dtype))
        new_v = mx.array(np.zeros((*shape, self.v_width), self.v_dtype))
        if cache.keys is None:
            cache.keys, cache.values = new_k, new_v
        else:
            if index % step != 0:
                cache.keys, cache.values = cache.keys[..., :index, :], cache.values[..., :index, :]
            cache.keys = mx.concatenate([cache.keys, new_k], axis=2)
            cache.values = mx.concatenate([cache.values, new_v], axis=2)

    def _ready(self, caches: list, index: int, rows: int, positions: int):
        """Every layer's buffer grown for `positions` more at index, evaluated, and its pointers and strides
        (cache_pointers), or None."""
        for c in caches:
            self.grow(c, index, rows, positions)
        mx.eval([(c.keys, c.values) for c in caches])
        return self.cache_pointers(caches, rows)

    def cache_pointers(self, caches: list, rows: int) -> tuple[list[int], list[int], list[int]] | None:
        """The evaluated caches' key and value buffers and their strides in elements (per sequence, head and
        position: keys' then values', layer after layer), or None where one is not of the step's storage type
        (float16 for an f16 cache, else float32) in that layout."""
        keys, values, strides = [], [], []
        for c in caches:
            for arr, out, dtype in ((c.keys, keys, self.k_dtype), (c.values, values, self.v_dtype)):
                view = np.array(arr, copy=False)
                size = np.dtype(dtype).itemsize
                if view.dtype != dtype or view.strides[-1] != size or view.shape[0] != rows:
                    return None
                out.append(view.ctypes.data)
                strides.extend(s // size for s in view.strides[:3])
        return keys, values, strides

    def turn_block_keys(self, keys: mx.array, turn) -> mx.array:
        """Block-quantized keys (b, h, t, row bytes) moved as b10621's build_rope_shift moves them: read back to
        float32 (to_float), their Hadamard rotation undone, turned by `turn` (float32 keys in the head's own
        element order), rotated and quantized again."""
        native, D = self.native, self.head_dim
        code = kv_numerics.TYPES[self.k_kind]
        for fn in (native.mlxcel_kv_dequantize_rows, native.mlxcel_kv_quantize_rows):
            fn.argtypes = [ctypes.c_int, _VOID_P, _VOID_P, ctypes.c_long, ctypes.c_long]
        native.mlxcel_kv_rotate.argtypes = [_VOID_P, ctypes.c_long, ctypes.c_int]
        rot = int(native.mlxcel_kv_rotation(code, D, 1))
        b, h, t, width = keys.shape
        rows = b * h * t
        packed = np.ascontiguousarray(np.array(keys, copy=False))
        floats = np.empty((b, h, t, D), np.float32)
        if rows and native.mlxcel_kv_dequantize_rows(code, packed.ctypes.data, floats.ctypes.data, rows, D) != 0:
            raise RuntimeError("block keys that do not read back")
        native.mlxcel_kv_rotate(floats.ctypes.data, rows * D, rot)  # (H H = I: the rotation undone)
        interleaved = self.interleaved and D % 2 == 0
        if interleaved:  # stored in the GGUF's order (element 2i is the head's i, 2i + 1 its i + D/2)
            floats = np.concatenate([floats[..., 0::2], floats[..., 1::2]], axis=-1)
        turned = np.array(turn(mx.array(floats)), np.float32)
        if interleaved:
            turned = np.stack([turned[..., : D // 2], turned[..., D // 2 :]], axis=-1).reshape(b, h, t, D)
        turned = np.ascontiguousarray(turned)
        native.mlxcel_kv_rotate(turned.ctypes.data, rows * D, rot)
        out = np.empty((b, h, t, width), np.uint8)
        if rows and native.mlxcel_kv_quantize_rows(code, turned.ctypes.data, out.ctypes.data, rows, D) != 0:
            raise RuntimeError("block keys that do not quantize")
        return mx.array(out)

    def position_bytes(self) -> tuple[int, int]:
        """The bytes one position takes in every layer's keys, values (b10621's size_k_bytes per cell)."""
        sizes = (np.dtype(self.k_dtype).itemsize * self.k_width, np.dtype(self.v_dtype).itemsize * self.v_width)
        return sizes[0] * self.kv_heads * self.layers, sizes[1] * self.kv_heads * self.layers

    def _storage_matches(self, caches: list) -> bool:
        """Every layer's buffers (where it has any) are of the step's storage types and widths."""
        k_type, v_type = (_MX_DTYPES[np.dtype(t)] for t in (self.k_dtype, self.v_dtype))
        return all(
            c.keys is None
            or (
                c.keys.dtype == k_type
                and c.values.dtype == v_type
                and c.keys.shape[-1] == self.k_width
                and c.values.shape[-1] == self.v_width
            )
            for c in caches
        )

    def takes_rows(self, caches: list, rows: int) -> bool:
        """Whether a decode step takes these caches: one sequence's per-layer KVCaches (one row, every layer at
        the same offset), or a batch's per-layer BatchKVCaches (up to MAX_ROWS rows, left-padded only)."""
        if len(caches) != self.layers or not self._storage_matches(caches):
            return False
        first = caches[0]
        if type(first) is KVCache:
            return rows == 1 and all(type(c) is KVCache and c.offset == first.offset for c in caches)
        if type(first) is BatchKVCache and 1 <= rows <= MAX_ROWS:
            index = batch_cache.written(first)
            return all(
                type(c) is BatchKVCache and batch_cache.written(c) == index and batch_cache.left_padded_only(c)
                for c in caches
            )
        return False

    def takes_sequence(self, caches: list, rows: int, max_rows: int | None = MAX_ROWS) -> bool:
        """Whether a verify (or prefill, max_rows None) pass takes `rows` tokens into one sequence's caches."""
        if rows < 1 or (max_rows is not None and rows > max_rows) or len(caches) != self.layers:
            return False
        index = caches[0].offset
        return self._storage_matches(caches) and all(type(c) is KVCache and c.offset == index for c in caches)

    def _pointers(self, caches: list, index: int, rows: int, positions: int):
        pointers = self._ready(caches, index, rows, positions)
        if pointers is None:  # takes_*() checked the types and offsets: the layout is the step's own
            raise RuntimeError("a KV buffer not in the native step's layout")
        return pointers

    def __call__(self, caches: list, tokens: list[int]) -> mx.array:
        """One token per row (takes_rows() first): caches is a sequence's per-layer KVCaches (one row) or a
        batch's per-layer BatchKVCaches; returns the rows' logits (rows x vocab, float32)."""
        rows = len(tokens)
        first_cache = caches[0]
        if type(first_cache) is KVCache:
            index = first_cache.offset
            positions, first = [index], None
        else:
            index = batch_cache.written(first_cache)
            positions, padding = first_cache.offset.tolist(), first_cache.left_padding.tolist()
            first = (ctypes.c_int * rows)(*padding)
        keys, values, strides = self._pointers(caches, index, rows, 1)
        logits = np.empty((rows, self.vocab), np.float32)
        n = len(caches)
        capture = self._capture_into(rows)
        status = self.native.mlxcel_step(
            self.handle,
            rows,
            (ctypes.c_int * rows)(*tokens),
            (ctypes.c_int * rows)(*positions),
            first,
            index + 1,
            (_VOID_P * n)(*keys),
            (_VOID_P * n)(*values),
            (ctypes.c_long * len(strides))(*strides),
            _VOID_P(logits.ctypes.data),
        )
        self._captured(capture)
        if status != 0:
            raise MemoryError("decode step")
        if type(first_cache) is KVCache:
            for c in caches:
                c.offset += 1
        else:
            offset = first_cache.offset + 1
            for c in caches:
                batch_cache.advance(c, offset, index + 1)
        return mx.array(logits)

    def sequence_pass(
        self, native_fn, caches: list, tokens: list[int] | np.ndarray, logits: np.ndarray | None, what: str
    ) -> None:
        """A native pass over consecutive tokens of one sequence (verify, prefill): its per-layer KVCaches take
        their keys and values at the next positions (grown first), then move on; logits (if any) written.
        `tokens` may be rows of embeddings instead (a float32 C-contiguous array, one row a position)."""
        rows, index, n = len(tokens), caches[0].offset, len(caches)
        keys, values, strides = self._pointers(caches, index, 1, rows)
        given = _VOID_P(tokens.ctypes.data) if isinstance(tokens, np.ndarray) else (ctypes.c_int * rows)(*tokens)
        capture = self._capture_into(rows)
        status = native_fn(
            self.handle,
            rows,
            given,
            index,
            (_VOID_P * n)(*keys),
            (_VOID_P * n)(*values),
            (ctypes.c_long * len(strides))(*strides),
            None if logits is None else _VOID_P(logits.ctypes.data),
        )
        self._captured(capture)
        if status != 0:
            raise MemoryError(what)
        for c in caches:
            c.offset += rows

    def verify(self, caches: list, tokens: list[int]) -> mx.array:
        """Consecutive tokens of one sequence (a speculative draft's verification, takes_sequence() first): every
        row's logits (rows x vocab, float32), each bitwise what a decode step at its position returns."""
        logits = np.empty((len(tokens), self.vocab), np.float32)
        self.sequence_pass(self.native.mlxcel_verify, caches, tokens, logits, "verify step")
        return mx.array(logits)
