"""What mlxcel does at startup with each b10621 option it does not serve itself: accept the value as inert
(it changes nothing here, and nothing upstream either, or asks for what mlxcel always does), or refuse it with
one line naming the option, the value, the reason and the mlxcel alternative, before any weight is read.

The options mlxcel acts on are the ones server/cli/args.py gives settings to; every other b10621 option has a
rule here (tests/test_cli_surface.py holds the two sets disjoint and complete). A rule may also carry
b10621's own check of a value (its handler's exception text), which the parser runs as upstream does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..cpu_threads import check_mask, check_range
from ..textparse import AUTOY, FALSEY, TRUTHY, parse_csv_row, stof, stoi, stoul

if TYPE_CHECKING:  # parse.py calls check_value: Given only annotates here
    from .parse import Given


@dataclass(frozen=True)
class Rule:
    inert: Callable[[object], bool]  # which values change nothing here
    reason: str = ""  # why any other value is refused
    alternative: str = ""  # what to do instead, in mlxcel
    inert_text: str = ""  # the inert values, in words (for the manifest notes)
    check: Callable[[object], None] | None = None  # b10621's own validation (raises ValueError in its words)
    accumulates: bool = False  # every use counts (b10621 appends); otherwise the last value wins


def _always(_v) -> bool:
    return True


def _never(_v) -> bool:
    return False


def _is(*values) -> Callable[[object], bool]:
    return lambda v: v in values


def _positive_only(v) -> bool:  # a pair whose negative form is the inert one
    return v is False


def _inert(text: str, check=None, accumulates: bool = False) -> Rule:
    return Rule(_always, inert_text=text, check=check, accumulates=accumulates)


def _refuse(reason: str, alternative: str, check=None, accumulates: bool = False) -> Rule:
    return Rule(_never, reason, alternative, "none", check, accumulates)


def _only(
    inert: Callable[[object], bool], text: str, reason: str, alternative: str, check=None, accumulates: bool = False
) -> Rule:
    return Rule(inert, reason, alternative, text, check, accumulates)


# --- b10621's own checks of a value, raising what its handlers throw -------------------------------------------


def _in(option: str, *allowed: str, message: str | None = None) -> Callable[[object], None]:
    def check(v) -> None:
        if v not in allowed:
            raise ValueError(message.format(option=option, v=v) if message else "invalid value")

    return check


def _range(lo: int, hi: int | None, message: str = "invalid value") -> Callable[[object], None]:
    def check(v) -> None:
        if v < lo or (hi is not None and v > hi):
            raise ValueError(message)

    return check


def _removed(msg: str) -> Callable[[object], None]:
    def check(_v) -> None:
        raise ValueError("the argument has been removed. " + msg)

    return check


def _stof_check(v) -> None:
    stof(v)


def _gpu_layers_check(v) -> None:
    if v not in ("auto", "all"):
        stoi(v)


def _device_check(v) -> None:
    """parse_device_list on b10621's CPU build: `none` alone, or no device of the first name."""
    names = str(v).split(",")
    if names != ["none"]:
        raise ValueError(f"invalid device: {names[0]}")


def _override_check(v) -> None:
    """parse_tensor_buffer_overrides on b10621's CPU build: pattern=CPU, each; it lists the buffer types first."""
    for override in str(v).split(","):
        if "=" not in override:
            raise ValueError("invalid value")
        if override.split("=", 1)[1] != "CPU":
            print("Available buffer types:\n  CPU")
            raise ValueError("unknown buffer type")


def spec_types(v: str) -> list[str]:
    """common_speculative_types_from_names: the names up to a "none", which stands for itself alone."""
    out = []
    for name in v.split(","):
        if name not in SPEC_TYPES:
            raise ValueError(f"unknown speculative type: {name}")
        if name == "none":
            return ["none"]
        out.append(name)
    return out


def _spec_types_check(v) -> None:
    spec_types(v)


def _stoi_each(v) -> None:
    for x in v:
        stoi(x)


def _sleep_check(v) -> None:
    if v == 0 or v < -1:
        raise ValueError("invalid value: cannot be 0 or less than -1")


def _split_list(v: str) -> list[str]:
    return [x for x in re.split(r"[,/]+", v) if x]


def _override_kv_check(v) -> None:
    """string_parse_kv_override over each item, as b10621's handler runs it (its words, its trailing newline)."""
    from ..models.kv_override import parse  # deferred: the parser's checks import no model code up front

    try:
        parse([v])
    except ValueError as exc:
        raise ValueError(f"{exc}\n") from None


def _kv_type_check(v) -> None:
    if v not in KV_CACHE_TYPES:
        raise ValueError(f"Unsupported cache type: {v}")


def _directory_check(v) -> None:
    if not Path(v).is_dir():
        raise ValueError(f"not a directory: {v}")


def _pairs_check(option: str) -> Callable[[object], None]:
    def check(v) -> None:
        for item in parse_csv_row(v):
            parts = item.split(":")
            if len(parts) != 2:
                raise ValueError(f"{option} format: FNAME:SCALE")
            stof(parts[1])

    return check


def _read_file_check(v) -> None:
    try:
        Path(v).read_bytes()
    except OSError:
        raise ValueError(f"error: failed to open file '{v}'\n") from None


SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")

# --- the reasons and alternatives, shared ------------------------------------------------------------------------

_NO_GGML = "mlxcel has no GGML backend: MLX runs every tensor of the model on one device, its default"
_PLACEMENT = (
    "mlxcel places no tensor on a chosen device or buffer type: every weight and the KV cache live on MLX's "
    "default device"
)
_KV_SERVED_TEXT = (
    "every type b10621 accepts, stored as ggml stores it: f32, f16 (the default), bf16 rounded as ggml writes "
    "them; q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 block-quantized as ggml's from_float (on the native CPU steps)"
)
_GGUF = (
    "mlxcel fetches no model from Docker Hub's registry: it fetches from a Hugging Face-style hub (-hf) or a URL "
    "(-m FILE -mu URL)"
)
_GGUF_ALT = "pass -hf REPO[:QUANT], or -m FILE.gguf -mu URL (a GGUF is converted once into the cache)"


def _preset(repo: str, mlx: str, flags: str, why: str) -> Rule:
    return _refuse(
        f"b10621's preset serves the GGUF repository {repo}; {why}",
        f"the nearest MLX checkpoint is {mlx}: fetch it (`huggingface-cli download {mlx} --local-dir "
        f"DIR`) and run `mlxcel-server -m DIR {flags}`",
    )


_FIM = "--port 8012 -ub 1024 -b 1024 -c 0"
_GPT_OSS = "--port 8013 -ub 2048 -b 32768 -np 2 -c 262144 --temp 1.0 --top-p 1.0 --top-k 0 --min-p 0.01 --jinja"
_DRAFT_NOTE = (
    "its draft model is a second repository, which mlxcel does not fetch (pass a local one with --spec-draft-model)"
)
_NO_ARCH = "mlxcel does not serve the gpt-oss architecture"
_NO_VISION = "it is a vision model, and mlxcel serves text models only"

RULES: dict[str, Rule] = {
    # ----- ggml-runtime: thread pool, affinity, placement, loading -----
    # placement (server/cli/offload.py): on a CPU-only MLX every layer runs on the CPU, as on b10621's CPU build,
    # which starts with each of these (-ngl, -sm, -ts, -mg warn that they have no effect); on a GPU host mlxcel
    # honors a whole placement and refuses a split at startup
    "--device": _inert("none (every layer on the CPU); b10621's CPU build knows no other device", check=_device_check),
    "--override-tensor": _inert(
        "the CPU buffer type (b10621's CPU build's only one): every tensor is on the CPU already",
        check=_override_check,
        accumulates=True,
    ),
    "--cpu-moe": _inert("on a CPU-only host the experts are on the CPU already", accumulates=True),
    "--n-cpu-moe": _inert(
        "any count: on a CPU-only host the experts are on the CPU already", check=_range(0, None), accumulates=True
    ),
    "--gpu-layers": _inert(
        "any value on a CPU-only host (every layer on the CPU, b10621's warning printed); on a GPU host 0, "
        "auto, all and a full count",
        check=_gpu_layers_check,
    ),
    "--split-mode": _inert(
        "none, layer, row, tensor: one device, nothing to split (b10621's CPU build's warning printed)",
        check=_in("--split-mode", "none", "layer", "row", "tensor"),
    ),
    "--tensor-split": _inert(
        "any split on a CPU-only host (b10621's warning printed)", check=lambda v: [stof(x) for x in _split_list(v)]
    ),
    "--main-gpu": _inert("any index on a CPU-only host (b10621's warning printed); 0 on a GPU host"),
    "--flash-attn": _inert(
        "on, off, auto: served (auto is on, as on b10621's CPU backend): attention over an f16 "
        "or bf16 KV cache rounds what ggml-cpu's flash or plain attention rounds "
        "(server/models/kv_numerics.py); over an f32 cache both are f32 math",
        check=_in("--flash-attn", *TRUTHY, *FALSEY, *AUTOY, message="error: unknown value for {option}: '{v}'\n"),
    ),
    "--fit": _inert(
        "on, off: mlxcel never adjusts unset arguments to fit device memory, and on is upstream's default; "
        "`mlxcel estimate` (or --estimate-memory) says what the sizes given take",
        check=_in("--fit", *TRUTHY, *FALSEY, message="error: unknown value for {option}: '{v}'\n"),
    ),
    "--fit-target": _inert("any margin: nothing to fit on a CPU-only host, and mlxcel never fits arguments"),
    "--fit-ctx": _inert("any context: nothing to fit on a CPU-only host, and mlxcel never fits the context"),
    "--op-offload": _inert("--op-offload, --no-op-offload: every operation runs on MLX's one device either way"),
    "--kv-offload": _inert("--kv-offload, --no-kv-offload on a CPU-only host: the KV cache is on the CPU either way"),
    "--repack": _inert("--repack, --no-repack: weight repacking is a GGML CPU layout, never a different result"),
    "--no-host": _inert("every buffer is MLX's on its one device: there is no extra host buffer to bypass"),
    "--perf": _inert(
        "both: b10621's server only counts with it (its llama_perf_context_print is not called); mlxcel always "
        "measures, in every response's timings and the slot's log lines"
    ),
    "--rpc": _refuse(
        _NO_GGML + "; there is no RPC backend to offload to",
        "split one model over several machines with mlx.launch (docs/scaling-out.md)",
        accumulates=True,
    ),
    # --mlock, --mmap, --direct-io and --load-mode write one field, in command-line order: see load_mode_refusal
    "--mlock": _inert("served: the weights locked in RAM once loaded"),
    "--mmap": _inert("--mmap, --no-mmap: MLX loads the weights, the same either way"),
    "--direct-io": _inert("--no-direct-io; -dio (direct I/O) is refused: see --load-mode"),
    "--load-mode": _inert(
        "auto, none, mmap (MLX loads the weights), mlock, mmap+mlock (then locked in RAM); dio is refused",
        check=_in("--load-mode", *LOAD_MODES),
    ),
    "--defrag-thold": _inert("every value: upstream only warns that it is deprecated"),
    # ----- model source -----
    "--model-url": _inert(
        "served: with -m FILE the GGUF is fetched from the URL into FILE as b10621 fetches it (kept while its ETag "
        "holds); without -m, router mode, as b10621"
    ),
    "--docker-repo": _refuse(_GGUF, _GGUF_ALT),
    "--override-kv": _inert(
        "served for a GGUF -m: its metadata overridden as b10621's loader overrides it, in a conversion of its own",
        check=_override_kv_check,
        accumulates=True,
    ),
    # ----- web UI, server tools, MCP -----
    "--ui-mcp-proxy": _inert(
        "served: GET and POST /cors-proxy forward as b10621's proxy does (server/api/cors_proxy.py)"
    ),
    "--agent": _inert("served: -ag turns every built-in tool and the CORS proxy on, -no-ag both off, as b10621"),
    "--path": _inert(
        "served: the directory's files at the root in place of the built-in web UI, as b10621's mount point"
    ),
    "--tools": _inert(
        "served: GET and POST /tools run b10621's built-in tools on the host (server/tools/builtin.py); an unknown "
        "name is refused at startup in b10621's words"
    ),
    "--tools-runtime": _inert(
        "served: the built-in tools run in that container (docker/podman) or over SSH, as b10621"
    ),
    "--mcp-servers-config": _inert(
        "served: each MCP server's tools through /tools as <server>_<tool> (server/tools/mcp.py)"
    ),
    "--mcp-servers-json": _inert(
        "served: each MCP server's tools through /tools as <server>_<tool> (server/tools/mcp.py)"
    ),
    # ----- logging: prompts on disk -----
    "--embd-gemma-default": _refuse(
        "b10621's preset serves the GGUF repository "
        "ggml-org/embeddinggemma-300M-qat-q4_0-GGUF, which mlxcel cannot load, and "
        "embeddinggemma is no BERT-family encoder, the one family mlxcel embeds with",
        "the bundled embedding model: `mlxcel-server -m all-minilm-l6-v2 --port 8011 -np 32 --embedding`",
    ),
    # ----- presets (b10621's twelve: a GGUF repository plus a parameter block) -----
    "--gpt-oss-20b-default": _preset(
        "ggml-org/gpt-oss-20b-GGUF", "mlx-community/gpt-oss-20b-MXFP4-Q8", _GPT_OSS, _NO_ARCH
    ),
    "--gpt-oss-120b-default": _preset(
        "ggml-org/gpt-oss-120b-GGUF", "mlx-community/gpt-oss-120b-MXFP4-Q8", _GPT_OSS, _NO_ARCH
    ),
    "--vision-gemma-4b-default": _preset(
        "ggml-org/gemma-3-4b-it-qat-GGUF",
        "mlx-community/gemma-3-4b-it-qat-4bit",
        "--port 8014 -c 0 --jinja",
        _NO_VISION,
    ),
    "--vision-gemma-12b-default": _preset(
        "ggml-org/gemma-3-12b-it-qat-GGUF",
        "mlx-community/gemma-3-12b-it-qat-4bit",
        "--port 8014 -c 0 --jinja",
        _NO_VISION,
    ),
    # ----- control vectors, LoRA -----
    "--lora-init-without-apply": _inert(
        "--lora-init-without-apply: b10621's server applies its adapters' scales "
        "to every batch it runs, this flag or not (POST /lora-adapters sets them)"
    ),
    # ----- runtime and context -----
    "--warmup": _inert("--warmup, --no-warmup: mlxcel runs no warm-up pass, and one never changes a result"),
    "--cache-type-k": _inert(_KV_SERVED_TEXT, check=_kv_type_check),
    "--cache-type-v": _inert(_KV_SERVED_TEXT, check=_kv_type_check),
    # ----- embeddings, multimodal, observability, router: other issues' surfaces -----
    "--mmproj-offload": _inert("every form: the projector runs on the CPU (numpy), as b10621's CPU build runs it"),
    "--mmproj-device": _inert("every value: the projector runs on the CPU (numpy), as b10621's CPU build runs it"),
    "--image-min-tokens": _inert(
        "every value: they size dynamic-resolution images; the towers mlxcel serves take one fixed size, as in b10621"
    ),
    "--image-max-tokens": _inert(
        "every value: they size dynamic-resolution images; the towers mlxcel serves take one fixed size, as in b10621"
    ),
    "--mtmd-batch-max-tokens": _inert(
        "every value: the towers mlxcel serves encode one image at a time, as b10621's do (no batching tower)"
    ),
    "--draft": _refuse("removed upstream", "", check=_removed("use --spec-draft-n-max or --spec-ngram-mod-n-max")),
    "--draft-min": _refuse("removed upstream", "", check=_removed("use --spec-draft-n-min or --spec-ngram-mod-n-min")),
    "--spec-ngram-size-n": _refuse("removed upstream", "", check=_removed("use the respective --spec-ngram-*-size-n")),
    "--spec-ngram-size-m": _refuse("removed upstream", "", check=_removed("use the respective --spec-ngram-*-size-m")),
    "--spec-ngram-min-hits": _refuse(
        "removed upstream", "", check=_removed("use the respective --spec-ngram-*-min-hits")
    ),
}

_DRAFT_TUNING = (
    "every value without a draft model (it configures nothing then, as upstream); with one, the "
    "values the target's own option accepts (--spec-ngram-simple-min-hits: ngram-simple reads no hit count)"
)
for _id, _check in {
    "--spec-draft-cpu-mask": None,
    "--spec-draft-cpu-range": None,
    "--spec-draft-cpu-strict": None,
    "--spec-draft-poll": None,
    "--spec-draft-cpu-mask-batch": None,
    "--spec-draft-cpu-strict-batch": None,
    "--spec-draft-poll-batch": None,
    "--spec-draft-prio": _range(0, 3),
    "--spec-draft-prio-batch": _range(0, 3),
    "--spec-draft-type-k": _kv_type_check,
    "--spec-draft-type-v": _kv_type_check,
    "--spec-draft-override-tensor": _override_check,
    "--spec-draft-cpu-moe": None,
    "--spec-draft-n-cpu-moe": _range(0, None),
    "--spec-draft-p-split": _stof_check,
    "--spec-draft-backend-sampling": None,
    "--spec-draft-device": _device_check,
    "--spec-draft-ngl": _gpu_layers_check,
    "--spec-ngram-simple-min-hits": _range(1, None, "ngram min hits must be at least 1"),
}.items():
    RULES[_id] = _inert(_DRAFT_TUNING, check=_check)

# with a draft model, the draft's runtime options are held to the target's analogue: what that one accepts as
# inert, and its refusal otherwise (the draft never changes a token, but a placement asked for is not ignored)
DRAFT_ANALOGUES = {
    "--spec-draft-cpu-mask": "--cpu-mask",
    "--spec-draft-cpu-mask-batch": "--cpu-mask-batch",
    "--spec-draft-cpu-range": "--cpu-range",
    "--spec-draft-cpu-strict": "--cpu-strict",
    "--spec-draft-cpu-strict-batch": "--cpu-strict-batch",
    "--spec-draft-poll": "--poll",
    "--spec-draft-poll-batch": "--poll-batch",
    "--spec-draft-prio": "--prio",
    "--spec-draft-prio-batch": "--prio-batch",
    "--spec-draft-type-k": "--cache-type-k",
    "--spec-draft-type-v": "--cache-type-v",
    "--spec-draft-override-tensor": "--override-tensor",
    "--spec-draft-cpu-moe": "--cpu-moe",
    "--spec-draft-n-cpu-moe": "--n-cpu-moe",
    "--spec-draft-device": "--device",
}


# the draft model runs on the target's CPU thread pool (server/cpu_threads.py), its jobs on -td / -tbd's thread
# counts (they act: cpu_threads.draft_steps); its placement options are inert at their defaults, refused otherwise
_DRAFT_POOL = (
    "the draft model runs on the target's CPU thread pool (on -td / -tbd of its threads), which -C / -Cr / "
    "--cpu-strict / --prio / --poll place"
)
_DRAFT_POOL_ALT = "leave it out, and size or place the pool with the target's options"
DRAFT_POOL_RULES: dict[str, Rule] = {
    "--cpu-mask": _refuse(_DRAFT_POOL, _DRAFT_POOL_ALT),
    "--cpu-mask-batch": _refuse(_DRAFT_POOL, _DRAFT_POOL_ALT),
    "--cpu-range": _refuse(_DRAFT_POOL, _DRAFT_POOL_ALT),
    "--cpu-strict": _only(lambda v: stoul(v) == 0, "0", _DRAFT_POOL, _DRAFT_POOL_ALT),
    "--cpu-strict-batch": _only(_is(0), "0", _DRAFT_POOL, _DRAFT_POOL_ALT),
    "--poll": _only(lambda v: stoul(v) == 50, "50 (the default)", _DRAFT_POOL, _DRAFT_POOL_ALT),
    "--poll-batch": _only(_is(50), "50 (the default)", _DRAFT_POOL, _DRAFT_POOL_ALT),
    "--prio": _only(_is(0), "0", _DRAFT_POOL, _DRAFT_POOL_ALT),
    "--prio-batch": _only(_is(0), "0", _DRAFT_POOL, _DRAFT_POOL_ALT),
}


def draft_refusals(given: list[Given]) -> list[str]:
    """With a draft model: each draft runtime option its target analogue would refuse (-ngld stays inert: the
    draft runs on MLX's device whole, as the target does)."""
    model = next((g.value for g in reversed(given) if g.option == "--spec-draft-model"), "")
    if not model:
        return []
    last: dict[str, Given] = {g.option: g for g in given}
    out = []
    for option, analogue in DRAFT_ANALOGUES.items():
        g = last.get(option)
        rule = DRAFT_POOL_RULES.get(analogue) or RULES[analogue]
        if g is not None and not rule.inert(g.value):
            out.append(_diagnostic(g, f"{rule.reason} (the draft model's placement)", rule.alternative))
    return out


# the draft model's options that place or tune what mlxcel's draft does not have: accepted, one log line each
_DRAFT_INERT_WHY = {
    "--spec-draft-ngl": "the draft runs whole on MLX's device, as the target does",
    "--spec-draft-device": "the draft runs whole on MLX's device, as the target does",
    "--spec-draft-p-split": "b10621 parses it and no drafter of its reads it",
    "--spec-draft-backend-sampling": "mlxcel picks the draft's top-k on the host (the same pick)",
    "--spec-draft-cpu-moe": "as the target's own option: its experts stay with the rest",
    "--spec-draft-n-cpu-moe": "as the target's own option: its experts stay with the rest",
    "--spec-draft-override-tensor": "as the target's own option: no buffer type to place a tensor in",
}


def draft_inert_notices(given: list[Given]) -> list[str]:
    """With a draft model, one line for each of its options that change nothing in mlxcel (the draft's cache
    types and thread counts act; its placement is held to the target's: draft_refusals)."""
    if not any(g.option in ("--spec-draft-model", "--spec-draft-hf") and g.value for g in given):
        return []
    last = {g.option: g for g in given}
    return [
        f"{last[o].shown()}: accepted, changes nothing here: {why}" for o, why in _DRAFT_INERT_WHY.items() if o in last
    ]


def _parallel_check(v) -> None:
    if v == 0:
        raise ValueError("error: invalid value for n_parallel\n")


# b10621's handler checks of options mlxcel acts on (args.py), run by the parser as upstream runs them
ACTED_ON_CHECKS: dict[str, Callable[[object], None]] = {
    "--numa": _in("--numa", "distribute", "", "isolate", "numactl"),
    "--cpu-mask": lambda v: check_mask(str(v)),
    "--cpu-mask-batch": lambda v: check_mask(str(v)),
    "--cpu-range": lambda v: check_range(str(v)),
    "--cpu-range-batch": lambda v: check_range(str(v)),
    "--cpu-strict": lambda v: stoul(v),
    "--poll": lambda v: stoul(v),
    "--prio": _range(-1, 3),
    "--prio-batch": _range(0, 3),
    "--parallel": _parallel_check,
    "--slot-prompt-similarity": _stof_check,
    "--pooling": _in("--pooling", "none", "mean", "cls", "last", "rank"),
    "--slot-save-path": _directory_check,
    "--media-path": _directory_check,
    "--checkpoint-min-step": _range(0, None, "checkpoint-min-step must be non-negative"),
    "--ui-config-file": _read_file_check,
    "--sleep-idle-seconds": _sleep_check,
    "--lora-scaled": _pairs_check("lora-scaled"),
    "--control-vector-scaled": _pairs_check("control-vector-scaled"),
    "--control-vector-layer-range": _stoi_each,
    "--rope-scale": _stof_check,
    "--rope-freq-base": _stof_check,
    "--rope-freq-scale": _stof_check,
    "--spec-type": _spec_types_check,  # (every type is served: the drafters, server/engine/drafting.py)
    "--spec-draft-n-max": _range(0, None),
    "--spec-draft-p-min": _stof_check,
    "--spec-ngram-simple-size-n": _range(1, 1024, "ngram size N must be between 1 and 1024 inclusive"),
    "--spec-ngram-simple-size-m": _range(1, 1024, "ngram size M must be between 1 and 1024 inclusive"),
    "--spec-ngram-mod-n-min": _range(0, 1024, "ngram n-min must be between 0 and 1024 inclusive"),
    "--spec-ngram-mod-n-max": _range(0, 1024, "ngram n-max must be between 0 and 1024 inclusive"),
    "--spec-ngram-mod-n-match": _range(1, 1024, "ngram size N must be between 1 and 1024 inclusive"),
    "--spec-ngram-map-k-size-n": _range(1, 1024, "ngram size N must be between 1 and 1024 inclusive"),
    "--spec-ngram-map-k-size-m": _range(1, 1024, "ngram size M must be between 1 and 1024 inclusive"),
    "--spec-ngram-map-k-min-hits": _range(1, None, "ngram min hits must be at least 1"),
    "--spec-ngram-map-k4v-size-n": _range(1, 1024, "ngram size N must be between 1 and 1024 inclusive"),
    "--spec-ngram-map-k4v-size-m": _range(1, 1024, "ngram size M must be between 1 and 1024 inclusive"),
    "--spec-ngram-map-k4v-min-hits": _range(1, None, "ngram min hits must be at least 1"),
    "--rope-scaling": _in("--rope-scaling", "none", "linear", "yarn"),
    "--yarn-ext-factor": _stof_check,
    "--yarn-attn-factor": _stof_check,
    "--yarn-beta-slow": _stof_check,
    "--yarn-beta-fast": _stof_check,
}


def check_value(option: str, value) -> None:
    """b10621's own check of a value for `option` (raises ValueError with its handler's words)."""
    rule = RULES.get(option)
    if rule is not None and rule.check is not None:
        rule.check(value)
    elif option in ACTED_ON_CHECKS:
        ACTED_ON_CHECKS[option](value)


def _diagnostic(g: Given, reason: str, alternative: str) -> str:
    text = f"error: {g.shown()}: {reason}" + (f"; {alternative}" if alternative else "")
    return text.replace("\n", "\\n")


def refusals(given: list[Given]) -> list[str]:
    """One line per refused option, in the order b10621 applied them (environment, then command line)."""
    last: dict[str, Given] = {}
    for g in given:
        last[g.option] = g
    out = []
    for g in given:
        rule = RULES.get(g.option)
        if rule is None or (not rule.accumulates and last[g.option] is not g):
            continue
        if not rule.inert(g.value):
            out.append(_diagnostic(g, rule.reason, rule.alternative))
    load = load_mode_refusal(given)
    return out + ([load] if load else []) + draft_refusals(given)


def load_mode(given: list[Given]) -> tuple[str, Given | None]:
    """--mlock, --mmap/--no-mmap, --direct-io/--no-direct-io and --load-mode write b10621's one load_mode field
    in the order it applied them: the mode they leave, and the option that left it."""
    mode, by = "auto", None
    for g in given:
        if g.option == "--load-mode":
            mode, by = g.value, g
        elif g.option == "--mlock":
            mode, by = "mlock", g
        elif g.option == "--mmap":
            mode, by = ("mmap" if g.value else "none"), g
        elif g.option == "--direct-io":
            mode, by = ("dio" if g.value else "none"), g
    return str(mode), by


def load_mode_refusal(given: list[Given]) -> str | None:
    """The load mode left is served (auto, none, mmap; mlock and mmap+mlock lock the weights in RAM:
    server/models/weight_lock.py) or, for direct I/O, refused."""
    mode, by = load_mode(given)
    if mode != "dio" or by is None:
        return None
    return _diagnostic(
        by,
        "the load mode this leaves (dio) asks mlxcel to read the weights with direct I/O; mlxcel loads safetensors "
        "through MLX and has no such loading mode",
        "leave it out, or pass --load-mode auto|mmap|none|mlock",
    )


def layer_count(checkpoint: Path) -> int | None:
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for c in (config, config.get("text_config") or {}):
        if isinstance(c.get("num_hidden_layers"), int):
            return c["num_hidden_layers"]
    return None
