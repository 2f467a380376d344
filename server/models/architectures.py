"""mlx-lm's model architectures without mlx-lm's package `__init__`.

`import mlx_lm.models.llama` runs `mlx_lm/__init__.py` first, which imports `convert`, `generate` and
`utils`, and through `tokenizer_utils` the whole of `transformers`: ~1.5 s of a ~3 s server start, for
code the server never calls. `bare_package()` registers `mlx_lm` as a plain package (its path only), so its
submodules import alone; the first attribute asked of the package itself (`from mlx_lm import load`) runs
the real `__init__` then. `load_model` is mlx-lm's `utils.load_model` for checkpoints that say how they are
quantized in `quantization` (what `mlxcel convert` and mlx-lm's own converter write); any other kind
(legacy `quantization_config`, custom model files) goes to mlx-lm's loader itself, imported then.
"""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import json
import sys
import types
from functools import lru_cache
from pathlib import Path

PACKAGE = "mlx_lm"


def bare_package() -> None:
    """Make `mlx_lm.models.*` importable without running mlx_lm's `__init__` (idempotent)."""
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)  # finds the package without executing it
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return  # not installed: the import that needs it fails with the usual ModuleNotFoundError
    module = types.ModuleType(PACKAGE)
    module.__spec__, module.__path__, module.__package__ = spec, list(spec.submodule_search_locations), PACKAGE
    module.__file__ = spec.origin

    def complete(name: str):  # PEP 562: reached only for what the bare package lacks
        if name.startswith("__"):
            raise AttributeError(name)
        del module.__dict__["__getattr__"]
        spec.loader.exec_module(module)  # the real __init__, in place
        return getattr(module, name)

    module.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules[PACKAGE] = module


@lru_cache(maxsize=1)
def _remappings() -> tuple[dict, dict]:
    """mlx-lm's MODEL_REMAPPING and MODEL_ARCHITECTURE_REMAPPING, read from its utils.py as literals (the
    one place they are kept) without importing it."""
    spec = importlib.util.find_spec(f"{PACKAGE}.utils")
    found: dict[str, dict] = {}
    if spec is not None and spec.origin:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("MODEL_REMAPPING", "MODEL_ARCHITECTURE_REMAPPING")
            ):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found.get("MODEL_REMAPPING", {}), found.get("MODEL_ARCHITECTURE_REMAPPING", {})


# architectures mlxcel runs with a model file of its own (mlx-lm's layers, b10621's behaviour where mlx-lm's
# differs): model_type -> module
OWN_MODELS = {
    "gemma2": "server.models.gemma2_swa",  # the sliding window mlx-lm's Gemma 2 does not apply
    "gemma3_text": "server.models.gemma3_window",  # b10621's embedding scale; plain caches on every layer
    "qwen3_5": "server.models.qwen35",  # a GGUF's Gated DeltaNet tensors as b10621 lays them out
}


# integrated vision-language checkpoints (HF's *ForConditionalGeneration, as mlx-lm and mlx-vlm lay them out):
# model_type -> the text model's, where text_config leaves it out. mlxcel serves their text model as a model of
# its own (OWN_MODELS apply) and their tower through server/models/projectors.py.
INTEGRATED = {"llava": "llama", "gemma3": "gemma3_text"}
_TOP_KEYS = ("mlxcel", "eos_token_id", "bos_token_id", "quantization", "quantization_config", "vocab_size")


def integrated_text_config(config: dict) -> dict | None:
    """An integrated checkpoint's text model's configuration (the keys that describe the whole checkpoint, its
    quantization among them, carried over), else None."""
    kind = config.get("model_type")
    if kind not in INTEGRATED or not isinstance(config.get("text_config"), dict):
        return None
    text = dict(config["text_config"])
    text.setdefault("model_type", INTEGRATED[kind])
    for key in _TOP_KEYS:
        if key in config and key not in text:
            text[key] = config[key]
    return text


def integrated_text_weights(weights: dict) -> dict:
    """The text model's weights of an integrated checkpoint under the text model's own names: mlx-lm's and older
    HF layouts (language_model.model.*, language_model.lm_head.*) and newer HF's (model.language_model.*,
    lm_head.*); the tower's and the projector's left out."""
    out = {}
    for name, value in weights.items():
        if name.startswith("language_model."):
            out[name.removeprefix("language_model.")] = value
        elif name.startswith("model.language_model."):
            out["model." + name.removeprefix("model.language_model.")] = value
        elif name.startswith("lm_head."):
            out[name] = value
    return out


def model_classes(config: dict) -> tuple[type, type]:
    """(Model, ModelArgs) of a config's architecture, as mlx-lm's `_get_classes` picks them (OWN_MODELS
    excepted)."""
    bare_package()
    remap, arch_remap = _remappings()
    model_type = config["model_type"]
    architectures = config.get("architectures") or ()
    if isinstance(architectures, str):
        architectures = (architectures,)
    chosen = next((arch_remap[(model_type, a)] for a in architectures if (model_type, a) in arch_remap), None)
    model_type = chosen or remap.get(model_type, model_type)
    try:
        arch = importlib.import_module(OWN_MODELS.get(model_type) or f"{PACKAGE}.models.{model_type}")
    except ImportError as exc:
        raise ValueError(f"Model type {model_type} not supported.") from exc
    return arch.Model, arch.ModelArgs


def read_config(path: Path) -> dict:
    """config.json with generation_config.json's eos_token_id over it, as mlx-lm's load_config reads them."""
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    generation = path / "generation_config.json"
    if generation.exists():
        try:
            eos = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id")
        except json.JSONDecodeError:
            eos = None
        if eos:
            config["eos_token_id"] = eos
    return config


def _needs_mlx_lm_loader(config: dict) -> bool:
    """A custom model file, activation quantization, or only a legacy `quantization_config` (mlx-lm reads
    `quantization` first and the legacy block only without it)."""
    legacy = "quantization_config" in config or "quantization_config" in (config.get("text_config") or {})
    return (
        "model_file" in config
        or bool(config.get("quantize_activations"))
        or ("quantization" not in config and legacy)
        or not isinstance(config.get("quantization", {}), dict)
    )


def load_model(path: Path):
    """(model, config) of an MLX checkpoint directory, weights evaluated."""
    # deferred: server/__init__.py imports this module, before blas.activate() lets anything import mlx
    import mlx.core as mx

    config = read_config(path)
    if _needs_mlx_lm_loader(config) or (path / "hf_quant_config.json").exists():
        return _mlx_lm_load_model(path)
    files = glob.glob(str(path / "model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"No safetensors found in {path}")
    weights: dict = {}
    for f in files:
        weights.update(mx.load(f))
    text = integrated_text_config(config)
    if text is not None:  # an integrated vision-language checkpoint: its text model
        config, weights = text, integrated_text_weights(weights)
    if any(k.endswith(".scales") and v.dtype == mx.uint8 for k, v in weights.items()):
        return _mlx_lm_load_model(path)  # a float mode (mxfp4, nvfp4, ...): mlx-lm infers which
    model_class, args_class = model_classes(config)
    model = model_class(args_class.from_dict(config))
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    _quantize(model, config, weights)
    kept = (config.get("mlxcel") or {}).get("ggml_blocks")
    if kept:  # the server's own import keeps K-quant blocks (models/quant_layers.py)
        from .quant_layers import install_blocks  # deferred: it imports mlx, which blas.activate() must precede

        install_blocks(model, kept, weights)
    model.eval()
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model, config


def _quantize(model, config: dict, weights: dict) -> None:
    """The checkpoint's affine layers made QuantizedLinear as its config (and each weight's packing) says."""
    import mlx.nn as nn  # deferred: as load_model's (blas.activate() first)

    quantization = config.get("quantization")
    if quantization is None:
        return
    per_layer = {k: v for k, v in quantization.items() if isinstance(v, (dict, bool))}

    def predicate(p: str, m) -> bool | dict:
        if p in per_layer:
            return per_layer[p]
        if not hasattr(m, "to_quantized") or f"{p}.scales" not in weights:
            return False
        return _packed_as(p, m, weights)

    nn.quantize(
        model,
        group_size=quantization["group_size"],
        bits=quantization["bits"],
        mode=quantization.get("mode", "affine"),
        class_predicate=predicate,
    )


def _mlx_lm_load_model(path: Path):
    bare_package()
    # deferred: mlx_lm.utils brings transformers (~1.5 s), which only these checkpoints need
    from mlx_lm.utils import load_model as mlx_lm_load_model

    return mlx_lm_load_model(path)


def _packed_as(path: str, module, weights: dict) -> dict:
    """The group size and bits a saved affine weight was packed with (mlx-lm's infer_quant_config, whose
    other modes go through mlx-lm's loader)."""
    scales = weights[f"{path}.scales"]
    in_dims = module.weight.shape[-1]
    return {
        "group_size": in_dims // scales.shape[-1],
        "bits": (weights[f"{path}.weight"].shape[-1] * 32) // in_dims,
        "mode": "affine",
    }
