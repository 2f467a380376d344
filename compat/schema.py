"""The manifest's schema (version 4): states, key orders, claim keys, shards, canonical serialization."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = 4
MANIFEST_DIR = Path(__file__).parent / "llama-server" / "b10621"
PIN_FILE = "pin.json"
ISSUES_FILE = "issues.json"
UNCLASSIFIED_FILE = "_unclassified.json"

STATES = ("supported", "aliased", "not_applicable", "deferred", "by_design")
HONEST_ALTERNATIVES = ("aliased", "not_applicable", "deferred", "by_design")
NEEDS_ISSUE = ("aliased", "not_applicable", "deferred")

FACT_KEYS = {
    "option": (
        "kind",
        "id",
        "section",
        "spellings",
        "long_spellings",
        "value_hint",
        "env",
        "default",
        "description",
        "discovery",
    ),
    "route": ("kind", "id", "method", "path", "source", "condition", "discovery"),
    "native_request_field": ("kind", "id", "field", "aliases", "parent", "field_type", "description", "discovery"),
}
POLICY_KEYS = ("state", "issue", "test", "notes", "divergence", "rationale", "mlxcel")
CLAIM_KEYS = (
    "accepted_spellings",
    "accepted_on_one_binary_only",
    "env",
    "env_binding",
    "env_test",
    "defaults",
    "hidden",
    "route",
    "field",
    "refusal_is_the_behaviour",
)
RATIONALE_KEYS = ("kind", "reason", "revisit_if")
RATIONALE_KINDS = ("architectural", "policy")

SHARDS = (
    "authentication",
    "chat-templates",
    "embeddings-and-rerank",
    "ggml-runtime",
    "logging-and-presets",
    "lora-adapters",
    "model-source",
    "multimodal-and-audio",
    "observability-and-slots",
    "router-models",
    "routes",
    "runtime-and-context",
    "sampling-and-grammar",
    "speculative",
    "streams-and-realtime",
    "transport-tls-cors",
    "ui-tools-mcp-gcp",
)


def entry_keys(kind: str) -> tuple[str, ...]:
    return FACT_KEYS[kind] + POLICY_KEYS


def sort_entries(entries: list[dict]) -> list[dict]:
    kind_order = {k: i for i, k in enumerate(FACT_KEYS)}
    return sorted(entries, key=lambda e: (kind_order.get(e.get("kind"), 99), e.get("id", "")))


def canonical_entry(entry: dict) -> dict:
    keys = entry_keys(entry["kind"]) if entry.get("kind") in FACT_KEYS else tuple(entry)
    return {k: entry[k] for k in keys if k in entry}


def dumps(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def shard_document(area: str, entries: list[dict]) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "area": area,
        "entries": [canonical_entry(e) for e in sort_entries(entries)],
    }


def load_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def shard_files(manifest_dir: Path) -> list[Path]:
    return sorted(p for p in manifest_dir.glob("*.json") if p.name not in (PIN_FILE, ISSUES_FILE))
