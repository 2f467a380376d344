"""server/chat/template.py renders chat templates as b10621's own jinja engine (common/jinja) does, and
server/chat/caps.py finds their capabilities as its caps_get() does.

Every expected value below was recorded from b10621 (llama-server b10621 started with --jinja
--chat-template-file <the template>, then POST /apply-template {"messages": ...} for the prompt, GET /props for
chat_template_caps). Where b10621 fails to render a template, it refuses it at startup ("the supplied chat
template is not supported") with the error quoted in the test.
"""

from __future__ import annotations

import time

import pytest

from server.chat.caps import template_caps
from server.chat.template import TemplateError, render


def _user(text: str = "a") -> dict:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


THREE = [_user("a"), _assistant("b"), _user("c")]


def _render(template: str, messages: list | None = None, add_generation_prompt: bool = True) -> str:
    """As /apply-template renders a user-ending conversation: the generation prompt asked for."""
    return render(
        template,
        messages or [_user()],
        add_generation_prompt=add_generation_prompt,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
    )


# --- the gaps the autoparser port found --------------------------------------------------------------------


def test_strftime_now():
    # recorded from b10621 (Apertus, Mistral-Small-3.2, Granite 3.3 and Solar call it)
    assert _render('{{ strftime_now("[%%]") }}{{ strftime_now("%Y")|length }}') == "[%]4"
    assert _render('{{ strftime_now("%Y-%m-%d") }}') in (
        time.strftime("%Y-%m-%d"),
        time.strftime("%Y-%m-%d", time.localtime(time.time() - 5)),
    )


def test_generation_tags_render_their_body():
    # recorded from b10621 (Laguna, LFM2.5): {% generation %} and {% endgeneration %} render nothing themselves
    template = "{% for m in messages %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}"
    assert _render(template, THREE) == "<a><b><c>"


def test_string_plus_undefined_is_the_string():
    # recorded from b10621 (fireworks' functions, Command R+ with a parameter lacking its description)
    template = (
        '{% for m in messages %}{{ "[" + m.content + m.description + "]" }}{{ m.missing ~ "|" }}'
        '{% endfor %}{{ "f:" + functions }}'
    )
    assert _render(template) == "[a]|f:"


def test_number_plus_undefined_fails():
    # recorded from b10621: refused, "Cannot perform operation + on undefined values"
    with pytest.raises(TemplateError, match="Cannot perform operation \\+ on undefined values"):
        _render("{{ 1 + messages[0].missing }}")


def test_tojson_of_map():
    # recorded from b10621 (llama-cpp-deepseek-r1.jinja pipes map(...) into tojson)
    assert _render('{{ messages|map(attribute="role")|tojson }}', THREE) == '["user", "assistant", "user"]'


def test_safe_does_not_escape_what_it_is_joined_to():
    # recorded from b10621 (functionary 3.1: "..."|safe + x)
    assert _render('{{ "<b>"|safe + messages[0].content }}', [_user('"a" & <c>')]) == '<b>"a" & <c>'


def test_add_generation_prompt_undefined_unless_asked():
    # recorded from b10621 (rwkv-world and Solar default it to true when it is not defined)
    template = '{{ add_generation_prompt is defined }}|{{ add_generation_prompt|default("unset") }}'
    assert _render(template, add_generation_prompt=False) == "False|unset"
    assert _render(template) == "True|True"


def test_lists_and_objects_can_be_changed():
    # recorded from b10621 (Kimi-K2 appends to a list): append, pop, and {% set obj.key %} on a dict
    template = (
        "{% set l = [] %}{% set d = {} %}{% for m in messages %}{% set _ = l.append(m.role) %}"
        '{% set d.last = m.content %}{% endfor %}{{ l|join(",") }}|{{ d.last }}|{{ l.pop() }}{{ l|length }}'
    )
    assert _render(template, THREE) == "user,assistant,user|c|user2"


def test_changes_stay_in_the_render():
    # the template works on a copy of the values, as b10621 renders a copy of the request's JSON
    messages = [_user()]
    template = '{% set _ = messages.append({"role": "x"}) %}{{ messages|length }}'
    assert _render(template, messages) == "2"
    assert _render(template, messages) == "2"
    assert messages == [_user()]


# --- values ------------------------------------------------------------------------------------------------


def test_printing_values():
    # recorded from b10621: none, undefined and objects print nothing, arrays their items one after another;
    # joined to a string, a value is its repr
    template = (
        '{{ none }}|{{ messages[0].nope }}|{{ [1, "a", [true]] }}|{{ {"k": 1} }}|{{ none ~ "x" }}|'
        '{{ "x" ~ none }}|{{ 1.5 }}|{{ 2.0 }}|{{ "n" ~ [1, "a"] }}|{{ "n" + {"k": "v"} }}'
    )
    assert _render(template) == "||1aTrue||x|x|1.5|2.0|n[1, 'a']|n{'k': 'v'}"


def test_equality():
    # recorded from b10621: arrays and objects holding an array or object are never equal
    template = (
        '{% set a = {"x": [1]} %}{{ a == a }}|{{ {"x": 1} == {"x": 1} }}|{{ [[1]] == [[1]] }}|'
        '{{ [1] == [1] }}|{{ 1 == 1.0 }}|{{ "1" == 1 }}'
    )
    assert _render(template) == "False|True|False|True|True|False"


def test_in_and_undefined():
    # recorded from b10621: anything in undefined is false; undefined in anything fails
    assert _render('{{ "a" in messages[0].nope }}|{{ "a" not in messages[0].nope }}') == "False|True"
    with pytest.raises(TemplateError, match="Cannot perform operation in on undefined values"):
        _render('{{ messages[5].role in ["user"] }}')


def test_strings_compare_only_for_equality():
    # recorded from b10621: refused, 'Unknown operator "<" between String and String'
    with pytest.raises(TemplateError, match='Unknown operator "<" between String and String'):
        _render('{{ "a" < "b" }}')


def test_tests_and_default():
    # recorded from b10621: a bool is no number, an object no sequence, undefined is iterable; default() also
    # replaces none
    template = (
        '{{ true is number }}|{{ 1 is number }}|{{ {} is sequence }}|{{ none|default("d") }}|'
        '{{ ""|default("d") }}|{{ messages[0].nope is iterable }}'
    )
    assert _render(template) == "False|True|False|d||True"


def test_objects_have_no_default():
    # recorded from b10621: refused, "Unknown (built-in) filter 'default' for type Object"
    with pytest.raises(TemplateError, match="Unknown \\(built-in\\) filter 'default' for type Object"):
        _render("{{ messages[0]|default(1) }}")


def test_undefined_builtins():
    # recorded from b10621: items(), join and length of undefined (and items() of none) are empty
    template = (
        '{{ messages[0].nope.items()|length }}|{{ none.items()|length }}|{{ messages[0].nope|join(",") }}|'
        "{{ messages[0].nope|length }}"
    )
    assert _render(template) == "0|0||0"
    # recorded from b10621: refused, "Unknown (built-in) filter 'slice' for type Undefined"
    with pytest.raises(TemplateError, match="Unknown \\(built-in\\) filter 'slice' for type Undefined"):
        _render("{{ messages[0].nope[1:] }}")


def test_tojson():
    # recorded from b10621: floats as C++ prints them, no HTML escaping, indent, ensure_ascii, separators
    template = (
        '{{ {"a": [1, 2.5, 1.0, none], "b": "é\\n<&>\'"}|tojson }}|{{ [1, {"c": 2}, []]|tojson(indent=2) }}|'
        '{{ "é😀"|tojson(ensure_ascii=true) }}|{{ [1, 2]|tojson(separators=[",", ":"]) }}'
    )
    assert _render(template) == (
        '{"a": [1, 2.5, 1, null], "b": "é\\n<&>\'"}|[\n  1,\n  {\n    "c": 2\n  },\n  []\n]|'
        '"\\u00e9\\ud83d\\ude00"|[1,2]'
    )


def test_string_builtins():
    # recorded from b10621: split on the separator only, title after blanks only, "{}" formats (not "%s"),
    # length in bytes, trim, a number coerced for upper
    template = (
        '{{ "a  b".split(" ")|tojson }}|{{ "hello-world foo"|title }}|{{ "%s"|format(1) }}|'
        '{{ "{}-{}".format(1, "b") }}|{{ "abc"|length }}|{{ "  x "|trim }}|{{ 5|upper }}'
    )
    assert _render(template) == '["a", "", "b"]|Hello-world Foo|%s|1-b|3|x|5'


def test_unknown_filter_or_test_fails_only_when_run():
    # recorded from b10621
    assert _render("{% if false %}{{ messages|nonexistent }}{% endif %}ok") == "ok"
    assert _render("{% macro m() %}{{ messages|nonexistent }}{{ 1 is nonexistent }}{% endmacro %}ok") == "ok"


# --- statements and source ---------------------------------------------------------------------------------


def test_loop_keeps_its_variables_across_iterations():
    # recorded from b10621: one scope for the whole loop (jinja2 alone renders "[a][][]")
    template = (
        "{% for m in messages %}{% if loop.first %}{% set first = m.content %}{% endif %}[{{ first }}]{% endfor %}"
    )
    assert _render(template, THREE) == "[a][a][a]"


def test_loop_over_an_object():
    # recorded from b10621: its keys, or its (key, value) pairs when the loop unpacks two names
    template = "{% for k, v in messages[0] %}{{ k }}={{ v }};{% endfor %}{% for k in messages[0] %}{{ k }};{% endfor %}"
    assert _render(template) == "role=user;content=a;role;content;"
    # recorded from b10621: dictsort gives an object (printing nothing) whose pairs a loop unpacks
    template = '{% for k, v in {"b": 2, "a": 1}|dictsort %}{{ k }}{{ v }}{% endfor %}|{{ {"b": 2, "a": 1}|dictsort }}'
    assert _render(template) == "a1b2|"


def test_loop_over_a_string_fails():
    # recorded from b10621: refused, "Expected iterable or object type in for loop: got String"
    with pytest.raises(TemplateError, match="Expected iterable or object type in for loop: got String"):
        _render('{% for c in "ab" %}{{ c }}{% endfor %}')


def test_first_text_before_a_tag():
    # recorded from b10621: its lexer drops the source's first text when only blanks follow its first character
    # up to a {% tag
    assert _render("x  {% for m in messages %}{{ m.content }}{% endfor %}") == "a"


# --- capabilities ------------------------------------------------------------------------------------------

_NO_TOOLS = {
    "supports_object_arguments": False,
    "supports_parallel_tool_calls": False,
    "supports_preserve_reasoning": False,
    "supports_reasoning_effort": False,
    "supports_string_content": True,
    "supports_system_role": True,
    "supports_tool_calls": False,
    "supports_tools": False,
    "supports_typed_content": False,
}


def test_caps_typed_content_is_content_read_as_an_array():
    # recorded from b10621: typed content handled only where content is not a string does not count
    for branch in ("{% for p in m.content %}{{ p.text }}{% endfor %}", "{{ m.content[0].text }}"):
        template = (
            "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
            + branch
            + "{% endif %}{% endfor %}"
        )
        assert template_caps(template) == _NO_TOOLS
    # recorded from b10621: iterating the content fails for a string, and reads it as an array
    assert template_caps("{% for c in messages[0].content %}{{ c }}{% endfor %}") == {
        **_NO_TOOLS,
        "supports_string_content": False,
        "supports_typed_content": True,
    }


def test_caps_object_arguments_are_arguments_read_inside():
    # recorded from b10621: arguments joined to a string (its repr shows their values) are not read inside;
    # arguments|tojson are
    template = (
        "{% for m in messages %}{{ m.role }}:{{ m.content }}{% for c in m.tool_calls %}ARGS"
        "{% endfor %}{% endfor %}{% for t in tools %}{{ t.function.name }}{% endfor %}"
    )
    tools = {"supports_parallel_tool_calls": True, "supports_tool_calls": True, "supports_tools": True}
    concat = template.replace("ARGS", '{{ "\\n" + c.function.name + "\\n" + c.function.arguments }}')
    assert template_caps(concat) == {**_NO_TOOLS, **tools}
    as_json = template.replace("ARGS", "{{ c.function.name }}{{ c.function.arguments|tojson }}")
    assert template_caps(as_json) == {**_NO_TOOLS, **tools, "supports_object_arguments": True}


def test_caps_system_role_and_reasoning_effort():
    # recorded from b10621: a system message never read; a reasoning_effort read
    template = (
        '{% for m in messages %}{% if m.role != "system" %}{{ m.content }}{% endif %}{% endfor %}'
        "{% if reasoning_effort %}{{ reasoning_effort }}{% endif %}"
    )
    assert template_caps(template) == {**_NO_TOOLS, "supports_system_role": False, "supports_reasoning_effort": True}
