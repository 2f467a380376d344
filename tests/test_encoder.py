"""The encoder side: --embd-normalize's arithmetic, the WordPiece tokenizer's llama.cpp rules, how a command line
resolves to an encoder server, the rerank pair, the native encoder against the MLX one, and a live server
through the openai client (mlxcel-only: the oracle comparisons are conformance/test_embeddings.py's)."""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys

import numpy as np
import openai
import pytest

from oracle import loopback
from oracle.processes import mlxcel_server
from server.cli.parse import Given
from server.encoder.normalize import embd_normalize
from server.encoder.startup import EncoderModeError, encoder_config, resolved_pooling
from server.models.bundled import MINILM_NAME, minilm_checkpoint


@pytest.fixture(scope="module")
def minilm():
    return minilm_checkpoint()


@pytest.fixture(scope="module")
def tokenizer(minilm):
    from server.models.tokenizer import ModelTokenizer

    return ModelTokenizer(minilm)


# ---- --embd-normalize ------------------------------------------------------------------------------------


def _reference_normalize(x: np.ndarray, mode: int) -> np.ndarray:
    """common_embd_normalize, written out element by element."""
    total = 0.0
    if mode == -1:
        total = 1.0
    elif mode == 0:
        for v in x:
            total = max(total, abs(float(v)))
        total /= 32760.0
    elif mode == 2:
        for v in x:
            total += float(np.float32(v) * np.float32(v))
        total = total**0.5
    else:
        for v in x:
            total += abs(float(v)) ** mode
        total = total ** (1.0 / mode)
    scale = np.float32(1.0 / total) if total > 0 else np.float32(0.0)
    return np.array([np.float32(v) * scale for v in x], dtype=np.float32)


@pytest.mark.parametrize("mode", [-1, 0, 1, 2, 3, 7])
def test_normalization_follows_upstream_arithmetic(mode):
    x = np.random.default_rng(mode + 10).standard_normal(384).astype(np.float32)
    got = embd_normalize(x, mode)
    assert got.dtype == np.float32
    assert np.array_equal(got, _reference_normalize(x, mode))


def test_normalization_modes_mean_what_their_names_say():
    x = np.array([3.0, -4.0, 0.0], np.float32)
    assert embd_normalize(x, -1).tolist() == [3.0, -4.0, 0.0]
    assert embd_normalize(x, 0).tolist() == [24570.0, -32760.0, 0.0]
    assert np.isclose(np.abs(embd_normalize(x, 1)).sum(), 1.0)
    assert embd_normalize(x, 2).tolist() == pytest.approx([0.6, -0.8, 0.0])


@pytest.mark.parametrize("mode", [-1, 0, 1, 2, 3])
def test_a_zero_vector_stays_zero(mode):
    assert embd_normalize(np.zeros(8, np.float32), mode).tolist() == [0.0] * 8


# ---- the WordPiece tokenizer -----------------------------------------------------------------------------


def test_wordpiece_pieces_and_specials_follow_llama_cpp(tokenizer):
    ids = tokenizer.tokenize("Hello world, unaffable!", add_special=True, parse_special=True)
    assert ids[0] == tokenizer.bos_id == 101 and ids[-1] == tokenizer.eos_id == 102
    pieces = [tokenizer.piece(i) for i in ids]
    assert pieces[:3] == [b"[CLS]", b" hello", b" world"]
    assert b" una" in pieces and b"ffa" in pieces  # a "##" continuation carries no space
    assert pieces[-2] == b" !"  # punctuation is a word of its own
    assert tokenizer.tokenize("[SEP] x", add_special=False, parse_special=True)[0] == 102
    assert 102 not in tokenizer.tokenize("[SEP] x", add_special=False, parse_special=False)


def test_the_checkpoint_padding_is_not_applied(tokenizer):
    assert len(tokenizer.tokenize("x", add_special=True, parse_special=True)) == 3  # the file pads to 128


# ---- command line -> encoder settings --------------------------------------------------------------------


def _args(**kw) -> argparse.Namespace:
    given = kw.pop("given", [])
    base = dict(embedding=False, reranking=False, embd_normalize=2, ubatch_size=512, ctx_size=0, given=given)
    return argparse.Namespace(**{**base, **kw})


def test_pooling_resolution_takes_the_last_writer_then_the_checkpoint(minilm):
    rerank, mean = Given("--rerank", "--rerank", None), Given("--pooling", "--pooling", "mean")
    assert resolved_pooling([rerank, mean], minilm) == "mean"
    assert resolved_pooling([mean, rerank], minilm) == "rank"
    assert resolved_pooling([], minilm) == "mean"  # 1_Pooling/config.json


def test_encoder_settings_follow_the_flags(minilm):
    cfg = encoder_config(_args(embedding=True, embd_normalize=1, ubatch_size=256), minilm, 4)
    assert (cfg.mode, cfg.pooling, cfg.embd_normalize, cfg.n_ubatch) == ("embedding", "mean", 1, 256)
    rerank = encoder_config(_args(reranking=True, given=[Given("--rerank", "--rerank", None)]), minilm, 4)
    assert (rerank.mode, rerank.pooling) == ("rerank", "rank")


def test_an_encoder_without_the_flag_and_a_chat_model_with_it_refuse(minilm):
    from server.models.bundled import BUNDLED_MODELS

    with pytest.raises(EncoderModeError, match="is a BERT-family encoder"):
        encoder_config(_args(), minilm, 4)
    chat = BUNDLED_MODELS["smollm2-135m-instruct-q4_1"].materialize()
    with pytest.raises(EncoderModeError, match="--embeddings: .* is not an encoder"):
        encoder_config(_args(embedding=True), chat, 4)
    assert encoder_config(_args(), chat, 4) is None


def test_the_refusals_exit_1_with_one_line():
    for argv in (["-m", MINILM_NAME], ["-m", "smollm2-135m-instruct-q4_1", "--reranking"]):
        proc = subprocess.run(
            [sys.executable, "-m", "server", *argv, "--port", "0"], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


# ---- the models ------------------------------------------------------------------------------------------


def test_the_rerank_pair_is_cls_query_sep_document_sep(tokenizer):
    from server.api.rerank import pair_tokens

    pair = pair_tokens(tokenizer, "[SEP] a", "b")
    assert pair[0] == 101 and pair[-1] == 102 and pair.count(102) == 2  # the query's [SEP] stays text


def test_the_native_encoder_agrees_with_the_mlx_one(minilm, tokenizer):
    import mlx.core as mx

    from server import blas, cpu_kernels
    from server.models.bert import BertEncoder, NativeBert

    if not cpu_kernels.available():
        pytest.skip("the native encoder needs x86 with AVX2")
    native, ref = NativeBert.load(minilm, blas.STATE.native), BertEncoder.load(minilm)
    for text in ("Hello world, this is a test.", "x", "The quick brown fox jumps over the lazy dog."):
        ids = tokenizer.tokenize(text, add_special=True, parse_special=True)
        a = native.hidden(ids)
        b = np.array(ref.hidden(mx.array([ids]), [len(ids)])[0])
        assert a.shape == b.shape and np.abs(a - b).max() < 2e-3  # fp16 GELU steps apart, nothing more
        for kind in ("mean", "cls", "last"):
            assert native.pool(a, kind).shape == (384,)


# ---- a live server, through the openai client -------------------------------------------------------------


@pytest.fixture(scope="module")
def embedding_server():
    proc = mlxcel_server(MINILM_NAME, ["--embeddings", "--alias", "minilm"])
    proc.start()
    yield proc
    proc.cleanup()


def test_openai_client_embeddings(embedding_server):
    client = openai.OpenAI(base_url=f"{embedding_server.base_url}/v1", api_key="sk-no-key-required")
    r = client.embeddings.create(model="minilm", input=["The cat sat on the mat.", "A dog barked."])
    assert [d.index for d in r.data] == [0, 1] and len(r.data[0].embedding) == 384
    assert np.isclose(np.linalg.norm(r.data[0].embedding), 1.0, atol=1e-5)
    assert r.usage.prompt_tokens == r.usage.total_tokens > 4
    b64 = client.embeddings.create(model="minilm", input="The cat sat on the mat.", encoding_format="base64")
    raw = np.frombuffer(base64.b64decode(b64.data[0].embedding), dtype="<f4")  # asked for, it stays base64
    assert raw.tolist() == pytest.approx(r.data[0].embedding, abs=0)
    similar = client.embeddings.create(
        model="minilm", input=["A man plays a guitar.", "Someone strums an instrument.", "The stock market fell."]
    )
    v = [np.array(d.embedding) for d in similar.data]
    assert v[0] @ v[1] > v[0] @ v[2]  # a real embedder: paraphrases sit closer than unrelated sentences


def test_generation_routes_answer_501_naming_the_flag(embedding_server):

    for path in ("/completion", "/v1/chat/completions", "/infill", "/v1/messages"):
        r = loopback.post(embedding_server.base_url + path, json={"prompt": "x"}, timeout=30)
        assert r.status_code == 501, path
        assert r.json()["error"]["message"] == (
            "This server does not support completions. Start it without `--embeddings`"
        )
    assert loopback.get(embedding_server.base_url + "/health", timeout=30).json() == {"status": "ok"}


def test_props_of_an_encoder_server_carry_no_drafter(embedding_server):
    # the encoder's config has no drafter fields: GET /props answered 500 when it read them as the engine's

    r = loopback.get(embedding_server.base_url + "/props", timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "speculative" not in body and body["total_slots"] >= 1 and body["model_alias"] == "minilm"
