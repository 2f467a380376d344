"""draft-dflash and draft-dspark (server/engine/dflash_drafter.py, server/models/dflash_head.py): the draft loads
from the converter's GGUF as its checkpoint holds it (and refuses what it cannot run, in one line), a draft GGUF
names its type when --spec-type is left out, the first mask row reads the injected context, DSpark's Markov chain
biases each row by the previous row's pick, the cache keeps the accepted positions' cells only (b10621's seq_rm
after the block and after a verify), and the output is plain decoding's.
conformance/test_dflash_drafter.py holds the draft counts to b10621's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from server.backends import BackendRefusal, open_backend
from server.cli.startup import types_from_gguf
from server.engine.dflash_drafter import DFlashDrafter
from server.engine.drafting import load_dflash
from server.engine.speculative import DraftConfig
from server.engine.types import SamplingParams
from server.models.dflash_head import DFlashDraft, DraftRefusal
from server.models.kv_numerics import KVNumerics
from server.models.loader import load_checkpoint
from server.models.tokenizer import ModelTokenizer
from tests.engines import drafted_as_plain, engine_factory


@pytest.fixture(scope="module")
def draft_gguf():
    from fixtures.dflash_twin import dflash_twin

    return dflash_twin()


@pytest.fixture(scope="module")
def dspark_gguf():
    from fixtures.dflash_twin import dspark_twin

    return dspark_twin()


@pytest.fixture(scope="module")
def target(twin_f32):
    return open_backend(load_checkpoint(twin_f32.mlx_dir))


def test_the_draft_loads_from_the_converters_gguf_as_its_checkpoint_holds_it(draft_gguf):
    from safetensors.numpy import load_file

    from fixtures.dflash_twin import dflash_checkpoint, gguf_name

    draft = DFlashDraft.load(draft_gguf, 49152)
    config = json.loads((dflash_checkpoint() / "config.json").read_text())
    assert draft.target_layers == tuple(i + 1 for i in config["dflash_config"]["target_layer_ids"]) == (0, 27)
    assert (draft.block_size, draft.mask_token, draft.n_layer) == (8, 2, 1)
    assert (draft.n_head, draft.n_kv, draft.head_dim, draft.rope_base) == (9, 9, 64, 1e6)
    hf = load_file(str(dflash_checkpoint() / "model.safetensors"))
    assert sorted(gguf_name(n) for n in hf) == sorted(draft.weights)
    assert [n for n in hf if not np.array_equal(np.array(draft.weights[gguf_name(n)]), hf[n])] == []


def test_the_dspark_draft_loads_its_markov_head_from_the_converters_gguf(dspark_gguf):
    from safetensors.numpy import load_file

    from fixtures.dflash_twin import dflash_checkpoint, gguf_name

    draft = DFlashDraft.load(dspark_gguf, 49152)
    assert draft.markov and draft.sample_from_anchor
    hf = load_file(str(dflash_checkpoint(dspark=True) / "model.safetensors"))
    assert {"markov_w1.weight", "markov_w2.weight", "conf_proj.weight", "conf_proj.bias"} <= set(draft.weights)
    assert [n for n in hf if not np.array_equal(np.array(draft.weights[gguf_name(n)]), hf[n])] == []


def test_a_reduced_vocabulary_draft_reads_its_own_embedding_and_head(twin_f32, target):
    """A DSpark export with a 2k draft vocabulary: its own embedding (not the target's), its own head whose rows
    land on their d2t ids, every other id -inf (b10621's scatter), the Markov bias scattered alike."""
    from safetensors.numpy import load_file

    from fixtures.dflash_twin import dflash_checkpoint, gguf_name, reduced_dspark_twin

    draft = DFlashDraft.load(reduced_dspark_twin(), target.n_vocab)
    hf = load_file(str(dflash_checkpoint(reduced=True) / "model.safetensors"))
    assert draft.d2t is not None and np.array_equal(draft.d2t, hf["d2t"] + np.arange(2048))
    assert (
        np.all(np.diff(draft.d2t) > 0)
        and hf["t2d"].sum() == 2048
        and np.array_equal(np.flatnonzero(hf["t2d"]), draft.d2t)
    )
    assert [
        n for n in hf if n not in ("d2t", "t2d") and not np.array_equal(np.array(draft.weights[gguf_name(n)]), hf[n])
    ] == []
    drafter = DFlashDrafter(draft, target.embed_tokens, target.output_head, KVNumerics.from_flags("f16", "f16", None))
    ids, cache, last = _prompt_passes(target, draft, "Count: 1, 2, 3, 4, 5,")
    st = drafter.new_state()
    drafter.process(st, target.take_passes(cache))
    logits, conf = draft.block(
        st.cache, [last, draft.mask_token], len(ids), target.embed_tokens, target.output_head, drafter.numerics
    )
    off = np.ones(target.n_vocab, dtype=bool)
    off[draft.d2t] = False
    assert np.all(np.isneginf(logits[:, off])) and np.all(np.isfinite(logits[:, draft.d2t])) and conf is not None
    st.cache.trim(len(ids))
    shared = DFlashDraft(
        **{**draft.__dict__, "weights": {k: v for k, v in draft.weights.items() if k != "token_embd.weight"}}
    )
    other, _ = shared.block(
        st.cache, [last, draft.mask_token], len(ids), target.embed_tokens, target.output_head, drafter.numerics
    )
    assert np.abs(logits[:, draft.d2t] - other[:, draft.d2t]).max() > 0.01  # (its own embedding is read)


def test_the_markov_chain_biases_each_row_by_the_previous_rows_pick(dspark_gguf):
    """build_dspark_markov_head in numpy: row i gets w2 . w1[prev], prev the anchor then each biased row's argmax;
    its confidence is sigmoid(conf_proj . [normed row; w1[prev]] + b)."""
    draft = DFlashDraft.load(dspark_gguf, 49152)
    w = {k: np.array(v, np.float64) for k, v in draft.weights.items() if k.startswith(("markov", "conf"))}
    rng = np.random.default_rng(0)
    base = rng.standard_normal((4, 49152)).astype(np.float32) * 10
    normed = rng.standard_normal((4, 576)).astype(np.float32)
    anchor = 28  # (',': a token whose bigram the head codes)
    assert np.abs(w["markov_w1.weight"][anchor]).max() > 0
    logits, conf = draft._markov(anchor, mx.array(base), mx.array(normed))
    prev, picks = anchor, []
    for i in range(4):
        code = w["markov_w1.weight"][prev]
        row = base[i] + w["markov_w2.weight"] @ code
        z = w["conf_proj.weight"][0] @ np.concatenate([normed[i], code]) + w["conf_proj.bias"][0]
        np.testing.assert_allclose(logits[i], row, rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(conf[i], 1 / (1 + np.exp(-z)), rtol=1e-5)
        prev = int(np.argmax(row))
        picks.append(prev)
    assert [int(np.argmax(r)) for r in logits] == picks and len(set(picks)) > 1


def _converted(tmp_path: Path, twin_f32, edit) -> Path:
    """The twin's checkpoint with its config edited, converted again."""
    from fixtures.dflash_twin import convert, dflash_checkpoint

    src = tmp_path / "draft"
    shutil.copytree(dflash_checkpoint(), src)
    config = json.loads((src / "config.json").read_text())
    edit(config)
    (src / "config.json").write_text(json.dumps(config))
    return convert(src, twin_f32.gguf, tmp_path)


def test_what_is_no_dflash_draft_mlxcel_runs_is_refused_in_one_line(draft_gguf, twin_f32, tmp_path):
    with pytest.raises(DraftRefusal, match="is no DFlash draft"):
        DFlashDraft.load(twin_f32.gguf, 49152)
    no_mask = _converted(tmp_path, twin_f32, lambda c: c["dflash_config"].pop("mask_token_id"))
    with pytest.raises(DraftRefusal, match="names no mask token"):
        DFlashDraft.load(no_mask, 49152)
    (tmp_path / "layers").mkdir()
    no_layers = _converted(tmp_path / "layers", twin_f32, lambda c: c["dflash_config"].pop("target_layer_ids"))
    with pytest.raises(DraftRefusal, match="^DFlash model requires 'target_layers' in GGUF metadata$"):
        DFlashDraft.load(no_layers, 49152)


def test_a_draft_mlxcel_cannot_run_beside_its_target_is_refused_at_load(draft_gguf, twin_f32):
    with pytest.raises(BackendRefusal, match=r"^failed to load draft model, '.*': '.*' is no DFlash draft"):
        load_dflash(DraftConfig(str(twin_f32.gguf), kind="draft-dflash"), _Target())
    with pytest.raises(BackendRefusal, match="^draft-dflash reads the target's hidden states from mlxcel's native"):
        load_dflash(DraftConfig(str(draft_gguf), kind="draft-dflash"), _Target())


class _Target:
    """A target on MLX alone: no captured layer inputs."""

    n_vocab = 49152


def test_a_draft_gguf_names_its_spec_type(draft_gguf, dspark_gguf, twin_f32):
    from fixtures.eagle3_twin import eagle3_twin

    assert types_from_gguf(str(draft_gguf)) == ["draft-dflash"]
    assert types_from_gguf(str(dspark_gguf)) == ["draft-dspark"]
    assert types_from_gguf(str(eagle3_twin())) == []  # (b10621 auto-detects DFlash, DSpark and MTP only)
    assert types_from_gguf(str(twin_f32.gguf)) == []
    assert types_from_gguf("/nonexistent.gguf") == []


def _prompt_passes(target, draft, text: str):
    tok = ModelTokenizer(Path(target.loaded.path))
    ids = tok.tokenize(text, True, True)
    target.capture(draft.target_layers)
    cache = target.new_cache()
    logits = target.prefill(cache, ids)
    return ids, cache, int(np.argmax(np.array(logits).reshape(-1)))


def test_the_first_mask_row_reads_the_injected_context(draft_gguf, target):
    """The last context cell's features move the first mask row's logits (its heads 4-8 read it)."""
    draft = DFlashDraft.load(draft_gguf, target.n_vocab)
    drafter = DFlashDrafter(draft, target.embed_tokens, target.output_head, KVNumerics.from_flags("f16", "f16", None))
    ids, cache, last = _prompt_passes(target, draft, "The history of the Roman Empire begins with")
    passes = target.take_passes(cache)
    rows = []
    for scale in (1.0, -1.0):  # (the last row's deep features turned round)
        st = drafter.new_state()
        changed = list(passes)
        feats = changed[-1].features.copy()
        feats[-1, 576:] *= scale
        changed[-1] = type(changed[-1])(changed[-1].first, changed[-1].tokens, feats)
        drafter.process(st, changed)
        rows.append(
            draft.block(
                st.cache, [last, draft.mask_token], len(ids), target.embed_tokens, target.output_head, drafter.numerics
            )[0][1]
        )
    assert np.abs(rows[0] - rows[1]).max() > 0.5


def test_the_cache_keeps_the_accepted_positions_only(draft_gguf, target):
    draft = DFlashDraft.load(draft_gguf, target.n_vocab)
    drafter = DFlashDrafter(
        draft, target.embed_tokens, target.output_head, KVNumerics.from_flags("f16", "f16", None), n_max=3
    )
    ids, cache, last = _prompt_passes(target, draft, "Count: 1, 2, 3, 4, 5,")
    st = drafter.new_state(0)
    assert drafter.new_state(0) is st  # (per slot, kept across requests)
    drafter.process(st, target.take_passes(cache))
    n = len(ids)
    assert st.cache.positions == list(range(n))
    proposal = drafter.propose(st, ids, last, 8)
    assert len(proposal) == 3 and st.cache.positions == list(range(n))  # (the block's cells dropped)
    assert drafter.propose(st, ids, last, 2) == proposal[:2]  # (the slot's room cuts the same block)
    target.verify(cache, [last, *proposal])
    drafter.process(st, target.take_passes(cache))
    assert st.cache.positions == list(range(n + 4)) and st.cache.keys[0].shape[2] == n + 4
    drafter.accept(st, 1)
    assert st.cache.positions == list(range(n + 2))  # (the verify's rows past the accepted one and its bonus)


def test_n_max_and_n_min_are_clamped_to_the_block(draft_gguf, dspark_gguf, target):
    draft = DFlashDraft.load(draft_gguf, target.n_vocab)
    drafter = DFlashDrafter(draft, target.embed_tokens, target.output_head, KVNumerics(), n_max=12, n_min=9)
    assert (drafter.n_max, drafter.n_min) == (7, 7)  # (a block of 8 rows: the anchor and 7 masks)
    spark = DFlashDraft.load(dspark_gguf, target.n_vocab)
    drafter = DFlashDrafter(spark, target.embed_tokens, target.output_head, KVNumerics(), n_max=12, dspark=True)
    assert drafter.n_max == 8  # (DSpark samples from the anchor: every row of the block drafts)


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["draft-dflash", "draft-dspark"])
async def test_output_is_plain_decodings_greedy_and_seeded(twin_f32, draft_gguf, dspark_gguf, kind):
    gguf = draft_gguf if kind == "draft-dflash" else dspark_gguf
    with engine_factory(twin_f32.mlx_dir) as (make, tok):
        plain = make()
        drafted = make(draft=DraftConfig(str(gguf), n_max=4, kind=kind))
        drafted_n, accepted = await drafted_as_plain(
            plain,
            drafted,
            tok,
            [
                ("Count: 1, 2, 3, 4, 5,", SamplingParams(temperature=0.0)),
                ("The history of the Roman Empire begins with", SamplingParams(temperature=0.0)),
                ("def add(a, b):", SamplingParams(temperature=0.8, seed=42)),
            ],
        )
        assert 0 < accepted < drafted_n  # (drafts taken and refused: both paths ran)
