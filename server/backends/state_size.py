"""The size b10621 gives a slot's KV state (llama_state_seq_get_size_ext, what --cache-ram counts), one place.

llama_kv_cache::state_write for one sequence: the stream count, a cell count per stream, then for the stream
holding the sequence each cell's position, seq-id count and seq id (4 bytes each), v_trans and the layer count,
and per layer the keys' type and row size (4 + 8 bytes) and their rows, then the values' (the same 12 bytes of
header, transposed or not) and their rows. Rows are n_embd x the cache type's element size.
"""

from __future__ import annotations

ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def state_bytes(n_tokens: int, layers: list[tuple[int, int]], k_type: str, v_type: str, n_stream: int) -> int:
    """layers: (n_embd_k_gqa, n_embd_v_gqa) of each layer; n_stream: 1 with a unified KV cache, else the slots."""
    size = 4 + 4 * n_stream
    if n_tokens <= 0:
        return size
    size += 12 * n_tokens + 8
    for n_embd_k, n_embd_v in layers:
        size += 12 + n_tokens * n_embd_k * ELEMENT_BYTES[k_type]
        size += 12 + n_tokens * n_embd_v * ELEMENT_BYTES[v_type]
    return size
