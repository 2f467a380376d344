"""--mmproj at startup (server/cli/projector.py): the projector types mlxcel runs load, the others are refused in
one line (or, fetched by -hf on their own, left out with a warning), and b10621's width check holds."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pytest

from server.cli.projector import ProjectorRefused, load_projector


def _write(path, projector: str = "mlp", pinpoints: list[int] | None = None) -> str:
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("clip.projector_type", projector)
    for key, value in (("image_size", 16), ("patch_size", 8), ("embedding_length", 8), ("block_count", 1)):
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_uint32("clip.vision.attention.head_count", 2)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    if pinpoints:
        w.add_array("clip.vision.image_grid_pinpoints", pinpoints)
    w.add_tensor("v.patch_embd.weight", np.zeros((8, 3, 8, 8), np.float16))
    w.add_tensor("v.position_embd.weight", np.zeros((4, 8), np.float32))
    w.add_tensor("mm.0.weight", np.zeros((12, 8), np.float16))
    w.add_tensor("mm.0.bias", np.zeros(12, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _args(path: str, **extra) -> argparse.Namespace:
    return argparse.Namespace(
        mmproj=path, context_shift=True, cache_reuse=256, spec_draft_model="", mmproj_fetched=False, **extra
    )


def test_a_llava_projector_loads_and_turns_off_context_shift_and_cache_reuse(tmp_path, tmp_path_factory, caplog):
    args = _args(_write(tmp_path / "p.gguf"))
    with caplog.at_level(logging.WARNING, logger="mlxcel"):
        projector = load_projector(args, tmp_path_factory.mktemp("model"), 12, split=False)
    assert projector is not None and projector.n_tokens == 4 and projector.n_embd == 12
    assert (args.context_shift, args.cache_reuse) == (False, 0)
    assert "ctx_shift is not supported by multimodal, it will be disabled" in caplog.text
    assert "cache_reuse is not supported by multimodal, it will be disabled" in caplog.text


@pytest.mark.parametrize(
    ("kind", "pinpoints", "why"),
    [
        (
            "qwen2.5vl_merger",
            None,
            "projector type 'qwen2.5vl_merger' is not served yet (mlxcel runs LLaVA-1.5's mlp, Gemma 3's and Qwen2-Audio's qwen2a)",
        ),
        ("mlp", [336, 672, 672, 336], "LLaVA-1.6's tiled images (clip.vision.image_grid_pinpoints) are not served yet"),
    ],
)
def test_other_projectors_are_refused_in_one_line(tmp_path, kind, pinpoints, why):
    path = _write(tmp_path / "p.gguf", kind, pinpoints)
    with pytest.raises(ProjectorRefused) as e:
        load_projector(_args(path), tmp_path, 12, split=False)
    assert str(e.value) == f"failed to load multimodal model, '{path}': {why}"


def test_a_fetched_projector_mlxcel_does_not_run_is_left_out_with_a_warning(tmp_path, caplog):
    args = _args(_write(tmp_path / "p.gguf", "qwen2.5vl_merger"))
    args.mmproj_fetched = True
    with caplog.at_level(logging.WARNING, logger="mlxcel"):
        assert load_projector(args, tmp_path, 12, split=False) is None
    assert "serving the model without it (images are refused)" in caplog.text
    assert args.context_shift is True  # (nothing loaded: nothing turned off)


def test_the_width_must_be_the_models_in_b10621s_words(tmp_path):
    with pytest.raises(ProjectorRefused) as e:
        load_projector(_args(_write(tmp_path / "p.gguf")), tmp_path, 576, split=False)
    assert str(e.value) == (
        "mismatch between text model (n_embd = 576) and mmproj (n_embd = 12); hint: you may be using wrong mmproj"
    )


def test_images_with_a_draft_model_or_split_ranks_are_refused(tmp_path):
    path = _write(tmp_path / "p.gguf")
    with pytest.raises(ProjectorRefused, match="a model split over ranks"):
        load_projector(_args(path), tmp_path, 12, split=True)
    args = _args(path)
    args.spec_draft_model = "d"
    with pytest.raises(ProjectorRefused, match="draft model"):
        load_projector(args, tmp_path, 12, split=False)
