"""-ngl, -dev, -sm, -ts, -mg, -ot, -cmoe / -ncmoe and --list-devices on the device MLX runs on.

b10621 built without a GPU backend (the reference here) starts with every one of these: -ngl, -sm, -ts and -mg
each print a warning that they have no effect (common/arg.cpp), -dev takes only `none`, -ot only the CPU buffer
type, and every layer runs on the CPU. mlxcel on a CPU-only MLX (mlx[cpu] on Linux) is that case: the same
warnings, everything on the CPU. Where MLX has a GPU, mlxcel serves the whole model on it, so a placement is
honored where it is whole (-ngl 0 or -dev none: everything on the CPU; a full -ngl: everything on the GPU) and
refused where it asks for a split across devices (some layers, tensors or experts on the CPU, a second GPU).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .classify import layer_count
from .parse import Given

log = logging.getLogger("mlxcel")

# b10621's CPU build's warnings (common/arg.cpp), printed as it prints them, to stderr
NO_GPU_WARNINGS = {
    "--gpu-layers": (
        "warning: no usable GPU found, --gpu-layers option will be ignored\n"
        "warning: one possible reason is that llama.cpp was compiled without GPU support\n"
        "warning: consult docs/build.md for compilation instructions\n"
    ),
    "--split-mode": (
        "warning: llama.cpp was compiled without support for GPU offload. Setting the split mode has no effect.\n"
    ),
    "--tensor-split": (
        "warning: llama.cpp was compiled without support for GPU offload. Setting a tensor split has no effect.\n"
    ),
    "--main-gpu": (
        "warning: llama.cpp was compiled without support for GPU offload. Setting the main GPU has no effect.\n"
    ),
}
CPU_BUFFER = "CPU"  # the one buffer type of b10621's CPU build (ggml_backend_buft_name of the CPU device)
_SPLIT = "mlxcel serves the whole model on MLX's device (here a GPU) and cannot split it across devices"


def gpu_host() -> bool:
    import mlx.core as mx  # deferred: the start's import of mlx (blas.activate() first)

    return mx.default_device() != mx.cpu


def list_devices() -> str:
    """--list-devices: b10621's list of the non-CPU devices (a CPU-only host: none)."""
    if not gpu_host():
        return "Available devices:\n  (none)\n"
    return "Available devices:\n  MLX GPU: MLX's default device (the whole model runs there)\n"


def _last(given: list[Given], option: str) -> Given | None:
    return next((g for g in reversed(given) if g.option == option), None)


def resolve(given: list[Given], checkpoint: Path) -> str | None:
    """Print b10621's warnings (CPU host) or move the model to the CPU (-ngl 0 / -dev none on a GPU host); the
    refusal line for a split mlxcel cannot serve, or None."""
    if not gpu_host():
        for g in given:  # (each use warns, as each handler call does)
            if g.option in NO_GPU_WARNINGS:
                sys.stderr.write(NO_GPU_WARNINGS[g.option])
        log.info("every layer runs on the CPU: MLX's device here is the CPU")
        return None
    return _gpu_refusal(given, checkpoint)


def _gpu_refusal(given: list[Given], checkpoint: Path) -> str | None:
    import mlx.core as mx  # deferred: as gpu_host's

    ngl, dev = _last(given, "--gpu-layers"), _last(given, "--device")
    layers = layer_count(checkpoint)
    n = None if ngl is None or ngl.value in ("auto", "all") else int(str(ngl.value))
    if (dev is not None and dev.value == "none") or n == 0:
        mx.set_default_device(mx.cpu)
        log.info("every layer runs on the CPU (-ngl 0 or -dev none), MLX's GPU unused")
        return None
    if n is not None and n >= 0 and (layers is None or n <= layers):
        have = f"this model has {layers} layers" if layers is not None else "this model's layer count is unknown"
        return f"error: -ngl {n}: {have}, so {n} keeps some on the CPU; {_SPLIT}; pass -ngl all or -ngl 0"
    for option, inert in (
        ("--main-gpu", lambda v: v == 0),
        ("--override-tensor", lambda v: False),
        ("--cpu-moe", lambda v: False),
        ("--n-cpu-moe", lambda v: v == 0),
        ("--tensor-split", lambda v: False),
        ("--kv-offload", lambda v: bool(v)),
    ):
        g = _last(given, option)
        if g is not None and not inert(g.value):
            return f"error: {g.shown()}: {_SPLIT}; leave it out"
    return None
