"""Mixed token arrays with elements that are neither strings nor numbers: b10621's JSON type_error (found by
the soak fuzzing: a nested list in /tokenize's content was a Python TypeError)."""

from __future__ import annotations

import pytest

from server.api.prompts import checked_mixed
from server.errors import ErrorKind, UpstreamError


@pytest.mark.parametrize(
    "value,kind", [([1, []], "array"), ([1, {"a": 1}], "object"), (["a", None], "null"), ([True], "boolean")]
)
def test_an_element_that_is_no_token_id_is_b10621s_type_error(value, kind):
    with pytest.raises(UpstreamError) as err:
        checked_mixed(value)
    assert err.value.kind is ErrorKind.SERVER
    assert err.value.message == f"[json.exception.type_error.302] type must be number, but is {kind}"


def test_strings_and_numbers_pass():
    assert checked_mixed(["a", 1, 2.0]) == ["a", 1, 2.0] and checked_mixed("x") == "x"
    with pytest.raises(UpstreamError):
        checked_mixed(3)
