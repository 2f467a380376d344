"""Loading a checkpoint for the CPU: the fast layouts change no number."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from server.models.loader import TransposedLinear, load_checkpoint

TOKENS = [504, 3458, 282, 4649, 314, 7042, 30, 198] * 8


def _logits(model) -> tuple[mx.array, mx.array]:
    cache = make_prompt_cache(model)
    prefill = model(mx.array([TOKENS]), cache=cache)
    step = model(mx.array([[504]]), cache=cache)
    mx.eval(prefill, step)
    return prefill, step


def test_transposed_linears_give_the_same_logits(twin_q4_1):
    plain = load_checkpoint(twin_q4_1.mlx_dir, dequantize=True, transpose=False, kernels=False)
    fast = load_checkpoint(twin_q4_1.mlx_dir, dequantize=True, transpose=True, kernels=False)
    layers = [m for _, m in fast.model.named_modules() if isinstance(m, TransposedLinear)]
    assert len(layers) == 7 * len(fast.model.layers)  # q, k, v, o, gate, up, down in every block
    (prefill_a, step_a), (prefill_b, step_b) = _logits(plain.model), _logits(fast.model)
    assert mx.array_equal(prefill_a, prefill_b).item()  # GEMMs: bitwise
    # a one-row step runs on mlxcel's few-row kernel (server/native/cpu_kernels.c), which sums over W and over
    # its transpose in different orders: the last bits may differ
    assert mx.abs(step_a - step_b).max().item() < 1e-4
    assert mx.array_equal(mx.argmax(step_a, -1), mx.argmax(step_b, -1)).item()


def test_the_kernel_blocks_give_mlx_lms_logits(twin_q4_1):
    """Fused projections, attention and SwiGLU on mlxcel's CPU kernels (server/models/cpu_layers.py): a
    prompt, a step, and a prompt continued after a cached prefix (queries at an offset), against mlx-lm's own
    blocks."""
    from server import cpu_kernels
    from server.models.cpu_layers import KernelAttention, KernelMLP

    assert cpu_kernels.available()
    plain = load_checkpoint(twin_q4_1.mlx_dir, kernels=False)
    # the products in float32, as mlx-lm's (a GGUF's are over 8-bit activations by default: test_int8_dot.py)
    fast = load_checkpoint(twin_q4_1.mlx_dir, kernels=True, int8=False)
    assert all(type(b.self_attn) is KernelAttention and type(b.mlp) is KernelMLP for b in fast.model.layers)
    # q, k, v as one product, gate and up as another
    assert all("qkv_proj" in b.self_attn and "gate_up_proj" in b.mlp for b in fast.model.layers)
    assert not any("q_proj" in b.self_attn or "up_proj" in b.mlp for b in fast.model.layers)
    assert not any(type(b.self_attn) is KernelAttention for b in plain.model.layers)
    (prefill_a, step_a), (prefill_b, step_b) = _logits(plain.model), _logits(fast.model)
    for a, b in ((prefill_a, prefill_b), (step_a, step_b)):
        assert 0 < mx.abs(a - b).max().item() < 2e-4  # a different exp: close, not bitwise
        assert mx.array_equal(mx.argmax(a, -1), mx.argmax(b, -1)).item()
    # the same prompt in two chunks: the second chunk's queries sit at an offset into the cache
    cache = make_prompt_cache(fast.model)
    fast.model(mx.array([TOKENS[:24]]), cache=cache)
    rest = fast.model(mx.array([TOKENS[24:]]), cache=cache)
    assert mx.abs(rest - prefill_a[:, 24:]).max().item() < 2e-4


def test_a_row_gets_bitwise_the_same_logits_alone_or_batched(twin_q4_1):
    """On the CPU a sequence's decode step sums in the same order alone or with other rows (products of up to
    16 rows and the left-padded batch attention, server/native/cpu_kernels.c)."""
    from server.backends import open_backend

    runner = open_backend(load_checkpoint(twin_q4_1.mlx_dir))
    prompts = [TOKENS[:5], TOKENS[3:20], TOKENS[:11], TOKENS[7:9]]
    snaps = []
    for prompt in prompts:
        cache = runner.new_cache()
        runner.prefill(cache, prompt)
        snaps.append(runner.snapshot(cache, len(prompt))[0])
    step = [504, 3458, 282, 30]
    alone = [runner.decode(runner.restore(s, len(p)), t) for s, p, t in zip(snaps, prompts, step, strict=False)]
    batch = runner.batch_merge([runner.restore(s, len(p)) for s, p in zip(snaps, prompts, strict=False)])
    together = runner.decode_rows(batch, step)
    for i, logits in enumerate(alone):
        assert mx.array_equal(logits[0], together[i]).item(), i


def test_decode_steps_read_the_quantized_twins_of_a_dequantized_checkpoint(twin_q4_1):
    """With --lora-fuse (adapters baked into float weights; none here) the Q4_1 twin runs dequantized; its 4- and
    8-bit weights stay registered as twins (server/models/quantized_twins.py) and a few-row product reads
    them: the same numbers as the float weight within rounding, until the model goes."""
    import gc

    import numpy as np

    from server import blas

    native = blas.STATE.native
    gc.collect()
    registered = native.mlxcel_quant_registered()
    loaded = load_checkpoint(twin_q4_1.mlx_dir, fuse=lambda model: set())
    # q/k/v, o, gate/up and down in every block, and the tied head
    assert native.mlxcel_quant_registered() - registered == 4 * len(loaded.model.model.layers) + 1
    layer = loaded.model.model.layers[3]
    x = mx.array(np.random.default_rng(0).standard_normal((3, 576)).astype(np.float32))
    cases = [
        (layer.self_attn.qkv_proj.weight_t, False),
        (layer.mlp.gate_up_proj.weight_t, False),
        (loaded.model.model.embed_tokens.weight, True),
    ]  # the tied head: 8-bit, passed transposed
    for weight, tied in cases:
        operand = weight.T if tied else weight
        before = native.mlxcel_quant_calls()
        few = x @ operand
        mx.eval(few)
        assert native.mlxcel_quant_calls() - before == 1
        exact = np.array(x).astype(np.float64) @ np.array(operand)
        assert np.abs(np.array(few) - exact).max() < 1e-3 * max(1.0, np.abs(exact).max())
        mx.eval(mx.concatenate([x] * 6) @ operand)  # 18 rows: a float GEMM
        assert native.mlxcel_quant_calls() - before == 1
    del layer, cases, weight, operand, loaded
    gc.collect()
    assert native.mlxcel_quant_registered() == registered  # forgotten with the model
    before = native.mlxcel_quant_calls()
    fresh = load_checkpoint(
        twin_q4_1.mlx_dir, kernels=False, transpose=True
    )  # no twins: its weights may reuse the memory
    mx.eval(x @ fresh.model.model.layers[3].mlp.gate_proj.weight_t)
    assert native.mlxcel_quant_calls() == before


def test_the_loader_builds_mlx_lms_model_bitwise(twin_q4_1):
    """server/models/architectures.load_model (no transformers) against mlx-lm's own utils.load_model: the
    same module types, the same parameters bit for bit (the Q4_1 twin: 4-bit layers, an 8-bit embedding)."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model as mlx_lm_load_model

    from server.models.architectures import load_model

    ours, _ = load_model(twin_q4_1.mlx_dir)
    theirs, _ = mlx_lm_load_model(twin_q4_1.mlx_dir)
    types = lambda m: [(p, type(x).__name__, getattr(x, "bits", None)) for p, x in m.named_modules()]  # noqa: E731
    assert types(ours) == types(theirs)
    a, b = dict(tree_flatten(ours.parameters())), dict(tree_flatten(theirs.parameters()))
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and mx.array_equal(a[k], b[k]).item() for k in a)


def test_serving_imports_no_transformers(twin_q4_1):
    """The server's start-up path (command line, app, engine, loader, tokenizer) never imports transformers:
    it cost ~1.5 s of every start through mlx-lm's package __init__."""
    import subprocess
    import sys

    code = (
        "import sys; from server.cli import main, startup; from server.api import app; from server.engine import engine, "
        "drafting; from server.backends import mlx_backend, native_backend; from server.models import loader, tokenizer, decode_step, prefill_step; "
        f"loader.load_checkpoint(__import__('pathlib').Path({str(twin_q4_1.mlx_dir)!r})); "
        "tokenizer.ModelTokenizer(__import__('pathlib').Path(" + repr(str(twin_q4_1.mlx_dir)) + ")); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'huggingface_hub')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_bare_package_still_gives_mlx_lms_top_level_names():
    """Asking mlx_lm itself for a name (`from mlx_lm import load`) runs its real __init__ then."""
    import mlx_lm
    from mlx_lm import load  # noqa: F401

    assert callable(mlx_lm.load) and mlx_lm.__version__


def test_checkpoints_load_on_any_thread_one_after_another(twin_q4_1):
    """Engines load on threads of their own (the router loads several over its life); MLX binds streams to the
    thread that made them, so nothing made while loading may outlive its thread (it broke the next load)."""
    import threading

    loaded = []
    worker = threading.Thread(target=lambda: loaded.append(load_checkpoint(twin_q4_1.mlx_dir)))
    worker.start()
    worker.join()
    assert len(loaded) == 1
    again = load_checkpoint(twin_q4_1.mlx_dir)  # on this thread now
    step = again.model(mx.array([TOKENS[:8]]))
    mx.eval(step)
    assert step.shape[-1] == 49152
