"""GET /props and POST /props, shaped as b10621's get_res_props() and post_props handler."""

from __future__ import annotations

import dataclasses
import os

from fastapi import APIRouter, Request

from .. import blas
from ..build import build_info, media_marker
from ..chat.caps import template_caps
from ..chat.legacy import default_template_source
from ..errors import PROPS_DISABLED, ErrorKind, UpstreamError
from .jsonio import UpstreamJSON
from .task_params import TaskParams, generation_settings

router = APIRouter()


def _token_text(tok, token_id: int | None) -> str:
    return "" if token_id is None else tok.piece(token_id, special=True).decode("utf-8", "replace")


def _modality(projector) -> str | None:
    """What the loaded projector reads: "image", "audio", or None without one."""
    return None if projector is None else getattr(projector, "modality", "image")


def props_body(state) -> dict:
    s, tok = state.settings, state.tokenizer
    # an encoder server has no chat settings: b10621 reports the template it would fall back to (chatml)
    template = s.chat.template if s.chat is not None else default_template_source("", tok.chat_template or "")
    # a default task_params carrying the server's sampling settings (its own chat defaults, not the server's)
    defaults = TaskParams(
        **{
            **vars(s.base_params),
            "n_predict": -1,
            "n_keep": 0,
            "reasoning_format": "none",
            "stream": False,
            "timings_per_token": False,
            "post_sampling_probs": False,
            "speculative_types": "none",  # a default task_params: none of the server's speculative types
        }
    )
    body = {
        "default_generation_settings": {
            "params": generation_settings(defaults, only_metrics=True),
            "n_ctx": state.engine.info.n_ctx,
        },
        "total_slots": state.engine.info.n_slots,
        "model_alias": state.model_name,
        "model_ftype": state.model_ftype,
        "model_path": state.model_path,
        "modalities": {
            "vision": _modality(s.projector) == "image",
            "video": False,
            "audio": _modality(s.projector) == "audio",
        },
        "media_marker": media_marker(),
        "endpoint_slots": s.endpoint_slots,
        "endpoint_props": s.endpoint_props,
        "endpoint_metrics": s.endpoint_metrics,
        "ui": s.webui.enabled,  # b10621 reports --ui/--no-ui as given (served only where `mlxcel webui` built it)
        "ui_settings": s.webui.settings,
        "chat_template": template,
        "chat_template_caps": template_caps(template),
        "bos_token": _token_text(tok, tok.bos_id),
        "eos_token": _token_text(tok, tok.eos_id),
        # b10621's b<build>-<commit>; mlxcel adds the CPU backend it verified at startup (server/blas.py)
        "build_info": " ".join(filter(None, (build_info(), blas.summary() and f"({blas.summary()})"))),
        "is_sleeping": bool(getattr(state.engine, "sleeping", False)),
        "cors_proxy_enabled": state.settings.mcp_proxy,
    }
    speculative = speculative_props(state.engine.config)
    if speculative is not None:  # an mlxcel key, only where drafting is on: b10621 reports none of it
        body["speculative"] = speculative
    return body


def speculative_props(config) -> dict | None:
    """The drafters this server runs, as resolved from its command line (b10621's priority order: n-gram
    first), with the draft model's basename only; None without any."""
    out: dict = {"types": []}
    if config.ngram_simple is not None:
        out["types"].append("ngram-simple")
        out["ngram_simple"] = {"size_n": config.ngram_simple[0], "size_m": config.ngram_simple[1]}
    ngram = config.ngram
    for name, params in (
        ("ngram-map-k", ngram.map_k),
        ("ngram-map-k4v", ngram.map_k4v),
        ("ngram-mod", ngram.mod),
        ("ngram-cache", ngram.cache),
    ):
        if params is not None:
            out["types"].append(name)
            # the options only (ngram-cache's tables read at startup are state, not shown: repr=False)
            out[name.replace("-", "_")] = {
                f.name: getattr(params, f.name) for f in dataclasses.fields(params) if f.repr
            }
    if config.draft is not None:
        out["types"].append("draft-simple")
        draft = config.draft
        out["draft"] = {
            "model": os.path.basename(os.path.normpath(draft.model)),
            "n_max": draft.n_max,
            "n_min": draft.n_min,
            "p_min": draft.p_min,
        }
    return out if out["types"] else None


@router.get("/props")
async def get_props(request: Request):
    return UpstreamJSON(props_body(request.app.state.mlxcel))


@router.post("/props")
async def post_props(request: Request):
    state = request.app.state.mlxcel
    if not state.settings.endpoint_props:
        raise UpstreamError(PROPS_DISABLED, ErrorKind.NOT_SUPPORTED)
    return UpstreamJSON({"success": True})
