"""LoRA adapters served unfused, with live scales (b10621's --lora, --lora-scaled, /lora-adapters).

Each adapter adds, to every linear layer it targets, the low-rank term `(B (A x)) * scale * alpha / r` after the
base product, in llama.cpp's order (build_lora_mm: the base product, then each adapter's product scaled and
added). The base weights are never touched, so the scales can change between forward passes: the engine sets
`LoraSet.current` to a request's scales before each pass, and a term whose scale is 0 adds no operation at all
(a server holding only unapplied adapters computes exactly what one without adapters computes).

Three formats are read: a PEFT directory (adapter_config.json with r / lora_alpha, adapter_model.safetensors),
an mlx-lm adapter directory (adapter_config.json with lora_parameters, adapters.safetensors), and a GGUF LoRA
file as b10621 loads it (general.type "adapter"; its q/k B rows are in llama.cpp's rope order and are put back).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..textparse import stof
from .cpu_layers import FusedLinear
from .gguf_quants import permute_rows
from .loader import TransposedLinear
from .quant_layers import FusedGGMLLinear, FusedQuantLinear, GGMLLinear

# llama.cpp's tensor names for the linear layers mlxcel attaches terms to, and the layer each names
GGUF_TARGETS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


class LoraError(ValueError):
    """An adapter that cannot be served: startup fails with this message."""


@dataclass
class Adapter:
    path: str  # as given on the command line (GET /lora-adapters reports it)
    # "model.layers.N.self_attn.q_proj" -> (A: r x in, B: out x r), float32
    pairs: dict[str, tuple[np.ndarray, np.ndarray]]
    alpha: float  # llama.cpp's adapter.lora.alpha: a term is scaled by scale * alpha / r (by scale when 0)
    per_rank: bool = True  # False: alpha is the whole factor (mlx-lm's lora_parameters.scale)
    rope_order: bool = False  # a GGUF's q/k B rows are in llama.cpp's rope order (put back at attach)
    task_name: str = ""
    prompt_prefix: str = ""

    def factor(self, scale: float, rank: int) -> np.float32:
        """llama_adapter_lora_weight::get_scale, in float arithmetic as ggml computes it."""
        f32 = np.float32
        if not self.alpha:
            return f32(scale)
        return f32(f32(scale) * f32(self.alpha)) / f32(rank if self.per_rank else 1)


@dataclass
class LoraSet:
    """The loaded adapters, the server's default scales (what POST /lora-adapters sets) and the scales of the
    forward pass being run (what the layers read)."""

    adapters: list[Adapter]
    defaults: list[float]
    current: tuple[float, ...] = ()
    fused: bool = False  # --lora-fuse: the terms are in the base weights, the scales fixed

    def engaged(self) -> bool:
        """Whether the pass being run adds any term (the native decode and prompt steps know no adapters)."""
        return any(s != 0.0 for s in self.current)

    def resolve(self, listed: dict[int, float]) -> list[float]:
        """b10621's construct_lora_list: listed ids take their scales, the others 0.0, unknown ids ignored."""
        return [float(listed.get(i, 0.0)) for i in range(len(self.adapters))]


# --- reading adapters -----------------------------------------------------------------------------------------


def load_adapter(spec: str) -> Adapter:
    path = Path(spec)
    if path.is_file():
        return _from_gguf(spec)
    if not path.is_dir():
        raise LoraError(f"failed to load lora adapter '{spec}': no such file or directory")
    config_file = path / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise LoraError(f"failed to load lora adapter '{spec}': cannot read {config_file.name}: {exc}") from None
    if (path / "adapter_model.safetensors").is_file():
        return _from_peft(spec, path, config)
    if (path / "adapters.safetensors").is_file():
        return _from_mlx(spec, path, config)
    raise LoraError(
        f"failed to load lora adapter '{spec}': no adapter_model.safetensors (PEFT) or "
        "adapters.safetensors (mlx-lm) in the directory"
    )


def _layer_path(key: str) -> str | None:
    """'...layers.N.self_attn.q_proj...' -> 'model.layers.N.self_attn.q_proj'."""
    m = re.search(r"layers\.(\d+)\.((?:self_attn|mlp)\.\w+?)(?:\.lora_|\.weight|$)", key)
    return f"model.layers.{m.group(1)}.{m.group(2)}" if m else None


def _from_peft(spec: str, path: Path, config: dict) -> Adapter:
    # deferred: safetensors (~3 ms) only to read a PEFT or MLX adapter
    from safetensors.numpy import load_file

    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise LoraError(f"failed to load lora adapter '{spec}': peft_type {config.get('peft_type')!r} is not LORA")
    alpha = float(config.get("lora_alpha") or 0.0)
    tensors = load_file(str(path / "adapter_model.safetensors"))
    found: dict[str, dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        target = _layer_path(key)
        side = "a" if ".lora_A." in key else "b" if ".lora_B." in key else None
        if target is None or side is None:
            raise LoraError(
                f"failed to load lora adapter '{spec}': tensor '{key}' is not a LoRA pair of an "
                "attention or MLP projection (the layers mlxcel adapts)"
            )
        found.setdefault(target, {})[side] = value
    return Adapter(spec, _pairs(spec, found), alpha)


def _from_mlx(spec: str, path: Path, config: dict) -> Adapter:
    # deferred: safetensors (~3 ms) only to read a PEFT or MLX adapter
    from safetensors.numpy import load_file

    params = config.get("lora_parameters") or {}
    if config.get("fine_tune_type", "lora") != "lora":
        raise LoraError(
            f"failed to load lora adapter '{spec}': fine_tune_type {config.get('fine_tune_type')!r} is not lora"
        )
    scale = float(params.get("scale", 20.0))
    found: dict[str, dict[str, np.ndarray]] = {}
    for key, value in load_file(str(path / "adapters.safetensors")).items():
        target = _layer_path(key)
        if target is None or not key.endswith((".lora_a", ".lora_b")):
            raise LoraError(
                f"failed to load lora adapter '{spec}': tensor '{key}' is not a LoRA pair of an "
                "attention or MLP projection (the layers mlxcel adapts)"
            )
        # mlx-lm stores lora_a as in x r and lora_b as r x out, and scales by `scale` itself
        found.setdefault(target, {})[key[-1]] = value.T
    return Adapter(spec, _pairs(spec, found), scale, per_rank=False)


def _pairs(spec: str, found: dict[str, dict[str, np.ndarray]]) -> dict:
    out = {}
    for target, sides in sorted(found.items()):
        if set(sides) != {"a", "b"}:
            raise LoraError(
                f"failed to load lora adapter '{spec}': {target} has lora_{''.join(sides)} without its pair"
            )
        a, b = (np.asarray(sides[k], dtype=np.float32) for k in "ab")
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise LoraError(
                f"failed to load lora adapter '{spec}': {target}: lora_a {list(a.shape)} and lora_b "
                f"{list(b.shape)} do not form a low-rank pair"
            )
        out[target] = (a, b)
    if not out:
        raise LoraError(f"failed to load lora adapter '{spec}': it holds no LoRA tensors")
    return out


def _from_gguf(spec: str) -> Adapter:
    import gguf  # deferred: gguf (~50 ms) only to read a GGUF adapter

    try:
        reader = gguf.GGUFReader(spec)
    except Exception as exc:  # not a GGUF at all
        raise LoraError(f"failed to load lora adapter '{spec}': {exc}") from None

    def value(key: str, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    if value("general.type") != "adapter":
        raise LoraError(
            f"failed to load lora adapter '{spec}': expect general.type to be 'adapter', but got: "
            f"{value('general.type', '')}"
        )
    if value("adapter.type") != "lora":
        raise LoraError(
            f"failed to load lora adapter '{spec}': expect adapter.type to be 'lora', but got: "
            f"{value('adapter.type', '')}"
        )
    if value("general.architecture") != "llama":
        raise LoraError(f"failed to load lora adapter '{spec}': model arch and LoRA arch mismatch")
    if reader.fields.get("adapter.alora.invocation_tokens") is not None:
        raise LoraError(
            f"failed to load lora adapter '{spec}': it is an activated LoRA (aLoRA), which applies "
            "only after its invocation tokens; mlxcel serves plain LoRA adapters"
        )
    alpha = float(value("adapter.lora.alpha", 0.0) or 0.0)
    found: dict[str, dict[str, np.ndarray]] = {}
    for t in reader.tensors:
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight\.lora_([ab])", t.name)
        if m is None or m.group(2) not in GGUF_TARGETS:
            raise LoraError(
                f"failed to load lora adapter '{spec}': tensor '{t.name}' is not a LoRA pair of an "
                "attention or MLP projection (the layers mlxcel adapts)"
            )
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            data = gguf.quants.dequantize(t.data, t.tensor_type)
        else:
            data = np.array(t.data)
        shape = tuple(int(d) for d in reversed(t.shape))  # ggml ne -> numpy rows x columns
        found.setdefault(f"model.layers.{m.group(1)}.{GGUF_TARGETS[m.group(2)]}", {})[m.group(3)] = data.reshape(
            shape
        ).astype(np.float32)
    return Adapter(
        spec,
        _pairs(spec, found),
        alpha,
        rope_order=True,
        task_name=str(value("adapter.lora.task_name", "") or ""),
        prompt_prefix=str(value("adapter.lora.prompt_prefix", "") or ""),
    )


# --- attaching terms to the model ---------------------------------------------------------------------------


class _Hook:
    """The terms one layer adds after its base product, per output slice (a fused layer has several)."""

    def __init__(self, lora: LoraSet, slices: list[list[tuple]], widths: list[int]):
        self.lora, self.slices, self.widths = lora, slices, widths

    def __call__(self, x: mx.array, y: mx.array) -> mx.array:
        current = self.lora.current
        if not any(current):
            return y
        deltas, any_term = [], False
        for terms, width in zip(self.slices, self.widths, strict=False):
            delta = None
            for i, a_t, b_t, adapter in terms:
                s = current[i] if i < len(current) else 0.0
                if s == 0.0:
                    continue
                ab = ((x @ a_t) @ b_t) * mx.array(adapter.factor(s, a_t.shape[1]), dtype=y.dtype)
                delta = ab if delta is None else delta + ab
            any_term = any_term or delta is not None
            deltas.append(delta if delta is not None else mx.zeros((*y.shape[:-1], width), dtype=y.dtype))
        if not any_term:
            return y
        return y + (deltas[0] if len(deltas) == 1 else mx.concatenate(deltas, axis=-1))


_HOOKED: dict[type, type] = {}


def _hooked_class(cls: type) -> type:
    """A subclass of an MLX layer class whose call adds the layer's LoRA terms (nn.Linear, QuantizedLinear)."""
    if cls not in _HOOKED:

        def __call__(self, x):
            return self.__dict__["lora_hook"](x, cls.__call__(self, x))

        _HOOKED[cls] = type(f"Lora{cls.__name__}", (cls,), {"__call__": __call__})
    return _HOOKED[cls]


def attach(model: nn.Module, lora: LoraSet) -> None:  # noqa: C901
    """Give every adapted layer its hook. Refuses an adapter whose targets the model lacks or whose shapes do
    not fit (b10621: "tensor ... has incorrect shape (hint: maybe wrong base model?)")."""
    modules = dict(model.named_modules())
    args = getattr(model, "args", None)
    n_head = getattr(args, "num_attention_heads", None)
    n_kv = getattr(args, "num_key_value_heads", None) or n_head
    wanted: dict[str, list[tuple]] = {}
    for i, adapter in enumerate(lora.adapters):
        for target, (a, b) in adapter.pairs.items():
            if adapter.rope_order and n_head and target.endswith(("q_proj", "k_proj")):
                b = permute_rows(b, n_head if target.endswith("q_proj") else n_kv)
            # the layer multiplies x (.. x in) @ A^T (in x r) @ B^T (r x out)
            a_t, b_t = mx.array(np.ascontiguousarray(a.T)), mx.array(np.ascontiguousarray(b.T))
            wanted.setdefault(target, []).append((i, a_t, b_t, adapter))
    by_owner: dict[str, dict[str, list]] = {}
    for target, terms in wanted.items():
        owner, name = target.rsplit(".", 1)
        by_owner.setdefault(owner, {})[name] = terms
    for owner_path, named in by_owner.items():
        owner = modules.get(owner_path)
        if owner is None:
            raise LoraError(
                f"failed to load lora adapter: the model has no layer '{owner_path}' (hint: maybe wrong base model?)"
            )
        fused = [
            (attr, m) for attr, m in owner.items() if isinstance(m, (FusedLinear, FusedQuantLinear, FusedGGMLLinear))
        ]
        covered = set()
        for _attr, layer in fused:
            sources = layer.sources
            if not set(sources) & set(named):
                continue
            n_in, n_out = _in_out(layer)
            widths = [b - a for a, b in zip([0, *layer.splits], [*layer.splits, n_out], strict=False)]
            slices = [named.get(s, []) for s in sources]
            for s, width, terms in zip(sources, widths, slices, strict=False):
                _check(owner_path, s, n_in, width, terms)
            object.__setattr__(layer, "lora_hook", _Hook(lora, slices, widths))
            covered |= set(sources)
        for name, terms in named.items():
            if name in covered:
                continue
            layer = owner.get(name) if isinstance(owner, dict) else None
            if layer is None:
                raise LoraError(
                    f"failed to load lora adapter: the model has no layer '{owner_path}.{name}' "
                    "(hint: maybe wrong base model?)"
                )
            n_in, n_out = _in_out(layer)
            _check(owner_path, name, n_in, n_out, terms)
            if not isinstance(layer, TransposedLinear):
                layer.__class__ = _hooked_class(type(layer))
            object.__setattr__(layer, "lora_hook", _Hook(lora, [terms], [n_out]))


def _in_out(layer) -> tuple[int, int]:
    if isinstance(layer, GGMLLinear):
        return layer.shape
    if hasattr(layer, "weight_t"):
        return int(layer.weight_t.shape[0]), int(layer.weight_t.shape[1])
    if isinstance(layer, nn.QuantizedLinear):
        return int(layer.weight.shape[1] * 32 // layer.bits), int(layer.weight.shape[0])
    return int(layer.weight.shape[1]), int(layer.weight.shape[0])


def _check(owner: str, name: str, n_in: int, n_out: int, terms) -> None:
    for _, a_t, b_t, _ in terms:
        if a_t.shape[0] != n_in or b_t.shape[1] != n_out:
            raise LoraError(
                f"failed to load lora adapter: tensor '{owner}.{name}' has incorrect shape (hint: maybe "
                f"wrong base model?): the layer maps {n_in} -> {n_out}, the adapter "
                f"{a_t.shape[0]} -> {b_t.shape[1]}"
            )


def check_scale(text: str, what: str = "lora") -> float:
    """--lora-scaled's (or --control-vector-scaled's) SCALE: std::stof, and a finite number."""
    value = stof(text)
    if not math.isfinite(value):
        raise ValueError(f"{what} scale '{text}' is not a finite number")
    return value


def fuse(model: nn.Module, lora: LoraSet) -> set[str]:  # noqa: C901
    """--lora-fuse: each adapted layer's weight becomes W + scale * alpha / r * (B A) at the server's scales
    (their terms are then in every product, the native steps included, and the scales are fixed). Returns the
    paths of the layers whose weights changed (the source layers of a fused projection by their own names)."""
    modules = dict(model.named_modules())
    args = getattr(model, "args", None)
    n_head = getattr(args, "num_attention_heads", None)
    n_kv = getattr(args, "num_key_value_heads", None) or n_head
    deltas: dict[str, np.ndarray] = {}  # layer path -> (in x out) to add to its transposed weight
    for adapter, scale in zip(lora.adapters, lora.defaults, strict=False):
        if scale == 0.0:
            continue
        for target, (a, b) in adapter.pairs.items():
            if adapter.rope_order and n_head and target.endswith(("q_proj", "k_proj")):
                b = permute_rows(b, n_head if target.endswith("q_proj") else n_kv)
            delta = (a.T @ b.T) * adapter.factor(scale, a.shape[0])
            deltas[target] = deltas[target] + delta if target in deltas else delta
    changed: set[str] = set()
    for target, delta in deltas.items():
        owner_path, name = target.rsplit(".", 1)
        owner = modules.get(owner_path)
        if owner is None:
            raise LoraError(
                f"failed to load lora adapter: the model has no layer '{target}' (hint: maybe wrong base model?)"
            )
        layer = owner.get(name) if isinstance(owner, dict) else None
        fused = (
            next((m for m in owner.values() if isinstance(m, FusedLinear) and name in m.sources), None)
            if layer is None
            else None
        )
        if fused is not None:
            i = fused.sources.index(name)
            bounds = [0, *fused.splits, fused.weight_t.shape[1]]
            lo, hi = bounds[i], bounds[i + 1]
            if delta.shape != (fused.weight_t.shape[0], hi - lo):
                raise LoraError(
                    f"failed to load lora adapter: tensor '{target}' has incorrect shape (hint: maybe "
                    "wrong base model?)"
                )
            w = np.array(fused.weight_t)
            w[:, lo:hi] += delta
            fused.weight_t = mx.array(w)
        elif layer is not None and hasattr(layer, "weight_t"):
            if tuple(layer.weight_t.shape) != delta.shape:
                raise LoraError(
                    f"failed to load lora adapter: tensor '{target}' has incorrect shape (hint: maybe "
                    "wrong base model?)"
                )
            layer.weight_t = mx.array(np.array(layer.weight_t) + delta)
        else:
            raise LoraError(f"--lora-fuse: layer '{target}' is not a float linear layer mlxcel can fuse into")
        changed.add(target)
    return changed
