"""Claims are checked against mlxcel's real surfaces both ways: flags, routes and native fields."""

from __future__ import annotations

import copy

import pytest

from compat.claims import Surfaces, check_claims, load_entries, real_surfaces


@pytest.fixture(scope="module")
def surfaces() -> Surfaces:
    return real_surfaces()


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    return load_entries()


def test_every_claim_holds_against_the_real_binaries(entries, surfaces):
    assert check_claims(entries, surfaces) == []


def test_both_binaries_dump_their_surface_and_hide_the_dump_flag(surfaces):
    assert set(surfaces.flags) == {"mlxcel-server", "mlxcel serve"}
    for binary, options in surfaces.flags.items():
        spellings = {s for o in options for s in o["spellings"]}
        assert {"-m", "--model", "--port"} <= spellings
        assert "--dump-flag-surface" not in surfaces.help_text[binary]


def test_adding_an_unflipped_b10621_flag_fails(entries, surfaces):
    unflipped = copy.deepcopy(entries)  # every b10621 option parses now: take one entry's claim back
    next(e for e in unflipped if e["id"] == "--threads")["mlxcel"] = None
    errors = check_claims(unflipped, surfaces)
    assert any(e.startswith("--threads: mlxcel-server accepts") for e in errors), errors
    assert any("binds LLAMA_ARG_THREADS" in e for e in errors)


def test_serving_an_unflipped_route_fails(entries, surfaces):
    unflipped = copy.deepcopy(entries)  # the route served, its entry still without the claim
    next(e for e in unflipped if e["id"] == "POST /v1/audio/transcriptions")["mlxcel"] = None
    assert "POST /v1/audio/transcriptions" in surfaces.routes
    expected = "POST /v1/audio/transcriptions: mlxcel serves this route but the manifest does not claim it"
    assert expected in check_claims(unflipped, surfaces)


def test_adding_an_unflipped_native_field_fails(entries, surfaces):
    widened = copy.deepcopy(surfaces)
    widened.fields.add("lora")
    assert "lora: mlxcel serves this field but the manifest does not claim it" in check_claims(entries, widened)


def test_dropping_a_claimed_flag_fails(entries, surfaces):
    narrowed = copy.deepcopy(surfaces)
    narrowed.flags["mlxcel serve"] = [o for o in narrowed.flags["mlxcel serve"] if "--alias" not in o["spellings"]]
    assert any(
        e.startswith("--alias: claims") and "mlxcel serve does not accept" in e for e in check_claims(entries, narrowed)
    )


def test_a_claim_removed_from_the_manifest_fails(entries, surfaces):
    edited = copy.deepcopy(entries)
    next(e for e in edited if e["id"] == "--port")["mlxcel"] = None
    assert any(e.startswith("--port: mlxcel-server accepts ['--port']") for e in check_claims(edited, surfaces))


def test_default_and_env_claims_are_compared(entries, surfaces):
    edited = copy.deepcopy(entries)
    next(e for e in edited if e["id"] == "--port")["mlxcel"]["defaults"] = {"--port": 8081}
    assert any("claims default 8081 for --port" in e for e in check_claims(edited, surfaces))


def test_aliased_claim_is_checked_both_ways(entries, surfaces):
    edited = copy.deepcopy(entries)
    entry = next(e for e in edited if e["id"] == "POST /completions")
    entry.update(state="aliased", mlxcel={"route": "POST /completion"})
    errors = check_claims(edited, surfaces)
    # mlxcel still serves the b10621 route itself, so it cannot be an alias
    assert "POST /completions: aliased, yet mlxcel serves the b10621 route itself (then it is supported)" in errors
    entry["mlxcel"] = {"route": "POST /nowhere"}
    assert "POST /completions: aliased to POST /nowhere, which mlxcel does not serve" in check_claims(edited, surfaces)


def test_the_dump_flag_leaking_into_help_fails(entries, surfaces):
    leaky = copy.deepcopy(surfaces)
    leaky.help_text["mlxcel-server"] += "\n  --dump-flag-surface\n"
    assert "mlxcel-server: --dump-flag-surface must never appear in --help" in check_claims(entries, leaky)
