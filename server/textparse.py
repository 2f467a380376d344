"""The C++ text conversions b10621's option handlers use (std::stoi, std::stoul, std::stof, common/arg.cpp's
parse_bool_value and parse_csv_row, the is_truthy / is_falsey / is_autoy vocabularies), for every layer that
reads b10621's option values: the command line, the API keys, the log options, the adapter scales. Errors are
ValueErrors whose text is the C++ exception's what()."""

from __future__ import annotations

import re

TRUTHY = ("on", "enabled", "true", "1")  # common_arg_utils::is_truthy, case-sensitive
FALSEY = ("off", "disabled", "false", "0")
AUTOY = ("auto", "-1")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def stoi(raw: str) -> int:
    """std::stoi: leading whitespace, a sign, decimal digits, the rest ignored; "stoi" on failure or overflow."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", raw)
    if not m:
        raise ValueError("stoi")
    v = int(m.group(1))
    if not INT_MIN <= v <= INT_MAX:
        raise ValueError("stoi")
    return v


def stoul(raw: str) -> int:
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", raw)
    if not m:
        raise ValueError("stoul")
    return int(m.group(1))


def stof(raw: str) -> float:
    """std::stof: the longest leading number (hex and inf/nan included); "stof" when there is none."""
    m = re.match(
        r"[ \t\n\v\f\r]*([+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?|"
        r"inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))",
        raw,
        re.IGNORECASE,
    )
    if not m:
        raise ValueError("stof")
    text = m.group(1)
    if "x" in text.lower():
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        return sign * float.fromhex(body if "p" in body.lower() else body + "p0")
    return float(text)


def parse_bool_value(raw: str) -> bool:
    if raw in TRUTHY:
        return True
    if raw in FALSEY:
        return False
    raise ValueError("invalid boolean value")


def parse_csv_row(value: str) -> list[str]:
    """common/arg.cpp's parse_csv_row (--api-key, LLAMA_API_KEY, FNAME:SCALE lists): commas split; a field
    opening with '"' is quoted, where ',' is literal and '""' is '"'; a quote later in a field is literal."""
    fields: list[str] = []
    field: list[str] = []
    in_quotes = False
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == '"':
            if not in_quotes:
                if field:
                    field.append('"')
                else:
                    in_quotes = True
            elif i + 1 < len(value) and value[i + 1] == '"':
                field.append('"')
                i += 1
            else:
                in_quotes = False
        elif ch == "," and not in_quotes:
            fields.append("".join(field))
            field = []
        else:
            field.append(ch)
        i += 1
    fields.append("".join(field))
    return fields
