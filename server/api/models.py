"""GET /models and GET /v1/models for one served model: b10621's get_res_models() (an Ollama-style `models` list
beside the OpenAI `data` list). Nothing here touches the engine, so it answers while the server sleeps."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from .jsonio import UpstreamJSON

router = APIRouter()


def model_info(state) -> dict:
    f = state.model_facts
    return {
        "id": state.model_name,
        "aliases": list(state.model_aliases),
        "tags": list(state.model_tags),
        "object": "model",
        "created": int(time.time()),
        "owned_by": "llamacpp",
        "meta": {
            # b10621 stores llama_vocab_type() in a bool: every real vocabulary reports true
            "vocab_type": True,
            "n_vocab": f.n_vocab,
            "n_ctx": state.engine.info.n_ctx,
            "n_ctx_train": f.n_ctx_train,
            "n_embd": f.n_embd,
            "n_params": f.n_params,
            "size": f.size,
            "ftype": state.model_ftype,
        },
    }


def models_body(state) -> dict:
    name = state.model_name
    projector = getattr(state.settings, "projector", None) is not None
    return {
        "models": [
            {
                "name": name,
                "model": name,
                "modified_at": "",
                "size": "",
                "digest": "",
                "type": "model",
                "description": "",
                "tags": [""],
                "capabilities": ["completion", "multimodal"] if projector else ["completion"],
                "parameters": "",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "",
                    "families": [""],
                    "parameter_size": "",
                    "quantization_level": "",
                },
            }
        ],
        "object": "list",
        "data": [model_info(state)],
    }


@router.get("/models")
@router.get("/v1/models")
async def get_models(request: Request):
    return UpstreamJSON(models_body(request.app.state.mlxcel))
