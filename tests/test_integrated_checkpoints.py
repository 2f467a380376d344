"""Integrated vision-language checkpoints (one MLX/HF directory: text model, tower, projector): the text model is
served under its own names and configuration (server/models/architectures.py INTEGRATED), the tower as the
projector GGUF b10621's converter writes from the same checkpoint (server/models/projectors.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from server.models.architectures import INTEGRATED, integrated_text_config, integrated_text_weights
from server.models.clip_gemma3 import gguf_tensor_name
from server.models.projectors import INTEGRATED_TOWERS


def test_every_integrated_type_has_a_tower():
    assert set(INTEGRATED) == set(INTEGRATED_TOWERS)


def test_the_text_config_takes_the_checkpoints_own_keys_without_overriding_the_text_models():
    config = {
        "model_type": "gemma3",
        "text_config": {"hidden_size": 8, "vocab_size": 5},
        "vocab_size": 9,
        "eos_token_id": [1, 106],
        "quantization": {"bits": 4, "group_size": 64},
        "vision_config": {"hidden_size": 4},
    }
    text = integrated_text_config(config)
    assert text == {
        "hidden_size": 8,
        "vocab_size": 5,
        "model_type": "gemma3_text",
        "eos_token_id": [1, 106],
        "quantization": {"bits": 4, "group_size": 64},
    }
    assert integrated_text_config({"model_type": "gemma3_text", "hidden_size": 8}) is None
    assert integrated_text_config({"model_type": "gemma3"}) is None  # (no text_config: not integrated)


def test_the_text_weights_are_found_under_each_layout_and_the_towers_left_out():
    weights = {
        "language_model.model.embed_tokens.weight": 1,  # mlx-lm's and older HF's
        "language_model.lm_head.weight": 2,
        "model.language_model.layers.0.mlp.down_proj.weight": 3,  # newer HF's
        "lm_head.weight": 4,
        "vision_tower.vision_model.post_layernorm.weight": 5,
        "model.vision_tower.vision_model.post_layernorm.bias": 6,
        "multi_modal_projector.mm_input_projection_weight": 7,
    }
    assert integrated_text_weights(weights) == {
        "model.embed_tokens.weight": 1,
        "lm_head.weight": 4,  # (the two layouts never meet in one checkpoint)
        "model.layers.0.mlp.down_proj.weight": 3,
    }


@pytest.mark.parametrize(
    ("hf", "gguf"),
    [
        ("multi_modal_projector.mm_input_projection_weight", "mm.input_projection.weight"),
        ("multi_modal_projector.mm_soft_emb_norm.weight", "mm.soft_emb_norm.weight"),
        ("vision_tower.vision_model.embeddings.patch_embedding.bias", "v.patch_embd.bias"),
        ("vision_tower.vision_model.encoder.layers.1.self_attn.out_proj.weight", "v.blk.1.attn_out.weight"),
        ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "v.blk.0.ffn_up.weight"),
        ("vision_tower.vision_model.encoder.layers.0.layer_norm2.bias", "v.blk.0.ln2.bias"),
        ("vision_tower.vision_model.post_layernorm.weight", "v.post_ln.weight"),
    ],
)
def test_gemma3_tensor_names_are_gguf_pys(hf, gguf):
    assert gguf_tensor_name(hf) == gguf


def test_the_gemma3_tower_of_the_integrated_twin_is_the_converters_projector(tmp_path):
    """From one directory, the tower equals the mmproj GGUF written from the same values (each tensor, the
    arguments, the 2x2 merge from image_seq_length), and encodes an image to the same rows; a checkpoint without
    its tower is refused in words."""
    from fixtures.gemma3_vision_twin import gemma3_mlx_dir, gemma3_mmproj
    from fixtures.llava_twin import png_pixels
    from server.models.loader import vision_config
    from server.models.projectors import load_integrated_tower, load_projector_gguf

    path = gemma3_mlx_dir()
    tower, gguf = load_integrated_tower(path, vision_config(path)), load_projector_gguf(gemma3_mmproj())
    assert (tower.args, tower.merge, sorted(tower.t)) == (gguf.args, gguf.merge, sorted(gguf.t))
    for name, data in gguf.t.items():
        np.testing.assert_array_equal(tower.t[name], data, err_msg=name)
    rgb = png_pixels(48, 48, seed=4)
    np.testing.assert_array_equal(tower.encode(rgb), gguf.encode(rgb))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(path / "config.json", bare / "config.json")
    from safetensors.numpy import save_file

    save_file({"language_model.model.norm.weight": np.ones(4, np.float32)}, str(bare / "model.safetensors"))
    with pytest.raises(ValueError, match="no Gemma 3 vision tower"):
        load_integrated_tower(bare, json.loads((bare / "config.json").read_text()))


def test_the_integrated_gemma3_text_model_is_the_family_twins():
    """The same logits from the integrated checkpoint as from the gemma3 family twin's own MLX directory (its
    text weights, mlxcel's own Gemma 3 model class)."""
    import mlx.core as mx

    from fixtures.families import family_twin
    from fixtures.gemma3_vision_twin import gemma3_mlx_dir
    from server.models import gemma3_window
    from server.models.loader import load_checkpoint

    a = load_checkpoint(gemma3_mlx_dir(), kernels=False)
    b = load_checkpoint(family_twin("gemma3").mlx_dir, kernels=False)
    assert type(a.model) is gemma3_window.Model and a.config["model_type"] == "gemma3_text"
    tokens = mx.array([[2, 10, 200, 3000, 7]])
    np.testing.assert_array_equal(np.array(a.model(tokens)), np.array(b.model(tokens)))
