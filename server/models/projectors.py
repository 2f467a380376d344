"""An mmproj GGUF's encoder by its projector type (clip.projector_type), for the types mlxcel runs."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from .clip_gemma3 import Gemma3Encoder
from .clip_llava import LlavaEncoder, gguf_fields
from .whisper_audio import Qwen2AudioEncoder


class ImageEncoder(Protocol):
    """A projector's encoder: an image's pixels (or, where `modality` is "audio", a 30-second log-mel chunk) in,
    n_tokens rows of the text model's width out."""

    begin: str  # text before an image's tokens (mtmd's img_beg), tokenized with special tokens parsed
    end: str
    non_causal: bool  # b10621 decodes the image's tokens with causal attention off (Gemma 3)

    @property
    def n_tokens(self) -> int: ...

    @property
    def n_embd(self) -> int: ...

    def encode(self, rgb: np.ndarray) -> np.ndarray: ...


SERVED = {"mlp": LlavaEncoder.from_gguf, "gemma3": Gemma3Encoder.from_gguf, "qwen2a": Qwen2AudioEncoder.from_gguf}
# integrated checkpoints (config.json model_type, server/models/architectures.py INTEGRATED): their tower
INTEGRATED_TOWERS = {"llava": LlavaEncoder.from_hf, "gemma3": Gemma3Encoder.from_hf}


def load_projector_gguf(path: Path) -> ImageEncoder:
    """The projector's encoder; ValueError naming its type where mlxcel runs none (LLaVA-1.5's mlp, Gemma 3's,
    Qwen2-Audio's qwen2a)."""
    value, _, _ = gguf_fields(path)
    kind = value("clip.projector_type", "mlp")
    if kind not in SERVED:
        raise ValueError(
            f"projector type '{kind}' is not served yet (mlxcel runs LLaVA-1.5's mlp, Gemma 3's and Qwen2-Audio's qwen2a)"
        )
    return SERVED[kind](path)


def load_integrated_tower(path: Path, config: dict) -> ImageEncoder:
    """An integrated checkpoint's own tower and projector, computed as the projector GGUF b10621's converter writes
    from it; ValueError where its safetensors hold none."""
    return INTEGRATED_TOWERS[config["model_type"]](path, config)
