"""The resident memory a served model takes at its peak (`mlxcel estimate`, `mlxcel-server --estimate-memory`),
from the checkpoint's files and the command line's sizes, before a weight is loaded.

The parts, as mlxcel allocates them:
- runtime: the interpreter, the server's libraries and the tokenizer, measured by the estimating process once it
  has imported what the server imports (server/cli/estimate_cmd.py);
- weights: the checkpoint's tensors as the loader keeps them (safetensors bytes: quantized blocks stay blocks);
  a float32 model whose products the native steps sum in ggml's order keeps its layers' product weights (and an
  untied head) a second time, out x in (models/decode_step.py _ggml_order_weights); while the weights load, the
  file's reading holds LOAD_TRANSIENT of them again beside them (the load's own peak);
- the KV cache: each slot's cells at a full context (its -c share, in 256-cell steps), every layer's key and
  value rows in the cache types (ggml's row sizes, server/backends/state_size.py); a cache grows by appending a
  new buffer and concatenating (decode_step.grow, mlx-lm's update_and_fetch), so at the last growth the old
  buffer and the new one are both resident, and the old one stays in MLX's buffer cache: GROWTH x the cache;
- compute: a prompt chunk's activations (n_ubatch rows through a layer: the residual, its norm, q/k/v, attention
  and the feed-forward's gate, up and product) held twice (a chunk's buffers and the C heap's freed ones), and the
  logits of a decode step's rows.
The peak is the larger of the load's and the full context's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..models.facts import _header, head_dim
from .state_size import row_bytes

STEP = 256  # cells a cache grows by (and llama_context's padding of -c)
GROWTH = 1.0  # the old buffer beside the grown one, then in MLX's cache
LOAD_TRANSIENT = 0.5  # of the weights, held again while they load
COMPUTE_COPIES = 2


@dataclass(frozen=True)
class Sizes:
    """What the command line sizes: cells per slot (a full context), slots (streams), the cache types, the
    prompt chunk (n_ubatch) and the rows a decode step computes logits for."""

    cells_per_slot: int
    slots: int
    k_type: str = "f16"
    v_type: str = "f16"
    n_ubatch: int = 512


@dataclass(frozen=True)
class Estimate:
    runtime: int
    weights: int
    ggml_order_copy: int
    load_transient: int
    kv: int
    kv_growth: int
    compute: int

    @property
    def loading(self) -> int:
        return self.runtime + self.weights + self.ggml_order_copy + self.load_transient

    @property
    def serving(self) -> int:
        return self.runtime + self.weights + self.ggml_order_copy + self.kv + self.kv_growth + self.compute

    @property
    def peak(self) -> int:
        return max(self.loading, self.serving)


PRODUCTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def _tensors(checkpoint: Path) -> dict[str, tuple[str, int]]:
    """name -> (dtype, bytes), from the safetensors headers."""
    out = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        for name, info in _header(f).items():
            if name != "__metadata__":
                start, end = info["data_offsets"]
                out[name] = (info["dtype"], int(end) - int(start))
    return out


def _is_product(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in PRODUCTS


def ggml_order_copy_bytes(tensors: dict[str, tuple[str, int]]) -> int:
    """The second copy a float32 model's products take when summed in ggml's order: its layers' product weights
    and an untied head, where every one of them is float32 (one that is not: the order does not apply)."""
    products = [(dtype, n) for name, (dtype, n) in tensors.items() if _is_product(name)]
    if not products or any(dtype != "F32" for dtype, _ in products):
        return 0
    return sum(n for _, n in products)


def kv_bytes(config: dict, cells: int, k_type: str, v_type: str) -> int:
    """`cells` cells of every layer's keys and values in the cache types (a text model's config)."""
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    width = kv_heads * head_dim(config)
    layers = int(config.get("num_hidden_layers") or 0)
    return layers * cells * (row_bytes(k_type, width) + row_bytes(v_type, width))


def compute_bytes(config: dict, n_ubatch: int, slots: int) -> int:
    """A prompt chunk's activations (decode_step.c run_rows' buffer: 3 E + qkv + 2 H D + 3 I floats a row),
    held COMPUTE_COPIES times, and a decode step's logits (a row per slot)."""
    E = int(config.get("hidden_size") or 0)
    I = int(config.get("intermediate_size") or 0)  # noqa: E741 (the feed-forward's width, as the kernels name it)
    H = int(config.get("num_attention_heads") or 1)
    Hkv = int(config.get("num_key_value_heads") or H)
    D = head_dim(config)
    row = 3 * E + (H + 2 * Hkv) * D + 2 * H * D + 3 * I
    return COMPUTE_COPIES * n_ubatch * row * 4 + slots * int(config.get("vocab_size") or 0) * 4


def estimate(checkpoint: Path, config: dict, sizes: Sizes, runtime: int, ggml_order: bool) -> Estimate:
    """ggml_order: whether the native steps may sum in ggml's order here (AVX2, not switched off)."""
    tensors = _tensors(checkpoint)
    weights = sum(n for _, n in tensors.values())
    cells = (sizes.cells_per_slot + STEP - 1) // STEP * STEP
    kv = sizes.slots * kv_bytes(config, cells, sizes.k_type, sizes.v_type)
    return Estimate(
        runtime=runtime,
        weights=weights,
        ggml_order_copy=ggml_order_copy_bytes(tensors) if ggml_order else 0,
        load_transient=int(LOAD_TRANSIENT * weights),
        kv=kv,
        kv_growth=int(GROWTH * kv),
        compute=compute_bytes(config, sizes.n_ubatch, sizes.slots),
    )
