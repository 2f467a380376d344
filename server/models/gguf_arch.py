"""What each GGUF architecture the importer takes means for an MLX checkpoint: its mlx-lm model type, its tensors'
names there, the converter's rope-order permutation, and the config mlx-lm builds the model from.

Facts from b10621's converter (conversion/llama.py, qwen.py, phi.py) and loader (src/llama-model.cpp,
src/llama-arch.cpp): only `llama` permutes the rows of attn_q / attn_k (and their biases) into ggml's
interleaved rope order, so only `llama` is permuted back; qwen2/qwen3/phi3 use the NEOX (rotate-half) rope as
written. `rope_freqs` (Llama 3.1 and later) holds the per-pair frequency divisors the converter computed from the
llama3 rope scaling; it is no weight of the model and travels in the config (server/models/rope_factors.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


class ImportRefused(ValueError):
    """The GGUF holds something this importer cannot carry over exactly."""


# GGUF tensor name (per block, after "blk.N.") -> mlx-lm name (after "model.layers.N."), common to all
_COMMON_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_QKV_BIASES = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}
_QK_NORMS = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# tensors that are parameters of the rope, not weights: read into the config
ROPE_FREQS = "rope_freqs.weight"


@dataclass(frozen=True)
class HParams:
    """The `{arch}.*` keys every supported architecture has, as llama_model::load_hparams reads them."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_ctx_train: int
    rope_theta: float
    rms_eps: float
    vocab_size: int
    head_dim: int

    @classmethod
    def read(cls, arch: str, field_of: Callable[..., Any], n_tokens: int) -> "HParams":
        def get(key: str, default: Any = None) -> Any:
            value = field_of(f"{arch}.{key}", default)
            if value is None:
                raise ImportRefused(f"the GGUF lacks '{arch}.{key}'")
            return value

        n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
        head_dim = field_of(f"{arch}.attention.key_length") or field_of(f"{arch}.rope.dimension_count")
        return cls(
            n_layer=int(get("block_count")),
            n_embd=n_embd,
            n_ff=int(get("feed_forward_length")),
            n_head=n_head,
            n_head_kv=int(get("attention.head_count_kv", n_head)),
            n_ctx_train=int(get("context_length")),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rms_eps=float(get("attention.layer_norm_rms_epsilon")),
            vocab_size=int(get("vocab_size", n_tokens)),
            head_dim=int(head_dim or n_embd // n_head),
        )

    def base_config(self) -> dict:
        return {
            "hidden_size": self.n_embd,
            "intermediate_size": self.n_ff,
            "num_hidden_layers": self.n_layer,
            "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_head_kv,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.n_ctx_train,
            "rms_norm_eps": self.rms_eps,
            "rope_theta": self.rope_theta,
            "vocab_size": self.vocab_size,
        }


@dataclass(frozen=True)
class ArchSpec:
    gguf: str  # general.architecture
    model_type: str  # mlx-lm's module (mlx_lm/models/<model_type>.py)
    hf_architecture: str
    permute_qk: bool  # the converter permuted attn_q / attn_k rows into ggml's interleaved rope order
    block: dict[str, str] = field(default_factory=dict)
    extra_config: dict = field(default_factory=dict)

    def hf_name(self, gguf_name: str) -> str:
        if gguf_name in _TOP:
            return _TOP[gguf_name]
        parts = gguf_name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[2] in self.block:
            return f"model.layers.{parts[1]}.{self.block[parts[2]]}"
        raise ImportRefused(f"tensor '{gguf_name}' has no known mapping for architecture '{self.gguf}'")

    def config(self, hp: HParams, tied: bool) -> dict:
        return {
            "architectures": [self.hf_architecture],
            "model_type": self.model_type,
            **hp.base_config(),
            "tie_word_embeddings": tied,
            **self.extra_config,
        }


_PHI3_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_up.weight": "mlp.gate_up_proj.weight",  # gate and up rows fused, gate first, as in the HF checkpoint
    "ffn_down.weight": "mlp.down_proj.weight",
}

ARCHITECTURES: dict[str, ArchSpec] = {
    spec.gguf: spec
    for spec in (
        ArchSpec(
            "llama",
            "llama",
            "LlamaForCausalLM",
            permute_qk=True,
            block={**_COMMON_BLOCK, **_QKV_BIASES},
            extra_config={"attention_bias": False, "mlp_bias": False, "hidden_act": "silu"},
        ),
        ArchSpec("qwen2", "qwen2", "Qwen2ForCausalLM", permute_qk=False, block={**_COMMON_BLOCK, **_QKV_BIASES}),
        ArchSpec("qwen3", "qwen3", "Qwen3ForCausalLM", permute_qk=False, block={**_COMMON_BLOCK, **_QK_NORMS}),
        ArchSpec("phi3", "phi3", "Phi3ForCausalLM", permute_qk=False, block=_PHI3_BLOCK),
    )
}


def spec_of(arch: str) -> ArchSpec:
    spec = ARCHITECTURES.get(arch)
    if spec is None:
        raise ImportRefused(f"architecture '{arch}' is not supported (supported: {', '.join(ARCHITECTURES)})")
    return spec
