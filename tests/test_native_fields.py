"""The native schema's type checks, limits and custom fields, in upstream's wording and order."""

from __future__ import annotations

import pytest

from server.api.native_fields import SCHEMA
from server.api.task_params import TaskParams, evaluate, generation_settings
from server.errors import UpstreamError


def _error(body: dict, n_slots: int = 4) -> str:
    with pytest.raises(UpstreamError) as exc:
        evaluate(body, n_slots)
    assert exc.value.kind.status == 400
    return exc.value.message


def test_wrong_types_name_the_field_and_both_types():
    assert _error({"temperature": "hot"}) == (
        "Field 'temperature': [json.exception.type_error.302] type must be number, but is string"
    )
    assert (
        _error({"stream": 1}) == "Field 'stream': [json.exception.type_error.302] type must be boolean, but is number"
    )


def test_numbers_accept_booleans_and_truncate_fractions_like_nlohmann():
    p = evaluate({"top_k": True, "n_predict": 2.9}, 4)
    assert (p.top_k, p.n_predict) == (1, 2)


def test_hard_limits_use_std_to_string_formatting():
    assert _error({"adaptive_decay": 1.5}) == (
        "Field 'adaptive_decay': Value must be between 0.000000 <= value <= 0.990000, but got 1.500000"
    )
    assert _error({"n_keep": -2}) == "Field 'n_keep': Value must be between -1 <= value <= 2147483647, but got -2"
    assert _error({"n": 5}, n_slots=4) == "Field 'n': Value must be between 1 <= value <= 4, but got 5"


def test_null_is_absent_and_the_first_present_spelling_wins():
    assert evaluate({"n_predict": None, "max_tokens": 3, "max_completion_tokens": 7}, 4).n_predict == 7
    assert _error({"max_tokens": "x"}).startswith("Field 'max_tokens':")


def test_the_first_offending_field_in_declaration_order_is_reported():
    assert _error({"n_predict": "a", "stream": "b"}).startswith("Field 'stream':")  # stream is declared first


def test_schema_names_are_unique_and_cover_upstream_typed_fields():
    names = [n for f in SCHEMA for n in f.names]
    assert len(names) == len(set(names))
    assert {"n_predict", "max_tokens", "temperature", "ignore_eos", "n_probs", "logprobs"} <= set(names)


def test_defaults_render_as_b10621_prints_them():
    g = generation_settings(TaskParams())
    assert list(g)[:3] == ["seed", "temperature", "dynatemp_range"] and list(g)[-1] == "lora"
    assert g["seed"] == 4294967295 and g["top_p"] == 0.949999988079071 and g["temperature"] == 0.800000011920929


def test_soft_limits_clamp_and_integers_wrap_like_cpp():
    p = evaluate({"top_p": 1.5, "temperature": -1, "top_k": -3, "mirostat": 7, "seed": -2}, 4)
    assert (p.top_p, p.temperature, p.top_k, p.mirostat, p.seed) == (1.0, 0.0, 0, 2, 4294967294)
    assert _error({"n_predict": 2**31}).endswith("but got -2147483648")  # int32 wraps before the check


def test_custom_fields():
    assert evaluate({"dry_base": 0.5}, 4).dry_base == 1.75  # below 1.0: the server default
    assert evaluate({"samplers": "kpx?"}, 4).samplers == ["top_k", "top_p", "xtc"]
    assert evaluate({"samplers": ["Top-K", "nucleus", "bogus"]}, 4).samplers == ["top_k", "top_p"]
    assert _error({"samplers": ["top_k", 3]}) == (
        "Field 'samplers': [json.exception.type_error.302] type must be string, but is number"
    )
    assert evaluate({"stop": ["", None, "a"]}, 4).stop == ["", "a"]  # json::empty() is false for ""
    assert _error({"stop": [1]}).startswith("Field 'stop': [json.exception.type_error.302] type must be string")
    assert _error({"reasoning_format": "x"}) == "Field 'reasoning_format': Unknown reasoning format: x"
    assert _error({"dry_sequence_breakers": []}) == (
        "Field 'dry_sequence_breakers': Error: dry_sequence_breakers must be a non-empty array of strings"
    )
    assert _error({"lora": {}}) == (
        "Field 'lora': Error: 'lora' must be an array of objects with 'id' and 'scale' fields"
    )
    assert evaluate({"lora": [{"id": 2, "scale": 0.5}, {"scale": 1}]}, 4).lora == {-1: 1.0, 2: 0.5}
    assert _error({"grammar_triggers": ["x"]}) == (
        "Field 'grammar_triggers': [json.exception.type_error.304] cannot use at() with string"
    )
    p = evaluate({"stream": True, "reasoning_format": "deepseek-legacy"}, 4)
    assert p.reasoning_in_content
