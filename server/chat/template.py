"""Rendering a checkpoint's chat template with jinja2, the way HF transformers sets it up."""

from __future__ import annotations

import json
from functools import lru_cache

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    """raise_exception() in a template, or a template that fails to render."""


def _raise(message: str):
    raise TemplateError(message)


def _tojson(value, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(
        value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=8)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(source)


def render(
    source: str, messages: list, add_generation_prompt: bool = False, tools: list | None = None, **kwargs
) -> str:
    context = {"messages": messages, "add_generation_prompt": add_generation_prompt, **kwargs}
    if tools is not None:  # absent from the context unless the request carries tools
        context["tools"] = tools
    try:
        return compile_template(source).render(**context)
    except TemplateError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure inside the template is the template's error
        raise TemplateError(f"{type(exc).__name__}: {exc}") from exc
