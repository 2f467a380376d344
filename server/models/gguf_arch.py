"""What each GGUF architecture the importer takes means for an MLX checkpoint: its mlx-lm model type, its tensors'
names there, the converter's rope-order permutation, and the config mlx-lm builds the model from.

Facts from b10621's converter (conversion/llama.py, qwen.py, phi.py, gemma.py) and loader (src/llama-model.cpp,
src/models/*.cpp): only `llama` and `smollm3` (a LlamaModel in the converter) permute the rows of attn_q /
attn_k (and their biases) into ggml's interleaved rope order, so only they are permuted back; the others use the
NEOX (rotate-half) rope as written. `rope_freqs` (Llama 3.1 and later) holds the per-pair frequency divisors the converter computed from the
llama3 rope scaling; it is no weight of the model and travels in the config (server/models/rope_factors.py).
Gemma's converter adds 1 to every norm weight (HF's Gemma norms scale by 1 + w, ggml's by w), so the importer
subtracts it: for a stored value g >= 0.5, g - 1 is exact and mlx-lm's 1 + (g - 1) gives g back bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

FieldOf = Callable[..., Any]  # (key, default=None) -> the GGUF key's value


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
# config["mlxcel"] key of a checkpoint whose Gated DeltaNet tensors keep the GGUF's layout (models/qwen35.py)
GGML_LAYOUT = "ggml_delta_net"


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
    def read(cls, arch: str, field_of: FieldOf, n_tokens: int) -> "HParams":
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
    norm_shift: float = 0.0  # what the converter added to every norm weight
    # the architecture's own `{arch}.*` keys, read into mlx-lm's config as llama_model::load_hparams reads them
    arch_config: Callable[[HParams, FieldOf], dict] | None = None
    # the blocks past the trunk (`{arch}.nextn_predict_layers`: an MTP block, src/models/qwen35.cpp) -> the HF
    # checkpoint's `mtp.*` names (the trunk's model leaves them to server/models/mtp_head.py)
    nextn: dict[str, str] = field(default_factory=dict)
    # GGUF tensor name suffix -> the shape the checkpoint holds it in, from the GGUF's (a conv1d's kernel axis)
    reshape: dict[str, Callable[[tuple], tuple]] = field(default_factory=dict)
    # config["mlxcel"] entries its model reads (server/models/qwen35.py: GGML_LAYOUT)
    mlxcel_flags: dict = field(default_factory=dict)

    def hf_name(self, gguf_name: str, n_trunk: int | None = None) -> str:
        if gguf_name in _TOP:
            return _TOP[gguf_name]
        parts = gguf_name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and n_trunk is not None and int(parts[1]) >= n_trunk:
            if int(parts[1]) == n_trunk and parts[2] in self.nextn:
                return self.nextn[parts[2]]
        elif len(parts) == 3 and parts[0] == "blk" and parts[2] in self.block:
            return f"model.layers.{parts[1]}.{self.block[parts[2]]}"
        raise ImportRefused(f"tensor '{gguf_name}' has no known mapping for architecture '{self.gguf}'")

    def config(self, hp: HParams, tied: bool, field_of: FieldOf = lambda key, default=None: default) -> dict:
        def key_of(key: str, default: Any = None) -> Any:
            return field_of(f"{self.gguf}.{key}", default)

        own = self.arch_config(hp, key_of) if self.arch_config is not None else {}
        return {
            "architectures": [self.hf_architecture],
            "model_type": self.model_type,
            **hp.base_config(),
            "tie_word_embeddings": tied,
            **self.extra_config,
            **own,
        }


_PHI3_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_up.weight": "mlp.gate_up_proj.weight",  # gate and up rows fused, gate first, as in the HF checkpoint
    "ffn_down.weight": "mlp.down_proj.weight",
}

_GEMMA_BLOCK = {
    **_COMMON_BLOCK,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_MOE_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{k: v for k, v in _COMMON_BLOCK.items() if k.startswith("attn_")},
    "ffn_gate_inp.weight": "mlp.gate.weight",  # the router
    "ffn_gate_exps.weight": "mlp.switch_mlp.gate_proj.weight",  # (experts, ff, hidden), as mlx-lm stacks them
    "ffn_up_exps.weight": "mlp.switch_mlp.up_proj.weight",
    "ffn_down_exps.weight": "mlp.switch_mlp.down_proj.weight",
}


def _attention_scale(hp: HParams, n_layer_27b: int) -> float:
    """query_pre_attn_scalar as b10621 applies it: 1/sqrt(head_dim), but n_embd / n_head for the 27B model."""
    return float(hp.n_embd // hp.n_head if hp.n_layer == n_layer_27b else hp.head_dim)


def _swa_pattern(value: Any, default: int) -> int:
    """`attention.sliding_window_pattern`: a period, or (newer converters) one flag per layer; mlx-lm takes a period."""
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        flags = [bool(v) for v in value]
        period = flags.index(False) + 1 if False in flags else 1  # layers 0..period-2 sliding, then one global
        if flags != [(i + 1) % period != 0 for i in range(len(flags))]:
            raise ImportRefused("a sliding-window layer pattern that is not periodic is not supported")
        return period
    return int(value)


def _gemma2_config(hp: HParams, key: FieldOf) -> dict:
    """src/models/gemma2.cpp: a sliding window of 4096 on every other layer unless the GGUF says otherwise."""
    window = int(key("attention.sliding_window", 4096))
    if _swa_pattern(key("attention.sliding_window_pattern"), 2) != 2:
        raise ImportRefused("gemma2 with a sliding-window pattern other than every other layer is not supported")
    return {
        "attn_logit_softcapping": float(key("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": float(key("final_logit_softcapping", 30.0)),
        "query_pre_attn_scalar": _attention_scale(hp, 46),
        "sliding_window": window,
    }


def _gemma3_config(hp: HParams, key: FieldOf) -> dict:
    """src/models/gemma3.cpp: sliding-window layers with a period of 6 (the last of each period global) where the
    GGUF has a window, local rope base 10000 unless given; the global layers' rope scaling as the converter wrote
    it."""
    window = int(key("attention.sliding_window", 0) or 0)
    if key("final_logit_softcapping"):
        raise ImportRefused("gemma3 with final_logit_softcapping is not supported")
    config = {
        "query_pre_attn_scalar": _attention_scale(hp, 62),
        "sliding_window": window or hp.n_ctx_train,
        "sliding_window_pattern": _swa_pattern(key("attention.sliding_window_pattern"), 6) if window else 1,
        "rope_local_base_freq": float(key("rope.freq_base_swa", 10000.0)),
    }
    kind, factor = key("rope.scaling.type"), key("rope.scaling.factor")
    if kind == "linear" and factor:
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(factor)}
    elif kind not in (None, "none"):
        raise ImportRefused(f"gemma3 with rope scaling '{kind}' is not supported")
    return config


def _qwen3moe_config(hp: HParams, key: FieldOf) -> dict:
    """src/models/qwen3moe.cpp: every layer sparse, softmax routing, the chosen experts' weights normalized."""
    return {
        "num_experts": int(key("expert_count")),
        "num_experts_per_tok": int(key("expert_used_count")),
        "moe_intermediate_size": int(key("expert_feed_forward_length", hp.n_ff)),
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    }


_QWEN35_BLOCK = {  # conversion/qwen.py Qwen3_5TextModel's names, read back (server/models/qwen35.py has the layout)
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    **{k: v for k, v in _COMMON_BLOCK.items() if k.startswith(("attn_q", "attn_k", "attn_v", "attn_output", "ffn_"))},
    **_QK_NORMS,
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_a": "linear_attn.ssm_a",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
}
_QWEN35_NEXTN = {
    "nextn.eh_proj.weight": "mtp.fc.weight",
    "nextn.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "nextn.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "nextn.shared_head_norm.weight": "mtp.norm.weight",
    **{k: f"mtp.layers.0.{v}" for k, v in _QWEN35_BLOCK.items() if not v.startswith("linear_attn.")},
}


def _qwen35_config(hp: HParams, key: FieldOf) -> dict:
    """src/models/qwen35.cpp's hyperparameters as mlx-lm's qwen3_5 reads them (a flat config is its text config):
    the trunk is block_count less the MTP blocks; the rope NeoX over rope.dimension_count dims (IMROPE on text
    positions, its sections all one position); the layer kinds by full_attention_interval."""
    n_nextn = int(key("nextn_predict_layers", 0) or 0)
    if key("attention.recurrent_layers") is not None:
        raise ImportRefused("qwen35 with an explicit recurrent-layer list is not supported")
    if int(key("ssm.state_size")) * int(key("ssm.time_step_rank")) != int(key("ssm.inner_size")):
        raise ImportRefused("qwen35 with value heads of another size than its key heads is not supported")
    n_rot = int(key("rope.dimension_count", hp.head_dim))
    return {
        "num_hidden_layers": hp.n_layer - n_nextn,
        "linear_num_key_heads": int(key("ssm.group_count")),
        "linear_num_value_heads": int(key("ssm.time_step_rank")),
        "linear_key_head_dim": int(key("ssm.state_size")),
        "linear_value_head_dim": int(key("ssm.state_size")),
        "linear_conv_kernel_dim": int(key("ssm.conv_kernel")),
        "full_attention_interval": int(key("full_attention_interval", 4)),
        "attention_bias": False,
        "rope_parameters": {
            "type": "default",
            "rope_theta": hp.rope_theta,
            "partial_rotary_factor": n_rot / hp.head_dim,
        },
        "mtp_num_hidden_layers": n_nextn,
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
        ArchSpec(  # src/models/smollm3.cpp: llama's blocks, no rope on every fourth layer (a fixed step of 4)
            "smollm3",
            "smollm3",
            "SmolLM3ForCausalLM",
            permute_qk=True,
            block=_COMMON_BLOCK,
            extra_config={
                "attention_bias": False,
                "mlp_bias": False,
                "hidden_act": "silu",
                "no_rope_layer_interval": 4,
            },
        ),
        ArchSpec("qwen2", "qwen2", "Qwen2ForCausalLM", permute_qk=False, block={**_COMMON_BLOCK, **_QKV_BIASES}),
        ArchSpec("qwen3", "qwen3", "Qwen3ForCausalLM", permute_qk=False, block={**_COMMON_BLOCK, **_QK_NORMS}),
        ArchSpec("phi3", "phi3", "Phi3ForCausalLM", permute_qk=False, block=_PHI3_BLOCK),
        ArchSpec(
            "gemma2",
            "gemma2",
            "Gemma2ForCausalLM",
            permute_qk=False,
            block=_GEMMA_BLOCK,
            norm_shift=1.0,
            arch_config=_gemma2_config,
        ),
        ArchSpec(
            "gemma3",
            "gemma3_text",
            "Gemma3ForCausalLM",
            permute_qk=False,
            block={**_GEMMA_BLOCK, **_QK_NORMS},
            norm_shift=1.0,
            arch_config=_gemma3_config,
        ),
        ArchSpec(
            "qwen3moe",
            "qwen3_moe",
            "Qwen3MoeForCausalLM",
            permute_qk=False,
            block={**_MOE_BLOCK, **_QK_NORMS},
            arch_config=_qwen3moe_config,
        ),
        ArchSpec(
            "qwen35",
            "qwen3_5",
            "Qwen3_5ForCausalLM",
            permute_qk=False,
            block=_QWEN35_BLOCK,
            arch_config=_qwen35_config,
            nextn=_QWEN35_NEXTN,
            reshape={"ssm_conv1d.weight": lambda shape: (*shape, 1)},  # (C, K) -> mlx's Conv1d (C, K, 1)
            mlxcel_flags={GGML_LAYOUT: True},
        ),
    )
}


def spec_of(arch: str) -> ArchSpec:
    spec = ARCHITECTURES.get(arch)
    if spec is None:
        raise ImportRefused(f"architecture '{arch}' is not supported (supported: {', '.join(ARCHITECTURES)})")
    return spec
