"""Speculative decoding's rounds (speculative.py holds the drafters and b10621's arithmetic): the draft, the
target's pass over the last token and the draft, the draws (common_sampler_sample_and_accept_n), the rejected
positions forgotten, the tokens emitted in order."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, cast

from ..backends import Backend, BackendRefusal, FeatureCapture, load_backend
from ..backends.base import PassSource
from ..backends.mlx_backend import MLXBackend
from ..models.dflash_head import DFlashDraft, DraftRefusal
from ..models.eagle3_head import Eagle3Head, HeadRefusal
from ..models.kv_numerics import KVNumerics
from ..models.mtp_head import MTPHead, MTPRefusal, MTPRunner
from .dflash_drafter import DFlashDrafter
from .eagle3_drafter import Eagle3Drafter
from .mtp_drafter import MTPDrafter
from .ngram_drafters import NgramCache, NgramDrafters, NgramMap, NgramMod
from .process_token import TokenProcessor
from .running import Running
from .scheduler import Sequence
from .sequence_tokens import cached_tokens, slot_tokens
from .speculative import DraftConfig, Drafter, NgramSimple, Speculator, draft_max
from .types import TokenProbs

log = logging.getLogger("mlxcel.engine")


def load_drafters(
    draft: DraftConfig | None,
    ngram_simple: tuple[int, int] | None,
    ngram: NgramDrafters,
    target: Backend | None = None,
) -> Speculator | None:
    """The drafters, in b10621's priority order (ngram-simple, -map-k, -map-k4v, -mod, -cache, then the draft
    model or EAGLE-3 head); the draft model loaded beside the target, a head over the target's captured features."""
    sources: list = []
    if ngram_simple is not None:
        sources.append(NgramSimple(*ngram_simple))
    if ngram.map_k is not None:
        sources.append(NgramMap(ngram.map_k, key_only=True))
    if ngram.map_k4v is not None:
        sources.append(NgramMap(ngram.map_k4v, key_only=False))
    if ngram.mod is not None:
        sources.append(NgramMod(ngram.mod))
    if ngram.cache is not None:
        sources.append(NgramCache(ngram.cache))
    if draft is not None and draft.kind in HEAD_LOADERS:
        if target is None:
            raise BackendRefusal(f"{draft.kind} reads the target model's hidden states: no target given")
        sources.append(HEAD_LOADERS[draft.kind](draft, target))
    elif draft is not None:
        sources.append(Drafter(load_backend(Path(draft.model), kv=draft.kv), draft))
        log.info(
            "draft model loaded: %s (n_max %d, n_min %d, p_min %g; %s)",
            draft.model,
            draft.n_max,
            draft.n_min,
            draft.p_min,
            draft.kv.describe() if draft.kv else "KV cache in float32",
        )
    return Speculator(sources) if sources else None


def load_mtp(draft: DraftConfig, target: Backend) -> MTPDrafter:
    """The target's own MTP block (b10621's MTP draft context on the target model), over the final hidden states
    of the target's passes."""
    loaded = getattr(target, "loaded", None)
    if not isinstance(target, MLXBackend) or loaded is None or not hasattr(loaded.model, "trunk_and_head"):
        raise BackendRefusal("context type MTP requested but model doesn't contain MTP layers")
    try:
        head = MTPHead.load(loaded.path, loaded.config)
    except MTPRefusal as exc:
        raise BackendRefusal(f"context type MTP requested but {exc}") from None
    kv = draft.kv or KVNumerics.from_flags("f16", "f16", None)
    if kv.blocks:
        raise BackendRefusal(
            f"-ctkd {kv.k_type} -ctvd {kv.v_type}: an MTP block's KV cache in a block type is not served by mlxcel "
            "yet: use a float type (f16, b10621's default)"
        )
    head.set_numerics(kv)
    trunk, output = loaded.model.trunk_and_head()
    target.capture_outputs()
    log.info(
        "MTP draft head loaded from the target model (n_max %d, n_min %d, p_min %g; %s)",
        draft.n_max,
        draft.n_min,
        draft.p_min,
        kv.describe(),
    )
    runner = MTPRunner(head, trunk.embed_tokens, output)
    return MTPDrafter(runner, int(loaded.model.language_model.args.hidden_size), draft.n_max, draft.n_min, draft.p_min)


def load_eagle3(draft: DraftConfig, target: Backend) -> Eagle3Drafter:
    """The EAGLE-3 head over the target's captured layer inputs (the native steps' only: BackendRefusal else)."""
    try:
        head = Eagle3Head.load(Path(draft.model), target.n_vocab)
    except (HeadRefusal, OSError) as exc:
        raise BackendRefusal(f"failed to load draft model, '{draft.model}': {exc}") from None
    if not isinstance(target, FeatureCapture):
        raise BackendRefusal(
            "draft-eagle3 reads the target's hidden states from mlxcel's native CPU steps, which do not run this model"
        )
    if head.target_width != target.hidden_size:
        raise BackendRefusal(
            f"the EAGLE-3 head reads {head.target_width}-wide hidden states, the target's are {target.hidden_size}"
        )
    kv = draft.kv or KVNumerics.from_flags("f16", "f16", None)
    if kv.blocks:
        raise BackendRefusal(
            f"-ctkd {kv.k_type} -ctvd {kv.v_type}: an EAGLE-3 head's KV cache in a block type is not served by mlxcel "
            "yet: use a float type (f16, b10621's default)"
        )
    target.capture(head.target_layers)
    log.info(
        "EAGLE-3 head loaded: %s (target layers %s, draft vocab %s; n_max %d, n_min %d, p_min %g; %s)",
        draft.model,
        list(head.target_layers),
        "the target's" if head.d2t is None else len(head.d2t),
        draft.n_max,
        draft.n_min,
        draft.p_min,
        kv.describe(),
    )
    embed = target.embed_tokens
    return Eagle3Drafter(head, embed, kv, draft.n_max, draft.n_min, draft.p_min)


def load_dflash(draft: DraftConfig, target: Backend) -> DFlashDrafter:
    """The DFlash draft over the target's captured layer inputs, its embedding and output head (the native
    steps' only: BackendRefusal else)."""
    try:
        dflash = DFlashDraft.load(Path(draft.model), target.n_vocab)
    except (DraftRefusal, OSError) as exc:
        raise BackendRefusal(f"failed to load draft model, '{draft.model}': {exc}") from None
    if not isinstance(target, FeatureCapture):
        raise BackendRefusal(
            f"{draft.kind} reads the target's hidden states from mlxcel's native CPU steps, which do not run this model"
        )
    if dflash.width != target.hidden_size:
        raise BackendRefusal(
            f"the DFlash draft is {dflash.width} wide, the target {target.hidden_size}: it reads the target's "
            "embedding and head"
        )
    kv = draft.kv or KVNumerics.from_flags("f16", "f16", None)
    if kv.blocks:
        raise BackendRefusal(
            f"-ctkd {kv.k_type} -ctvd {kv.v_type}: a DFlash draft's KV cache in a block type is not served by mlxcel "
            "yet: use a float type (f16, b10621's default)"
        )
    try:
        target.capture(dflash.target_layers)
    except ValueError as exc:
        raise BackendRefusal(f"DFlash: {exc}") from None
    dspark = draft.kind == "draft-dspark"
    if dspark and not dflash.markov:
        log.warning("draft-dspark over a DFlash draft without a Markov head: no confidences, --spec-draft-p-min unused")
    log.info(
        "%s draft loaded: %s (target layers %s, block %d, mask token %d; n_max %d, n_min %d, p_min %g; %s)",
        "DSpark" if dflash.markov else "DFlash",
        draft.model,
        list(dflash.target_layers),
        dflash.block_size,
        dflash.mask_token,
        draft.n_max,
        draft.n_min,
        draft.p_min,
        kv.describe(),
    )
    return DFlashDrafter(
        dflash, target.embed_tokens, target.output_head, kv, draft.n_max, draft.n_min, draft.p_min, dspark
    )


HEAD_LOADERS: dict[str, Callable[[DraftConfig, Backend], object]] = {
    "draft-eagle3": load_eagle3,
    "draft-mtp": load_mtp,
    "draft-dflash": load_dflash,
    "draft-dspark": load_dflash,
}


def text_tokens(tokens: list[int]) -> list[int]:
    """b10621's get_text_tokens: an image's positions left out (the drafters see text alone)."""
    return tokens if all(t >= 0 for t in tokens) else [t for t in tokens if t >= 0]


def draft_state_bytes(drafter: Speculator | None) -> Callable[[int, int], int]:
    """The draft model's share of a slot's state, as --cache-ram counts it."""
    models = [s.runner for s in drafter.sources if isinstance(s, Drafter)] if drafter is not None else []
    return lambda n, n_stream: sum(m.state_bytes(n, n_stream) for m in models)


class Speculation:
    def __init__(self, drafter: Speculator, backend: Backend, tokens: TokenProcessor, n_ctx: int):
        self.drafter, self.backend, self.tokens, self.n_ctx = drafter, backend, tokens, n_ctx
        # the target's passes, for a drafter that reads its features (draft-eagle3)
        reads = drafter.reads_outputs or (drafter.captures and isinstance(backend, FeatureCapture))
        self.capture = cast(PassSource, backend) if reads else None

    def n_max(self, seq: Sequence) -> int:
        """How many tokens this decode step may draft (0: it decodes plainly): b10621's get_n_draft_max, for a
        sequence whose cache forgets rejected positions (rewind)."""
        caps = self.backend.capabilities
        if not (caps.rewind or caps.draft_rewind):
            return 0
        run: Running = seq.payload
        return draft_max(self.n_ctx, slot_tokens(seq), run.request.n_predict, seq.n_decoded)

    def begin(self, seq: Sequence) -> None:
        """A request's prompt is processed (b10621's SLOT_STATE_DONE_PROMPT): each drafter sees it, with the
        slot's state (kept across requests: b10621's drafters keep theirs per sequence id)."""
        run: Running = seq.payload
        run.drafts.state = self.drafter.new_state(seq.slot)
        self.drafter.begin(run.drafts.state, text_tokens(list(seq.prompt)))

    def round(self, seq: Sequence, n_max: int) -> None:
        """One round for a sequence out of any decode batch, its adapters' scales set."""
        run: Running = seq.payload
        backend, drafter, d = self.backend, self.drafter, run.drafts
        if d.state is None:
            d.state = drafter.new_state(seq.slot)
        if self.capture is not None:  # (b10621 processes each target batch as it runs: here before drafts read them)
            drafter.process(d.state, self.capture.take_passes(run.cache))
        # after a context shift the draft cache keeps its common prefix with the shifted tokens and is fed the rest
        draft = drafter.propose(d.state, text_tokens(cached_tokens(seq)), run.last_token, n_max)
        d.n_draft += len(draft)
        if not draft:
            run.logits = backend.decode(run.cache, run.last_token)
            self.tokens.sample(seq)
            return
        n_past = backend.length(run.cache)
        rows = backend.verify(run.cache, [run.last_token, *draft])
        ids = []
        for i in range(len(draft) + 1):
            run.logits = rows[i : i + 1]
            drawn = self.tokens.draw(seq)
            if drawn is None:  # the sequence failed (a grammar dead end)
                return
            ids.append(drawn[0])
            if i == len(draft) or drawn[0] != draft[i]:
                break
        if self.capture is not None:
            drafter.process(d.state, self.capture.take_passes(run.cache))
        backend.trim(run.cache, n_past + len(ids))
        drafter.accept(d.state, len(ids) - 1)
        self._count(run, len(ids) - 1)
        # b10621 reports no candidates for a verified round's tokens: probability 1, an empty list
        probs = TokenProbs(1.0, ()) if run.request.n_probs > 0 else None
        for token in ids:
            if self.tokens.emit(seq, token, probs):
                return

    def _count(self, run: Running, n_accepted: int) -> None:
        d = run.drafts
        d.n_accepted += n_accepted
        d.n_rounds += 1
        if not d.accepted_per_pos:
            d.accepted_per_pos = [0] * self.drafter.n_max
        for i in range(min(n_accepted, len(d.accepted_per_pos))):
            d.accepted_per_pos[i] += 1
