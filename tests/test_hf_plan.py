"""-hf's choices as b10621's common/download.cpp and hf-cache.cpp make them (server/models/hf_download.py,
hf_cache.py): which GGUF a repository's listing yields, which names are repositories, where the cache is. The
downloads themselves are compared with b10621 on a loopback hub in conformance/test_hf_download.py."""

from __future__ import annotations

import pytest

from server.models import hf_cache
from server.models.hf_cache import HFFile
from server.models.hf_download import best_model, best_sibling, quant_bits, split_info, split_repo_tag


def _files(*paths: str) -> list[HFFile]:
    return [HFFile("o/r", p) for p in paths]


def test_the_default_is_q4_k_m_then_q8_0_then_the_first_model_file():
    files = _files("README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-f16.gguf")
    assert best_model(files, "").path == "m-Q4_K_M.gguf"
    assert best_model(_files("m-Q8_0.gguf", "m-F16.gguf"), "").path == "m-Q8_0.gguf"
    assert best_model(_files("mmproj-F16.gguf", "m.imatrix.gguf", "m-F16.gguf"), "").path == "m-F16.gguf"
    assert best_model(_files("mmproj-F16.gguf"), "") is None


def test_a_tag_matches_case_insensitively_before_a_dot_or_dash_and_never_falls_back():
    files = _files("m-Q4_K_M.gguf", "m-q8_0.gguf", "m-Q8_0_L.gguf")
    assert best_model(files, "Q8_0").path == "m-q8_0.gguf"
    assert best_model(files, "q4_k_m").path == "m-Q4_K_M.gguf"
    assert best_model(files, "Q5_K_M") is None


def test_a_split_model_is_named_by_its_first_part():
    files = _files("big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00001-of-00003.gguf")
    assert best_model(files, "").path == "big-Q4_K_M-00001-of-00003.gguf"
    assert split_info("big-Q4_K_M-00002-of-00003.gguf") == ("big-Q4_K_M", 2, 3)
    assert split_info("m-Q8_0.gguf") == ("m-Q8_0", 1, 1)


def test_repository_names_as_b10621_reads_them():
    assert split_repo_tag("ggml-org/x-GGUF:Q8_0") == ("ggml-org/x-GGUF", "Q8_0")
    assert split_repo_tag("ggml-org/x-GGUF") == ("ggml-org/x-GGUF", "")
    with pytest.raises(hf_cache.HFError, match="expected <user>/<model>"):
        split_repo_tag("just-a-name")
    assert hf_cache.valid_repo_id("ggml-org/gemma-3-1b-it-GGUF")
    for bad in ("a//b", "a/b/c", "-a/b", "a/b.", "a b/c", "a/.b"):
        assert not hf_cache.valid_repo_id(bad), bad


def test_the_cache_is_where_b10621_puts_it(monkeypatch, tmp_path):
    for var in ("LLAMA_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hf_cache.cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert hf_cache.cache_dir() == tmp_path / "x" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "h"))
    assert hf_cache.cache_dir() == tmp_path / "h" / "hub"
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "l"))
    assert hf_cache.cache_dir() == tmp_path / "l"
    assert hf_cache.repo_path("ggml-org/x").name == "models--ggml-org--x"


def test_a_split_model_is_refused_before_anything_is_fetched(monkeypatch):
    from server.models import hf_download

    parts = _files("big-Q4_K_M-00001-of-00002.gguf", "big-Q4_K_M-00002-of-00002.gguf")
    monkeypatch.setattr(hf_cache, "repo_files", lambda client, repo, token: parts)
    fetched = []
    monkeypatch.setattr(hf_download, "fetch", lambda *a: fetched.append(a))
    with pytest.raises(hf_cache.HFError, match=r"split into 2 GGUF files.*llama-gguf-split --merge"):
        hf_download.resolve("o/r", "", "", offline=False)
    assert fetched == []


def test_the_projector_is_the_sibling_b10621_picks():
    """find_best_sibling: in the model's directory or above it, the deepest first, then the nearest quant bits."""
    assert [quant_bits(p) for p in ("m-Q4_K_M.gguf", "mmproj-F16.gguf", "x.gguf", "m-bf16-00001-of-00002.gguf")] == [
        4,
        16,
        0,
        16,
    ]
    files = _files("m-Q4_K_M.gguf", "mmproj-m-f32.gguf", "mmproj-m-f16.gguf", "mmproj-m-q8_0.gguf")
    assert best_sibling(files, "m-Q4_K_M.gguf", "mmproj").path == "mmproj-m-q8_0.gguf"
    assert best_sibling(files[:3], "m-Q4_K_M.gguf", "mmproj").path == "mmproj-m-f16.gguf"
    nested = _files("q4/m-Q4_K_M.gguf", "mmproj-f16.gguf", "q4/mmproj-f32.gguf", "other/mmproj-q4.gguf")
    assert best_sibling(nested, "q4/m-Q4_K_M.gguf", "mmproj").path == "q4/mmproj-f32.gguf"  # deeper beats nearer
    assert best_sibling(nested, "m-Q4_K_M.gguf", "mmproj").path == "mmproj-f16.gguf"  # (not in a subdirectory)
    assert best_sibling(_files("m-Q4_K_M.gguf"), "m-Q4_K_M.gguf", "mmproj") is None
