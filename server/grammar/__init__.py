"""GBNF grammars: parsing, JSON-schema conversion and constrained decoding."""
