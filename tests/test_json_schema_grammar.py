"""json_schema_to_grammar() against what b10621's llama-server recorded for the same schemas.

The expectations come from fixtures/grammars/capture_json_schema_cases.py: the GBNF the reference
server converted, or the message of the 400 it answered. No server is needed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.grammar.json_schema import json_schema_to_grammar

GRAMMARS = Path(__file__).resolve().parents[1] / "fixtures" / "grammars"
CASES = {c["name"]: c["schema"] for c in json.loads((GRAMMARS / "json_schema_cases.json").read_text("utf-8"))}
EXPECTED = json.loads((GRAMMARS / "json_schema_expected.json").read_text("utf-8"))

# how the server wraps the converter's what(): the field handler, then the field validation layer
ERROR_PREFIX = "Field 'json_schema': \"json_schema\": "


def test_every_case_was_recorded() -> None:
    assert [e["name"] for e in EXPECTED] == list(CASES)


@pytest.mark.parametrize("expected", EXPECTED, ids=[e["name"] for e in EXPECTED])
def test_matches_reference(expected: dict) -> None:
    schema = CASES[expected["name"]]
    if "grammar" in expected:
        assert json_schema_to_grammar(schema) == expected["grammar"]
        return
    message = expected["error"]
    if not message.startswith(ERROR_PREFIX):
        # converted fine, but a later stage (the GBNF parser) refused the grammar: the C++ splits
        # multi-byte keys into single-byte character classes, which is not valid UTF-8
        grammar = json_schema_to_grammar(schema)
        assert not grammar.isascii()
        with pytest.raises(UnicodeEncodeError):
            grammar.encode("utf-8")
        return
    with pytest.raises(ValueError) as err:
        json_schema_to_grammar(schema)
    assert ERROR_PREFIX + str(err.value) == message
