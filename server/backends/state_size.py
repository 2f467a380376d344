"""The size b10621 gives a slot's KV state (llama_state_seq_get_size_ext, what --cache-ram counts), one place.

llama_kv_cache::state_write for one sequence: the stream count, a cell count per stream, then for the stream
holding the sequence each cell's position, seq-id count and seq id (4 bytes each), v_trans and the layer count,
and per layer the keys' type and row size (4 + 8 bytes) and their rows, then the values' (the same 12 bytes of
header, transposed or not) and their rows. Rows are ggml_row_size(type, n_embd): n_embd x the element size, or n_embd / 32 blocks of a block type.
"""

from __future__ import annotations

ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
# ggml's blocks of 32 values (kv_quant.c stores them; tests/test_kv_quant.py checks the two agree)
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "iq4_nl": 18, "q5_0": 22, "q5_1": 24}


def row_bytes(kind: str, n: int) -> int:
    """ggml_row_size: n values of the cache type `kind`."""
    return n // 32 * BLOCK_BYTES[kind] if kind in BLOCK_BYTES else n * ELEMENT_BYTES[kind]


def state_bytes(n_tokens: int, layers: list[tuple[int, int]], k_type: str, v_type: str, n_stream: int) -> int:
    """layers: (n_embd_k_gqa, n_embd_v_gqa) of each layer; n_stream: 1 with a unified KV cache, else the slots."""
    size = 4 + 4 * n_stream
    if n_tokens <= 0:
        return size
    size += 12 * n_tokens + 8
    for n_embd_k, n_embd_v in layers:
        size += 12 + n_tokens * row_bytes(k_type, n_embd_k)
        size += 12 + n_tokens * row_bytes(v_type, n_embd_v)
    return size
