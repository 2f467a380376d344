"""b10621's jinja values for jinja2 (common/jinja/value.cpp, value.h, runtime.cpp): its undefined, its operators,
how it prints a value, and the built-in functions it offers per type, which serve both as filters (x|upper) and
as methods (x.upper()). Strings are compared and measured as UTF-8 bytes and cased as ASCII, as upstream does."""

from __future__ import annotations

import math
import re
import time
from contextvars import ContextVar
from functools import cmp_to_key

import jinja2
from jinja2.utils import Namespace


class JinjaError(Exception):
    """A runtime error of b10621's engine (a template that fails there fails here)."""


class Undefined(jinja2.ChainableUndefined):
    """value_undefined: falsy, empty when printed or iterated, and any member of it is undefined too."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, Undefined)

    def __ne__(self, other):
        return not isinstance(other, Undefined)

    __hash__ = jinja2.ChainableUndefined.__hash__


class Usage:
    """b10621's value stats (value_t::stats_t) while one capability probe renders: which values the template
    read, and which built-ins and accesses it applied to each (by identity)."""

    def __init__(self):
        self.used: set[int] = set()
        self.ops: dict[int, set[str]] = {}
        self._alive: list = []  # the values marked, kept alive so that no other value takes their id

    def mark(self, v, deep: bool = False) -> None:
        self.used.add(id(v))
        self._alive.append(v)
        if deep and isinstance(v, (list, tuple)):
            for x in v:
                self.mark(x, True)
        elif deep and is_object(v):
            for k, x in items_of(v):
                self.mark(k, True)
                self.mark(x, True)

    def op(self, v, name: str) -> None:
        self.ops.setdefault(id(v), set()).add(name)
        self._alive.append(v)

    def is_used(self, v) -> bool:
        return id(v) in self.used

    def has_op(self, v, name: str) -> bool:
        return name in self.ops.get(id(v), ())


USAGE: ContextVar[Usage | None] = ContextVar("template_usage", default=None)


def seen(v):
    """A variable's value read by the template (identifier::execute_impl marks it used)."""
    usage = USAGE.get()
    if usage is not None:
        usage.mark(v)
    return v


def builtin_used(v, name: str) -> None:
    """try_builtin_func(): the value a built-in is looked up on is used, and the built-in's name noted."""
    usage = USAGE.get()
    if usage is not None:
        usage.mark(v)
        usage.op(v, name)


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_object(v) -> bool:
    return isinstance(v, (dict, Namespace))


def items_of(v) -> list:
    """An object's (key, value) pairs, in insertion order."""
    return list((v._Namespace__attrs if isinstance(v, Namespace) else v).items())


def type_name(v) -> str:
    if isinstance(v, Undefined):
        return "Undefined"
    for kind, name in (
        (type(None), "None"),
        (bool, "Boolean"),
        (int, "Integer"),
        (float, "Float"),
        (str, "String"),
        (tuple, "Tuple"),
        (list, "Array"),
        (dict, "Object"),
        (Namespace, "Object"),
    ):
        if isinstance(v, kind):
            return name
    return "Function" if callable(v) else type(v).__name__


def float_str(f: float) -> str:
    """value_float_t::as_string(): std::to_string without its trailing zeros, one kept after the point."""
    out = f"{f:f}".rstrip("0")
    return out + "0" if out.endswith(".") else out


def repr_str(v) -> str:
    """value_to_string_repr(): a string quoted, JSON-quoted when it holds a quote."""
    if isinstance(v, str):
        return to_json(v) if "'" in v else "'" + v + "'"
    if v is None:
        return "None"
    if isinstance(v, Undefined):
        return "Undefined"
    if callable(v) and not isinstance(v, (list, tuple, dict)):
        return "Function"
    return as_string(v)


def as_string(v) -> str:
    """value_t::as_string(): how a value joins a string."""
    if isinstance(v, str):
        return str(v)
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return float_str(v)
    if v is None:
        return "None"
    if isinstance(v, tuple):
        return "(" + ", ".join(repr_str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(repr_str(x) for x in v) + "]"
    if is_object(v):
        return "{" + ", ".join(f"{repr_str(k)}: {repr_str(x)}" for k, x in items_of(v)) + "}"
    raise JinjaError(f"{type_name(v)} is not a string value")


def output(v) -> str:
    """gather_string_parts_recursive(): what {{ value }} prints. None, undefined and objects print nothing; an
    array prints its items one after another."""
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (bool, int, float)):
        return as_string(v)
    if isinstance(v, (list, tuple)):
        return "".join(output(x) for x in v)
    return ""


# ---------------------------------------------------------------------------------------------------------------
# JSON (value_to_json)

_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(s: str, ensure_ascii: bool) -> str:
    out = []
    for ch in s:
        if ch in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        elif ensure_ascii and ord(ch) >= 0x80:
            if 0xD800 <= ord(ch) <= 0xDFFF:  # not valid UTF-8 upstream
                out.append("\\ufffd")
            elif ord(ch) > 0xFFFF:
                cp = ord(ch) - 0x10000
                out.append(f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}")
            else:
                out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def to_json(  # noqa: C901
    v, indent: int = -1, item_sep: str | None = None, key_sep: str = ": ", ensure_ascii: bool = False, level: int = 0
) -> str:
    if item_sep is None:
        item_sep = ", " if indent < 0 else ","
    newline = "\n" if indent >= 0 else ""
    pad = " " * (level * indent) if indent > 0 else ""
    step = " " * indent if indent > 0 else ""
    if v is None or isinstance(v, Undefined):
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return _json_string(v, ensure_ascii)
    if isinstance(v, (list, tuple)):
        if not v:
            return "[]"
        body = (item_sep + newline).join(
            pad + step + to_json(x, indent, item_sep, key_sep, ensure_ascii, level + 1) for x in v
        )
        return "[" + newline + body + newline + pad + "]"
    if is_object(v):
        pairs = items_of(v)
        if not pairs:
            return "{}"
        body = (item_sep + newline).join(
            pad
            + step
            + _json_string(as_string(k), ensure_ascii)
            + key_sep
            + to_json(x, indent, item_sep, key_sep, ensure_ascii, level + 1)
            for k, x in pairs
        )
        return "{" + newline + body + newline + pad + "}"
    return "null"


# ---------------------------------------------------------------------------------------------------------------
# Operators (binary_expression::execute_impl)


def binop(op: str, a, b):  # noqa: C901
    a_null, b_null = a is None or isinstance(a, Undefined), b is None or isinstance(b, Undefined)
    if a_null or b_null:
        if op in ("+", "~"):  # the workaround for a null or undefined joined to a string: the string
            if a_null and isinstance(b, str):
                return str(b)
            if b_null and isinstance(a, str):
                return str(a)
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            raise JinjaError(f"Cannot perform operation {op} on undefined values")
        raise JinjaError("Cannot perform operation on null values")
    if is_num(a) and is_num(b):
        x, y = float(a), float(b)
        as_float = isinstance(a, float) or isinstance(b, float)
        if op in ("+", "-", "*"):
            r = x + y if op == "+" else x - y if op == "-" else x * y
            return r if as_float else int(r)
        if op == "/":
            return x / y if y else (math.copysign(math.inf, x) if x else math.nan)
        if op == "%":
            r = math.fmod(x, y) if y else math.nan
            return r if as_float else int(r)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and op == "+":
        return list(a) + list(b)
    if (isinstance(a, str) or isinstance(b, str)) and op in ("~", "+"):
        return as_string(a) + as_string(b)
    if op == "*" and ((isinstance(a, str) and is_int(b)) or (is_int(a) and isinstance(b, str))):
        s, n = (a, b) if isinstance(a, str) else (b, a)
        return str(s) * max(n, 0)
    raise JinjaError(f'Unknown operator "{op}" between {type_name(a)} and {type_name(b)}')


def concat(values) -> str:
    """a ~ b ~ c, left to right."""
    values = list(values)
    out = values[0]
    for v in values[1:]:
        out = binop("~", out, v)
    return out


def negate(v):
    if is_num(v):
        return -v
    raise JinjaError("Unary - operator requires numeric operand")


def compare(a, b, op: str) -> bool:
    """value_compare()"""
    ops = {
        "eq": lambda x, y: x == y,
        "ne": lambda x, y: x != y,
        "gt": lambda x, y: x > y,
        "ge": lambda x, y: x >= y,
        "lt": lambda x, y: x < y,
    }
    if is_num(a) and is_num(b):
        return ops[op](float(a), float(b))
    if isinstance(a, str) and (is_num(b) or isinstance(b, str)) or isinstance(b, str) and is_num(a):
        return ops[op](as_string(a).encode(), as_string(b).encode())
    if isinstance(a, bool) and isinstance(b, bool):
        if op not in ("eq", "ne"):
            raise JinjaError("Unsupported comparison operator for bool type")
        return ops[op](a, b)
    return False


def _immutable(v) -> bool:
    return not isinstance(v, (list, dict, Namespace))


def _hashable(v) -> bool:
    """is_hashable() of a value that is also immutable: what may key an object or be compared by content."""
    if (
        isinstance(v, (Undefined, dict, Namespace))
        or v is not None
        and not isinstance(v, (bool, int, float, str, list, tuple))
    ):
        return False
    if isinstance(v, (list, tuple)):
        return all(_immutable(x) and _hashable(x) for x in v)
    return True


def _content_hashable(v) -> bool:
    """is_hashable() of an array or object: all its values immutable and hashable."""
    values = [x for _, x in items_of(v)] if is_object(v) else v
    return all(_immutable(x) and _hashable(x) for x in values)


def equal(a, b) -> bool:
    """a == b (value_t::operator==): numbers by value, strings by text; arrays and objects by content, in order,
    and only when they hold no array or object (else they are never equal)."""
    if isinstance(a, Undefined):
        return isinstance(b, Undefined)
    if a is None:
        return b is None
    if isinstance(a, (bool, int, float)):
        if not isinstance(b, (bool, int, float)) or isinstance(b, Undefined):
            return False
        return _as_int(a) == _as_int(b) and float(a) == float(b)
    if isinstance(a, str):
        return isinstance(b, str) and a == b
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, tuple) == isinstance(a, tuple)
            and isinstance(b, (list, tuple))
            and _content_hashable(a)
            and _content_hashable(b)
            and len(a) == len(b)
            and all(equal(x, y) for x, y in zip(a, b, strict=False))
        )
    if is_object(a):
        if not is_object(b) or not _content_hashable(a) or not _content_hashable(b):
            return False
        pa, pb = items_of(a), items_of(b)
        return len(pa) == len(pb) and all(
            equal(ka, kb) and equal(va, vb) for (ka, va), (kb, vb) in zip(pa, pb, strict=False)
        )
    return a is b


def contains(needle, haystack) -> bool:
    """test_is_in"""
    if isinstance(haystack, Undefined):
        return False
    if isinstance(haystack, (list, tuple)):
        return any(equal(needle, x) for x in haystack)
    if isinstance(haystack, str):
        if not isinstance(needle, str):
            raise JinjaError(
                "'in' test expects args[1] as string when args[0] is string, got args[1] as " + type_name(needle)
            )
        return needle in haystack
    if is_object(haystack):
        return _has_key(haystack, needle)
    raise JinjaError("'in' test expects iterable as first argument, got " + type_name(haystack))


_COMPARE_OPS = {"gt": ">", "gteq": ">=", "lt": "<", "lteq": "<=", "in": "in", "notin": "not in"}


def compare_op(op: str, a, b):
    """a == b, a < b, a in b ... (jinja2's names for them) as binary_expression::execute_impl runs them."""
    if op in ("eq", "ne"):
        return equal(a, b) == (op == "eq")
    name = _COMPARE_OPS[op]
    if isinstance(a, Undefined) or isinstance(b, Undefined):
        if isinstance(b, Undefined) and op in ("in", "notin"):  # anything in undefined: false
            return op == "notin"
        raise JinjaError(f"Cannot perform operation {name} on undefined values")
    if a is None or b is None:
        raise JinjaError("Cannot perform operation on null values")
    if is_num(a) and is_num(b) and op not in ("in", "notin"):
        x, y = float(a), float(b)
        return {"gt": x > y, "gteq": x >= y, "lt": x < y, "lteq": x <= y}[op]
    if op in ("in", "notin"):
        both_arrays = isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
        if not both_arrays and (
            isinstance(b, (list, tuple)) or is_object(b) or isinstance(a, str) and isinstance(b, str)
        ):
            return contains(a, b) == (op == "in")
    raise JinjaError(f'Unknown operator "{name}" between {type_name(a)} and {type_name(b)}')


# ---------------------------------------------------------------------------------------------------------------
# Built-in functions per type (the get_builtins() tables). Each takes the call's arguments, the value first, as
# b10621's func_args: keyword arguments count among them and a position is only read when it holds no keyword.


class Args:
    def __init__(self, name: str, value, args: tuple = (), kwargs: dict | None = None):
        self.name, self.args, self.kwargs = name, (value, *args), kwargs or {}

    @property
    def count(self) -> int:
        return len(self.args) + len(self.kwargs)

    def pos(self, i: int, *default):
        if i < len(self.args):
            return self.args[i]
        if i < self.count:
            return self.kwargs[list(self.kwargs)[i - len(self.args)]]  # a keyword argument in that place
        if default:
            return default[0]
        raise JinjaError(f"Function '{self.name}' expected at least {i + 1} arguments, got {self.count}")

    def kw_or_pos(self, key: str, i: int):
        if key in self.kwargs:
            return self.kwargs[key]
        return self.args[i] if i < len(self.args) else Undefined()

    def ensure(self, lo: int, hi: int = 999) -> None:
        if not lo <= self.count <= hi:
            raise JinjaError(f"Function '{self.name}' expected between {lo} and {hi} arguments, got {self.count}")

    def types(self, *kinds) -> None:
        """ensure_vals: these leading arguments present and of these kinds (a kind of None: any)."""
        self.ensure(len(kinds))
        for i, kind in enumerate(kinds):
            v = self.pos(i)
            if kind is not None and not kind(v):
                raise JinjaError(f"Function '{self.name}' expected value of another type, got {type_name(v)}")


def _as_int(v) -> int:
    if isinstance(v, (bool, int)):
        return int(v)
    if isinstance(v, float):
        return int(v) if math.isfinite(v) else 0
    raise JinjaError(f"{type_name(v)} is not an int value")


def _as_float(v) -> float:
    if isinstance(v, (bool, int, float)):
        return float(v)
    raise JinjaError(f"{type_name(v)} is not a float value")


def _ascii_map(s: str, fn) -> str:
    return "".join(fn(c) if c.isascii() else c for c in s)


_SPACE = " \t\n\v\f\r"


def _strip(s: str, chars, left: bool, right: bool) -> str:
    chars = _SPACE if isinstance(chars, Undefined) else as_string(chars)
    if left:
        s = s.lstrip(chars)
    if right:
        s = s.rstrip(chars)
    return s


def _title(s: str) -> str:
    out, cap = [], True
    for c in s:
        if c in _SPACE:
            cap = True
            out.append(c)
        elif cap:
            out.append(c.upper() if c.isascii() else c)
            cap = False
        else:
            out.append(c.lower() if c.isascii() else c)
    return "".join(out)


def _capitalize(s: str) -> str:
    return (s[0].upper() if s[0].isascii() else s[0]) + _ascii_map(s[1:], str.lower) if s else s


def _split(a: Args, right: bool):
    a.ensure(1, 3)
    s = a.pos(0)
    if not isinstance(s, str):
        raise JinjaError(f"{a.name}() first argument must be a string")
    delim = as_string(a.pos(1)) if a.count > 1 else " "
    if not delim:
        raise JinjaError("empty separator")
    maxsplit = _as_int(a.pos(2)) if a.count > 2 else -1
    return s.rsplit(delim, maxsplit) if right else s.split(delim, maxsplit)


def _stoi(s: str, base: int) -> int:
    """std::stoi: leading blanks, a sign, digits of the base (and its 0x prefix); ValueError when none."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)", s)
    sign, rest = m.group(1), s[m.end() :]
    if base in (0, 16) and re.match(r"0[xX][0-9a-fA-F]", rest):
        rest, base = rest[2:], 16
    elif base == 0:
        base = 8 if rest.startswith("0") else 10
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
    n = 0
    while n < len(rest) and rest[n].lower() in digits:
        n += 1
    if not n:
        raise ValueError(s)
    value = int(sign + rest[:n], base)
    if not -(2**31) <= value < 2**31:
        raise ValueError(s)
    return value


def _stod(s: str) -> float:
    m = re.match(r"[ \t\n\v\f\r]*([+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))", s, re.IGNORECASE)
    if not m:
        raise ValueError(s)
    return float(m.group(1))


def _indent(a: Args) -> str:
    a.ensure(1, 4)
    s, width = a.pos(0), a.kw_or_pos("width", 1)
    first, blank = _truthy(a.kw_or_pos("first", 2)), _truthy(a.kw_or_pos("blank", 3))
    if not isinstance(s, str):
        raise JinjaError("indent() first argument must be a string")
    pad = " " * width if is_int(width) else str(width) if isinstance(width, str) else "    "
    lines = s.split("\n")
    if s.endswith("\n"):
        lines.pop()
    out = ""
    for line in lines if s else []:  # as upstream's getline loop: a leading empty line adds nothing
        if out:
            out += "\n"
        if first if not out else (line != "" or blank):
            out += pad
        out += line
    if s.endswith("\n"):
        out += "\n" + (pad if blank else "")
    return out


def _format(a: Args) -> str:
    fmt = a.pos(0)
    if not isinstance(fmt, str):
        raise JinjaError("format() first argument must be a string")
    out, arg, i = [], 1, 0
    while i < len(fmt):
        if fmt[i] != "{":
            out.append(fmt[i])
        elif i + 1 < len(fmt) and fmt[i + 1] == "}":
            out.append(as_string(a.pos(arg)))
            arg += 1
            i += 1
        else:
            raise JinjaError("NotImplemented: format() only supports simple '{}' placeholders")
        i += 1
    return "".join(out)


def _slice(a: Args, kind):
    a.ensure(2, 4)
    a.types(kind, is_int)
    # upstream reads every one of start, stop and step: with fewer given, an undefined one fails
    start, stop, step = (_as_int(a.pos(i, Undefined())) for i in (1, 2, 3))
    if step == 0:
        raise JinjaError("slice step cannot be zero")
    return a.pos(0)[start:stop:step]


def _tojson(a: Args) -> str:
    a.ensure(1, 5)
    usage = USAGE.get()
    if usage is not None:
        usage.mark(a.pos(0), deep=True)
    ensure_ascii, indent = a.kw_or_pos("ensure_ascii", 1), a.kw_or_pos("indent", 2)
    separators, sort_keys = a.kw_or_pos("separators", 3), a.kw_or_pos("sort_keys", 4)
    if _truthy(sort_keys):
        raise JinjaError("NotImplemented: tojson sort_keys=true not implemented")
    seps = list(separators) if isinstance(separators, (list, tuple)) else []
    ind = indent if is_int(indent) else -1
    item_sep = as_string(seps[0]) if seps else (", " if ind < 0 else ",")
    key_sep = as_string(seps[1]) if len(seps) > 1 else ": "
    return to_json(a.pos(0), ind, item_sep, key_sep, _truthy(ensure_ascii))


def _truthy(v) -> bool:
    if callable(v) and not isinstance(v, (Undefined, list, tuple, dict, str)):
        raise JinjaError("Function is not a bool value")
    return bool(v)


def _default(a: Args):
    a.ensure(2, 3)
    v = a.pos(0)
    if _truthy(a.kw_or_pos("boolean", 2)):
        return a.pos(1) if not _truthy(v) else v
    return a.pos(1) if v is None or isinstance(v, Undefined) else v


def _selectattr(a: Args, reject: bool) -> list:  # noqa: C901
    a.ensure(2, 4)
    a.types(lambda v: isinstance(v, (list, tuple)), lambda v: isinstance(v, str))
    items, attr, out = a.pos(0), a.pos(1), []
    if a.count == 3:  # arr|select("test", arg): the test on each item
        test = TESTS.get(as_string(a.pos(1)))
        if test is None:
            raise JinjaError(f"selectattr: unknown test '{as_string(a.pos(1))}'")

        def pick(x):
            return test(x, a.pos(2))
    elif a.count == 4:  # arr|selectattr("attr", "test", arg)
        test = TESTS.get(as_string(a.pos(2)))
        if test is None:
            raise JinjaError(f"selectattr: unknown test '{as_string(a.pos(2))}'")

        def pick(x):
            if not is_object(x):
                raise JinjaError("selectattr: item is not an object")
            return test(_key(x, attr), a.pos(3))
    else:

        def pick(x):
            if not is_object(x):
                raise JinjaError("selectattr: item is not an object")
            return _truthy(_key(x, attr))

    for x in items:
        if bool(pick(x)) != reject:
            out.append(x)
    return out


_NO_DEFAULT = object()


def _has_key(obj, key) -> bool:
    if not _hashable(key):
        raise JinjaError("Object key of unhashable type: " + type_name(key))
    return key in (obj._Namespace__attrs if isinstance(obj, Namespace) else obj)


def _key(obj, key, default=_NO_DEFAULT):
    """value_object_t::at(key, default): the key's value, or the default (undefined unless given)."""
    if _has_key(obj, key):
        return (obj._Namespace__attrs if isinstance(obj, Namespace) else obj)[key]
    return Undefined() if default is _NO_DEFAULT else default


def _join(a: Args) -> str:
    a.ensure(1, 3)
    items = a.pos(0)
    if not isinstance(items, (list, tuple)):
        raise JinjaError("join() first argument must be an array")
    delim, attr = a.kw_or_pos("d", 1), a.kw_or_pos("attribute", 2)
    if not isinstance(attr, (Undefined, str)) and not is_int(attr):
        raise JinjaError("join() attribute must be string or integer")
    parts = []
    for x in items:
        if not isinstance(attr, Undefined):
            if is_int(attr) and isinstance(x, (list, tuple)):
                if not -len(x) <= attr < len(x):
                    raise JinjaError(f"Index {attr} out of bounds for array of size {len(x)}")
                x = x[attr]
            elif not is_int(attr) and is_object(x):
                x = _key(x, attr)
                if isinstance(x, Undefined):
                    raise JinjaError(f"Key '{attr}' not found in value of type Object")
        if not isinstance(x, str) and not is_num(x):
            raise JinjaError("join() can only join arrays of strings or numerics")
        parts.append(as_string(x))
    return ("" if isinstance(delim, Undefined) else as_string(delim)).join(parts)


def _map(a: Args):
    a.ensure(2)
    items = a.pos(0)
    if not isinstance(items, (list, tuple)):
        raise JinjaError("map: first argument must be an array")
    if len(a.args) > 1:
        raise JinjaError("NotImplemented: map: filter-mapping not implemented")
    attr = a.kw_or_pos("attribute", 1)
    if not isinstance(attr, str) and not is_int(attr):
        raise JinjaError("map: attribute must be string or integer")
    default = a.kwargs.get("default", Undefined())
    out = []
    for x in items:
        if is_int(attr):
            ok = isinstance(x, (list, tuple)) and -len(x) <= attr < len(x)
            out.append(x[attr] if ok else default)
        else:
            out.append(_key(x, attr, default) if is_object(x) else default)
    return tuple(out) if isinstance(items, tuple) else out


def _sort_key(reverse: bool):
    op = "gt" if reverse else "lt"
    return cmp_to_key(lambda x, y: -1 if compare(x, y, op) else 1 if compare(y, x, op) else 0)


def _sort(a: Args):
    a.ensure(1, 4)
    items = a.pos(0)
    if not isinstance(items, (list, tuple)):
        raise JinjaError("sort: first argument must be an array")
    reverse, attr = _truthy(a.kw_or_pos("reverse", 1)), a.kw_or_pos("attribute", 3)

    def pick(x):
        if isinstance(attr, Undefined):
            return x
        if is_int(attr) and isinstance(x, (list, tuple)):
            return x[attr]
        if not is_int(attr) and is_object(x):
            return _key(x, attr)
        raise JinjaError("sort: unsupported object attribute comparison")

    out = sorted(items, key=lambda x: _sort_key(reverse)(pick(x)))
    return tuple(out) if isinstance(items, tuple) else out


def _minmax(a: Args, op: str):
    a.ensure(1, 4)
    a.types(lambda v: isinstance(v, (list, tuple)))
    if not isinstance(a.kw_or_pos("attribute", 2), Undefined):
        raise JinjaError(f"NotImplemented: {a.name}: attribute not implemented")
    items = a.pos(0)
    if not items:
        return Undefined()
    out = items[0]
    for x in items[1:]:
        if compare(x, out, op):
            out = x
    return out


def _append(a: Args):
    a.ensure(2)
    items = a.pos(0)
    if not isinstance(items, (list, tuple)):
        raise JinjaError("append: first argument must be an array")
    if isinstance(items, tuple):
        raise JinjaError("Attempting to modify immutable type")
    items.append(a.pos(1))
    return items


def _pop(a: Args):
    a.ensure(1, 2)
    a.types(lambda v: isinstance(v, (list, tuple)))
    items = a.pos(0)
    if isinstance(items, tuple):
        raise JinjaError("Attempting to modify immutable type")
    index = _as_int(a.pos(1)) if a.count == 2 else -1
    if index < 0:
        index += len(items)
    if not 0 <= index < len(items):
        raise JinjaError(f"Index {index} out of bounds for array of size {len(items)}")
    return items.pop(index)


def _get(a: Args):
    a.ensure(2, 3)
    if not is_object(a.pos(0)):
        raise JinjaError("get: first argument must be an object")
    if not isinstance(a.pos(1), str):
        raise JinjaError("get: second argument must be a string (key)")
    return _key(a.pos(0), a.pos(1), a.pos(2) if a.count == 3 else None)


def _dictsort(a: Args) -> dict:
    by_value = a.kw_or_pos("by", 2)
    by_value = isinstance(by_value, str) and by_value == "value"
    reverse = _truthy(a.kw_or_pos("reverse", 3))
    key = _sort_key(reverse)
    return dict(sorted(items_of(a.pos(0)), key=lambda kv: key(kv[1] if by_value else kv[0])))


def _not_implemented(what: str):
    def fn(a: Args):
        raise JinjaError(f"NotImplemented: {what} not implemented")

    return fn


def _const(value_fn):
    return lambda a: value_fn()


def _typed(kind, fn):
    """A built-in that checks its input's type first (ensure_vals<T>)."""

    def wrapped(a: Args):
        a.types(kind)
        return fn(a.pos(0))

    return wrapped


_S = lambda v: isinstance(v, str)
_A = lambda v: isinstance(v, (list, tuple))
_O = is_object


def _str_int(a: Args) -> int:
    v, default, base = a.pos(0), a.kw_or_pos("default", 1), a.kw_or_pos("base", 2)
    base = 10 if isinstance(base, Undefined) else _as_int(base)
    if base != 0 and not 2 <= base <= 36:
        raise JinjaError("int() base must be 0 or between 2 and 36")
    if not isinstance(v, str):
        raise JinjaError("int() first argument must be a string")
    try:
        return _stoi(v, base)
    except ValueError:
        return 0 if isinstance(default, Undefined) else _as_int(default)


def _str_float(a: Args) -> float:
    a.types(_S)
    default = a.kw_or_pos("default", 1)
    try:
        return _stod(a.pos(0))
    except ValueError:
        return 0.0 if isinstance(default, Undefined) else _as_float(default)


def _str_replace(a: Args) -> str:
    a.types(_S, _S, _S)
    if a.count > 3 and _as_int(a.pos(3)) > 0:
        raise JinjaError("NotImplemented: String replace with count argument not implemented")
    return a.pos(0).replace(as_string(a.pos(1)), as_string(a.pos(2)))


_NUMBER = {
    "default": _default,
    "tojson": _tojson,
    "safe": _tojson,
    "string": _tojson,
    "float": lambda a: _as_float(a.pos(0)),
}
INT_BUILTINS = {**_NUMBER, "abs": _typed(is_int, abs), "int": _typed(is_int, int), "float": _typed(is_int, float)}
FLOAT_BUILTINS = {
    **_NUMBER,
    "abs": _typed(lambda v: isinstance(v, float), abs),
    "int": _typed(lambda v: isinstance(v, float), _as_int),
    "float": _typed(lambda v: isinstance(v, float), float),
}
BOOL_BUILTINS = {
    "default": _default,
    "int": _typed(lambda v: isinstance(v, bool), int),
    "float": _typed(lambda v: isinstance(v, bool), float),
    "safe": _typed(lambda v: isinstance(v, bool), as_string),
    "string": _typed(lambda v: isinstance(v, bool), as_string),
    "tojson": _tojson,
}
STRING_BUILTINS = {
    "default": _default,
    "upper": _typed(_S, lambda s: _ascii_map(s, str.upper)),
    "lower": _typed(_S, lambda s: _ascii_map(s, str.lower)),
    "strip": lambda a: _strip(_need_str(a, "strip"), a.kw_or_pos("chars", 1), True, True),
    "rstrip": lambda a: _strip(_typed(_S, str)(a), a.kw_or_pos("chars", 1), False, True),
    "lstrip": lambda a: _strip(_typed(_S, str)(a), a.kw_or_pos("chars", 1), True, False),
    "title": _typed(_S, _title),
    "capitalize": _typed(_S, _capitalize),
    "length": _typed(_S, lambda s: len(s.encode("utf-8", "surrogatepass"))),
    "startswith": lambda a: (a.types(_S, _S), a.pos(0).startswith(a.pos(1)))[1],
    "endswith": lambda a: (a.types(_S, _S), a.pos(0).endswith(a.pos(1)))[1],
    "split": lambda a: _split(a, False),
    "rsplit": lambda a: _split(a, True),
    "replace": _str_replace,
    "format": _format,
    "int": _str_int,
    "float": _str_float,
    "string": _typed(_S, str),
    "slice": lambda a: _slice(a, _S),
    "safe": _typed(_S, lambda s: s),
    "tojson": _tojson,
    "indent": _indent,
    "join": _not_implemented("String join builtin"),
}


def _deep_used(v):
    usage = USAGE.get()
    if usage is not None:
        usage.mark(v, deep=True)
    return v


def _need_str(a: Args, name: str) -> str:
    if not isinstance(a.pos(0), str):
        raise JinjaError(f"{name}() first argument must be a string")
    return a.pos(0)


ARRAY_BUILTINS = {
    "default": _default,
    "list": _typed(_A, list),
    "first": _typed(_A, lambda v: v[0] if v else Undefined()),
    "last": _typed(_A, lambda v: v[-1] if v else Undefined()),
    "length": _typed(_A, len),
    "slice": lambda a: _slice(a, _A),
    "selectattr": lambda a: _selectattr(a, False),
    "select": lambda a: _selectattr(a, False),
    "rejectattr": lambda a: _selectattr(a, True),
    "reject": lambda a: _selectattr(a, True),
    "join": _join,
    "string": _typed(_A, lambda v: as_string(_deep_used(v))),
    "tojson": _tojson,
    "map": _map,
    "append": _append,
    "pop": _pop,
    "sort": _sort,
    "reverse": _typed(_A, lambda v: v[::-1]),
    "min": lambda a: _minmax(a, "lt"),
    "max": lambda a: _minmax(a, "gt"),
    "unique": _not_implemented("Array unique builtin"),
}
OBJECT_BUILTINS = {
    "get": _get,
    "keys": _typed(_O, lambda v: [k for k, _ in items_of(v)]),
    "values": _typed(_O, lambda v: [x for _, x in items_of(v)]),
    "items": _typed(_O, lambda v: [tuple(kv) for kv in items_of(v)]),
    "tojson": _tojson,
    "string": _typed(_O, lambda v: as_string(_deep_used(v))),
    "length": _typed(_O, lambda v: len(items_of(v))),
    "dictsort": _dictsort,
    "join": _not_implemented("object join"),
}
NONE_BUILTINS = {
    "default": _default,
    "tojson": _tojson,
    "string": _const(lambda: "None"),
    "safe": _const(lambda: "None"),
    **{k: _const(list) for k in ("items", "map", "reject", "rejectattr", "select", "selectattr", "unique")},
}
UNDEFINED_BUILTINS = {
    "default": _default,
    **{
        k: _const(str)
        for k in ("capitalize", "join", "lower", "replace", "safe", "string", "strip", "title", "truncate", "upper")
    },
    **{k: _const(Undefined) for k in ("first", "last", "max", "min")},
    **{
        k: _const(list)
        for k in ("items", "list", "map", "reject", "rejectattr", "reverse", "select", "selectattr", "sort", "unique")
    },
    **{k: _const(int) for k in ("length", "sum", "wordcount")},
}


def builtins_of(v) -> dict:
    if isinstance(v, Undefined):
        return UNDEFINED_BUILTINS
    if v is None:
        return NONE_BUILTINS
    if isinstance(v, bool):
        return BOOL_BUILTINS
    if isinstance(v, int):
        return INT_BUILTINS
    if isinstance(v, float):
        return FLOAT_BUILTINS
    if isinstance(v, str):
        return STRING_BUILTINS
    if isinstance(v, (list, tuple)):
        return ARRAY_BUILTINS
    if is_object(v):
        return OBJECT_BUILTINS
    raise JinjaError(f"{type_name(v)} has no builtins")


def method(v, name: str):
    """x.name: the built-in bound to x, or None when its type has none of that name."""
    fn = builtins_of(v).get(name)
    if fn is None:
        return None

    def bound(*args, **kwargs):
        return fn(Args(name, v, args, kwargs))

    return bound


_FILTER_ALIASES = {"count": "length", "d": "default", "e": "escape", "trim": "strip"}
_COERCED = {"capitalize", "lower", "replace", "strip", "title", "upper", "wordcount"}


def make_filter(name: str):
    """x|name(...): the built-in of x's type, called with x first (filter_expression::execute_impl)."""
    name = _FILTER_ALIASES.get(name, name)

    def apply(value, *args, **kwargs):
        if name in _COERCED and not args and not kwargs and not isinstance(value, (str, Undefined)):
            value = as_string(value)
        builtin_used(value, name)
        fn = builtins_of(value).get(name)
        if fn is None:
            raise JinjaError(f"Unknown (built-in) filter '{name}' for type {type_name(value)}")
        return fn(Args(name, value, args, kwargs))

    return apply


def _loop_iterable(v):
    usage = USAGE.get()
    if usage is not None:
        usage.mark(v)
        usage.op(v, "array_access")
        if is_object(v):
            usage.op(v, "object_access")
    if isinstance(v, Undefined):
        return []
    if not isinstance(v, (list, tuple)) and not is_object(v):
        raise JinjaError(f"Expected iterable or object type in for loop: got {type_name(v)}")
    return v


def loop_items(v):
    """What {% for x in v %} iterates: an array's items, an object's keys."""
    v = _loop_iterable(v)
    return [k for k, _ in items_of(v)] if is_object(v) else v


def loop_pairs(v):
    """What {% for a, b in v %} iterates: an array's items, an object's (key, value) pairs."""
    v = _loop_iterable(v)
    return [tuple(kv) for kv in items_of(v)] if is_object(v) else v


# ---------------------------------------------------------------------------------------------------------------
# Tests (the test_is_* globals) and global functions


def _int_test(fn):
    def test(v, *args):
        for x in (v, *args):
            if not is_int(x):
                raise JinjaError(f"expected value of type Integer, got {type_name(x)}")
        return fn(v, *args)

    return test


def _str_test(fn):
    def test(v, *args):
        if not isinstance(v, str):
            raise JinjaError(f"expected value of type String, got {type_name(v)}")
        return fn(v)

    return test


def _not_implemented_test(what: str):
    def test(*args):
        raise JinjaError(f"NotImplemented: {what} test not implemented")

    return test


TESTS = {
    "boolean": lambda v: isinstance(v, bool),
    "callable": lambda v: callable(v) and not isinstance(v, Undefined),
    "odd": _int_test(lambda v: v % 2 != 0),
    "even": _int_test(lambda v: v % 2 == 0),
    "false": lambda v: v is False,
    "true": lambda v: v is True,
    "divisibleby": _int_test(lambda v, n: int(math.fmod(v, n)) == 0),
    "string": lambda v: isinstance(v, str),
    "integer": is_int,
    "float": lambda v: isinstance(v, float),
    "number": is_num,
    "iterable": lambda v: isinstance(v, (list, tuple, str, Undefined)),
    "sequence": lambda v: isinstance(v, (list, tuple, str, Undefined)),
    "mapping": is_object,
    "lower": _str_test(lambda s: not any("A" <= c <= "Z" for c in s)),
    "upper": _str_test(lambda s: not any("a" <= c <= "z" for c in s)),
    "none": lambda v: v is None,
    "defined": lambda v: not isinstance(v, Undefined),
    "undefined": lambda v: isinstance(v, Undefined),
    "eq": lambda a, b: compare(a, b, "eq"),
    "equalto": lambda a, b: compare(a, b, "eq"),
    "ge": lambda a, b: compare(a, b, "ge"),
    "gt": lambda a, b: compare(a, b, "gt"),
    "greaterthan": lambda a, b: compare(a, b, "gt"),
    "lt": lambda a, b: compare(a, b, "lt"),
    "lessthan": lambda a, b: compare(a, b, "lt"),
    "ne": lambda a, b: compare(a, b, "ne"),
    "in": contains,
    "sameas": _not_implemented_test("sameas"),
    "escaped": _not_implemented_test("escaped"),
    "filter": _not_implemented_test("filter"),
}
TESTS["test"] = _str_test(lambda name: name in TESTS)


def make_test(name: str):
    test = TESTS.get(name)
    if test is not None:
        return test

    def unknown(*args):
        raise JinjaError(f"Unknown test '{name}'")

    return unknown


def namespace(*args, **kwargs) -> Namespace:
    if args:
        raise JinjaError("namespace() arguments must be kwargs")
    return Namespace(**kwargs)


def strftime_now(fmt, now: float | None = None) -> str:
    """strftime_now(format): the local time, as C's strftime writes it."""
    if not isinstance(fmt, str):
        raise JinjaError(f"Function 'strftime_now' expected value of type String, got {type_name(fmt)}")
    out = time.strftime(fmt, time.localtime(now))
    if not out or len(out.encode()) >= 100:  # upstream's 100-byte buffer
        raise JinjaError("strftime_now: failed to format time")
    return out


def range_(*args):
    if not 1 <= len(args) <= 3 or not all(is_int(x) for x in args):
        raise JinjaError("Function 'range' expected integer arguments")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if step == 0:
        raise JinjaError("range() step argument must not be zero")
    return list(range(start, stop, step))


def tojson_global(value, *args, **kwargs) -> str:
    return _tojson(Args("tojson", value, args, kwargs))
