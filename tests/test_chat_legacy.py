"""b10621's legacy (non-Jinja) chat templates (server/chat/legacy.py) against the b10621 llama-server.

Every expected value is in fixtures/chat/legacy_b10621.json, recorded once (by a throwaway script) from the
reference b10621 llama-server on SmolLM2-135M-Instruct F32, started with `--no-jinja --chat-template NAME`
(or the template text, or `--chat-template-file FILE`), the prompt read back from POST /apply-template:
- "builtin": each built-in name on three conversations, with and without add_generation_prompt;
- "model_templates": which built-in b10621 formats each of its models/templates/*.jinja as (the built-ins
  whose renderings all equal the server's), or null where the server refused the template at startup;
- "synthetic": one small source per detection rule of llm_chat_detect_template(), and ordering cases;
- "upstream_cases": tests/test-chat-template.cpp's legacy cases, re-rendered by the server (equal to the
  expected outputs written there);
- "props": /props chat_template and chat_template_caps under --no-jinja --chat-template NAME;
- "refusals": the startup refusal of an unsupported template; "smollm2_no_jinja": request edge cases on
  the model's own template (content parts, NUL bytes, an empty list, a trailing assistant message).
The models/templates sources are read from the pinned sdist; those tests skip when it is not unpacked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import require
from server.chat.legacy import (
    BUILTIN_LIST,
    CHATML_TEMPLATE_SRC,
    DOTS1,
    LEGACY_TEMPLATES,
    UNSUPPORTED_TEMPLATE_ERROR,
    apply_legacy,
    default_template_source,
    detect_template,
    legacy_content,
    template_from_name,
    unsupported_template_message,
    verify_legacy,
)

FIXTURE = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "chat" / "legacy_b10621.json").read_text(encoding="utf-8")
)
CONVERSATIONS = {k: [tuple(m) for m in v] for k, v in FIXTURE["conversations"].items()}
RENDER_KEYS = [f"{c}/{g}" for c in CONVERSATIONS for g in ("gen", "nogen")]


def renders(name_or_source: str) -> dict[str, str]:
    """What apply_legacy() gives for every recorded conversation, keyed as the fixture keys them."""
    out = {}
    for key in RENDER_KEYS:
        conv, gen = key.split("/")
        out[key] = apply_legacy(name_or_source, CONVERSATIONS[conv], gen == "gen")
    return out


def template_source(name: str) -> str:
    from oracle.reference import SOURCE_SUBDIR
    from server.cachedir import cache_root

    path = cache_root() / "reference" / "source" / SOURCE_SUBDIR / "models" / "templates" / name
    require(path.is_file(), f"the b10621 sources are not unpacked ({path})")
    return path.read_text(encoding="utf-8")


# --- names ----------------------------------------------------------------------------------------


def test_names_in_table_order():
    assert list(LEGACY_TEMPLATES) == list(FIXTURE["builtin"])
    # --help lists them sorted (a std::map)
    assert BUILTIN_LIST.startswith("bailing, bailing-think, bailing2, chatglm3, chatglm4, chatml, ")


def test_template_from_name():
    assert template_from_name("chatml") == "chatml"
    assert template_from_name("seed_oss") == "seed_oss"
    for not_a_name in ("Chatml", " chatml", "chatml ", DOTS1, "mistral", ""):
        assert template_from_name(not_a_name) is None


# --- formatting: each built-in by name ------------------------------------------------------------


@pytest.mark.parametrize("name", LEGACY_TEMPLATES)
def test_builtin_renders(name):
    assert renders(name) == FIXTURE["builtin"][name]


def test_upstream_cases():
    """test-chat-template.cpp: each template source detected and formatted as the server formats it."""
    for case in FIXTURE["upstream_cases"]:
        messages = [tuple(m) for m in case["messages"]]
        assert apply_legacy(case["template"], messages, True) == case["prompt"], case["name"]


def test_generation_prompt_ignored_where_upstream_has_none():
    # rwkv-world ends a last user turn with "Assistant:" either way; the others never add one
    for name in (
        "orion",
        "minicpm",
        "rwkv-world",
        "deepseek-ocr",
        "hunyuan-moe",
        "hunyuan-dense",
        "hunyuan-vl",
        "mistral-v1",
        "mistral-v3",
        "mistral-v3-tekken",
        "mistral-v7",
        "mistral-v7-tekken",
    ):
        assert FIXTURE["builtin"][name]["full/gen"] == FIXTURE["builtin"][name]["full/nogen"]


# --- detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", FIXTURE["synthetic"], ids=lambda e: e["source"][:40])
def test_detection_rules(entry):
    source, detected = entry["source"], entry["detected"]
    if detected is None:
        assert detect_template(source) is None
        assert not verify_legacy(source)
        with pytest.raises(ValueError, match="^this custom template is not supported, try using --jinja$"):
            apply_legacy(source, CONVERSATIONS["full"], True)
    elif detected == []:  # DOTS1: detected, but not a name
        assert detect_template(source) == DOTS1
        assert renders(source) == entry["renders"]
    else:
        assert detect_template(source) in detected
        assert renders(source) == FIXTURE["builtin"][detected[0]]


def test_granite_4_split_by_source():
    """granite-4.0 and granite-4.1 format alike; upstream tells them apart by g4_default_system_message."""
    assert detect_template("<|start_of_role|><tools>g4_default_system_message") == "granite-4.0"
    assert detect_template("<|start_of_role|><tool_call>") == "granite-4.1"


@pytest.mark.parametrize("filename", sorted(FIXTURE["model_templates"]))
def test_model_templates(filename):
    source = template_source(filename)
    detected = FIXTURE["model_templates"][filename]
    if detected is None:
        assert detect_template(source) is None
        assert not verify_legacy(source)
    else:
        assert detect_template(source) in detected
        assert renders(source) == FIXTURE["builtin"][detected[0]]


def test_model_template_kinds():
    """Which built-in b10621 formats some of its model templates as (granite 4.x: either)."""
    kinds = FIXTURE["model_templates"]
    assert kinds["Qwen-Qwen3-0.6B.jinja"] == ["chatml"]
    assert kinds["meta-llama-Llama-3.1-8B-Instruct.jinja"] == ["llama3"]
    assert kinds["mistralai-Mistral-Nemo-Instruct-2407.jinja"] == ["mistral-v3-tekken"]
    assert kinds["Mistral-Small-3.2-24B-Instruct-2506.jinja"] == ["mistral-v7"]
    assert kinds["deepseek-ai-DeepSeek-V3.1.jinja"] == ["deepseek3"]
    assert kinds["GLM-4.6.jinja"] == ["chatglm4"]
    assert kinds["openai-gpt-oss-120b.jinja"] == ["gpt-oss"]
    assert kinds["unsloth-Apriel-1.5.jinja"] == ["phi3"]
    assert kinds["ibm-granite-granite-4.0.jinja"] == ["granite-4.0", "granite-4.1"]
    assert kinds["MiniMax-M2.jinja"] is None and kinds["google-gemma-4-31B-it.jinja"] is None


# --- C strings, content parts, startup ------------------------------------------------------------


def test_nul_ends_role_content_and_source():
    assert apply_legacy("chatml", [("us\0er", "a\0b")], False) == "<|im_start|>us\na<|im_end|>\n"
    assert detect_template("chatml\0anything") == "chatml"
    assert detect_template("\0<|im_start|>") is None


def test_trim_and_upper_are_ascii_only():
    assert apply_legacy("llama3", [("user", "\u00a0x\u3000 \t\v\f\r\n")], False) == (
        "<|start_header_id|>user<|end_header_id|>\n\n\u00a0x\u3000<|eot_id|>"
    )
    assert apply_legacy("openchat", [("\u00e9x", "c"), ("", "d")], False) == (
        "GPT4 Correct \u00e9x: c<|end_of_turn|>GPT4 Correct : d<|end_of_turn|>"
    )
    assert apply_legacy("bailing", [("stra\u00dfe", "c")], False) == "<role>STRA\u00dfE</role>c"


def _oai_message(msg: dict) -> tuple[str, str]:
    """A recorded OpenAI-style message as the legacy route sees it: role and flattened content."""
    content = msg.get("content")
    if isinstance(content, list):
        return msg["role"], legacy_content("", [(p["type"], p.get("text", "")) for p in content])
    return msg["role"], content or ""


def test_requests_on_model_template():
    """--no-jinja on SmolLM2's own template (detected as chatml): its default system prompt is not added."""
    rec = FIXTURE["smollm2_no_jinja"]
    assert detect_template(rec["chat_template"]) == "chatml"
    for case in rec["requests"]:
        messages = [_oai_message(m) for m in case["messages"]]
        # a trailing assistant message becomes a continuation: no generation prompt (and nothing trimmed)
        gen = not (messages and messages[-1][0] == "assistant")
        assert apply_legacy(rec["chat_template"], messages, gen) == case["prompt"], case["messages"]


def test_legacy_content():
    assert legacy_content("", [("text", "a"), ("text", "b")]) == "a\nb"
    assert legacy_content("", [("text", ""), ("text", "b"), ("text", ""), ("text", "c")]) == "b\n\nc"
    assert legacy_content("x", [("image_url", "?"), ("media_marker", "<__media__>")]) == "x\n<__media__>"


def test_unsupported_error():
    with pytest.raises(ValueError) as e:
        apply_legacy("INVALID TEMPLATE", [("user", "x")], True)
    assert str(e.value) == UNSUPPORTED_TEMPLATE_ERROR


def test_startup_refusal_text():
    for r in FIXTURE["refusals"]:
        template = r["argv_tail"][-1]
        assert r["rc"] == 1 and r["stdout"] == ""
        assert not verify_legacy(template)
        # printed with fprintf(stderr, "%s\n")
        assert r["stderr"] == unsupported_template_message(template, use_jinja=False) + "\n"
    assert unsupported_template_message("x", use_jinja=True) == (
        "error: the supplied chat template is not supported: x\n"
    )


# --- /props ---------------------------------------------------------------------------------------


def test_default_template_source():
    assert default_template_source("chatml") == CHATML_TEMPLATE_SRC
    assert default_template_source("", "chatml", "TOOLS") == "TOOLS"
    assert default_template_source("", "", "") == CHATML_TEMPLATE_SRC
    # an override skips the model's templates
    assert default_template_source("chatml", "M", "TOOLS") == CHATML_TEMPLATE_SRC
    assert default_template_source("", "M", "TOOLS") == "M"
    assert default_template_source(" chatml", "M") == " chatml"


@pytest.mark.parametrize("name", LEGACY_TEMPLATES)
def test_props_under_no_jinja(name):
    """/props "chat_template" is the default template's source: the bare name, but CHATML_TEMPLATE_SRC for
    chatml; its caps are the Jinja analysis of that text (a bare name reads no system message)."""
    from server.chat.caps import template_caps

    props = FIXTURE["props"][name]
    source = default_template_source(name)
    assert source == props["chat_template"]
    assert template_caps(source) == props["chat_template_caps"]
