"""-hf against b10621: both servers on the same command line, each pointed (HF_ENDPOINT) at its own fake hub on
loopback serving the same repositories (GGUF twins of the families issue), each with its own empty cache
(LLAMA_CACHE). Compared per case: whether it serves or exits 1, what each asked the hub (paths, Range and
Authorization headers), the cache it left (b10621's Hugging Face layout, path for path), the model name it
reports, and the error line b10621 prints where it fails. The records are evidence for mlxcel-oracle verify."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from fixtures.families import quantized_gguf
from oracle import loopback
from oracle.evidence import write_record
from oracle.processes import ServerStartError, mlxcel_server, reference_server
from tests.fake_hub import FakeHub

pytestmark = pytest.mark.reference

TOKEN = "hf_" + "c" * 34
REPO, GATED = "ggml-org/tiny-GGUF", "acme/gated-GGUF"
DRAFT_REPO = "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF"  # the -spec presets' draft
# b10621's FIM presets (common/arg.cpp): the repository and file each fetches
FIM_PRESETS = {
    "--fim-qwen-1.5b-default": ("ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", "qwen2.5-coder-1.5b-q8_0.gguf"),
    "--fim-qwen-3b-default": ("ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", "qwen2.5-coder-3b-q8_0.gguf"),
    "--fim-qwen-7b-default": ("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "qwen2.5-coder-7b-q8_0.gguf"),
    "--fim-qwen-30b-default": (
        "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF",
        "qwen3-coder-30b-a3b-instruct-q8_0.gguf",
    ),
    "--fim-qwen-7b-spec": ("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "qwen2.5-coder-7b-q8_0.gguf"),
    "--fim-qwen-14b-spec": ("ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", "qwen2.5-coder-14b-q8_0.gguf"),
}


@pytest.fixture(scope="module")
def repos() -> dict[str, dict[str, bytes]]:
    # the smallest family twins (Gemma 2: 8 and 11 MB) under every name, the presets' included: what is compared
    # is which file is fetched, how and where, and the model each server then reports
    q4, q8 = quantized_gguf("gemma2", "Q4_K_M").read_bytes(), quantized_gguf("gemma2", "Q8_0").read_bytes()
    return {
        REPO: {"tiny-Q4_K_M.gguf": q4, "tiny-Q8_0.gguf": q8, "README.md": b"# tiny\n"},
        GATED: {"gated-Q8_0.gguf": q8},
        **{repo: {file: q8} for repo, file in FIM_PRESETS.values()},
        DRAFT_REPO: {"qwen2.5-coder-0.5b-q8_0.gguf": q4},
    }


VISION_REPO = "ggml-org/tiny-vision-GGUF"  # a text model beside two projectors (the LLaVA twin's, F32 and "F16")
SMOLVLM_REPO = "ggml-org/tiny-smolvlm-GGUF"  # a text model beside a projector of a type mlxcel refuses (idefics3)


@pytest.fixture(scope="module")
def vision_repos(repos) -> dict[str, dict[str, bytes]]:
    from fixtures.llava_twin import llava_mmproj
    from fixtures.projector import projector_gguf
    from fixtures.twins import twin

    projector = llava_mmproj().read_bytes()
    return {
        **repos,
        SMOLVLM_REPO: {
            "tiny-smolvlm-Q4_K_M.gguf": twin("q4_1").gguf.read_bytes(),
            "mmproj-tiny-smolvlm-f16.gguf": projector_gguf("idefics3").read_bytes(),
        },
        VISION_REPO: {
            "tiny-vision-Q4_K_M.gguf": twin("q4_1").gguf.read_bytes(),  # (SmolLM2: the projector's width)
            "mmproj-tiny-vision-f32.gguf": projector,
            "mmproj-tiny-vision-f16.gguf": projector,  # nearer the model's 4 bits: b10621 takes this one
        },
    }


class Side:
    """One server's runs: its cache (kept from run to run) and, per run, a fresh hub and what happened."""

    def __init__(self, name: str, repos: dict, cut: dict[str, int] | None = None):
        self.name, self.repos, self.cut = name, repos, dict(cut or {})
        self.cache = Path(tempfile.mkdtemp(prefix=f"mlxcel-hf-{name}-"))

    def run(self, binary: Path, args: list[str]) -> dict:
        with FakeHub(self.repos) as hub:
            hub.gated[GATED] = TOKEN
            hub.cut_after.update(self.cut)
            # "{hub}", "{cache}": this run's hub and this side's cache (a -mu URL, an -m path in the cache)
            args = [a.replace("{hub}", hub.url).replace("{cache}", str(self.cache)) for a in args]
            sp = reference_server(binary, None, args) if self.name == "reference" else mlxcel_server(None, args)
            sp.argv += ["--port", str(sp.port)]  # after the case's flags: a preset sets a port of its own
            sp.env.update(HF_ENDPOINT=hub.url, LLAMA_CACHE=str(self.cache))
            sp.env.pop("MLXCEL_MODELS_DIR", None)
            try:
                sp.start(timeout=120)
                served = True
                props = loopback.get(sp.base_url + "/props", timeout=30).json()
                alias = props["model_alias"].replace(str(self.cache), "{cache}")
                vision = bool((props.get("modalities") or {}).get("vision"))
                name = (alias, props["default_generation_settings"]["n_ctx"], props["total_slots"])
                ids = [
                    m["id"].replace(str(self.cache), "{cache}")
                    for m in loopback.get(sp.base_url + "/v1/models", timeout=30).json()["data"]
                ]
            except ServerStartError:
                served, name, ids, vision = False, None, None, None
            log = sp.log_path.read_text(errors="replace") if sp.log_path.is_file() else ""
            sp.cleanup()
            # (sorted: b10621 fetches a plan's files side by side, std::async, in no fixed order)
            requests, ranges = sorted(hub.requests, key=str), [r for _, r in hub.ranges]
        return {
            "served": served,
            "exit": sp.proc.returncode if sp.proc is not None else None,
            "model": name,
            "ids": ids,
            "vision": vision,
            "requests": requests,
            "ranges": ranges,
            "cache": sorted(
                p.relative_to(self.cache).as_posix() for p in self.cache.rglob("*") if p.is_file() or p.is_symlink()
            ),
            "log": log,
        }


def _pair(repos, reference_binary, args: list[str], sides=None) -> tuple[dict, dict]:
    ref, mine = sides or (Side("reference", repos), Side("mlxcel", repos))
    return ref.run(reference_binary, args), mine.run(reference_binary, args)


def _record(case: str, entries: list[str], want: dict, got: dict, keys: tuple[str, ...]) -> None:
    divergences = [{"path": f"$hf.{k}", "kind": "value"} for k in keys if want[k] != got[k]]
    write_record(
        {
            "case": f"hf-{case}",
            "entries": entries,
            "twin": "gemma2-gguf",
            "request": {"method": "STARTUP", "path": "-hf (hub on loopback)", "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": "live",
            "identical": not divergences,
            "bytes_identical": False,
            "normalizations_fired": [],
            "divergences": divergences,
            "reproduce": f"pytest conformance/test_hf_download.py -k {case.replace('-', '_')}",
        }
    )


COMPARED = ("served", "model", "ids", "requests", "ranges", "cache")


def test_fresh_download_picks_q4_k_m_then_offline_reads_the_cache(repos, reference_binary):
    ref, mine = Side("reference", repos), Side("mlxcel", repos)
    want, got = _pair(repos, reference_binary, ["-hf", REPO], (ref, mine))
    _record("fresh", ["--hf-repo"], want, got, COMPARED)
    assert want["served"] and [p for p in want["cache"] if p.endswith(".gguf")] == [
        f"models--ggml-org--tiny-GGUF/snapshots/{_commit()}/tiny-Q4_K_M.gguf"
    ]
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}
    assert os.path.islink(mine.cache / got["cache"][-1])  # the snapshot points at the blob, as b10621 leaves it
    again_want, again_got = _pair(repos, reference_binary, ["-hf", REPO, "--offline"], (ref, mine))
    _record("offline-cached", ["--hf-repo", "--offline"], again_want, again_got, COMPARED)
    assert again_want["served"] and again_want["requests"] == [] and again_want["cache"] == want["cache"]
    assert {k: again_got[k] for k in COMPARED} == {k: again_want[k] for k in COMPARED}


def test_a_quant_tag_and_a_file_pick_what_b10621_picks(repos, reference_binary):
    for case, args in (("tag", ["-hf", f"{REPO}:q8_0"]), ("file", ["-hf", REPO, "-hff", "tiny-Q8_0.gguf"])):
        want, got = _pair(repos, reference_binary, args)
        _record(case, ["--hf-repo", "--hf-file"] if case == "file" else ["--hf-repo"], want, got, COMPARED)
        assert want["served"] and any(p.endswith("tiny-Q8_0.gguf") for p in want["cache"])
        assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}, case


def test_a_broken_download_resumes_from_where_it_stopped(repos, reference_binary):
    cut = {"tiny-Q4_K_M.gguf": 1 << 20}  # the connection drops once after 1 MiB
    ref, mine = Side("reference", repos, cut), Side("mlxcel", repos, cut)
    want, got = _pair(repos, reference_binary, ["-hf", REPO], (ref, mine))
    _record("resume", ["--hf-repo"], want, got, COMPARED)
    assert want["served"] and want["ranges"] == [None, f"bytes={1 << 20}-"]
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}


def test_a_gated_repository_needs_the_token_and_gets_it(repos, reference_binary):
    want, got = _pair(repos, reference_binary, ["-hf", GATED, "-hft", TOKEN])
    _record("token", ["--hf-repo", "--hf-token"], want, got, COMPARED)
    assert want["served"] and all(auth == f"Bearer {TOKEN}" for _, auth in want["requests"])
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}
    want, got = _pair(repos, reference_binary, ["-hf", GATED])
    _record("gated", ["--hf-repo"], want, got, ("served", "requests", "cache"))
    assert not want["served"] and not got["served"] and got["exit"] == want["exit"] == 1
    line = "get_repo_commit: error: GET failed (401): Access to model acme/gated-GGUF is restricted."
    assert line in want["log"] and line in got["log"]
    assert (got["requests"], got["cache"]) == (want["requests"], want["cache"])


@pytest.mark.parametrize(
    ("case", "args", "line"),
    [
        ("missing-quant", ["-hf", f"{REPO}:Q5_K_M"], f"no GGUF files found in repository {REPO}"),
        ("missing-file", ["-hf", REPO, "-hff", "nope.gguf"], "file 'nope.gguf' not found in repository"),
        ("no-repo", ["-hf", "acme/none-GGUF"], "GET failed (404): Repository not found"),
        ("offline-uncached", ["-hf", REPO, "--offline"], "load_model: failed to load model"),
    ],
)
def test_what_cannot_be_had_fails_in_b10621s_words(repos, reference_binary, case, args, line):
    want, got = _pair(repos, reference_binary, args)
    _record(case, ["--hf-repo", "--hf-file"] if "-hff" in args else ["--hf-repo"], want, got, ("served", "cache"))
    assert not want["served"] and not got["served"] and got["exit"] == want["exit"] == 1
    assert line in want["log"] and line in got["log"], (want["log"][-800:], got["log"][-800:])
    assert (got["requests"], got["cache"]) == (want["requests"], want["cache"])


@pytest.mark.parametrize("preset", [p for p in FIM_PRESETS if p.endswith("-default")])
def test_a_fim_preset_fetches_its_model_and_serves_it_with_its_settings(repos, reference_binary, preset):
    want, got = _pair(repos, reference_binary, [preset])
    _record(f"fim-preset{preset.removeprefix('--fim-qwen').removesuffix('-default')}", [preset], want, got, COMPARED)
    assert want["served"] and any(p.endswith(FIM_PRESETS[preset][1]) for p in want["cache"])
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}


@pytest.mark.parametrize("preset", [p for p in FIM_PRESETS if p.endswith("-spec")])
def test_a_spec_preset_fetches_its_draft_from_a_second_repository(repos, reference_binary, preset):
    want, got = _pair(repos, reference_binary, [preset])
    _record(
        f"spec-preset{preset.removeprefix('--fim-qwen').removesuffix('-spec')}",
        [preset, "--spec-draft-hf"],
        want,
        got,
        COMPARED,
    )
    assert want["served"] and any("Qwen2.5-Coder-0.5B" in p for p in want["cache"])
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}


def _commit() -> str:
    from tests.fake_hub import COMMIT

    return COMMIT


def test_a_model_url_downloads_into_m_then_keeps_it_while_its_etag_holds(repos, reference_binary):
    """-m FILE -mu URL: the file fetched into -m's path with its ETag beside it; a second start asks the server
    (HEAD) and keeps the file; --offline asks nothing. (-mu without -m: router mode, on both: startup case
    model-url.)"""
    ref, mine = Side("reference", repos), Side("mlxcel", repos)
    args = ["-m", "{cache}/plain.gguf", "-mu", f"{{hub}}/{REPO}/resolve/main/tiny-Q8_0.gguf"]
    for case, extra in (("fresh", []), ("kept", []), ("offline", ["--offline"])):
        want, got = _pair(repos, reference_binary, args + extra, (ref, mine))
        _record(f"model-url-{case}", ["--model-url"], want, got, COMPARED)
        assert want["served"] and want["cache"] == ["plain.gguf", "plain.gguf.etag"]
        assert len(want["requests"]) == {"fresh": 2, "kept": 1, "offline": 0}[case]
        assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}


def test_a_model_url_that_cannot_be_had_fails_in_b10621s_words(repos, reference_binary):
    line = "failed to download model: Download '"
    args = ["-m", "{cache}/none.gguf", "-mu", "{hub}/acme/none/resolve/main/x.gguf"]
    want, got = _pair(repos, reference_binary, args)
    if line not in want["log"]:  # b10621's logger writes from a thread: exit(1) can cut its last lines (once in CI)
        want, got = _pair(repos, reference_binary, args)
    _record("model-url-missing", ["--model-url"], want, got, ("served", "cache"))
    assert not want["served"] and not got["served"] and got["exit"] == want["exit"] == 1
    assert line in want["log"] and line in got["log"] and "failed with status code: 404" in got["log"]
    assert (got["requests"], got["cache"]) == (want["requests"], want["cache"])


@pytest.mark.parametrize(("case", "extra"), [("mmproj-auto", []), ("no-mmproj", ["--no-mmproj"])])
def test_a_repository_with_a_projector_fetches_and_loads_it_as_b10621(vision_repos, reference_binary, case, extra):
    """-hf on a repository that ships projectors: b10621 fetches the one nearest the model's quant beside the model
    and loads it (vision on), unless --no-mmproj; mlxcel fetches the same files into the same cache and loads it."""
    want, got = _pair(vision_repos, reference_binary, ["-hf", VISION_REPO, *extra])
    _record(case, ["--hf-repo", "--mmproj-auto"], want, got, COMPARED)
    fetched = [p.rsplit("/", 1)[-1] for p in want["cache"] if p.endswith(".gguf") and "/snapshots/" in p]
    assert want["served"]
    assert sorted(fetched) == (
        ["tiny-vision-Q4_K_M.gguf"] if extra else ["mmproj-tiny-vision-f16.gguf", "tiny-vision-Q4_K_M.gguf"]
    )
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}
    for side in (want, got):  # (both say so in their logs: b10621's line, which mlxcel prints too)
        assert ("loaded multimodal model" in side["log"]) is (not extra), side["log"][-2000:]


def test_a_projector_url_is_fetched_into_the_cache_and_loaded_as_b10621(vision_repos, reference_binary):
    """--mmproj-url URL (no --mmproj): fetched into the llama.cpp cache under the URL's file name, its ETag beside
    it, then loaded beside -m's model; --offline then uses the copy."""
    from fixtures.twins import twin

    ref, mine = Side("reference", vision_repos), Side("mlxcel", vision_repos)
    url = f"{{hub}}/{VISION_REPO}/resolve/main/mmproj-tiny-vision-f32.gguf"
    args = ["-m", str(twin("q4_1").gguf), "--mmproj-url", url]
    for case, extra in (("fresh", []), ("offline", ["--offline"])):
        want, got = _pair(vision_repos, reference_binary, args + extra, (ref, mine))
        _record(f"mmproj-url-{case}", ["--mmproj-url"], want, got, COMPARED)
        assert want["served"] and want["cache"] == ["mmproj-tiny-vision-f32.gguf", "mmproj-tiny-vision-f32.gguf.etag"]
        assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}, case
        assert "loaded multimodal model" in want["log"] and "loaded multimodal model" in got["log"]


def test_a_projector_of_a_type_mlxcel_refuses_is_fetched_and_then_left_out_or_refused(vision_repos, reference_binary):
    """SmolVLM's projector type (idefics3), which b10621 loads and mlxcel does not run: with -hf both fetch the same
    files, b10621 serves images, mlxcel warns and serves the text model alone (the by_design divergence of
    --mmproj-auto); with --mmproj-url b10621 serves and mlxcel stops at startup in one line (--mmproj-url's)."""
    from fixtures.twins import twin

    want, got = _pair(vision_repos, reference_binary, ["-hf", SMOLVLM_REPO])
    _record("mmproj-auto-type-refused", ["--mmproj-auto"], want, got, (*COMPARED, "vision"))
    assert (want["served"], want["vision"], got["served"], got["vision"]) == (True, True, True, False)
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}
    assert "projector type 'idefics3' is not served yet" in got["log"] and "serving the model without it" in got["log"]
    url = f"{{hub}}/{SMOLVLM_REPO}/resolve/main/mmproj-tiny-smolvlm-f16.gguf"
    want, got = _pair(vision_repos, reference_binary, ["-m", str(twin("q4_1").gguf), "--mmproj-url", url])
    _record("mmproj-url-type-refused", ["--mmproj-url"], want, got, ("served", "requests", "cache"))
    assert (want["served"], want["vision"], got["served"]) == (True, True, False)
    assert (got["requests"], got["cache"]) == (want["requests"], want["cache"])  # (the same fetch, then the refusal)
    assert "projector type 'idefics3' is not served yet" in got["log"]
