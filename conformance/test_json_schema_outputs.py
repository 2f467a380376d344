"""JSON-schema constrained output validates against its schema, on mlxcel and on b10621 (F32 twins).

Each schema bounds its strings and arrays so a generation finishes inside the token budget; the answer
must stop at end of generation, parse as JSON and validate (jsonschema). Greedy and seeded draws; the two
servers' answers are also compared (the oracle corpus pins a few of them byte for byte).
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from oracle import loopback

NAME = {"type": "string", "maxLength": 12}
SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "tags": {
        "type": "array",
        "items": {"type": "string", "enum": ["red", "green", "blue"]},
        "minItems": 1,
        "maxItems": 3,
    },
    "nested": {
        "type": "object",
        "properties": {
            "title": NAME,
            "score": {"type": "number"},
            "author": {"type": "object", "properties": {"first": NAME, "last": NAME}, "required": ["first"]},
        },
        "required": ["title", "author"],
        "additionalProperties": False,
    },
    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    "either": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 9}, {"type": "boolean"}]},
    "refs": {
        "$defs": {
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": -9, "maximum": 9},
                    "y": {"type": "integer", "minimum": -9, "maximum": 9},
                },
                "required": ["x", "y"],
                "additionalProperties": False,
            }
        },
        "type": "array",
        "items": {"$ref": "#/$defs/point"},
        "minItems": 2,
        "maxItems": 2,
    },
}
DRAWS = {"greedy": {"temperature": 0}, "seeded": {"temperature": 0.8, "seed": 3}}


def _answer(base_url: str, schema: dict, draw: dict) -> dict:
    body = {"prompt": "Here is the answer as JSON:\n", "json_schema": schema, "n_predict": 160, **draw}
    r = loopback.post(f"{base_url}/completion", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _validates(answer: dict, schema: dict) -> None:
    assert answer["stop_type"] == "eos", answer["content"]
    jsonschema.validate(json.loads(answer["content"]), schema)


@pytest.mark.parametrize("draw", sorted(DRAWS))
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_constrained_output_validates_on_both_servers(name, draw, mlxcel_f32, live_reference_f32):
    schema = SCHEMAS[name]
    ours = _answer(mlxcel_f32.base_url, schema, DRAWS[draw])
    _validates(ours, schema)
    if live_reference_f32 is None:
        return
    theirs = _answer(live_reference_f32.base_url, schema, DRAWS[draw])
    _validates(theirs, schema)
    assert ours["content"] == theirs["content"]
