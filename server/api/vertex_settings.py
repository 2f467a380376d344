"""Vertex AI's AIP_* environment as b10621 reads it (register_gcp_compat): read before a model is resolved, so
kept apart from the HTTP layer it configures (server/api/vertex.py), which imports FastAPI."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _env(name: str, default: str, leading_slash: bool = False) -> str:
    value = os.environ.get(name) or default
    return "/" + value if leading_slash and value and not value.startswith("/") else value


@dataclass(frozen=True)
class VertexSettings:
    enabled: bool = False
    health_route: str = ""  # "": only the server's own /health
    predict_route: str = "/predict"
    port: int = 8080

    @classmethod
    def from_env(cls) -> "VertexSettings":
        if os.environ.get("AIP_MODE", "") != "PREDICTION":
            return cls()
        return cls(
            True,
            _env("AIP_HEALTH_ROUTE", "", True),
            _env("AIP_PREDICT_ROUTE", "/predict", True),
            int(_env("AIP_HTTP_PORT", "8080")),
        )
