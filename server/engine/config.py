"""The engine's settings, resolved from the command line by server/cli/startup.py (plain data)."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.distributed import Ranks
from ..models.kv_numerics import KVNumerics
from ..models.yarn import YarnFlags
from .ngram_drafters import NgramDrafters
from .speculative import DraftConfig


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 0  # per slot; 0: the model's training context
    n_slots: int = 1
    n_batch: int = 2048
    cont_batching: bool = True
    ubatch: int = 512  # the largest prefill chunk
    cache_prompt: bool = True
    cache_ram_mib: int = 8192  # -1: no limit, 0: no prompt cache
    slot_similarity: float = 0.1  # --slot-prompt-similarity (0: slots by LRU only)
    cache_idle_slots: bool = True  # --cache-idle-slots: idle slots saved to the prompt cache at each launch
    kv_unified: bool = False  # b10621's unified KV (-np auto): idle slots are also cleared at each launch
    ctx_shift: bool = False  # --context-shift: a full context discards old tokens instead of stopping
    add_bos: bool = False  # the vocabulary adds BOS: a context shift keeps one more token
    special: bool = False  # --special: generated special tokens are rendered as text
    sleep_idle_seconds: int = -1  # --sleep-idle-seconds: free the model after this long idle (-1: never)
    rope: tuple[float | None, float | None] = (None, None)  # --rope-freq-base, --rope-freq-scale (None: the model's)
    yarn: YarnFlags | None = None  # --rope-scaling yarn and the --yarn-* values
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (adapter, its starting scale)
    lora_fuse: bool = False  # --lora-fuse: the adapters baked into the weights at their starting scales
    # --control-vector / --control-vector-scaled: (file, strength); --control-vector-layer-range (0: default)
    control_vectors: tuple[tuple[str, float], ...] = ()
    control_vector_layers: tuple[int, int] = (0, 0)
    draft: DraftConfig | None = None  # --spec-draft-model with --spec-type draft-simple
    ngram_simple: tuple[int, int] | None = None  # --spec-type ngram-simple: (size_n, size_m)
    ngram: NgramDrafters = NgramDrafters()  # --spec-type ngram-map-k, -map-k4v, -mod, -cache and their tuning
    kv: KVNumerics = KVNumerics()  # -ctk, -ctv, -fa; this default a float32 cache (the CLI passes b10621's: f16)
    mlock: bool = False  # --mlock / --load-mode mlock|mmap+mlock: the weights locked in RAM once loaded
    # b10621's context checkpoints (-ctxcp, --checkpoint-min-step, --swa-full): where a sliding-window model's
    # prompt batches end (engine/checkpoints.py); mlxcel keeps no checkpoint itself
    ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    swa_full: bool = False
    ranks: Ranks | None = None  # launched by mlx.launch: the model split over these ranks (backends/distributed.py)


DEFAULT_CONFIG = EngineConfig()
