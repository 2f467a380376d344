"""Request bodies parsed and answers written as b10621's JSON library does (server/api/jsonio.py)."""

from __future__ import annotations

import pytest

from server.api.jsonio import MAX_DEPTH, dumps, loads
from server.errors import ErrorKind, UpstreamError


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'{"a": Infinity}', b"[-Infinity]", b'{"a": "\xc3\x28"}', b'{"a": 1'])
def test_what_is_not_json_is_b10621s_500_parse_error(raw):
    with pytest.raises(UpstreamError) as err:
        loads(raw)
    assert err.value.kind is ErrorKind.SERVER and err.value.message.startswith("[json.exception.parse_error.101]")


def test_nesting_past_the_limit_is_a_400_and_never_a_recursion_error():
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for raw in (
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "[" * 200_000 + "]" * 200_000,
        '{"a": ' * 3000 + "1" + "}" * 3000,
    ):
        with pytest.raises(UpstreamError) as err:
            loads(raw)
        assert err.value.kind is ErrorKind.INVALID_REQUEST and "nested" in err.value.message


def test_duplicate_keys_keep_the_last_value():
    assert loads('{"a": 1, "a": 2}') == {"a": 2}


def test_non_finite_floats_are_written_as_null():
    assert (
        dumps({"t": float("inf"), "l": [float("nan"), 1.5, -float("inf")], "k": "é"})
        == '{"t":null,"l":[null,1.5,null],"k":"é"}'.encode()
    )
