"""The b10621 options mlxcel parses today. Spellings, env bindings and defaults as in common/arg.cpp."""

from __future__ import annotations

import argparse
import os

from .surface import DUMP_FLAG


def _env_default(var: str, default, cast=str):
    raw = os.environ.get(var)
    return default if raw is None else cast(raw)


def _env_flag(raw: str) -> bool:
    """A value-less flag's environment binding fires only for these values (common/arg.cpp)."""
    return raw.strip().lower() in ("on", "enabled", "true", "1")


def _env_bool(raw: str) -> bool:
    """common/arg.cpp's boolean environment values."""
    value = raw.strip().lower()
    if value in ("1", "true", "on", "enabled", "yes"):
        return True
    if value in ("0", "false", "off", "disabled", "no"):
        return False
    raise ValueError(f"invalid boolean value '{raw}'")


class _NegatableFlag(argparse.Action):
    """A flag with positive and negative spellings (-cb/--cont-batching, -nocb/--no-cont-batching)."""

    def __init__(self, option_strings, dest, type=None, **kw):  # noqa: A002 - argparse's keyword
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not (option_string.startswith("-no") or option_string.startswith("--no-")))


def _add(p: argparse.ArgumentParser, *spellings: str, env: str | None = None, **kw) -> None:
    """Add an option; `env` names its LLAMA_ARG_* binding (read here, recorded for --dump-flag-surface)."""
    declared = kw.get("default")
    if env is not None and kw.get("action") is _Ordered:  # read by _ordered_env_defaults
        kw["help"] = f"{kw.get('help', '')} (env: {env})".strip()
    elif env is not None:
        kw["default"] = _env_default(env, declared, kw.get("type") or str)
        kw["help"] = f"{kw.get('help', '')} (env: {env})".strip()
    action = p.add_argument(*spellings, **kw)
    action.env = env
    action.declared_default = declared  # what --dump-flag-surface reports, whatever the environment says


def _stof(raw: str) -> float:
    """std::stof: the longest leading number; none is an error."""
    import re

    m = re.match(r"\s*[+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", raw, re.IGNORECASE)
    if not m:
        raise ValueError(f"invalid float '{raw}'")
    return float(m.group(0))


def _seed(raw: str) -> int:
    """std::stoul, folded into b10621's uint32 seed: -1 is the random sentinel 4294967295."""
    return int(raw.strip(), 0 if raw.strip().lower().startswith("0x") else 10) % 2**32


def _sampling_options(p: argparse.ArgumentParser) -> None:
    """The server's default sampler settings (common/arg.cpp's sampling section)."""
    _add(p, "-s", "--seed", type=_seed, default=0xFFFFFFFF, help="RNG seed (default: -1, use random seed for -1)")
    _add(p, "--samplers", default=None,
         help="samplers used for generation in order, separated by ';' "
              "(default: penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)")
    _add(p, "--sampler-seq", "--sampling-seq", default=None,
         help="simplified sequence for samplers that will be used (default: edskypmxt)")
    _add(p, "--temp", "--temperature", type=_stof, default=0.8, help="temperature (default: 0.80)")
    _add(p, "--top-k", env="LLAMA_ARG_TOP_K", type=int, default=40, help="top-k sampling (default: 40, 0 = disabled)")
    _add(p, "--top-p", type=_stof, default=0.95, help="top-p sampling (default: 0.95, 1.0 = disabled)")
    _add(p, "--min-p", type=_stof, default=0.05, help="min-p sampling (default: 0.05, 0.0 = disabled)")
    _add(p, "--top-nsigma", "--top-n-sigma", type=_stof, default=-1.0,
         help="top-n-sigma sampling (default: -1.00, -1.0 = disabled)")
    _add(p, "--xtc-probability", type=_stof, default=0.0, help="xtc probability (default: 0.00, 0.0 = disabled)")
    _add(p, "--xtc-threshold", type=_stof, default=0.1, help="xtc threshold (default: 0.10, 1.0 = disabled)")
    _add(p, "--typical", "--typical-p", type=_stof, default=1.0,
         help="locally typical sampling, parameter p (default: 1.00, 1.0 = disabled)")
    _add(p, "--repeat-last-n", type=int, default=64,
         help="last n tokens to consider for penalize (default: 64, 0 = disabled, -1 = ctx_size)")
    _add(p, "--repeat-penalty", type=_stof, default=1.0,
         help="penalize repeat sequence of tokens (default: 1.00, 1.0 = disabled)")
    _add(p, "--presence-penalty", type=_stof, default=0.0,
         help="repeat alpha presence penalty (default: 0.00, 0.0 = disabled)")
    _add(p, "--frequency-penalty", type=_stof, default=0.0,
         help="repeat alpha frequency penalty (default: 0.00, 0.0 = disabled)")
    _add(p, "--dynatemp-range", type=_stof, default=0.0, help="dynamic temperature range (default: 0.00, 0.0 = disabled)")
    _add(p, "--dynatemp-exp", type=_stof, default=1.0, help="dynamic temperature exponent (default: 1.00)")
    _add(p, "--mirostat", type=int, default=0,
         help="use Mirostat sampling (default: 0, 0 = disabled, 1 = Mirostat, 2 = Mirostat 2.0)")
    _add(p, "--mirostat-lr", type=_stof, default=0.1, help="Mirostat learning rate, parameter eta (default: 0.10)")
    _add(p, "--mirostat-ent", type=_stof, default=5.0, help="Mirostat target entropy, parameter tau (default: 5.00)")
    _add(p, "--dry-multiplier", type=_stof, default=0.0, help="set DRY sampling multiplier (default: 0.00, 0.0 = disabled)")
    _add(p, "--dry-base", type=_stof, default=1.75, help="set DRY sampling base value (default: 1.75)")
    _add(p, "--dry-allowed-length", type=int, default=2, help="set allowed length for DRY sampling (default: 2)")
    _add(p, "--dry-penalty-last-n", type=int, default=64,
         help="set DRY penalty for the last n tokens (default: 64, 0 = disable)")
    _add(p, "--dry-sequence-breaker", action="append", default=None,
         help="add sequence breaker for DRY sampling, clearing out default breakers ('\\n', ':', '\"', '*') in the "
              "process; use \"none\" to not use any sequence breakers")
    _add(p, "--adaptive-target", type=_stof, default=-1.0,
         help="adaptive-p: select tokens near this probability (valid range 0.0 to 1.0; negative = disabled) "
              "(default: -1.00)")
    _add(p, "--adaptive-decay", type=_stof, default=0.9,
         help="adaptive-p: decay rate for target adaptation over time (valid range 0.0 to 0.99) (default: 0.90)")
    _add(p, "--ignore-eos", action="store_true", default=False,
         help="ignore end of stream token and continue generating (implies --logit-bias EOS-inf)")
    _add(p, "-l", "--logit-bias", action="append", default=None,
         help="modifies the likelihood of token appearing in the completion, i.e. `--logit-bias 15043+1`")
    _add(p, "-bs", "--backend-sampling", env="LLAMA_ARG_BACKEND_SAMPLING", action=_NegatableFlag, default=False,
         type=_env_flag, help="enable backend sampling (experimental) (default: disabled); mlxcel always runs "
                              "b10621's CPU sampler chain, so this only sets the reported backend_sampling")
    # b10621 runs these handlers in command-line order and the last one sets the grammar: one ordered list
    _add(p, "--grammar", dest="grammar_args", action=_Ordered, default=None,
         help="BNF-like grammar to constrain generations (see samples in grammars/ dir)")
    _add(p, "--grammar-file", dest="grammar_args", action=_Ordered, default=None, metavar="FNAME",
         help="file to read grammar from")
    _add(p, "-j", "--json-schema", dest="grammar_args", action=_Ordered, default=None, metavar="SCHEMA",
         help="JSON schema to constrain generations (https://json-schema.org/), e.g. `{}` for any JSON object")
    _add(p, "-jf", "--json-schema-file", dest="grammar_args", action=_Ordered, default=None, metavar="FILE",
         help="File containing a JSON schema to constrain generations (https://json-schema.org/), e.g. `{}` for "
              "any JSON object")


class _Ordered(argparse.Action):
    """Record (long spelling, spelling given, value) in command-line order on a list shared by several
    options; values from the environment are replaced by any given on the command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = getattr(namespace, self.dest) or []
        if isinstance(seen, _FromEnv):
            seen = []
        setattr(namespace, self.dest, [*seen, (self.option_strings[-1], option_string, values)])


class _FromEnv(list):
    """An _Ordered list that came from LLAMA_ARG_* variables."""


def _ordered_env_defaults(p: argparse.ArgumentParser, dest: str) -> None:
    """The environment values of every option sharing `dest`, as one _Ordered list."""
    found = _FromEnv()
    for action in p._actions:
        if action.dest == dest and getattr(action, "env", None) and os.environ.get(action.env) is not None:
            found.append((action.option_strings[-1], action.env, os.environ[action.env]))
    p.set_defaults(**{dest: found or None})


def _chat_options(p: argparse.ArgumentParser) -> None:
    """How chat requests become prompts (common/arg.cpp's chat-template options)."""
    _add(p, "--jinja", "--no-jinja", env="LLAMA_ARG_JINJA", action=_NegatableFlag, default=True, type=_env_bool,
         help="whether to use jinja template engine for chat (default: enabled); mlxcel renders with Jinja only")
    _add(p, "--chat-template", env="LLAMA_ARG_CHAT_TEMPLATE", dest="chat_template_args", action=_Ordered,
         default=None, metavar="JINJA_TEMPLATE",
         help="set custom jinja chat template (default: template taken from model's metadata)")
    _add(p, "--chat-template-file", env="LLAMA_ARG_CHAT_TEMPLATE_FILE", dest="chat_template_args",
         action=_Ordered, default=None, metavar="JINJA_TEMPLATE_FILE",
         help="set custom jinja chat template file (default: template taken from model's metadata)")
    _ordered_env_defaults(p, "chat_template_args")
    # these four write the same template-kwargs map upstream, handler by handler: one ordered list
    _add(p, "--chat-template-kwargs", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", dest="template_kwargs_args",
         action=_Ordered, default=None, metavar="STRING",
         help="sets additional params for the json template parser, must be a valid json object string")
    _add(p, "-rea", "--reasoning", env="LLAMA_ARG_REASONING", dest="template_kwargs_args", action=_Ordered,
         default=None, metavar="[on|off|auto]",
         help="Use reasoning/thinking in the chat ('on', 'off', or 'auto', default: 'auto' (detect from template))")
    _add(p, "--reasoning-effort", env="LLAMA_ARG_REASONING_EFFORT", dest="template_kwargs_args", action=_Ordered,
         default=None, metavar="LEVEL", help="reasoning effort level given to the chat template (default: default)")
    _add(p, "--reasoning-preserve", "--no-reasoning-preserve", env="LLAMA_ARG_REASONING_PRESERVE",
         dest="template_kwargs_args", action=_Ordered, nargs=0, default=None,
         help="preserve reasoning trace in the full history, not just the last assistant message "
              "(default: template default)")
    _ordered_env_defaults(p, "template_kwargs_args")
    _add(p, "--reasoning-format", env="LLAMA_ARG_THINK", default="auto", metavar="FORMAT",
         help="controls whether thought tags are allowed and/or extracted from the response (default: auto)")
    _add(p, "--reasoning-budget", env="LLAMA_ARG_THINK_BUDGET", type=int, default=-1, metavar="N",
         help="token budget for thinking: -1 for unrestricted, 0 for immediate end, N>0 for token budget "
              "(default: -1)")
    _add(p, "--reasoning-budget-message", env="LLAMA_ARG_THINK_BUDGET_MESSAGE", default="", metavar="MESSAGE",
         help="message injected before the end-of-thinking tag when reasoning budget is exhausted (default: none)")
    _add(p, "--skip-chat-parsing", "--no-skip-chat-parsing", env="LLAMA_ARG_SKIP_CHAT_PARSING",
         action=_NegatableFlag, default=False, type=_env_bool,
         help="force a pure content parser, even if a Jinja template is specified (default: disabled)")
    _add(p, "--prefill-assistant", "--no-prefill-assistant", env="LLAMA_ARG_PREFILL_ASSISTANT",
         action=_NegatableFlag, default=True, type=_env_bool,
         help="whether to prefill the assistant's response if the last message is an assistant message "
              "(default: prefill enabled)")


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="mlxcel: an MLX-backed llama-server (b10621)")
    _add(p, "-m", "--model", env="LLAMA_ARG_MODEL", default=None,
         help="model: an MLX checkpoint directory or a model store name")
    _add(p, "-a", "--alias", env="LLAMA_ARG_ALIAS", default=None, help="model name reported in responses")
    _add(p, "--host", env="LLAMA_ARG_HOST", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    _add(p, "--port", env="LLAMA_ARG_PORT", type=int, default=8080, help="port to listen on (default: 8080)")
    _add(p, "-c", "--ctx-size", env="LLAMA_ARG_CTX_SIZE", type=int, default=0,
         help="size of the prompt context (default: 0, 0 = loaded from model)")
    _add(p, "-np", "--parallel", env="LLAMA_ARG_N_PARALLEL", type=int, default=-1,
         help="number of server slots (default: -1, -1 = auto)")
    _add(p, "-b", "--batch-size", env="LLAMA_ARG_BATCH", type=int, default=2048,
         help="logical maximum batch size (default: 2048)")
    _add(p, "-cb", "--cont-batching", "-nocb", "--no-cont-batching", env="LLAMA_ARG_CONT_BATCHING",
         action=_NegatableFlag, default=True, type=_env_bool,
         help="whether to enable continuous batching (a.k.a dynamic batching) (default: enabled)")
    _add(p, "-ub", "--ubatch-size", env="LLAMA_ARG_UBATCH", type=int, default=512,
         help="physical maximum batch size (default: 512)")
    _add(p, "--cache-prompt", "--no-cache-prompt", env="LLAMA_ARG_CACHE_PROMPT", action=_NegatableFlag,
         default=True, type=_env_bool, help="whether to enable prompt caching (default: enabled)")
    _add(p, "-cram", "--cache-ram", env="LLAMA_ARG_CACHE_RAM", type=int, default=8192,
         help="set the maximum cache size in MiB (default: 8192, -1 - no limit, 0 - disable)")
    _add(p, "--context-shift", "--no-context-shift", env="LLAMA_ARG_CONTEXT_SHIFT", action=_NegatableFlag,
         default=False, type=_env_bool,
         help="whether to use context shift on infinite text generation (default: disabled)")
    _add(p, "--keep", type=int, default=0,
         help="number of tokens to keep from the initial prompt (default: 0, -1 = all)")
    _add(p, "--sse-ping-interval", env="LLAMA_ARG_SSE_PING_INTERVAL", type=int, default=30,
         help="server SSE ping interval in seconds (-1 = disabled, default: 30)")
    _add(p, "-n", "--predict", "--n-predict", env="LLAMA_ARG_N_PREDICT", type=int, default=-1,
         help="number of tokens to predict (default: -1, -1 = infinity)")
    _add(p, "-r", "--reverse-prompt", action="append", default=None,
         help="halt generation at PROMPT (repeatable); the server's default stop strings")
    _add(p, "-sp", "--special", action="store_true", default=False,
         help="special tokens output enabled (default: false)")
    _sampling_options(p)
    _chat_options(p)
    _add(p, "--slots", "--no-slots", env="LLAMA_ARG_ENDPOINT_SLOTS", action=_NegatableFlag, default=True,
         type=_env_bool, help="expose slots monitoring endpoint (default: enabled)")
    _add(p, "--props", env="LLAMA_ARG_ENDPOINT_PROPS", action=_NegatableFlag, default=False, type=_env_flag,
         help="enable changing global properties via POST /props (default: disabled)")
    p.add_argument(DUMP_FLAG, action="store_true", help=argparse.SUPPRESS)
    return p
