"""The LLaVA twin's projector GGUF is what b10621's legacy converter writes for such a checkpoint
(tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py), and holds the same values as the HF-named
safetensors beside it (fixtures/llava_twin.py)."""

from __future__ import annotations

import numpy as np

from fixtures.llava_twin import FFN, HIDDEN, N_TEXT_EMBD, gguf_name, llava_twin_dir


def test_names_follow_the_legacy_converters_renames():
    assert gguf_name("vision_model.embeddings.patch_embedding.weight") == "v.patch_embd.weight"
    assert gguf_name("vision_model.embeddings.class_embedding") == "v.class_embd"
    assert gguf_name("vision_model.pre_layrnorm.bias") == "v.pre_ln.bias"
    assert gguf_name("vision_model.encoder.layers.1.self_attn.out_proj.weight") == "v.blk.1.attn_out.weight"
    assert gguf_name("vision_model.encoder.layers.0.layer_norm2.weight") == "v.blk.0.ln2.weight"
    # fc1 under ffn_down and fc2 under ffn_up: clip.cpp tells them apart by shape
    assert gguf_name("vision_model.encoder.layers.0.mlp.fc1.weight") == "v.blk.0.ffn_down.weight"
    assert gguf_name("multi_modal_projector.linear_2.bias") == "mm.2.bias"


def test_the_gguf_keeps_two_blocks_stores_f16_where_the_converter_does_and_matches_the_safetensors():
    import gguf
    from safetensors.numpy import load_file

    d = llava_twin_dir()
    reader = gguf.GGUFReader(str(d / "mmproj-model-f32.gguf"))
    fields = {f.name: f for f in reader.fields.values()}
    assert int(fields["clip.vision.block_count"].parts[-1][0]) == 2
    assert bytes(fields["clip.projector_type"].parts[-1]).decode() == "mlp"
    tensors = {t.name: t for t in reader.tensors}
    assert not any(n.startswith("v.blk.2.") for n in tensors) and "v.post_ln.weight" not in tensors
    f16 = {n for n, t in tensors.items() if t.tensor_type == gguf.GGMLQuantizationType.F16}
    assert f16 == {"v.patch_embd.weight", "mm.0.weight", "mm.2.weight"}
    assert tuple(int(x) for x in tensors["v.blk.0.ffn_down.weight"].shape) == (HIDDEN, FFN)  # (ne: fc1's in, out)
    assert tuple(int(x) for x in tensors["mm.2.weight"].shape) == (N_TEXT_EMBD, N_TEXT_EMBD)
    hf = load_file(str(d / "vision.safetensors"))
    for name, value in hf.items():
        stored = np.asarray(tensors[gguf_name(name)].data).astype(np.float32).reshape(value.shape)
        assert np.array_equal(stored, value), name
