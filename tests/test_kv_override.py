"""--override-kv's items as b10621's string_parse_kv_override reads them (server/models/kv_override.py); their
effect on a GGUF's conversion against b10621: startup cases override-kv and override-kv-ctx."""

from __future__ import annotations

import pytest

from server.models.kv_override import KVOverride, apply, parse


def test_each_type_reads_as_b10621_reads_it():
    assert parse(["a=int: 42x,b=float:2.5e3z,c=bool:true,d=str:hi there"]) == (
        KVOverride("a", "int", 42),  # std::atol: blanks, digits, the rest ignored
        KVOverride("b", "float", 2500.0),
        KVOverride("c", "bool", True),
        KVOverride("d", "str", "hi there"),
    )
    assert parse(["n=int:oops"]) == (KVOverride("n", "int", 0),)  # (atol of no digits)


@pytest.mark.parametrize("item", ["novalue", "x=nope:1", "x=bool:yes", "x=str:" + "s" * 128, "k" * 128 + "=int:1"])
def test_what_b10621_rejects_is_rejected_in_its_words(item):
    with pytest.raises(ValueError, match=f"^error: Invalid type for KV override: {item[:20]}"):
        parse([item])


def test_an_override_of_another_type_than_the_files_is_ignored():
    class Field:
        def __init__(self, types):
            self.types = types

    import gguf

    fields = {"tokenizer.ggml.add_bos_token": Field([gguf.GGUFValueType.BOOL])}
    apply(fields, (KVOverride("tokenizer.ggml.add_bos_token", "int", 1), KVOverride("llama.context_length", "int", 9)))
    assert isinstance(fields["tokenizer.ggml.add_bos_token"], Field)  # (kept: b10621 warns and reads the file's)
    assert fields["llama.context_length"].contents() == 9  # (a key the file lacks is taken)
