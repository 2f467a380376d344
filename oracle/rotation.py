"""The rotation: the slow suites a CI landing runs a third of, so that `nox -s tests` fits its 30-minute budget.

Each suite named in ROTATING runs, in CI (MLXCEL_LIVE_SHARE K/N, noxfile.py), the tests whose place among its
collected tests, modulo ROTATION (3), is the landing's turn K mod ROTATION: every test runs at least once in every
ROTATION landings in a row, as the families rotate (fixtures/families.py in_turn) and as the recorded cases meet the live reference once
in N. A developer's run (MLXCEL_LIVE_SHARE unset or "all") and MLXCEL_ALL_TWINS=1 run every test.

The manifest's gate (`mlxcel-oracle verify`) then finds no evidence from this landing for an entry whose cases were
rotated out: the test functions with rotated-out tests are listed beside the evidence (ROTATED_FILE), and an entry
that names one of them is not failed for missing evidence (a record that differs still fails it), as its cases
meet the gate in another landing.
"""

from __future__ import annotations

from pathlib import Path

# the slow suites that rotate (the junit times of a cold run on a 2-core AVX2 machine, 2026-12-07, in seconds);
# the corpus does not: every manifest entry's main evidence comes from it on every landing. A rotating suite takes
# no third of its own inside (fixtures/families.py in_turn): both at once would leave some cases out of every landing
ROTATING = (
    "conformance/test_startup.py",  # 178 (156 start-ups, both servers each)
    "conformance/test_hf_download.py",  # 136
    "tests/test_speculative.py",  # 94
    "tests/test_serving_ranks.py",  # 81 (servers of 2 and 3 processes)
    "conformance/test_ngram_drafters.py",  # 58
    "conformance/test_eagle3_drafter.py",  # 36 (warm; 2 cases, 3 servers each)
    "conformance/test_mtp_drafter.py",  # (2 cases, 3 servers each, the Qwen3.5 twin)
    "tests/reliability/test_security.py",  # 54
    "tests/test_decode_step.py",  # 49
    "tests/test_lora.py",  # 46
    "tests/reliability/test_faults.py",  # 44
    "conformance/test_embeddings.py",  # 40
    "conformance/test_image_chat.py",  # 40
    "conformance/test_audio_chat.py",  # 37
    "tests/test_engine_batching.py",  # 34
    "tests/reliability/test_fuzz.py",  # 31
    # added 2026-12-07 (a cold run at 43m41s: junit seconds of that run; test_vocab_pairs and test_kv_blocks, as
    # slow, already take their third inside)
    "tests/test_eagle3.py",  # 73 (its head twin's fit ~50 s of it, cold)
    "tests/reliability/test_load.py",  # 36
    "tests/test_mtp.py",  # 32 (the Qwen3.5 twin built, cold)
    "conformance/test_completion_greedy.py",  # 23
    "tests/test_eagle3_twin.py",  # 15
    # added 2026-12-07 afternoon (draft-dflash; warm seconds on the same machine)
    "conformance/test_dflash_drafter.py",  # 120 (3 cases, 3 servers each)
    "tests/test_dflash.py",  # 49 (its draft twin's fit ~10 s over the shared features, cold)
    # added 2026-12-07 evening (a warm run at 32m32s on a slow day: junit seconds of that run)
    "tests/test_cli_commands.py",  # 53 (model loads for generate, chat, estimate, bench)
    "conformance/test_kv_trace.py",  # 20
    "tests/test_model_loading.py",  # 19
    "conformance/test_router_sse.py",  # 17
    "conformance/test_long_prompts.py",  # 16
)
ROTATED_FILE = "rotated.lst"  # beside the evidence records (not *.json: those are records)


def landing() -> int | None:
    """This landing's turn (0 .. ROTATION - 1), or None: every test runs (the families' turn)."""
    from fixtures.families import landing_turn

    return landing_turn()


def _suite(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return path if path in ROTATING else None


def select(nodeids: list[str], turn: int | None) -> tuple[list[bool], list[str]]:
    """Which of the collected tests run this landing (in their order), and the test functions that lost some."""
    from fixtures.families import ROTATION

    keep, seen, rotated = [], {}, []
    for nodeid in nodeids:
        suite = _suite(nodeid)
        if suite is None or turn is None:
            keep.append(True)
            continue
        place = seen[suite] = seen.get(suite, -1) + 1
        keep.append(place % ROTATION == turn)
        function = nodeid.split("[", 1)[0]
        if not keep[-1] and function not in rotated:
            rotated.append(function)
    return keep, rotated


def write_rotated(functions: list[str], directory: Path) -> None:
    """Appended (the run's evidence directory is emptied before it): a pytest run inside the run, a test's, adds
    its own list to the run's rather than replacing it."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ROTATED_FILE).open("a", encoding="utf-8") as f:
        f.write("".join(fn + "\n" for fn in functions))


def read_rotated(directory: Path) -> set[str]:
    try:
        return {ln.strip() for ln in (directory / ROTATED_FILE).read_text(encoding="utf-8").splitlines() if ln.strip()}
    except OSError:
        return set()
