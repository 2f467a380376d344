"""LoRA adapters and control vectors: read once, attached to every backend loaded (after a wake too), and the
scales each forward pass adds the adapters' terms with (b10621's lora lists per task)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..backends import Backend
from ..models import lora
from .commands import AdapterInfo
from .types import GenerationRequest

log = logging.getLogger("mlxcel.engine")


class Adapters:
    def __init__(
        self,
        specs: tuple[tuple[str, float], ...],
        fuse: bool,
        control_vectors: tuple[tuple[str, float], ...],
        control_vector_layers: tuple[int, int],
    ):
        self.specs, self.fuse = specs, fuse
        self.control_vectors, self.control_vector_layers = control_vectors, control_vector_layers
        self.lora: lora.LoraSet | None = None  # once read (--lora, --lora-scaled)

    def _lora_set(self) -> lora.LoraSet:
        """The adapters (read once): their files, and the scales they start at."""
        if self.lora is None:
            adapters = [lora.load_adapter(path) for path, _ in self.specs]
            self.lora = lora.LoraSet(adapters, [scale for _, scale in self.specs], fused=self.fuse)
            log.info(
                "loaded %d LoRA adapter(s)%s: %s",
                len(adapters),
                " fused into the weights" if self.fuse else "",
                ", ".join(f"{a.path} (scale {s:g})" for a, s in zip(adapters, self.lora.defaults, strict=False)),
            )
        return self.lora

    def fuser(self) -> Callable[[Any], set[str]] | None:
        """The loader's fuse step under --lora-fuse, else None."""
        if not (self.specs and self.fuse):
            return None
        return lambda model: lora.fuse(model, self._lora_set())

    def attach(self, backend: Backend) -> None:
        """Control vectors and (unfused) adapters added to a backend just loaded."""
        if self.control_vectors:
            backend.attach_control_vectors(self.control_vectors, self.control_vector_layers)
        if self.specs and not self.fuse:  # fused adapters are in the weights already
            backend.attach_adapters(self._lora_set())

    def use(self, scales: tuple[float, ...]) -> None:
        """The scales the next forward pass adds its adapters' terms with."""
        if self.lora is not None:
            self.lora.current = scales

    def defaults(self) -> tuple[float, ...]:
        return tuple(self.lora.defaults) if self.lora is not None else ()

    def admitted(self, request: GenerationRequest) -> tuple[float, ...]:
        """b10621's launch_slot_with_task: the request's own scales (construct_lora_list), else the server's."""
        if self.lora is None or self.lora.fused:  # fused: the weights carry the one scale set there is
            return ()
        if request.lora:
            return tuple(self.lora.resolve(dict(request.lora)))
        return tuple(self.lora.defaults)

    @property
    def fused(self) -> bool:
        return self.lora is not None and self.lora.fused

    def set_defaults(self, listed: dict[int, float]) -> bool:
        """POST /lora-adapters: the server's scales by upstream's rule; False where they are fused (fixed)."""
        if self.fused:
            return False
        if self.lora is not None:
            self.lora.defaults = self.lora.resolve(listed)
        return True

    def conflicts(self, listed: dict[int, float]) -> bool:
        """A request's scales that fused adapters cannot give (they are fixed in the weights)."""
        return self.lora is not None and self.lora.fused and self.lora.resolve(listed) != list(self.lora.defaults)

    def listed(self) -> list[AdapterInfo]:
        """GET /lora-adapters: each adapter with the server's current scale."""
        if self.lora is None:
            return []
        return [
            AdapterInfo(i, a.path, s, a.task_name, a.prompt_prefix)
            for i, (a, s) in enumerate(zip(self.lora.adapters, self.lora.defaults, strict=False))
        ]


def key(scales: tuple[float, ...]) -> tuple[float, ...]:
    """What a prompt's cached positions were computed with besides the model: its adapters' scales, () when
    every scale is 0 (then the model alone computed them)."""
    return scales if any(scales) else ()
