"""Which server a command line asks for: a chat server, or an encoder one (--embeddings / --reranking), and
the encoder's settings, resolved as b10621 resolves them.

--embedding and --rerank both turn embeddings on; --rerank also sets rank pooling, as --pooling rank does, and
the later of the two pooling writers wins (upstream's handlers run in order). With no --pooling the
checkpoint's 1_Pooling/config.json decides, as the GGUF's pooling_type does upstream; with neither, none.
A command line that asks for an encoder mlxcel cannot serve fails here, with one line naming the flag.
"""

from __future__ import annotations

from pathlib import Path

from ..models.bert import declared_pooling, is_encoder_checkpoint
from .worker import EncoderConfig


class EncoderModeError(ValueError):
    pass


def resolved_pooling(given, checkpoint: Path) -> str:
    pooling = None
    for g in given:  # environment first, then the command line: the last writer wins
        if g.option == "--rerank" and g.value is not False:
            pooling = "rank"
        elif g.option == "--pooling":
            pooling = g.value
    return pooling or declared_pooling(checkpoint) or "none"


def encoder_config(args, checkpoint: Path, n_slots: int) -> EncoderConfig | None:
    """The encoder's settings when the command line asks for embeddings, else None (a chat server)."""
    embedding = bool(args.embedding or args.reranking)
    encoder = is_encoder_checkpoint(checkpoint)
    if not embedding:
        if encoder:
            raise EncoderModeError(
                f"error: '{checkpoint}' is a BERT-family encoder, which embeds and ranks but does "
                "not generate: start it with --embeddings, or --reranking for a cross-encoder"
            )
        return None
    flag = "--reranking" if args.reranking else "--embeddings"
    if not encoder:
        raise EncoderModeError(
            f"error: {flag}: '{checkpoint}' is not an encoder: mlxcel embeds and ranks with "
            "BERT-family encoders only (for example -m all-minilm-l6-v2); a chat model has no "
            "embedding path here"
        )
    pooling = resolved_pooling(args.given, checkpoint)
    return EncoderConfig(
        mode="rerank" if pooling == "rank" else "embedding",
        pooling=pooling,
        embd_normalize=args.embd_normalize,
        n_ubatch=args.ubatch_size,
        n_ctx=args.ctx_size,
        n_slots=n_slots,
        sleep_idle_seconds=getattr(args, "sleep_idle_seconds", -1),
    )
