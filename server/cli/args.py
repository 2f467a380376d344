"""The command line: every b10621 option (server/options.py) parses, read as b10621 reads it
(server/cli/parse.py). The options mlxcel acts on get their settings here (destination, type, default, help)
and show in --help; every other one parses hidden and is classified at startup (server/cli/classify.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..options import OPTIONS
from ..textparse import AUTOY, FALSEY, TRUTHY, parse_csv_row, stof, stoul
from .classify import RULES
from .parse import ArgError, parse
from .surface import DUMP_FLAG


class _NegatableFlag(argparse.Action):
    """A b10621 pair: the positive spellings set True, the negative ones (-no..., --no-...) False."""

    def __init__(self, option_strings, dest, type=None, **kw):
        kw.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith(("-no", "--no-")))


class _Ordered(argparse.Action):
    """Record (long spelling, spelling given or variable, value) in the order b10621 applies them, on a list
    shared by options whose handlers write one field."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = getattr(namespace, self.dest) or []
        setattr(namespace, self.dest, [*seen, (self.option_strings[-1], option_string, values)])


class _SortedSet(argparse.Action):
    """--alias / --tags: comma-separated, stripped, empties dropped, into b10621's std::set (sorted, unique)."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = {s.strip(" \t\n\v\f\r") for s in values.split(",")} - {""}
        setattr(namespace, self.dest, sorted(set(getattr(namespace, self.dest) or []) | items))


class _CsvAppend(argparse.Action):
    """--api-key: each use appends the non-empty fields of a CSV row (b10621 keeps the variable's keys too)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(
            namespace, self.dest, [*(getattr(namespace, self.dest) or []), *(k for k in parse_csv_row(values) if k)]
        )


def _preset(settings: dict) -> type[argparse.Action]:
    """A b10621 preset (--fim-qwen-*-default ...): its fields set where it stands in the command line, so an
    option after it overrides them and one before is overridden (common/arg.cpp's preset handlers)."""

    class Preset(argparse.Action):
        def __init__(self, option_strings, dest, **kw):
            kw.pop("nargs", None)
            kw.pop("type", None)
            super().__init__(option_strings, dest, nargs=0, **kw)

        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, self.dest, True)
            for name, value in settings.items():
                setattr(namespace, name, value)

    return Preset


def _fim(repo: str, file: str, draft: str = "") -> dict:
    # ggml-org's FIM presets: the model, port 8012, 1024-token batches, the model's own context, cache reuse 256;
    # the -spec ones a 0.5B draft model too
    fields = dict(hf_repo=repo, hf_file=file, port=8012, ubatch_size=1024, batch_size=1024, ctx_size=0, cache_reuse=256)
    if draft:
        fields |= dict(spec_draft_hf=draft, spec_draft_hf_file="qwen2.5-coder-0.5b-q8_0.gguf")
    return {"action": _preset(fields)}


_QWEN_DRAFT = "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF"


def _seed(raw: str) -> int:
    """std::stoul, folded into b10621's uint32 seed: -1 is the random sentinel 4294967295."""
    text = raw.strip()
    return (int(text, 16) if text.lower().startswith("0x") else stoul(raw)) % 2**32


def _log_colors(raw: str) -> str:
    for name, words in (("on", TRUTHY), ("off", FALSEY), ("auto", AUTOY)):
        if raw in words:
            return name
    raise ValueError(f"error: unknown value for --log-colors: '{raw}'\n")


def _openable(raw: str) -> str:
    try:
        with open(raw, "rb"):
            pass
    except OSError:
        raise ValueError(f"error: failed to open file '{raw}'\n") from None
    return raw


def _s(dest: str, help: str, default=None, **kw) -> dict:
    return dict(dest=dest, help=help, default=default, **kw)


_F = {"type": stof}  # a float value, read with std::stof
_GRAMMAR = {"dest": "grammar_args", "action": _Ordered}  # the last of these four sets the grammar
_TEMPLATE = {"dest": "chat_template_args", "action": _Ordered}
_KWARGS = {"dest": "template_kwargs_args", "action": _Ordered}  # these four write one template-kwargs map

# The options mlxcel acts on: b10621 id -> argparse settings. The transport, authentication and logging ones are
# parsed here for the modules that serve them.
MLXCEL: dict[str, dict] = {
    "--help": _s("help", "print usage and exit", False),
    "--version": _s("version", "show version and build info", False),
    "--cache-list": _s("cache_list", "show list of models in cache (the model store names -m accepts)", False),
    "--completion-bash": _s("completion_bash", "print source-able bash completion script for this command", False),
    "--model": _s("model", "model: an MLX checkpoint directory or a model store name"),
    "--alias": _s(
        "alias", "comma-separated model names; the first in sorted order is reported in responses", action=_SortedSet
    ),
    "--lora": _s(
        help="path to LoRA adapter (a PEFT or mlx-lm adapter directory, or a GGUF LoRA file; "
        "comma-separated values load several)",
        dest="lora_args",
        action=_Ordered,
    ),
    "--lora-scaled": _s(
        help="path to LoRA adapter with user defined scaling (format: FNAME:SCALE,...)",
        dest="lora_args",
        action=_Ordered,
    ),
    "--control-vector": _s(
        help="add a control vector (a GGUF of direction.N tensors; comma-separated values add several)",
        dest="control_vector_args",
        action=_Ordered,
    ),
    "--control-vector-scaled": _s(
        help="add a control vector with user defined scaling SCALE (format: FNAME:SCALE,...)",
        dest="control_vector_args",
        action=_Ordered,
    ),
    "--control-vector-layer-range": _s(
        "control_vector_layer_range", "layer range to apply the control vector(s) to, start and end inclusive"
    ),
    "--models-dir": _s("models_dir", "directory containing models for the router server (default: disabled)"),
    "--models-preset": _s(
        "models_preset", "path to INI file containing model presets for the router server (default: disabled)"
    ),
    "--models-max": _s(
        "models_max",
        "for router server, maximum number of models to load simultaneously (default: 4, 0 = unlimited)",
        4,
    ),
    "--models-autoload": _s(
        "models_autoload", "for router server, whether to automatically load models (default: enabled)", True
    ),
    "--hf-repo": _s(
        "hf_repo",
        "Hugging Face model repository; quant is optional, case-insensitive, default to Q4_K_M, or falls back to the "
        "first file in the repo if Q4_K_M doesn't exist; mlxcel fetches the GGUF b10621 picks into the same cache "
        "($LLAMA_CACHE, else the Hugging Face hub cache) and serves it",
    ),
    "--hf-file": _s("hf_file", "Hugging Face model file. If specified, it will override the quant in --hf-repo"),
    "--fim-qwen-1.5b-default": _s(
        "fim_preset",
        "use default Qwen 2.5 Coder 1.5B (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", "qwen2.5-coder-1.5b-q8_0.gguf"),
    ),
    "--fim-qwen-3b-default": _s(
        "fim_preset",
        "use default Qwen 2.5 Coder 3B (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", "qwen2.5-coder-3b-q8_0.gguf"),
    ),
    "--fim-qwen-7b-default": _s(
        "fim_preset",
        "use default Qwen 2.5 Coder 7B (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "qwen2.5-coder-7b-q8_0.gguf"),
    ),
    "--fim-qwen-7b-spec": _s(
        "fim_preset",
        "use Qwen 2.5 Coder 7B + 0.5B draft for speculative decoding (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "qwen2.5-coder-7b-q8_0.gguf", _QWEN_DRAFT),
    ),
    "--fim-qwen-14b-spec": _s(
        "fim_preset",
        "use Qwen 2.5 Coder 14B + 0.5B draft for speculative decoding (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", "qwen2.5-coder-14b-q8_0.gguf", _QWEN_DRAFT),
    ),
    "--spec-draft-hf": _s(
        "spec_draft_hf",
        "Same as --hf-repo, but for the draft model (default: unused); mlxcel fetches it as -hf does and drafts "
        "with it under --spec-type draft-simple",
    ),
    "--fim-qwen-30b-default": _s(
        "fim_preset",
        "use default Qwen 3 Coder 30B A3B Instruct (note: can download weights from the internet)",
        **_fim("ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF", "qwen3-coder-30b-a3b-instruct-q8_0.gguf"),
    ),
    "--offline": _s("offline", "offline mode: the model store downloads nothing (POST /models refuses)", False),
    "--hf-token": _s(
        "hf_token",
        "Hugging Face access token for the model store's downloads (POST /models), sent "
        "as 'Authorization: Bearer' (default: value from HF_TOKEN environment variable)",
    ),
    "--rope-scale": _s(
        help="RoPE context scaling factor, expands context by a factor of N", dest="rope_scale_args", action=_Ordered
    ),
    "--rope-freq-base": _s("rope_freq_base", "RoPE base frequency (default: loaded from model)"),
    "--rope-scaling": _s(
        "rope_scaling", "RoPE frequency scaling method, defaults to linear unless specified by the model"
    ),
    "--yarn-orig-ctx": _s(
        "yarn_orig_ctx", "YaRN: original context size of model (default: 0 = model training context size)", 0
    ),
    "--yarn-ext-factor": _s(
        "yarn_ext_factor", "YaRN: extrapolation mix factor (default: -1.00, 0.0 = full interpolation)", "-1.00"
    ),
    "--yarn-attn-factor": _s(
        "yarn_attn_factor", "YaRN: scale sqrt(t) or attention magnitude (default: -1.00)", "-1.00"
    ),
    "--yarn-beta-slow": _s("yarn_beta_slow", "YaRN: high correction dim or alpha (default: -1.00)", "-1.00"),
    "--yarn-beta-fast": _s("yarn_beta_fast", "YaRN: low correction dim or beta (default: -1.00)", "-1.00"),
    "--rope-freq-scale": _s(
        help="RoPE frequency scaling factor, expands context by a factor of 1/N",
        dest="rope_scale_args",
        action=_Ordered,
    ),
    "--spec-draft-model": _s(
        "spec_draft_model",
        "draft model for speculative decoding, an MLX checkpoint or a GGUF "
        "file (converted once); it drafts when the speculative types "
        "include draft-simple (default: unused)",
    ),
    "--spec-type": _s(
        "spec_type",
        "comma-separated list of types of speculative decoding to use (default: none); every type is served, "
        "each use appending (server/engine/drafting.py)",
        "none",
    ),
    "--spec-draft-n-max": _s("spec_draft_n_max", "number of tokens to draft for speculative decoding (default: 3)", 3),
    "--spec-draft-n-min": _s(
        "spec_draft_n_min", "minimum number of draft tokens to use for speculative decoding (default: 0)", 0
    ),
    "--spec-ngram-simple-size-n": _s(
        "spec_ngram_simple_size_n",
        "ngram size N for ngram-simple speculative decoding, length of lookup n-gram (default: 12)",
    ),
    "--spec-ngram-simple-size-m": _s(
        "spec_ngram_simple_size_m",
        "ngram size M for ngram-simple speculative decoding, length of draft m-gram (default: 48)",
    ),
    "--spec-draft-p-min": _s(
        "spec_draft_p_min", "minimum speculative decoding probability (greedy) (default: 0.00)", "0.00"
    ),
    **{
        f"--spec-ngram-{kind}-{knob}": _s(
            f"spec_ngram_{kind.replace('-', '_')}_{knob.replace('-', '_')}",
            f"{what} for {kind.replace('-', '_')} speculative decoding (default: {default})",
            default,
        )
        for kind in ("map-k", "map-k4v")
        for knob, what, default in (
            ("size-n", "ngram size N, length of the lookup n-gram,", 12),
            ("size-m", "ngram size M, length of the draft m-gram,", 48),
            ("min-hits", "minimum hits of a key n-gram", 1),
        )
    },
    "--spec-ngram-mod-n-match": _s(
        "spec_ngram_mod_n_match", "ngram-mod lookup length, tokens matched (default: 24)", 24
    ),
    "--spec-ngram-mod-n-min": _s("spec_ngram_mod_n_min", "minimum ngram-mod draft length (default: 48)", 48),
    "--spec-ngram-mod-n-max": _s("spec_ngram_mod_n_max", "maximum ngram-mod draft length (default: 64)", 64),
    "--spec-default": _s(
        "spec_default",
        "enable default speculative decoding config (ngram-mod: n_match 24, n_min 48, n_max 64)",
        False,
        action=_preset(dict(spec_ngram_mod_n_match=24, spec_ngram_mod_n_min=48, spec_ngram_mod_n_max=64)),
    ),
    "--lookup-cache-static": _s(
        "lookup_cache_static",
        "path to static lookup cache for ngram-cache speculative decoding (read, never written)",
        "",
    ),
    "--lookup-cache-dynamic": _s(
        "lookup_cache_dynamic",
        "path to dynamic lookup cache for ngram-cache speculative decoding (read, never written: as "
        "llama-server, which updates it only in llama-lookup)",
        "",
    ),
    "--tags": _s("tags", "comma-separated model tags (informational, reported by GET /v1/models)", action=_SortedSet),
    "--ctx-size": _s("ctx_size", "size of the prompt context (default: 0, 0 = loaded from model)", 0),
    "--predict": _s("predict", "number of tokens to predict (default: -1, -1 = infinity)", -1),
    "--batch-size": _s("batch_size", "logical maximum batch size (default: 2048)", 2048),
    "--ubatch-size": _s("ubatch_size", "physical maximum batch size (default: 512)", 512),
    "--keep": _s("keep", "number of tokens to keep from the initial prompt (default: 0, -1 = all)", 0),
    "--cache-reuse": _s(
        "cache_reuse",
        "min chunk size to attempt reusing from the cache via KV shifting, requires "
        "prompt caching to be enabled (default: 0)",
        0,
    ),
    "--swa-full": _s(
        "swa_full",
        "use full-size SWA cache (default: false); mlxcel's sliding-window layers always keep every position, and "
        "with it a prompt is computed in plain batches, as b10621 then takes no checkpoints",
        False,
    ),
    "--ctx-checkpoints": _s(
        "ctx_checkpoints",
        "max number of context checkpoints to create per slot (default: 32); mlxcel keeps none, and computes a "
        "sliding-window model's prompt in the batches b10621's checkpoints give it (none with 0)",
        32,
    ),
    "--checkpoint-min-step": _s(
        "checkpoint_min_step",
        "minimum spacing between context checkpoints in tokens (default: 8192, 0 = no minimum): where b10621's "
        "prompt batches end on a sliding-window model",
        8192,
    ),
    "--cache-ram": _s(
        "cache_ram", "set the maximum cache size in MiB (default: 8192, -1 - no limit, 0 - disable)", 8192
    ),
    "--context-shift": _s(
        "context_shift", "whether to use context shift on infinite text generation (default: disabled)", False
    ),
    "--spm-infill": _s(
        "spm_infill",
        "use Suffix/Prefix/Middle pattern for infill (instead of Prefix/Suffix/Middle) "
        "as some models prefer this. (default: disabled)",
        False,
    ),
    "--escape": _s(
        "escape",
        "whether to process escapes sequences (\\n, \\r, \\t, \\', \\\", \\\\) in -r and "
        "--dry-sequence-breaker (default: true)",
        True,
    ),
    "--reverse-prompt": _s(
        "reverse_prompt", "halt generation at PROMPT (repeatable); the server's default stop strings", action="append"
    ),
    "--special": _s("special", "special tokens output enabled (default: false)", False),
    "--parallel": _s("parallel", "number of server slots (default: -1, -1 = auto)", -1),
    "--cont-batching": _s(
        "cont_batching", "whether to enable continuous batching (a.k.a dynamic batching) (default: enabled)", True
    ),
    "--cache-prompt": _s("cache_prompt", "whether to enable prompt caching (default: enabled)", True),
    "--cache-idle-slots": _s(
        "cache_idle_slots",
        "save idle slots to the prompt cache on new task, and clear them "
        "when using unified KV (default: enabled, requires cache-ram)",
        True,
    ),
    "--slot-prompt-similarity": _s(
        "slot_prompt_similarity",
        "how much the prompt of a request must match the "
        "prompt of a slot in order to use that slot (default: 0.10, 0.0 = disabled)",
        0.1,
        **_F,
    ),
    "--slots": _s("slots", "expose slots monitoring endpoint (default: enabled)", True),
    "--props": _s("props", "enable changing global properties via POST /props (default: disabled)", False),
    # sampling: the server's default sampler settings
    "--seed": _s("seed", "RNG seed (default: -1, use random seed for -1)", 0xFFFFFFFF, type=_seed),
    "--samplers": _s(
        "samplers",
        "samplers used for generation in order, separated by ';' (default: penalties;dry;"
        "top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)",
    ),
    "--sampler-seq": _s("sampler_seq", "simplified sequence for samplers that will be used (default: edskypmxt)"),
    "--temp": _s("temp", "temperature (default: 0.80)", 0.8, **_F),
    "--top-k": _s("top_k", "top-k sampling (default: 40, 0 = disabled)", 40),
    "--top-p": _s("top_p", "top-p sampling (default: 0.95, 1.0 = disabled)", 0.95, **_F),
    "--min-p": _s("min_p", "min-p sampling (default: 0.05, 0.0 = disabled)", 0.05, **_F),
    "--top-nsigma": _s("top_nsigma", "top-n-sigma sampling (default: -1.00, -1.0 = disabled)", -1.0, **_F),
    "--xtc-probability": _s("xtc_probability", "xtc probability (default: 0.00, 0.0 = disabled)", 0.0, **_F),
    "--xtc-threshold": _s("xtc_threshold", "xtc threshold (default: 0.10, 1.0 = disabled)", 0.1, **_F),
    "--typical": _s("typical", "locally typical sampling, parameter p (default: 1.00, 1.0 = disabled)", 1.0, **_F),
    "--repeat-last-n": _s(
        "repeat_last_n", "last n tokens to consider for penalize (default: 64, 0 = disabled, -1 = ctx_size)", 64
    ),
    "--repeat-penalty": _s(
        "repeat_penalty", "penalize repeat sequence of tokens (default: 1.00, 1.0 = disabled)", 1.0, **_F
    ),
    "--presence-penalty": _s(
        "presence_penalty", "repeat alpha presence penalty (default: 0.00, 0.0 = disabled)", 0.0, **_F
    ),
    "--frequency-penalty": _s(
        "frequency_penalty", "repeat alpha frequency penalty (default: 0.00, 0.0 = disabled)", 0.0, **_F
    ),
    "--dynatemp-range": _s("dynatemp_range", "dynamic temperature range (default: 0.00, 0.0 = disabled)", 0.0, **_F),
    "--dynatemp-exp": _s("dynatemp_exp", "dynamic temperature exponent (default: 1.00)", 1.0, **_F),
    "--mirostat": _s("mirostat", "use Mirostat sampling (default: 0, 0 = disabled, 1 = Mirostat, 2 = Mirostat 2.0)", 0),
    "--mirostat-lr": _s("mirostat_lr", "Mirostat learning rate, parameter eta (default: 0.10)", 0.1, **_F),
    "--mirostat-ent": _s("mirostat_ent", "Mirostat target entropy, parameter tau (default: 5.00)", 5.0, **_F),
    "--dry-multiplier": _s("dry_multiplier", "set DRY sampling multiplier (default: 0.00, 0.0 = disabled)", 0.0, **_F),
    "--dry-base": _s("dry_base", "set DRY sampling base value (default: 1.75)", 1.75, **_F),
    "--dry-allowed-length": _s("dry_allowed_length", "set allowed length for DRY sampling (default: 2)", 2),
    "--dry-penalty-last-n": _s(
        "dry_penalty_last_n", "set DRY penalty for the last n tokens (default: 64, 0 = disable)", 64
    ),
    "--dry-sequence-breaker": _s(
        "dry_sequence_breaker",
        "add sequence breaker for DRY sampling, clearing out default "
        "breakers ('\\n', ':', '\"', '*') in the process; use \"none\" to not use any "
        "sequence breakers",
        action="append",
    ),
    "--adaptive-target": _s(
        "adaptive_target",
        "adaptive-p: select tokens near this probability (valid range 0.0 to "
        "1.0; negative = disabled) (default: -1.00)",
        -1.0,
        **_F,
    ),
    "--adaptive-decay": _s(
        "adaptive_decay",
        "adaptive-p: decay rate for target adaptation over time (valid range 0.0 to 0.99) (default: 0.90)",
        0.9,
        **_F,
    ),
    "--ignore-eos": _s(
        "ignore_eos", "ignore end of stream token and continue generating (implies --logit-bias EOS-inf)", False
    ),
    "--logit-bias": _s(
        "logit_bias",
        "modifies the likelihood of token appearing in the completion, i.e. `--logit-bias 15043+1`",
        action="append",
    ),
    "--backend-sampling": _s(
        "backend_sampling",
        "enable backend sampling (experimental) (default: disabled); mlxcel "
        "always runs b10621's CPU sampler chain, so this only sets the reported "
        "backend_sampling",
        False,
    ),
    "--grammar": _s(help="BNF-like grammar to constrain generations (see samples in grammars/ dir)", **_GRAMMAR),
    "--grammar-file": _s(help="file to read grammar from", **_GRAMMAR),
    "--json-schema": _s(
        help="JSON schema to constrain generations (https://json-schema.org/), e.g. `{}` for any JSON object",
        **_GRAMMAR,
    ),
    "--json-schema-file": _s(
        help="File containing a JSON schema to constrain generations "
        "(https://json-schema.org/), e.g. `{}` for any JSON object",
        **_GRAMMAR,
    ),
    # chat: how requests become prompts
    "--jinja": _s("jinja", "whether to use jinja template engine for chat (default: enabled)", True),
    "--chat-template": _s(
        help="set custom jinja chat template (default: template taken from model's metadata)", **_TEMPLATE
    ),
    "--chat-template-file": _s(
        help="set custom jinja chat template file (default: template taken from model's metadata)", **_TEMPLATE
    ),
    "--chat-template-kwargs": _s(
        help="sets additional params for the json template parser, must be a valid json object string", **_KWARGS
    ),
    "--reasoning": _s(
        help="Use reasoning/thinking in the chat ('on', 'off', or 'auto', default: 'auto' (detect from template))",
        **_KWARGS,
    ),
    "--reasoning-effort": _s(help="reasoning effort level given to the chat template (default: default)", **_KWARGS),
    "--reasoning-preserve": _s(
        help="preserve reasoning trace in the full history, not just the last assistant "
        "message (default: template default)",
        nargs=0,
        **_KWARGS,
    ),
    "--reasoning-format": _s(
        "reasoning_format",
        "controls whether thought tags are allowed and/or extracted from the response (default: auto)",
        "auto",
    ),
    "--reasoning-budget": _s(
        "reasoning_budget",
        "token budget for thinking: -1 for unrestricted, 0 for immediate end, N>0 for token budget (default: -1)",
        -1,
    ),
    "--reasoning-budget-message": _s(
        "reasoning_budget_message",
        "message injected before the end-of-thinking tag when reasoning budget is exhausted (default: none)",
        "",
    ),
    "--skip-chat-parsing": _s(
        "skip_chat_parsing",
        "force a pure content parser, even if a Jinja template is specified (default: disabled)",
        False,
    ),
    "--prefill-assistant": _s(
        "prefill_assistant",
        "whether to prefill the assistant's response if the last message "
        "is an assistant message (default: prefill enabled)",
        True,
    ),
    # transport, authentication, logging: parsed here, served by their own modules
    "--metrics": _s("metrics", "enable prometheus compatible metrics endpoint (default: disabled)", False),
    "--mmproj": _s(
        "mmproj",
        "path to a multimodal projector file; mlxcel serves LLaVA's (projector type mlp) beside a text model",
        "",
    ),
    "--mmproj-url": _s(
        "mmproj_url",
        "URL to a multimodal projector file, fetched into --mmproj's path (default: the llama.cpp cache directory)",
        "",
    ),
    "--mmproj-auto": _s(
        "mmproj_auto",
        "whether to use multimodal projector file (if available), useful when using -hf (default: enabled)",
        True,
    ),
    "--media-path": _s("media_path", "directory for loading local media files; file:// URLs resolve under it", ""),
    "--slot-save-path": _s(
        "slot_save_path",
        "path to save slot kv cache (default: disabled); mlxcel saves the "
        "slot's tokens, bound to the model, and recomputes their cache on restore",
        "",
    ),
    "--sleep-idle-seconds": _s(
        "sleep_idle_seconds",
        "number of seconds of idleness after which the server will sleep (default: -1; -1 = disabled)",
        -1,
    ),
    "--embedding": _s(
        "embedding",
        "restrict to only support embedding use case; use only with dedicated embedding "
        "models (default: disabled); mlxcel embeds with BERT-family encoders",
        False,
    ),
    "--rerank": _s(
        "reranking",
        "enable reranking endpoint on server (default: disabled); mlxcel ranks with BERT-family cross-encoders",
        False,
    ),
    "--pooling": _s("pooling", "pooling type for embeddings, use model default if unspecified"),
    "--embd-normalize": _s(
        "embd_normalize",
        "normalisation for embeddings (default: 2) (-1=none, 0=max absolute int16, 1=taxicab, 2=euclidean, >2=p-norm)",
        2,
    ),
    "--host": _s(
        "host",
        "ip address to listen, or bind to an UNIX socket if the address ends with .sock (default: 127.0.0.1)",
        "127.0.0.1",
    ),
    "--port": _s("port", "port to listen (default: 8080)", 8080),
    "--timeout": _s("timeout", "server read/write timeout in seconds (default: 3600)", 3600),
    "--kv-unified": _s(
        "kv_unified",
        "use single unified KV buffer shared across all sequences: each slot has the whole context "
        "(default: enabled if number of slots is auto)",
    ),
    "--check-tensors": _s(
        "check_tensors",
        "check model tensor data for invalid values (default: false): NaN or infinity stops the load",
        False,
    ),
    "--numa": _s(
        "numa",
        "attempt optimizations that help on some NUMA systems: distribute (workers spread over the nodes), "
        "isolate (on this thread's node), numactl (on numactl's CPUs); nothing on one node",
    ),
    "--ui": _s(
        "ui",
        "whether to enable the Web UI (default: enabled); mlxcel serves llama.cpp's UI as `mlxcel webui` built it",
        True,
    ),
    "--ui-config": _s("ui_config", "JSON that provides default UI settings (overrides UI defaults)"),
    "--ui-config-file": _s("ui_config_file", "JSON file that provides default UI settings (overrides UI defaults)"),
    "--log-prompts-dir": _s(
        "log_prompts_dir",
        "Log prompts to directory (auto-created if not present; only used for debugging, default: disabled)",
    ),
    "--list-devices": _s("list_devices", "print list of available devices and exit", False),
    # the CPU thread pool (server/cpu_threads.py): sized, placed and prioritised as b10621's threadpools
    "--threads": _s("threads", "number of CPU threads to use during generation (default: every core)"),
    "--threads-batch": _s(
        "threads_batch", "number of threads to use during batch and prompt processing (default: same as -t)"
    ),
    "--spec-draft-threads": _s(
        "spec_draft_threads",
        "number of threads to use during generation (default: same as --threads); the draft model's steps",
    ),
    "--spec-draft-threads-batch": _s(
        "spec_draft_threads_batch",
        "number of threads to use during batch and prompt processing (default: same as --threads-draft); the "
        "draft model's prompt rows",
    ),
    "--cpu-mask": _s(
        help='CPU affinity mask: arbitrarily long hex. Complements cpu-range (default: "")',
        dest="cpu_mask_args",
        action=_Ordered,
    ),
    "--cpu-range": _s(help="range of CPUs for affinity. Complements -C", dest="cpu_mask_args", action=_Ordered),
    "--cpu-strict": _s("cpu_strict", "use strict CPU placement (default: 0)"),
    "--prio": _s(
        "prio", "set process/thread priority : low(-1), normal(0), medium(1), high(2), realtime(3) (default: 0)"
    ),
    "--poll": _s("poll", "use polling level to wait for work (0 - no polling, default: 50)"),
    "--cpu-mask-batch": _s(
        help="CPU affinity mask for prompts (mlxcel's one pool: -C's where given)",
        dest="cpu_mask_batch_args",
        action=_Ordered,
    ),
    "--cpu-range-batch": _s(
        help="ranges of CPUs for affinity for prompts (mlxcel's one pool: the same range)",
        dest="cpu_mask_batch_args",
        action=_Ordered,
    ),
    "--cpu-strict-batch": _s("cpu_strict_batch", "use strict CPU placement for prompts (default: the plain option's)"),
    "--prio-batch": _s("prio_batch", "set process/thread priority for prompts (default: the plain option's)"),
    "--poll-batch": _s("poll_batch", "use polling to wait for work for prompts (default: the plain option's)"),
    "--threads-http": _s("threads_http", "number of threads used to process HTTP requests (default: -1)", -1),
    "--api-prefix": _s("api_prefix", "prefix path the server serves from, without the trailing slash (default: )", ""),
    "--reuse-port": _s("reuse_port", "allow multiple sockets to bind to the same port (default: disabled)", False),
    "--ssl-key-file": _s("ssl_key_file", "path to file a PEM-encoded SSL private key", ""),
    "--ssl-cert-file": _s("ssl_cert_file", "path to file a PEM-encoded SSL certificate", ""),
    "--cors-origins": _s(
        "cors_origins",
        "comma-separated list of allowed origins for CORS (default: *); if set to "
        "special value 'localhost', reflect the Origin header only if it is localhost",
        "*",
    ),
    "--cors-methods": _s(
        "cors_methods",
        "comma-separated list of allowed methods for CORS (default: GET, POST, DELETE, OPTIONS)",
        "GET, POST, DELETE, OPTIONS",
    ),
    "--cors-headers": _s("cors_headers", "comma-separated list of allowed headers for CORS (default: *)", "*"),
    "--cors-credentials": _s("cors_credentials", "whether to allow credentials for CORS (default: enabled)", True),
    "--sse-ping-interval": _s(
        "sse_ping_interval", "server SSE ping interval in seconds (-1 = disabled, default: 30)", 30
    ),
    "--api-key": _s(
        "api_key",
        "API key to use for authentication, multiple keys can be provided as a comma-separated list (default: none)",
        [],
        action=_CsvAppend,
    ),
    "--api-key-file": _s(
        "api_key_file",
        "path to file containing API keys, one per line; lines starting with a "
        "hash are treated as comments (default: none)",
        type=_openable,
        action="append",
    ),
    "--log-disable": _s("log_disable", "Log disable", False),
    "--log-file": _s("log_file", "Log to file"),
    "--log-colors": _s(
        "log_colors",
        "Set colored logging ('on', 'off', or 'auto', default: 'auto'); 'auto' enables "
        "colors when output is to a terminal",
        "auto",
        type=_log_colors,
    ),
    "--log-prefix": _s("log_prefix", "Enable prefix in log messages", True),
    "--log-timestamps": _s("log_timestamps", "Enable timestamps in log messages", True),
    "--verbose": _s("verbose", "Set verbosity level to infinity (i.e. log all messages, useful for debugging)", False),
    "--verbosity": _s(
        "verbosity",
        "Set the verbosity threshold. Messages with a higher verbosity will be ignored "
        "(0: generic output, 1: error, 2: warning, 3: info, 4: trace, 5: debug) (default: 3)",
        3,
    ),
}


class CompatParser(argparse.ArgumentParser):
    """parse_args reads the command line and the environment as b10621 does (parse.py); a parse error is
    b10621's sentence on stderr and exit status 1."""

    def parse_args(self, args=None, namespace=None):
        try:
            ns = parse(self, list(sys.argv[1:] if args is None else args), os.environ)
        except ArgError as e:
            self.exit(1, f"{e}\n")
        if ns.help:  # after the whole line parsed, as b10621 prints its usage
            self.print_help()
            self.exit(0)
        if ns.completion_bash:
            # deferred: introspect's importlib.metadata (~15 ms), which --help must not pay for
            from .introspect import completion_bash

            print(completion_bash(self, self.prog), end="")
            self.exit(0)
        return ns


def _dest(option_id: str) -> str:
    return option_id.lstrip("-").replace("-", "_").replace(".", "_")


def _accepted_help(o) -> str:
    """--help for an option classified at startup (server/cli/classify.py): shown, with the values mlxcel accepts
    and what it does with them, where it accepts some; hidden where every use is refused."""
    rule = RULES.get(o.id)
    if rule is None or rule.inert_text in ("", "none"):
        return argparse.SUPPRESS
    return f"{o.help.rstrip()} [mlxcel: {rule.inert_text}]".replace("%", "%%")


def build_parser(prog: str) -> CompatParser:
    p = CompatParser(
        prog=prog,
        add_help=False,
        usage=f"{prog} [options]",
        description="mlxcel: an MLX-backed llama-server (b10621). Every b10621 option parses; the ones "
        "listed here are served, the others are accepted only where their value changes "
        "nothing and otherwise refused at startup with the reason.",
    )
    for o in OPTIONS:
        kw = dict(MLXCEL.get(o.id) or {"dest": _dest(o.id), "default": None, "help": _accepted_help(o)})
        kw.setdefault("action", {"void": "store_true", "bool": _NegatableFlag}.get(o.kind, "store"))
        if o.kind == "str_str":
            kw["nargs"] = 2
        if o.metavar and kw["action"] not in ("store_true", _NegatableFlag) and kw.get("nargs") != 0:
            kw["metavar"] = o.metavar if o.kind == "str_str" else o.metavar[0]
        if o.env and kw["help"] != argparse.SUPPRESS:
            kw["help"] += f" (env: {o.env})"
        action = p.add_argument(*o.spellings, *o.negatives, **kw)
        action.option, action.env, action.declared_default = o, o.env, kw["default"]
    # mlxcel's own (no b10621 spelling): where the model store lives
    p.add_argument(
        "--model-store-root",
        dest="model_store_root",
        default=None,
        metavar="DIR",
        help="mlxcel's model store: <owner>/<name> snapshots, GET /models's cache source (default: "
        "$MLXCEL_MODELS_DIR, else the cache's models/)",
    )
    p.add_argument(
        "--lora-fuse",
        dest="lora_fuse",
        action="store_true",
        help="mlxcel's own: bake the --lora adapters into the weights at their starting scales (no cost "
        "per token; the scales are then fixed: POST /lora-adapters and a request's lora are refused)",
    )
    for flag, split in (("--tp-size", "tensor"), ("--pp-size", "pipeline")):  # launched by mlx.launch only
        p.add_argument(
            flag,
            dest=flag[2:].replace("-", "_"),
            type=int,
            default=None,
            metavar="N",
            help=f"mlxcel's own: the model split over N ranks started by mlx.launch, {split} parallel "
            "(default: tensor parallel over every rank; docs/scaling-out.md)",
        )
    p.add_argument(
        "--estimate-memory",
        dest="estimate_memory",
        action="store_true",
        help="mlxcel's own: print the resident memory this command line takes at its peak (weights, KV cache at "
        "-c/-np and the cache types, compute buffers) and exit; where b10621's --fit on sizes to the device",
    )
    p.add_argument(DUMP_FLAG, action="store_true", help=argparse.SUPPRESS)
    return p
