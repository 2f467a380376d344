"""The chat-template command line as b10621 reads it: --jinja / --no-jinja with the built-in names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from server.chat.legacy import CHATML_TEMPLATE_SRC
from server.cli.args import build_parser
from server.cli.startup import UnsupportedTemplate, chat_settings

MODEL_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def _settings(*argv: str):
    args = build_parser("mlxcel-server").parse_args(["-m", "x", *argv])
    tokenizer = SimpleNamespace(
        chat_template=MODEL_TEMPLATE, bos_id=None, eos_id=None, add_bos=False, add_eos=False, piece=lambda i: b""
    )
    return chat_settings(args, tokenizer)


def test_no_jinja_keeps_the_model_template_for_the_builtin_formatting():
    s = _settings("--no-jinja")
    assert s.template == MODEL_TEMPLATE and s.use_jinja is False and s.enable_thinking is False


def test_no_jinja_takes_a_builtin_name():
    assert _settings("--no-jinja", "--chat-template", "llama3").template == "llama3"


def test_chatml_is_the_bundled_chatml_source_with_or_without_jinja():
    assert _settings("--chat-template", "chatml").template == CHATML_TEMPLATE_SRC
    assert _settings("--no-jinja", "--chat-template", "chatml").template == CHATML_TEMPLATE_SRC


def test_no_jinja_refuses_a_template_no_builtin_formats_in_b10621s_words():
    with pytest.raises(UnsupportedTemplate) as err:
        _settings("--no-jinja", "--chat-template", "{{ messages }}")
    assert str(err.value) == (
        "error: the supplied chat template is not supported: {{ messages }}\nnote: llama.cpp "
        "was started without --jinja, we only support commonly used templates\n"
    )


def test_a_builtin_name_under_jinja_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match="add --no-jinja") as err:
        _settings("--chat-template", "llama3")
    assert not isinstance(err.value, UnsupportedTemplate)
