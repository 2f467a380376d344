"""Load an MLX checkpoint with mlx-lm, prepared for the device it will run on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_unflatten

from .. import cpu_kernels
from . import cpu_layers, gemma2_swa, gemma3_window, ggml_gelu, quant_layers, quantized_twins, rope_factors
from . import yarn as yarn_rope
from .architectures import integrated_text_config, load_model


@dataclass
class LoadedModel:
    model: nn.Module
    config: dict
    path: Path
    dequantized: bool

    @property
    def n_ctx_train(self) -> int:
        return int(self.config.get("max_position_embeddings", 4096))


def _dequantize_module(model: nn.Module) -> int:
    """Replace quantized layers with float32 ones holding the exact dequantized values."""
    replacements = []
    for path, layer in model.named_modules():
        if type(layer) not in (nn.QuantizedLinear, nn.QuantizedEmbedding):  # (kept ones are quant_layers')
            continue
        w = mx.dequantize(
            layer.weight,
            layer.scales,
            layer.biases,
            group_size=layer.group_size,
            bits=layer.bits,
            mode=getattr(layer, "mode", "affine"),
        ).astype(mx.float32)
        if isinstance(layer, nn.QuantizedLinear):
            new = nn.Linear(w.shape[1], w.shape[0], bias="bias" in layer)
            if "bias" in layer:
                new.bias = layer.bias
        else:
            new = nn.Embedding(w.shape[0], w.shape[1])
        new.weight = w
        replacements.append((path, new))
    if replacements:
        model.update_modules(tree_unflatten(replacements))
    return len(replacements)


class TransposedLinear(nn.Module):
    """nn.Linear with its weight stored transposed (in x out, contiguous). On the CPU the BLAS then runs
    x @ W.T as a plain GEMM, without a transposed operand: ~15% faster, and bitwise the same for GEMMs
    (tests/test_model_loading.py)."""

    def __init__(self, weight: mx.array, bias: mx.array | None = None):
        super().__init__()
        self.weight_t = weight.T  # a view until _settle_transposed: a layer fused next is copied once, not twice
        # the weight as loaded (out x in), no parameter: the ggml-order decode step's layout, taken from here
        # rather than transposed back (release_sources drops it once the backend is open)
        self.__dict__[cpu_layers.SOURCE] = weight
        if bias is not None:
            self.bias = bias

    def __call__(self, x: mx.array) -> mx.array:
        y = x @ self.weight_t
        y = y + self.bias if "bias" in self else y
        hook = self.__dict__.get("lora_hook")  # server/models/lora.py: adapters' terms, added after the product
        return y if hook is None else hook(x, y)


def release_sources(model: nn.Module) -> None:
    """Drop the weights kept as loaded (TransposedLinear's, FusedLinear's): once the backend is open, nothing
    reads them, and a model would otherwise hold its linear weights twice."""
    for _, layer in model.named_modules():
        layer.__dict__.pop(cpu_layers.SOURCE, None)


def _transpose_linears(model: nn.Module) -> int:
    replacements = [
        (path, TransposedLinear(layer.weight, layer.bias if "bias" in layer else None))
        for path, layer in model.named_modules()
        if type(layer) is nn.Linear
    ]
    if replacements:
        model.update_modules(tree_unflatten(replacements))
    return len(replacements)


def _settle_transposed(model: nn.Module) -> None:
    """Every TransposedLinear still in the model gets its weight laid out transposed (a plain GEMM's operand);
    those fused into one product since (cpu_layers) were copied once, by the fusing."""
    for _, layer in model.named_modules():
        if type(layer) is TransposedLinear:
            layer.weight_t = mx.contiguous(layer.weight_t)


def read_config(path: Path) -> dict:
    """The checkpoint's config.json as an object; ValueError naming the file when it is missing or damaged."""
    file = path / "config.json"
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"cannot read the model's configuration {file}: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"cannot read the model's configuration {file}: not a JSON object")
    return text_config(config)


def text_config(config: dict) -> dict:
    """An integrated vision-language checkpoint's text model's configuration (what serves its tokens); others as
    they are."""
    return integrated_text_config(config) or config


def vision_config(path: Path) -> dict | None:
    """The raw configuration of an integrated vision-language checkpoint (LLaVA, Gemma 3), else None."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return config if isinstance(config, dict) and integrated_text_config(config) is not None else None


def model_ftype(path: Path) -> str:
    """GET /props's model_ftype: the source GGUF's type for a converted checkpoint, else MLX's storage."""
    config = json.loads((path / "config.json").read_text())
    if (config.get("mlxcel") or {}).get("ftype"):
        return config["mlxcel"]["ftype"]
    q = config.get("quantization")
    if q:
        return f"MLX {q.get('mode', 'affine')} {q['bits']}-bit, group {q['group_size']}"
    return str(config.get("torch_dtype") or "unknown")


def override_rope(model: nn.Module, base: float | None, scale: float | None) -> int:
    """--rope-freq-base / --rope-freq-scale on every plain rope of the model, before anything reads them (the
    native steps take theirs from these modules). Returns how many ropes took them; an override that no rope
    takes (a scaled variant: Llama 3, YaRN, ...) is refused rather than ignored."""
    if base is None and scale is None:
        return 0
    applied, others = 0, set()
    # b10621 gives the context's base and scale to the global layers only: a sliding layer keeps its trained
    # rope (llama_model::get_rope_freq_base: rope_freq_base_train_swa), Gemma 2's and 3's
    keep = {id(layer.self_attn.rope) for i, layer in enumerate(getattr(model, "layers", [])) if sliding_layer(model, i)}
    for _, module in model.named_modules():
        if type(module) is nn.RoPE and id(module) in keep:
            applied += 1
        elif type(module) is nn.RoPE:
            if base is not None:
                module.base = float(np.float32(base))
            if scale is not None:
                module.scale = float(np.float32(scale))
            applied += 1
        elif "rope" in type(module).__name__.lower():
            others.add(type(module).__name__)
    if not applied:
        raise ValueError(
            "--rope-freq-base / --rope-freq-scale: the model's rope ("
            f"{', '.join(sorted(others)) or 'none found'}) takes no override"
        )
    return applied


def sliding_layer(model: nn.Module, layer: int) -> bool:
    """Whether the layer of a Gemma 2 or 3 model attends through its sliding window."""
    if type(model) is gemma2_swa.Model:
        return gemma2_swa.is_sliding(layer, model.args)
    return type(model) is gemma3_window.Model and gemma3_window.is_sliding(layer, model.args)


def _panels(model: nn.Module, now: bool) -> None:
    """The float panels of the few-row products: registered now, or left to open_backend (pending)."""
    if now:
        quantized_twins.register_panels(model)
    else:
        model.__dict__[quantized_twins.PANELS_PENDING] = True


def _install_ropes(model: nn.Module, config: dict, rope: tuple, yarn) -> None:
    """--rope-freq-base / --rope-freq-scale, a GGUF's rope_freqs (Llama 3.1+) after them, --rope-scaling yarn and
    the --yarn-* flags (ggml's rope_ext parameters)."""
    override_rope(model, *rope)
    rope_factors.install(model, config)
    if yarn is not None and yarn.given:
        n_ctx_train = int(config.get("max_position_embeddings") or 0)
        if yarn_rope.install(model, yarn, n_ctx_train) < 0:
            raise ValueError("--rope-scaling yarn / --yarn-*: the model's rope takes no YaRN parameters")


def load_checkpoint(
    path: Path,
    dequantize: bool | None = None,
    transpose: bool | None = None,
    kernels: bool | None = None,
    fuse=None,
    rope: tuple = (None, None),
    yarn=None,
    panels: bool = False,
    int8: bool | None = None,
) -> LoadedModel:
    """dequantize, transpose (TransposedLinear), kernels (cpu_layers): None means "on the CPU", where MLX's
    f32 matmul through the BLAS beats its quantized one and mlxcel's attention and SwiGLU kernels beat MLX's exp
    (when they are loaded); the weights are transposed for the kernels' plain GEMMs only (MLX's own decode step
    is faster on nn.Linear's layout: 55 against 66 ms a token on the F32 twin); on the CPU with the kernels, the
    quantized layers they read (4 or 8 bits, groups of 32 or 64) stay quantized with no float copy
    (quant_layers), the others are dequantized and their decode steps read 4/8-bit twins where they have them
    (quantized_twins). The float panels are left to open_backend (registered only where no native step replaces
    the products that read them: packing 540 MB costs up to seconds), or registered now with panels True. int8:
    the kept layers' few-row products over activations quantized to 8 bits, as ggml multiplies (None: for a
    GGUF's import, whose reference is ggml; an MLX checkpoint's are float, as mlx-lm's)."""
    model, _ = load_model(path)
    raw = json.loads((path / "config.json").read_text())
    config = text_config(raw)
    if config is not raw and hasattr(model, "language_model"):  # (mlx-lm's own loader: its integrated wrapper)
        model = model.language_model
    _install_ropes(model, config, rope, yarn)
    if dequantize is None:
        dequantize = mx.default_device() == mx.cpu
    on_cpu = mx.default_device() == mx.cpu
    ggml_gelu.install(model, str(config.get("model_type", "")) if on_cpu else "")  # b10621's CPU GELU table
    use_kernels = kernels if kernels is not None else on_cpu and cpu_kernels.available()
    if dequantize and use_kernels and on_cpu and fuse is None:  # (--lora-fuse changes weights: float ones)
        # the layers the kernels read stay quantized, no float copy; a GGUF's (config "mlxcel": its import) are
        # multiplied as ggml multiplies them, over activations quantized to 8 bits
        quant_layers.keep_quantized(model, int8=bool(config.get("mlxcel")) if int8 is None else int8)
    else:
        quant_layers.unkeep_blocks(model)  # a server cache's K-quant blocks, as MLX computes them
    twins = quantized_twins.collect(model) if dequantize and use_kernels else {}
    if dequantize:
        _dequantize_module(model)
    if transpose if transpose is not None else (on_cpu and use_kernels):
        _transpose_linears(model)
    if use_kernels:
        cpu_layers.use_kernels(model)
    if fuse is not None:  # --lora-fuse: adapters baked into the weights; a changed weight loses its 4-bit twin
        for changed in fuse(model):
            twins.pop(changed, None)
        release_sources(model)  # the weights as loaded no longer hold the fused adapters
    _settle_transposed(model)
    mx.eval(model.parameters())
    quantized_twins.register(model, twins, bool(config.get("tie_word_embeddings", False)))
    if use_kernels and on_cpu:
        _panels(model, now=panels)
    return LoadedModel(model=model, config=config, path=path, dequantized=dequantize)
