"""The native schema's type checks and hard limits, in upstream's wording and order."""

from __future__ import annotations

import pytest

from server.api.native_fields import SCHEMA, check_request
from server.errors import UpstreamError


def _error(body: dict, n_slots: int = 4) -> str:
    with pytest.raises(UpstreamError) as exc:
        check_request(body, n_slots)
    assert exc.value.kind.status == 400
    return exc.value.message


def test_wrong_types_name_the_field_and_both_types():
    assert _error({"temperature": "hot"}) == ("Field 'temperature': [json.exception.type_error.302] type must be "
                                              "number, but is string")
    assert _error({"stream": 1}) == "Field 'stream': [json.exception.type_error.302] type must be boolean, but is number"


def test_numbers_accept_booleans_and_truncate_fractions_like_nlohmann():
    assert check_request({"top_k": True, "n_predict": 2.9}, 4) == {"top_k": 1, "n_predict": 2}


def test_hard_limits_use_std_to_string_formatting():
    assert _error({"adaptive_decay": 1.5}) == ("Field 'adaptive_decay': Value must be between 0.000000 <= value "
                                               "<= 0.990000, but got 1.500000")
    assert _error({"n_keep": -2}) == "Field 'n_keep': Value must be between -1 <= value <= 2147483647, but got -2"
    assert _error({"n": 5}, n_slots=4) == "Field 'n': Value must be between 1 <= value <= 4, but got 5"


def test_null_is_absent_and_the_first_present_spelling_wins():
    assert check_request({"n_predict": None, "max_tokens": 3, "max_completion_tokens": 7}, 4) == {"n_predict": 7}
    assert _error({"max_tokens": "x"}).startswith("Field 'max_tokens':")


def test_the_first_offending_field_in_declaration_order_is_reported():
    assert _error({"n_predict": "a", "stream": "b"}).startswith("Field 'stream':")  # stream is declared first


def test_schema_names_are_unique_and_cover_upstream_typed_fields():
    names = [n for f in SCHEMA for n in f.names]
    assert len(names) == len(set(names))
    assert {"n_predict", "max_tokens", "temperature", "ignore_eos", "n_probs", "logprobs"} <= set(names)
