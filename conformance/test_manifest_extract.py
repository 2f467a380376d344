"""The extractor, run against the reference build and its pinned sources, reproduces the committed
manifest exactly (twice), and its counts match pin.json's rules."""

from __future__ import annotations

import shutil

import pytest

from compat import extract
from compat.schema import MANIFEST_DIR, load_json

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def sources():
    from oracle.reference import SDIST_NAME, source_tree
    from server.cachedir import cache_root

    return source_tree(), cache_root() / "reference" / SDIST_NAME


def _tree(d):
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.json"))}


def test_extractor_twice_leaves_the_manifest_unchanged(reference_binary, sources, tmp_path):
    src, sdist = sources
    work = tmp_path / "manifest"
    shutil.copytree(MANIFEST_DIR, work)
    extract.verify_sdist(sdist, src)
    for _ in range(2):
        placed = extract.extract(reference_binary, src, work, classify_new=False)
        assert placed["_unclassified"] == 0
        assert _tree(work) == _tree(MANIFEST_DIR)


def test_counts_follow_the_rules_written_in_pin(reference_binary, sources):
    src, _ = sources
    counts = extract.counts(extract.collect_facts(reference_binary, src))
    assert (counts["help_entries"], counts["long_option_spellings"], counts["short_option_spellings"]) == (249, 323, 84)
    assert counts["llama_environment_variables"] == 134
    assert counts["other_environment_variables"] == ["HF_TOKEN", "MTMD_BACKEND_DEVICE"]
    assert (counts["routes"], counts["native_request_fields"]) == (53, 70)
    assert load_json(MANIFEST_DIR / "pin.json")["counts"] == counts


def test_a_new_upstream_entry_lands_in_unclassified(reference_binary, sources, tmp_path):
    src, _ = sources
    work = tmp_path / "manifest"
    shutil.copytree(MANIFEST_DIR, work)
    doc = load_json(work / "authentication.json")
    doc["entries"] = [e for e in doc["entries"] if e["id"] != "--api-key-file"]
    from compat.schema import dumps, shard_document

    (work / "authentication.json").write_text(dumps(shard_document("authentication", doc["entries"])))
    placed = extract.extract(reference_binary, src, work, classify_new=False)
    assert placed["_unclassified"] == 1
    assert [e["id"] for e in load_json(work / "_unclassified.json")["entries"]] == ["--api-key-file"]
    from compat.validate import validate

    assert any(v.rule == "unclassified" for v in validate(work))


def test_tampered_sources_are_refused(sources, tmp_path):
    src, sdist = sources
    fake = tmp_path / "src"
    for rel in extract.SOURCE_FILES:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, fake / rel)
    (fake / "tools/server/server.cpp").write_text("// not the pinned file\n")
    with pytest.raises(extract.ExtractError, match="is not the file the pinned sdist carries"):
        extract.verify_sdist(sdist, fake)
