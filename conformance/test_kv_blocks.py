"""Block-quantized KV caches (-ctk / -ctv q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1) against b10621 (issue 30 point 3).

Two kinds of evidence, both with both servers on the same command line (b10621's -fa auto otherwise):
- the rows themselves: b10621's slot file (`POST /slots/0?action=save`) holds its KV cells as stored, and every
  key and value row mlxcel stores for the same prompt is byte for byte the same, in every layer. That covers what
  b10621 does before it quantizes (a llama GGUF's interleaved element order, the Walsh-Hadamard rotation of its
  attn_rot_k / attn_rot_v) and the quantizer itself;
- logit traces (oracle/trace.py) judged by the decided-position rule, and a context shift over q8_0 keys
  (dequantized, rotated back, turned, rotated and quantized again: b10621's build_rope_shift) giving the same text.

The q8_0 configuration runs on every landing; the other types take turns (fixtures/families.py, in_turn).
Measured here: every type 0 disagreements at decided positions, max |delta logprob| 1.3e-5..3.4e-5 (3 prompts x 24
tokens), the level of b10621's own f16 defaults.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from fixtures.families import in_turn
from fixtures.twins import twin
from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import COMMON_ARGS, Pair, reference_server
from oracle.trace import trace

pytestmark = pytest.mark.reference

GGML_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20}  # ggml.h's codes
HEADLINE = ("q8_0", "q8_0", ())
OTHERS = [("q4_0", "q4_0", ()), ("q4_1", "q5_1", ()), ("iq4_nl", "q5_0", ()), ("q8_0", "f16", ("-fa", "off"))]
CONFIGS = [HEADLINE, *in_turn(OTHERS)]
PROMPTS = [
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


def _flags(k: str, v: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    return ("-ctk", k, "-ctv", v, *extra)


def _name(config) -> str:
    k, v, extra = config
    return f"{k}-{v}" + ("-fa-off" if extra else "")


def _record(case: str, flags: tuple[str, ...], identical: bool, divergences: list, reproduce: str) -> None:
    write_record(
        {  # the evidence behind the cache types' entries (mlxcel-oracle verify)
            "case": case,
            "entries": ["--cache-type-k", "--cache-type-v"],
            "twin": "f32",
            "request": {"method": "TRACE", "path": " ".join(flags), "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": identical,
            "bytes_identical": identical,
            "normalizations_fired": [],
            "divergences": divergences,
            "reproduce": reproduce,
        }
    )


def _reference_rows(binary, flags: tuple[str, ...], prompt: str, saves: Path) -> tuple[list[int], bytes]:
    """The prompt's tokens and b10621's slot file after it processed them (one slot)."""
    ref = reference_server(binary, twin("f32").gguf, [*COMMON_ARGS, *flags, "--slot-save-path", str(saves), "-np", "1"])
    with ref:
        body = {"prompt": prompt, "n_predict": 1, "id_slot": 0, "cache_prompt": True, "temperature": 0}
        loopback.post(ref.base_url + "/completion", json=body, timeout=120).raise_for_status()
        tokens = loopback.post(ref.base_url + "/tokenize", json={"content": prompt, "add_special": True}).json()[
            "tokens"
        ]
        saved = loopback.post(ref.base_url + "/slots/0?action=save", json={"filename": "s.bin"}, timeout=120).json()
        data = (saves / "s.bin").read_bytes()
    assert saved["n_saved"] == len(tokens)
    return tokens, data


def _layer_rows(data: bytes, ggml_type: int, row: int, n: int, layers: int, start: int) -> tuple[list[np.ndarray], int]:
    """Each layer's n rows of one side (llama_kv_cache::state_write_data: a type, a row size, then the rows)."""
    out = []
    for _ in range(layers):
        at = data.index(struct.pack("<iQ", ggml_type, row), start) + 12
        out.append(np.frombuffer(data[at : at + n * row], np.uint8).reshape(n, row))
        start = at + n * row
    return out, start


@pytest.mark.parametrize("config", [HEADLINE, *in_turn([OTHERS[1], OTHERS[2]])], ids=_name)
def test_every_stored_row_is_b10621s(reference_binary, config, tmp_path):
    from server import blas

    blas.activate()
    from server.backends import load_backend
    from server.models.kv_numerics import KVNumerics
    from server.models.store import resolve_model

    k, v, extra = config
    flags = _flags(k, v, extra)
    tokens, data = _reference_rows(reference_binary, flags, PROMPTS[0], tmp_path)
    backend = load_backend(resolve_model(twin("f32").mlx_model), kv=KVNumerics(k, v, True))
    cache = backend.new_cache()
    backend.prefill(cache, tokens)
    n = len(tokens)

    def mine(arr) -> np.ndarray:  # (1, heads, positions, bytes) -> a position's row over the heads
        a = np.array(arr)[0, :, :n, :]
        return np.concatenate(list(a), axis=-1)

    keys = [mine(c.keys) for c in cache]
    values = [mine(c.values) for c in cache]
    theirs_k, after = _layer_rows(data, GGML_TYPES[k], keys[0].shape[1], n, len(cache), 0)
    theirs_v, _ = _layer_rows(data, GGML_TYPES[v], values[0].shape[1], n, len(cache), after)
    differ = [
        f"layer {i} {side}"
        for side, ours, theirs in (("K", keys, theirs_k), ("V", values, theirs_v))
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
        if not np.array_equal(a, b)
    ]
    _record(
        f"kv-blocks-rows-{_name(config)}-f32",
        flags,
        not differ,
        [{"path": f"$rows[{d}]", "kind": "value"} for d in differ],
        f"pytest conformance/test_kv_blocks.py -k rows ({' '.join(flags)})",
    )
    assert not differ, differ


@pytest.mark.parametrize("config", CONFIGS, ids=_name)
def test_block_cache_traces_agree_at_decided_positions(reference_binary, config):
    flags = _flags(*config[:2], config[2])
    with Pair("f32", flags, reference_binary, pinned=False) as pair:
        traces = [trace(pair.reference.base_url, pair.mlxcel.base_url, p, "f32", 24) for p in PROMPTS]
    worst = max(t.max_abs_delta_logprob for t in traces)
    _record(
        f"kv-blocks-trace-{_name(config)}-f32",
        flags,
        False,  # a trace is not bitwise equal
        [
            {"path": f"$trace[{i}].logprob", "kind": "value", "max_abs_delta": t.max_abs_delta_logprob}
            for i, t in enumerate(traces)
        ],
        f"mlxcel-oracle trace --twin f32 --defaults --server-arg={' --server-arg='.join(flags)}",
    )
    assert sum(t.decided for t in traces) >= 30  # the rule decides most positions
    assert [t.disagreements_at_decided for t in traces] == [0] * len(PROMPTS)
    assert worst <= 1e-3  # the defaults' bound (conformance/test_kv_trace.py)


def test_a_context_shift_over_q8_0_keys_writes_b10621s_text(reference_binary):
    flags = ("-c", "256", "--context-shift", *_flags(*HEADLINE[:2], ()))
    prompt = "The history of the city is long and full of stories. " * 18
    body = {"prompt": prompt, "n_predict": 96, "temperature": 0, "ignore_eos": True, "return_tokens": True}
    with Pair("f32", flags, reference_binary, pinned=False) as pair:
        theirs = loopback.post(pair.reference.base_url + "/completion", json=body, timeout=600).json()
        ours = loopback.post(pair.mlxcel.base_url + "/completion", json=body, timeout=600).json()
    assert theirs["tokens_predicted"] == 96
    shifted = theirs["tokens_evaluated"] + 96 > 256  # the context filled: b10621 shifted it
    _record(
        "kv-blocks-context-shift-q8_0-f32",
        flags,
        ours["tokens"] == theirs["tokens"],
        [] if ours["tokens"] == theirs["tokens"] else [{"path": "$.tokens", "kind": "value"}],
        "pytest conformance/test_kv_blocks.py -k context_shift",
    )
    assert shifted
    assert ours["tokens"] == theirs["tokens"]
    assert (ours["content"], ours["truncated"]) == (theirs["content"], theirs["truncated"])
