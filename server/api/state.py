"""What every route may read: the tokenizer, the engine handle and the resolved model identity."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.engine import Engine
from ..models.tokenizer import ModelTokenizer


@dataclass
class AppState:
    engine: Engine
    tokenizer: ModelTokenizer
    model_name: str  # what responses report as "model" (alias, else the checkpoint's name)
