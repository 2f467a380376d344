"""The EAGLE-3 head twin (fixtures/eagle3_twin.py) is what b10621's converter writes for such a checkpoint: the
arch, keys and tensor names its own gguf-py (the sdist's, which knows MODEL_ARCH.EAGLE3; the installed one does
not) gives the HF checkpoint's tensors through conversion/llama.py's EAGLE-3 path, the shapes
src/models/eagle3.cpp loads, d2t as absolute target ids; and the reference loads it as an eagle3 draft, drafts
with it and takes some of its drafts (fixtures/eagle3_fit.py fits it to the target) without changing its greedy
output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import require
from fixtures.eagle3_twin import DRAFT_VOCAB, convert, eagle3_checkpoint, eagle3_twin, write_head_checkpoint
from oracle.reference import SOURCE_SUBDIR
from server.cachedir import cache_root, sha256_file

GGUF_PY = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "gguf-py"
N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM, N_VOCAB = 576, 1536, 9, 3, 64, 49152

# conversion/llama.py's EAGLE-3 path, on the sdist's gguf-py: index_tensors' rename, modify_tensors' special cases,
# then the EAGLE3 tensor map; every name checked against MODEL_TENSORS[EAGLE3] as format_tensor_name does
CONVERTER_NAMES = r"""
import json, sys
import gguf

arch = gguf.MODEL_ARCH.EAGLE3
T = gguf.MODEL_TENSOR
allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]}
tmap = gguf.get_tensor_name_map(arch, 1)

def fmt(key, bid=None, suffix=".weight"):
    assert key in gguf.MODEL_TENSORS[arch], key
    name = gguf.TENSOR_NAMES[key]
    return (name.format(bid=bid) if "{bid}" in name else name) + suffix

names = {}
for hf in json.loads(sys.argv[1]):
    name = "model.layers.0." + hf[len("midlayer."):] if hf.startswith("midlayer.") else hf
    if name == "fc.weight":
        names[hf] = name
        assert name == fmt(T.FC)
    elif name == "d2t":
        names[hf] = fmt(T.D2T, suffix="")
    elif name == "t2d":
        names[hf] = None
    elif name.endswith(".hidden_norm.weight"):
        names[hf] = fmt(T.ATTN_NORM_2, 0)
    else:
        names[hf] = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if names[hf] is not None:
        base = names[hf].removesuffix(".weight")
        assert base in allowed or base.replace(".0.", ".{bid}.") in allowed, names[hf]
K = gguf.Keys.LLM
keys = [k.format(arch="eagle3") for k in (K.TARGET_LAYERS, K.TARGET_HIDDEN_SIZE, K.NORM_BEFORE_RESIDUAL, K.NORM_BEFORE_FC)]
print(json.dumps({"arch": gguf.MODEL_ARCH_NAMES[arch], "names": names, "keys": keys}))
"""

# src/models/eagle3.cpp load_arch_tensors' shapes (ne), for this head: n_embd_tgt 576, draft vocab DRAFT_VOCAB
LOADER_SHAPES = {
    "fc.weight": (3 * N_EMBD, N_EMBD),
    "output_norm.weight": (N_EMBD,),
    "output.weight": (N_EMBD, DRAFT_VOCAB),
    "blk.0.attn_norm.weight": (N_EMBD,),
    "blk.0.attn_norm_2.weight": (N_EMBD,),
    "blk.0.attn_q.weight": (2 * N_EMBD, HEAD_DIM * N_HEAD),
    "blk.0.attn_k.weight": (2 * N_EMBD, HEAD_DIM * N_HEAD_KV),
    "blk.0.attn_v.weight": (2 * N_EMBD, HEAD_DIM * N_HEAD_KV),
    "blk.0.attn_output.weight": (HEAD_DIM * N_HEAD, N_EMBD),
    "blk.0.ffn_norm.weight": (N_EMBD,),
    "blk.0.ffn_gate.weight": (N_EMBD, N_FF),
    "blk.0.ffn_down.weight": (N_FF, N_EMBD),
    "blk.0.ffn_up.weight": (N_EMBD, N_FF),
    "d2t": (DRAFT_VOCAB,),
}


def _permute(w: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """conversion/llama.py LlamaModel.permute(weights, n_head, n_head_kv), as written there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _converter_view(hf_names: list[str]) -> dict:
    require(GGUF_PY.is_dir(), "needs the reference sdist's gguf-py (the unpacked sources)")
    env = {**os.environ, "PYTHONPATH": str(GGUF_PY)}
    out = subprocess.run(
        [sys.executable, "-c", CONVERTER_NAMES, json.dumps(hf_names)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def _fields(reader) -> dict:
    return {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def test_the_gguf_is_what_the_converter_writes_for_the_checkpoint():
    import gguf
    from safetensors.numpy import load_file

    from fixtures.twins import twin

    hf = load_file(str(eagle3_checkpoint() / "model.safetensors"))
    config = json.loads((eagle3_checkpoint() / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["draft_vocab_size"] == DRAFT_VOCAB  # the converter's detection
    assert "eagle_aux_hidden_state_layer_ids" not in config and "target_hidden_size" not in config
    view = _converter_view(sorted(hf))

    reader = gguf.GGUFReader(str(eagle3_twin()))
    fields = _fields(reader)
    keys = list(fields)
    assert fields["general.architecture"].contents() == view["arch"] == "eagle3"
    assert keys[:5] == ["general.architecture", *view["keys"]]  # LlamaModel.__init__'s, before prepare_metadata's
    assert fields["eagle3.target_layers"].contents() == [2, 15, 27]  # [2, n/2, n-3] of the 30-layer target
    assert fields["eagle3.target_hidden_size"].contents() == N_EMBD
    assert fields["eagle3.norm_before_residual"].contents() is False
    assert fields["eagle3.norm_before_fc"].contents() is False
    hparams = [k for k in keys if k.startswith("eagle3.")][4:]
    assert hparams == [
        f"eagle3.{k}"
        for k in (
            "block_count",
            "context_length",
            "embedding_length",
            "feed_forward_length",
            "attention.head_count",
            "attention.head_count_kv",
            "rope.freq_base",
            "attention.layer_norm_rms_epsilon",
            "vocab_size",
            "rope.dimension_count",
        )
    ]
    assert fields["eagle3.block_count"].contents() == 1
    assert fields["eagle3.rope.dimension_count"].contents() == HEAD_DIM
    assert fields["general.file_type"].contents() == int(gguf.LlamaFileType.ALL_F32)
    assert keys.index("general.quantization_version") < keys.index("tokenizer.ggml.model")

    # the tokenizer is the target's, key for key
    target = _fields(gguf.GGUFReader(str(twin("f32").gguf)))
    tok = [k for k in keys if k.startswith("tokenizer.")]
    assert tok == [k for k in target if k.startswith("tokenizer.")]
    for k in tok:
        assert fields[k].contents() == target[k].contents(), k

    # the tensors: the converter's names, in its order (the safetensors' by name, t2d dropped, d2t last)
    names = view["names"]
    assert names["t2d"] is None
    expected = [names[n] for n in sorted(hf) if names[n] not in (None, "d2t")] + ["d2t"]
    assert [t.name for t in reader.tensors] == expected
    tensors = {t.name: t for t in reader.tensors}
    assert {n: tuple(int(x) for x in t.shape) for n, t in tensors.items()} == LOADER_SHAPES
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for n, t in tensors.items() if n != "d2t")
    assert tensors["d2t"].tensor_type == gguf.GGMLQuantizationType.I64

    # values: d2t as absolute target ids; the rest the checkpoint's, q/k rows in ggml's interleaved rope order
    ids = np.asarray(tensors["d2t"].data)
    assert np.array_equal(ids, hf["d2t"] + np.arange(DRAFT_VOCAB))
    assert np.array_equal(np.flatnonzero(hf["t2d"]), ids) and ids.max() < N_VOCAB
    for hf_name, name in names.items():
        if name in (None, "d2t"):
            continue
        stored = np.asarray(tensors[name].data).reshape(hf[hf_name].shape)
        want = hf[hf_name]
        if hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            want = _permute(want, N_HEAD, N_HEAD_KV if hf_name.endswith("k_proj.weight") else N_HEAD)
        assert np.array_equal(stored, want), hf_name


def test_the_conversion_is_deterministic(tmp_path):
    from fixtures.twins import twin

    t = twin("f32")
    head = tmp_path / eagle3_checkpoint().name
    write_head_checkpoint(head, json.loads((t.mlx_dir / "config.json").read_text()))
    for name in ("config.json", "model.safetensors"):
        assert sha256_file(head / name) == sha256_file(eagle3_checkpoint() / name), name
    again = convert(head, t.mlx_dir, t.gguf, tmp_path)
    assert again.name == eagle3_twin().name
    assert sha256_file(again) == sha256_file(eagle3_twin())


@pytest.mark.reference
def test_the_reference_drafts_with_the_head_and_keeps_its_greedy_output(reference_binary):
    from fixtures.twins import twin
    from oracle import loopback
    from oracle.processes import F32_NUMERICS, reference_server

    t = twin("f32")
    args = ["-c", "2048", "--parallel", "1", "-t", "1", "-tb", "1", *F32_NUMERICS]
    head = ["-md", str(eagle3_twin()), "--spec-type", "draft-eagle3", "-td", "1", "-tbd", "1", "-lv", "4"]
    body = {"prompt": "The quick brown fox", "n_predict": 32, "temperature": 0, "cache_prompt": False}
    answers, logs = {}, {}
    for name, extra in (("plain", []), ("eagle3", head)):
        with reference_server(reference_binary, t.gguf, [*args, *extra]) as proc:
            r = loopback.post(proc.base_url + "/completion", json=body, timeout=300)
            assert r.status_code == 200, r.text
            answers[name] = r.json()
            logs[name] = proc.log_path.read_text(errors="replace")
    log = logs["eagle3"]
    assert "general.architecture str              = eagle3" in log
    assert "EAGLE3 extract_layers = [2, 15, 27]" in log
    assert "EAGLE3 n_embd_tgt = 576 (draft n_embd = 576)" in log
    assert f"EAGLE3 using d2t mapping (draft_vocab_size = {DRAFT_VOCAB})" in log
    assert "adding speculative implementation 'draft-eagle3'" in log
    timings = answers["eagle3"]["timings"]
    assert (
        timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] < timings["draft_n"]
    )  # (fitted: agrees, sometimes)
    assert "draft_n" not in answers["plain"]["timings"]
    assert answers["eagle3"]["content"] == answers["plain"]["content"]
    assert answers["eagle3"]["tokens_predicted"] == answers["plain"]["tokens_predicted"] == 32
