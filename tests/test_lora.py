"""LoRA adapters served unfused with live scales: the formats read, a zero scale adding nothing, scales fixed at
admission, and one scale set per forward pass. The comparison with b10621 at scales 0, 0.5 and 1 is the oracle's
(fixtures/requests/*lora*)."""

from __future__ import annotations

import asyncio
import json

import mlx.core as mx
import numpy as np
import pytest

from fixtures.lora import lora_gguf, lora_peft, pairs
from oracle import loopback
from server.engine.types import FinalEvent, GenerationRequest, TokenEvent
from server.models import lora
from tests.engines import running_engine

pytestmark = pytest.mark.heavy  # in-process engine runs on the real twins: nox -s tests, not unit

PROMPT = "Once upon a time, in a quiet village,"


@pytest.fixture(scope="module")
def peft_dir():
    return lora_peft()


def _request(tok, n: int = 24, prompt: str = PROMPT, scales=None) -> GenerationRequest:
    return GenerationRequest(tuple(tok.tokenize(prompt, True, True)), n_predict=n, ignore_eos=True, lora=scales)


async def _tokens(handle, on_token=None) -> list[int]:
    out = []
    async for ev in handle:
        if isinstance(ev, TokenEvent):
            out.append(ev.token)
            if on_token is not None:
                await on_token(len(out))
        elif isinstance(ev, FinalEvent):
            break
    return out


def test_peft_gguf_and_mlx_lm_adapters_read_as_the_same_terms(peft_dir, tmp_path, twin_f32):
    """The GGUF's q/k rows come back from llama.cpp's rope order; mlx-lm's transposed pair and its whole-factor
    scale give the same products and factors."""
    from safetensors.numpy import save_file

    from server.models.loader import load_checkpoint

    config = json.loads((peft_dir / "adapter_config.json").read_text())
    mlx_dir = tmp_path / "mlx-adapter"
    mlx_dir.mkdir()
    tensors = {}
    for (layer, target), (a, b) in pairs().items():
        module = "self_attn" if target.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
        tensors[f"model.layers.{layer}.{module}.{target}.lora_a"] = np.ascontiguousarray(a.T)
        tensors[f"model.layers.{layer}.{module}.{target}.lora_b"] = np.ascontiguousarray(b.T)
    save_file(tensors, str(mlx_dir / "adapters.safetensors"))
    scale = config["lora_alpha"] / config["r"]
    (mlx_dir / "adapter_config.json").write_text(
        json.dumps({"fine_tune_type": "lora", "lora_parameters": {"rank": config["r"], "scale": scale}})
    )
    adapters = [lora.load_adapter(str(p)) for p in (peft_dir, lora_gguf(), mlx_dir)]
    model = load_checkpoint(twin_f32.mlx_dir).model
    attached = lora.LoraSet(adapters, [0.0, 0.0, 0.0])
    lora.attach(model, attached)
    hook = model.model.layers[3].self_attn.qkv_proj.__dict__["lora_hook"]
    q_terms = hook.slices[0]  # q_proj: one term per adapter
    assert len(q_terms) == 3
    for _, a_t, b_t, adapter in q_terms[1:]:
        assert np.array_equal(np.array(a_t), np.array(q_terms[0][1]))
        assert np.array_equal(np.array(b_t), np.array(q_terms[0][2]))
        assert adapter.factor(0.5, 8) == q_terms[0][3].factor(0.5, 8)


def test_a_zero_scale_adds_no_operation_and_a_scale_moves_the_logits(peft_dir, twin_f32):
    """A server holding unapplied adapters computes exactly what one without them computes (bitwise, through the
    native steps), and the term is there once a scale is set."""
    from server.backends import open_backend
    from server.models.loader import load_checkpoint
    from server.models.tokenizer import ModelTokenizer

    tokens = ModelTokenizer(twin_f32.mlx_dir).tokenize(PROMPT, True, True)
    plain = open_backend(load_checkpoint(twin_f32.mlx_dir))
    base = np.array(plain.prefill(plain.new_cache(), tokens))
    adapted = open_backend(load_checkpoint(twin_f32.mlx_dir))
    attached = lora.LoraSet([lora.load_adapter(str(peft_dir))], [0.0])
    adapted.attach_adapters(attached)
    attached.current = (0.0,)
    assert adapted._native()
    assert np.array_equal(np.array(adapted.prefill(adapted.new_cache(), tokens)), base)
    x = mx.ones((1, 576))
    y = mx.zeros((1, 576 + 192 + 192))
    assert adapted.loaded.model.model.layers[0].self_attn.qkv_proj.__dict__["lora_hook"](x, y) is y
    attached.current = (1.0,)
    assert not adapted._native()
    moved = np.array(adapted.prefill(adapted.new_cache(), tokens))
    assert np.abs(moved - base).max() > 0.1


async def test_a_scale_swap_mid_flight_does_not_change_a_running_generation(peft_dir, twin_f32):
    with running_engine(twin_f32.mlx_dir, lora=((str(peft_dir), 1.0),)) as (engine, tok):
        solo = await _tokens(engine.submit(_request(tok)))

        async def swap(n: int) -> None:
            if n == 4:  # mid-generation: the server's scale drops to 0 (POST /lora-adapters)
                await asyncio.wrap_future(engine.set_lora({0: 0.0}))

        swapped = await _tokens(engine.submit(_request(tok)), swap)
        assert engine.lora_adapters()[0].scale == 0.0
        after = await _tokens(engine.submit(_request(tok)))
    with running_engine(twin_f32.mlx_dir) as (engine, tok):
        base = await _tokens(engine.submit(_request(tok)))
    assert swapped == solo  # admitted at scale 1: it ends at scale 1
    assert after == base != solo  # admitted after the swap: the model alone


async def test_rows_admitted_with_other_scales_never_share_a_pass(peft_dir, twin_f32):
    prompts = ["Once upon a time, in a quiet village,", "The three primary colours are"]
    with running_engine(twin_f32.mlx_dir, n_slots=2, lora=((str(peft_dir), 1.0),)) as (engine, tok):
        alone = [
            await _tokens(engine.submit(_request(tok, 16, p, s)))
            for p, s in ((prompts[0], ((0, 1.0),)), (prompts[1], ((0, 0.0),)))
        ]
        together = await asyncio.gather(
            *(
                _tokens(engine.submit(_request(tok, 16, p, s)))
                for p, s in ((prompts[0], ((0, 1.0),)), (prompts[1], ((0, 0.0),)))
            )
        )
        # the same prompt at the two scales differs: the rows above did carry different terms
        other = await _tokens(engine.submit(_request(tok, 16, prompts[0], ((0, 0.0),))))
    assert together == alone
    assert other != alone[0]


def test_an_adapter_that_does_not_fit_the_model_is_refused(tmp_path, twin_f32):
    from safetensors.numpy import save_file

    from server.models.loader import load_checkpoint

    bad = tmp_path / "bad"
    bad.mkdir()
    key = "base_model.model.model.layers.0.self_attn.o_proj"
    save_file(
        {
            f"{key}.lora_A.weight": np.zeros((4, 100), np.float32),
            f"{key}.lora_B.weight": np.zeros((576, 4), np.float32),
        },
        str(bad / "adapter_model.safetensors"),
    )
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    model = load_checkpoint(twin_f32.mlx_dir).model
    with pytest.raises(lora.LoraError, match="has incorrect shape \\(hint: maybe wrong base model\\?\\)"):
        lora.attach(model, lora.LoraSet([lora.load_adapter(str(bad))], [1.0]))
    with pytest.raises(lora.LoraError, match="no such file or directory"):
        lora.load_adapter(str(tmp_path / "missing"))


async def test_lora_fuse_bakes_the_scales_into_the_weights_and_fixes_them(peft_dir, twin_f32):
    """--lora-fuse computes what the unfused adapter computes at the same scale (to float rounding: same tokens),
    through the native steps, and refuses to change the scales."""
    with running_engine(twin_f32.mlx_dir, lora=((str(peft_dir), 0.5),)) as (engine, tok):
        unfused = await _tokens(engine.submit(_request(tok)))
    with running_engine(twin_f32.mlx_dir, lora=((str(peft_dir), 0.5),), lora_fuse=True) as (engine, tok):
        fused = await _tokens(engine.submit(_request(tok)))
        assert engine.backend._native()  # no terms at run time: the native decode step serves it
        assert engine.lora_fused and engine.lora_adapters()[0].scale == 0.5
        assert (await asyncio.wrap_future(engine.set_lora({0: 0.0}))) is False  # POST answers {"success": false}
    with running_engine(twin_f32.mlx_dir) as (engine, tok):
        base = await _tokens(engine.submit(_request(tok)))
    assert fused == unfused != base


def test_lora_fuse_refuses_new_scales_over_http(peft_dir):

    from oracle.processes import mlxcel_server
    from server.errors import LORA_FUSED

    with mlxcel_server("smollm2-135m-instruct-f32", ["--lora-scaled", f"{peft_dir}:0.5", "--lora-fuse"]) as srv:
        base = srv.base_url
        r = loopback.post(base + "/lora-adapters", json=[{"id": 0, "scale": 1.0}])
        assert (r.status_code, r.json()["error"]["message"]) == (400, LORA_FUSED)
        body = {"prompt": "Hi", "n_predict": 2, "temperature": 0}
        r = loopback.post(base + "/completion", json={**body, "lora": [{"id": 0, "scale": 1.0}]}, timeout=120)
        assert (r.status_code, r.json()["error"]["message"]) == (400, LORA_FUSED)
        same = loopback.post(base + "/completion", json={**body, "lora": [{"id": 0, "scale": 0.5}]}, timeout=120)
        assert same.status_code == 200
        assert loopback.get(base + "/lora-adapters").json()[0]["scale"] == 0.5


def test_an_activated_lora_is_refused_rather_than_applied_everywhere(tmp_path):
    import gguf

    path = tmp_path / "alora.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 8.0)
    w.add_array("adapter.alora.invocation_tokens", [1, 2, 3])
    w.add_tensor("blk.0.attn_v.weight.lora_a", np.zeros((4, 576), np.float32))
    w.add_tensor("blk.0.attn_v.weight.lora_b", np.zeros((192, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(lora.LoraError, match="activated LoRA"):
        lora.load_adapter(str(path))
