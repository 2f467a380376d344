"""The "prompt" field as b10621's tokenize_input_prompts() reads it: one prompt or several.

A string, an array of token ids, a mixed array of strings and ids, or {"prompt_string": ...} is one prompt;
an array holding no integer is several (each element one of the former).
"""

from __future__ import annotations

from ..errors import BAD_PROMPT, EMPTY_PROMPTS, MULTIMODAL_UNSUPPORTED, ErrorKind, UpstreamError, type_error
from .media_input import base64_decode


def checked_mixed(value) -> str | list:
    """A tokenize_mixed() argument as b10621's JSON library takes it: a string, or an array whose elements are
    strings or numbers (get<llama_token>() throws its type_error, a 500, on anything else)."""
    if not isinstance(value, (str, list)):
        raise UpstreamError(type_error("string", value), ErrorKind.SERVER)
    for part in value if isinstance(value, list) else ():
        if not isinstance(part, str) and (isinstance(part, bool) or not isinstance(part, (int, float))):
            raise UpstreamError(type_error("number", part), ErrorKind.SERVER)
    return value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_mixed(v) -> bool:
    return isinstance(v, list) and any(isinstance(e, str) for e in v) and any(_is_int(e) for e in v)


def subprompt_tokens(tokenizer, prompt, media=None) -> list[int]:
    """One prompt's ids; `media(text, files)`: a projector's tokenizer for {"prompt_string", "multimodal_data"}."""
    if isinstance(prompt, str) or _is_mixed(prompt):
        return tokenizer.tokenize_mixed(prompt, add_special=True, parse_special=True)
    if isinstance(prompt, list) and all(_is_int(e) for e in prompt):
        return list(prompt)
    if isinstance(prompt, dict) and "prompt_string" in prompt:
        if "multimodal_data" in prompt:
            if media is None:
                raise UpstreamError(MULTIMODAL_UNSUPPORTED, ErrorKind.INVALID_REQUEST)
            data = prompt["multimodal_data"]
            bad = next((e for e in (data if isinstance(data, list) else [data]) if not isinstance(e, str)), None)
            if bad is not None or not isinstance(data, list):
                raise UpstreamError(type_error("string", bad if bad is not None else data), ErrorKind.INVALID_REQUEST)
            return media(prompt["prompt_string"], [base64_decode(e) for e in data])
        inner = prompt["prompt_string"]
        if not isinstance(inner, (str, list)):
            raise UpstreamError(BAD_PROMPT, ErrorKind.INVALID_REQUEST)
        return tokenizer.tokenize_mixed(inner, add_special=True, parse_special=True)
    raise UpstreamError(BAD_PROMPT, ErrorKind.INVALID_REQUEST)


def input_prompts(tokenizer, prompt, media=None) -> list[list[int]]:
    if isinstance(prompt, list) and not any(_is_int(e) for e in prompt):
        if not prompt:
            raise UpstreamError(EMPTY_PROMPTS, ErrorKind.INVALID_REQUEST)
        return [subprompt_tokens(tokenizer, p, media) for p in prompt]
    return [subprompt_tokens(tokenizer, prompt, media)]
