"""First-time placement of entries into shards, with their owning issue (used by `extract --classify`).

Existing entries are never moved: the extractor preserves policy by id, and anything new upstream goes
to _unclassified.json unless `--classify` asks for these rules. Order matters: the first match wins.
"""

from __future__ import annotations

import re

# our tracker's issue numbers (compat/llama-server/b10621/issues.json has titles and states)
(
    FOUNDATIONS,
    MANIFEST,
    ORACLE,
    ENGINE,
    SAMPLING,
    CHAT,
    CLI,
    PERF,
    RELIABILITY,
    EMBEDDINGS,
    OPERATIONS,
    ROUTER,
    SPECULATIVE,
) = 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14

_OPTION_RULES: tuple[tuple[str, str, int], ...] = (
    (r"^--api-key", "authentication", CLI),
    (
        r"^--(host|port|reuse-port|api-prefix|ssl-|cors-|timeout$|threads-http|sse-ping-interval)",
        "transport-tls-cors",
        CLI,
    ),
    (r"^--(log-|verbose|verbosity|offline-log|help|version|completion-bash)|-default$", "logging-and-presets", CLI),
    (r"^--(lora|control-vector)", "lora-adapters", ROUTER),
    (r"^--(models-)", "router-models", ROUTER),
    (r"^--(spec-|draft|lookup-cache)", "speculative", SPECULATIVE),
    (r"^--(mmproj|image-|mtmd-|media-path)", "multimodal-and-audio", SPECULATIVE),
    (r"^--(embedding|rerank|pooling|embd-normalize)", "embeddings-and-rerank", EMBEDDINGS),
    (r"^--(jinja|chat-template|reasoning|skip-chat-parsing|prefill-assistant)", "chat-templates", CHAT),
    (r"^--(ui|webui|tools|mcp-|agent|path$)", "ui-tools-mcp-gcp", CLI),
    (r"^--(metrics|props|slots|slot-save-path|sleep-idle-seconds)", "observability-and-slots", OPERATIONS),
    (r"^--(model$|model-url|docker-repo|hf-|offline$|alias|tags|override-kv|cache-list)", "model-source", CLI),
    (
        r"^--(samplers|seed|sampler-seq|ignore-eos|temp|top-|min-p|xtc-|typical|repeat-|presence-|frequency-|dry-|"
        r"adaptive-|dynatemp-|mirostat|logit-bias|grammar|json-schema|backend-sampling)",
        "sampling-and-grammar",
        SAMPLING,
    ),
    (
        r"^--(threads|cpu-|prio|poll|numa|device|list-devices|override-tensor|cpu-moe|n-cpu-moe|gpu-layers|split-mode|"
        r"tensor-split|main-gpu|fit|check-tensors|op-offload|rpc|mlock|mmap|direct-io|load-mode|repack|no-host|"
        r"kv-offload|flash-attn|perf)",
        "ggml-runtime",
        CLI,
    ),
    (r"^--(rope-|yarn-)", "runtime-and-context", SPECULATIVE),
    (r".", "runtime-and-context", ENGINE),
)

_ROUTE_RULES: tuple[tuple[str, str, int], ...] = (
    (r"^(POST|DELETE) /models$|^POST /models/|^GET /models/sse$", "router-models", ROUTER),
    (r" /v1/stream|/v1/streams/|/v1/chat/completions/control$", "streams-and-realtime", OPERATIONS),
    (r"/audio/transcriptions$", "multimodal-and-audio", SPECULATIVE),
    (r" /(v1/)?(embedding|embeddings|rerank|reranking)$", "embeddings-and-rerank", EMBEDDINGS),
    (r" /lora-adapters$", "lora-adapters", ROUTER),
    (r" /(metrics|slots|slots/:id_slot|props)$", "observability-and-slots", OPERATIONS),
    (r" /(cors-proxy|tools|predict|index\.html)$|^GET /$", "ui-tools-mcp-gcp", CLI),
    (r" /(v1/)?models$", "routes", ROUTER),
    (r"chat/completions|responses|messages|apply-template", "routes", CHAT),
    (r".", "routes", ENGINE),
)

_FIELD_RULES: tuple[tuple[str, str, int], ...] = (
    (
        r"^field:(top_|min_p|xtc_|typical_p|temperature|dynatemp_|repeat_|frequency_|presence_|dry_|mirostat|"
        r"adaptive_|seed|n_probs|min_keep|backend_sampling|post_sampling_probs|json_schema|grammar|logit_bias|"
        r"ignore_eos|stop$|samplers|preserved_tokens)",
        "sampling-and-grammar",
        SAMPLING,
    ),
    (
        r"^field:(chat_format|reasoning_format|generation_prompt|parse_tool_calls|chat_parser|continue_final_message|"
        r"echo|reasoning_budget|message_delimiters)",
        "chat-templates",
        CHAT,
    ),
    (r"^field:reasoning_control$", "streams-and-realtime", OPERATIONS),
    (r"^field:lora$", "lora-adapters", ROUTER),
    (r"^field:speculative\.", "speculative", SPECULATIVE),
    (r".", "runtime-and-context", ENGINE),
)

_RULES = {"option": _OPTION_RULES, "route": _ROUTE_RULES, "native_request_field": _FIELD_RULES}


def classify(entry: dict) -> tuple[str, int]:
    """(shard, owning issue) for a new entry."""
    key = entry["id"]
    for pattern, shard, issue in _RULES[entry["kind"]]:
        if re.search(pattern, key):
            return shard, issue
    raise AssertionError("the last rule matches everything")
