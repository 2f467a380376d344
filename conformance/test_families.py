"""Model families (issue 29): each family twin (fixtures/families.py) served by b10621 and by mlxcel on the same
F32 GGUF and the same command line (b10621's defaults: every family runs on the native steps), and mlxcel on the
family's MLX checkpoint.

Per family: the reference loads and answers the GGUF (the proof that the twin is what the converter writes);
/tokenize with special tokens, /apply-template on the family's real template, a greedy chat answer with and
without tools (the template's tool section and output parser), a 64-token greedy completion and
logit traces (oracle/trace.py: 0 disagreements at decided positions, max |delta logprob| <= 1e-4) agree for
both of mlxcel's formats. One reference and two mlxcel servers per family; one pair for its Q4_K_M.
"""

from __future__ import annotations

import os

import httpx
import pytest

from fixtures.chat.capture_templates import TOOLS  # the template gallery's tool
from fixtures.families import FAMILIES, in_turn, this_landing
from oracle import loopback
from oracle.normalize import normalize
from oracle.processes import Pair, server_pair, start_together
from oracle.trace import THRESHOLDS, compare, mlxcel_scores, reference_path, trace

pytestmark = pytest.mark.reference

PROMPTS = ["Once upon a time, in a small village,", "def fibonacci(n):"]
TEXTS = ["Hello world", " multiple   spaces\n\ttabs", "ünïcödé 🦙 123456", "<|im_start|>user<|im_end|>"]
SYSTEM_USER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
# b10621 parses an earlier assistant turn with the template's output parser: on some templates (Phi-3.5's) it
# refuses this one with a 500, which mlxcel must answer alike; the first conversation must render on every family
CONVERSATIONS = [
    SYSTEM_USER,
    [*SYSTEM_USER, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]
CHAT_NOISE = ("clocks", "created", "completion_id", "system_fingerprint", "tool_call_ids")  # oracle/normalize.py
TRACE_BOUND = 1e-4  # issue 29: F32 with f32 KV (and within it at b10621's defaults on the native steps)
# Every family's F32 twin runs on the native steps in ggml-cpu's order (server/models/decode_step.py,
# gemma_step.py): its activations are b10621's, so b10621's float16 KV cache rounds alike and the pairs run at
# b10621's defaults (no numerics flag: f16 KV cache, flash attention auto), the configuration users run, within the
# same 1e-4 (the issue asks 1e-3 there; measured ~2e-5, docs/models.md).
# Qwen3.5 runs through MLX (its Gated DeltaNet layers have no native step): its attention reads the f16 cache with
# ggml-cpu's kernel, but the prompt's rows are scored in one pass, not as b10621's decode steps; at b10621's
# defaults it is held to the 1e-3 (measured 4.4e-4; 4.8e-5 with -fa off -ctk f32 -ctv f32).
TRACE_BOUNDS = {"qwen3.5": 1e-3}


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return loopback.post(base + path, json=body, timeout=300)


def _chat(base: str, tools: bool) -> tuple[int, object]:
    """A greedy chat answer through the family's template and its output parser; with tools, the template's tool
    section and the tool-call parser (where the template has them: else both servers answer alike without)."""
    body: dict = {"messages": SYSTEM_USER, "max_tokens": 16, "temperature": 0}
    if tools:
        body["tools"] = TOOLS
    r = _post(base, "/v1/chat/completions", body)
    return r.status_code, normalize(r.json(), CHAT_NOISE)


def _greedy(base: str, prompt: str) -> list[int]:
    body = {"prompt": prompt, "n_predict": 64, "temperature": 0, "ignore_eos": True, "return_tokens": True}
    r = _post(base, "/completion", body)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


# CI's F32 pairs: every family whose graph or tokenizer path is its own (the 30-minute budget, issue 15);
# MLXCEL_ALL_TWINS=1 adds Mistral and DeepSeek-LLM (llama's graph: their SentencePiece and BPE vocabularies pass
# tests/test_vocab_pairs.py offline) and Qwen3 (Qwen3-MoE's attention), and `mlxcel-oracle models` measures them all
# (docs/models.md)
# (MLXCEL_ALL_TWINS=1 ...), and in CI a third of them each landing, in turn (fixtures/families.py this_landing)
F32_FAMILIES = this_landing(
    FAMILIES if os.environ.get("MLXCEL_ALL_TWINS") else set(FAMILIES) - {"mistral", "deepseek-llm", "qwen3"}
)


@pytest.mark.parametrize("family", F32_FAMILIES)
def test_family_twin_agrees_with_the_reference(reference_binary, family):
    """Three servers, one command line: the reference on the GGUF, mlxcel on the same GGUF and mlxcel on the MLX
    checkpoint; the reference's answers are computed once and each mlxcel is held to them."""
    ref, on_gguf = server_pair(f"f32_family_{family}", (), reference_binary, pinned=False)
    _, on_mlx = server_pair(f"f32_family_{family}_mlx", (), reference_binary, with_reference=False, pinned=False)
    try:
        start_together(ref, on_gguf, on_mlx)
        mine = {"gguf": on_gguf.base_url, "mlx": on_mlx.base_url}
        for text in TEXTS:
            body = {"content": text, "add_special": True, "parse_special": True}
            want = _post(ref.base_url, "/tokenize", body).json()
            assert {k: _post(u, "/tokenize", body).json() for k, u in mine.items()} == {k: want for k in mine}, text
        for i, messages in enumerate(CONVERSATIONS):
            want = _post(ref.base_url, "/apply-template", {"messages": messages})
            assert want.status_code == 200 or i > 0, want.text
            for u in mine.values():
                got = _post(u, "/apply-template", {"messages": messages})
                assert (got.status_code, got.json()) == (want.status_code, want.json())
        for tools in (False, True):  # the second request repeats the first's messages: a prompt-cache hit
            want_chat, got_chat = _chat(ref.base_url, tools), {k: _chat(u, tools) for k, u in mine.items()}
            assert want_chat[0] == 200, want_chat
            assert got_chat == {k: want_chat for k in mine}, tools
        greedy = [(_greedy(ref.base_url, p), {k: _greedy(u, p) for k, u in mine.items()}) for p in PROMPTS]
        paths = [reference_path(ref.base_url, p, 32, 5) for p in PROMPTS]
        traces = {
            k: [
                compare(p, t, probs, mlxcel_scores(u, p, t, 5), THRESHOLDS["f32"])
                for p, (t, probs) in zip(PROMPTS, paths, strict=True)
            ]
            for k, u in mine.items()
        }
    finally:
        for proc in (ref, on_gguf, on_mlx):
            proc.cleanup()
    for theirs, ours in greedy:
        assert len(set(theirs)) > 1  # not a path of one repeated token
        assert ours == {k: theirs for k in mine}
    for fmt, ts in traces.items():
        assert sum(t.decided for t in ts) >= 32, (fmt, [t.decided for t in ts])
        assert [t.disagreements_at_decided for t in ts] == [0] * len(PROMPTS), fmt
        bound = TRACE_BOUNDS.get(family, TRACE_BOUND)
        assert max(t.max_abs_delta_logprob for t in ts) <= bound, (fmt, [t.max_abs_delta_logprob for t in ts])


# CI's pairs: the families whose quantized tensors are laid out their own way (llama's permuted q/k rows, phi3's
# fused ones, Qwen3-MoE's stacked experts, Gemma's shifted norms); MLXCEL_ALL_TWINS=1 adds the rest, and
# `mlxcel-oracle models` measures every family in every format for docs/models.md
Q4_K_M_FAMILIES = sorted(FAMILIES) if os.environ.get("MLXCEL_ALL_TWINS") else ["gemma3", "llama3", "phi3", "qwen3-moe"]
# and the legacy types mlxcel keeps as the file's blocks (server/native/int8_dot.c dot_legacy, panel_legacy): Q5_0,
# llama-quantize's type for the rows no K-quant fits (two fifths of Gemma-3-1B's Q4_K_M: 1152-wide rows), and Q8_0;
# and Q2_K (its file holds Q2_K and Q3_K rows: int8_dot.c dot_q2_k, dot_q3_k)
QUANTIZED_PAIRS = [(family, "Q4_K_M") for family in Q4_K_M_FAMILIES] + [
    ("gemma3", "Q5_0"),
    ("llama3", "Q8_0"),
    ("mistral", "Q2_K"),
]


@pytest.mark.parametrize(("family", "qtype"), QUANTIZED_PAIRS)
def test_quantized_twin_agrees_at_decided_positions(reference_binary, family, qtype):
    """The most downloaded quantization, from the reference's own llama-quantize, both servers at b10621's
    defaults on the same GGUF: mlxcel holds its weights value-exact (tests/test_family_import.py) and multiplies
    them over 8-bit activations as ggml does (server/native/int8_dot.c), its float sums over blocks in its own
    order, so agreement is asked where the reference's top-1 leads by more than 2 nats (oracle/trace.py
    THRESHOLDS)."""
    with Pair(f"family_{family}_{qtype}", (), reference_binary, pinned=False) as pair:
        ref, mine = pair.reference.base_url, pair.mlxcel.base_url
        body = {"content": TEXTS[2], "add_special": True, "parse_special": True}
        assert _post(mine, "/tokenize", body).json() == _post(ref, "/tokenize", body).json()
        traces = [trace(ref, mine, p, "q4_1", 32) for p in PROMPTS]  # the quantized twins' 2.0-nat rule
    assert sum(t.decided for t in traces) >= 16, [t.decided for t in traces]
    assert [t.disagreements_at_decided for t in traces] == [0] * len(PROMPTS)


# F16, as the converter's --outtype f16 writes a model (here llama-quantize's F16 of the F32 twin: the same halves):
# the families whose layers differ most (llama's permuted q/k rows, Qwen3's q/k norms, Gemma's GeGLU and sliding
# layers, Phi-3's fused projections); a CI landing takes its third (fixtures/families.py in_turn)
F16_FAMILIES = in_turn(["gemma3", "llama3", "phi3", "qwen3"])
F16_BOUND = 2e-2  # both round the activations to f16 (ggml's vec_dot_type); the products' sums in their own orders


@pytest.mark.parametrize("family", F16_FAMILIES)
def test_f16_twin_agrees_with_b10621(reference_binary, family):
    """An F16 GGUF at b10621's defaults: mlxcel keeps the file's halves and multiplies them over activations rounded
    to f16 as ggml does (server/native/cpu_kernels.c dot_f16); greedy agreement at every decided position (the F32
    rule, 0.5 nats) and logprobs within F16_BOUND (measured 0.005-0.012 on these four)."""
    with Pair(f"family_{family}_F16", (), reference_binary, pinned=False) as pair:
        traces = [trace(pair.reference.base_url, pair.mlxcel.base_url, p, "f32", 32) for p in PROMPTS]
    assert sum(t.decided for t in traces) >= 32, [t.decided for t in traces]
    assert [t.disagreements_at_decided for t in traces] == [0] * len(PROMPTS)
    assert max(t.max_abs_delta_logprob for t in traces) <= F16_BOUND, [t.max_abs_delta_logprob for t in traces]
