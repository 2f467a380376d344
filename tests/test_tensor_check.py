"""--check-tensors (server/models/tensor_check.py): ggml_validate_row_data's checks and lines, over a GGUF's
tensors as the file holds them and over an MLX checkpoint's float arrays."""

from __future__ import annotations

import struct

import mlx.core as mx
import numpy as np
import pytest

from server.models.tensor_check import BLOCK_SCALES, _gguf_tensor, check_checkpoint, check_gguf


def test_float_tensors_report_the_first_bad_value_infinity_before_nan():
    x = np.ones(40, np.float32)
    assert _gguf_tensor("F32", x) is None
    x[17], x[30] = np.nan, np.inf
    assert _gguf_tensor("F32", x) == "ggml_validate_row_data: found nan value at block 17"
    x[3] = -np.inf
    assert _gguf_tensor("F32", x) == "ggml_validate_row_data: found inf value at block 3"
    h = np.ones(20, np.float16)
    h[5] = np.inf
    assert _gguf_tensor("F16", h) == "ggml_validate_row_data: found inf value at block 5"
    bf = np.full(10, 0x3F80, np.uint16)
    bf[[1, 2]] = 0x7FC0
    assert _gguf_tensor("BF16", bf) == "ggml_validate_row_data: found 2 NaNs in row of 10 BF16 values"


@pytest.mark.parametrize("kind", sorted(BLOCK_SCALES))
def test_quantized_tensors_check_their_block_scales_only(kind):
    size, offsets = BLOCK_SCALES[kind]
    blocks = np.zeros((3, size), np.uint8)
    for o in offsets:
        blocks[:, o : o + 2] = np.frombuffer(struct.pack("<H", 0x3C00), np.uint8)  # 1.0
    blocks[:, [i for i in range(size) if all(not o <= i < o + 2 for o in offsets)]] = 0xFF  # values: any bits
    assert _gguf_tensor(kind, blocks) is None
    blocks[2, offsets[-1] : offsets[-1] + 2] = np.frombuffer(struct.pack("<H", 0x7E00), np.uint8)
    assert _gguf_tensor(kind, blocks) == "ggml_validate_row_data: found nan value at block 2"


def test_a_gguf_with_a_nan_scale_names_its_tensor():
    from fixtures.damaged_gguf import damaged_dir
    from server.models.bundled import source_gguf

    assert check_gguf(source_gguf()) == []
    assert check_gguf(damaged_dir() / "nan.gguf") == [
        "ggml_validate_row_data: found nan value at block 0",
        "load_all_data: tensor 'blk.0.ffn_down.weight' has invalid data",
    ]


def test_an_mlx_checkpoints_float_arrays_are_checked(tmp_path):
    good = mx.ones((4, 8), mx.bfloat16)
    bad = mx.array(np.array([1.0, np.inf, 2.0], np.float32))
    mx.save_safetensors(
        str(tmp_path / "model.safetensors"), {"a.weight": good, "b.scales": bad, "c": mx.ones(3, mx.uint32)}
    )
    assert check_checkpoint(tmp_path) == [
        "ggml_validate_row_data: found inf value at block 1",
        "load_all_data: tensor 'b.scales' has invalid data",
    ]
