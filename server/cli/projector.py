"""--mmproj: the projector loaded beside the text model at startup, as b10621's mtmd_init_from_file checks it (its
type served, its rows as wide as the model's embeddings), and what a loaded one turns off (context shift and
cache reuse, with b10621's warnings)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..models.loader import vision_config
from ..models.projectors import ImageEncoder, load_integrated_tower, load_projector_gguf

log = logging.getLogger("mlxcel")


class ProjectorRefused(ValueError):
    """The projector cannot be served with this model: the line to print."""


def load_projector(args, checkpoint: Path, n_embd_text: int, split: bool) -> ImageEncoder | None:
    """--mmproj's projector, else an integrated checkpoint's own tower (LLaVA, Gemma 3), else None (a text model)."""
    path = args.mmproj
    integrated = None if path else vision_config(checkpoint)
    if not path and integrated is None:
        return None
    if integrated is not None:
        try:
            projector = load_integrated_tower(checkpoint, integrated)
        except (OSError, ValueError, KeyError) as exc:
            raise ProjectorRefused(f"cannot load the checkpoint's vision tower ({checkpoint}): {exc}") from None
        return _checked(args, projector, n_embd_text, split, str(checkpoint))
    try:
        projector = _load_file(path)
    except ProjectorRefused as exc:
        if not getattr(args, "mmproj_fetched", False):
            raise
        # -hf fetched it on its own (b10621's --mmproj-auto): a type mlxcel does not run leaves a text model
        log.warning("%s; serving the model without it (images are refused)", exc)
        return None
    return _checked(args, projector, n_embd_text, split, path)


def _load_file(path: str) -> ImageEncoder:
    if not Path(path).is_file():
        raise ProjectorRefused(f"failed to load multimodal model, '{path}': no such file")
    try:
        return load_projector_gguf(Path(path))
    except ValueError as exc:  # (a projector type mlxcel does not run)
        raise ProjectorRefused(f"failed to load multimodal model, '{path}': {exc}") from None
    except Exception as exc:  # a damaged file: the reader's error on one line
        raise ProjectorRefused(f"failed to load multimodal model, '{path}': {exc}".replace("\n", " ")) from None


def _checked(args, projector: ImageEncoder, n_embd_text: int, split: bool, path: str) -> ImageEncoder:
    if split:
        raise ProjectorRefused("--mmproj: a model split over ranks takes no images in mlxcel yet; run one process")
    if getattr(args, "spec_draft_model", None):
        raise ProjectorRefused(
            "--mmproj with a draft model (-md): mlxcel's draft model cannot read an image's positions; leave one out"
        )
    if n_embd_text > 0 and projector.n_embd != n_embd_text:
        raise ProjectorRefused(
            f"mismatch between text model (n_embd = {n_embd_text}) and mmproj (n_embd = {projector.n_embd}); "
            "hint: you may be using wrong mmproj"
        )
    log.info("loaded multimodal model, '%s'", path)
    if args.context_shift:
        args.context_shift = False
        log.warning("ctx_shift is not supported by multimodal, it will be disabled")
    if args.cache_reuse:
        args.cache_reuse = 0
        log.warning("cache_reuse is not supported by multimodal, it will be disabled")
    return projector
