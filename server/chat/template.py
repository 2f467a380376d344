"""Rendering a checkpoint's chat template with jinja2, set up to render as b10621's own jinja engine
(common/jinja) does: its undefined, operators, printing, filters, methods, tests and globals
(template_values.py), no autoescape, lists the template may append to, and the {% generation %} tags
it ignores."""

from __future__ import annotations

import copy
import re
from functools import lru_cache

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace

from . import template_values as tv


class TemplateError(Exception):
    """raise_exception() in a template, or a template that fails to render."""


def _raise(message: str):
    raise TemplateError(message)


class _Generation(Extension):
    """{% generation %} and {% endgeneration %} (transformers' assistant-mask markers): b10621 parses each as a
    statement that renders nothing, so what lies between them renders as usual."""

    tags = frozenset({"generation", "endgeneration"})

    def parse(self, parser):
        next(parser.stream)
        return []


_LOOP_ITEMS, _LOOP_PAIRS = "(loop items)", "(loop pairs)"  # internal filters: no template can name them


class _CodeGenerator(CodeGenerator):
    """jinja2's code, changed where b10621's runtime differs: operators, comparisons and slices go through the
    environment, and a for loop is one scope for all its iterations (a variable set in one is still set in the
    next, as b10621's for_statement keeps one context for the whole loop)."""

    _loop_flag: str | None = None

    def visit_Template(self, node: nodes.Template, frame=None) -> None:
        # what b10621's loops iterate: an array's items, an object's keys (or its (key, value) pairs when the
        # loop unpacks two names), nothing for undefined; anything else (a string) is an error
        for loop in node.find_all(nodes.For):
            kind = _LOOP_PAIRS if isinstance(loop.target, nodes.Tuple) else _LOOP_ITEMS
            loop.iter = nodes.Filter(loop.iter, kind, [], [], None, None, lineno=loop.iter.lineno)
        super().visit_Template(node, frame)

    def visit_For(self, node: nodes.For, frame) -> None:
        if not node.recursive:
            self._loop_flag = self.temporary_identifier()
            self.writeline(f"{self._loop_flag} = True")
        super().visit_For(node, frame)

    def enter_frame(self, frame) -> None:
        flag = self._loop_flag
        if flag is None or not frame.loop_frame:
            return super().enter_frame(frame)
        self._loop_flag = None  # the loop's variables are taken from the outer scope once, not every iteration
        self.writeline(f"if {flag}:")
        self.indent()
        self.writeline(f"{flag} = False")
        super().enter_frame(frame)
        self.outdent()

    def visit_Name(self, node: nodes.Name, frame) -> None:
        if node.ctx != "load":
            return super().visit_Name(node, frame)
        self.write("environment.seen(")
        super().visit_Name(node, frame)
        self.write(")")

    def visit_Assign(self, node: nodes.Assign, frame) -> None:
        """{% set obj.key = value %} sets a key of any object, a namespace or a dict (set_statement)."""
        self.push_assign_tracking()
        for name in sorted({ref.name for ref in node.find_all(nodes.NSRef)}):
            self.writeline(f"if not isinstance({frame.symbols.ref(name)}, (Namespace, dict)):")
            self.indent()
            self.writeline('raise TemplateRuntimeError("Cannot assign to member of non-object")')
            self.outdent()
        self.newline(node)
        self.visit(node.target, frame)
        self.write(" = ")
        self.visit(node.node, frame)
        self.pop_assign_tracking(frame)

    def visit_Getitem(self, node: nodes.Getitem, frame) -> None:
        if not isinstance(node.arg, nodes.Slice):
            return super().visit_Getitem(node, frame)
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for i, part in enumerate((node.arg.start, node.arg.stop, node.arg.step)):
            self.write(", " if i else "")
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
        self.write("))")

    def visit_Concat(self, node: nodes.Concat, frame) -> None:
        """a ~ b with b10621's operator, not str() of each side."""
        self.write("environment.concat_values((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_Compare(self, node: nodes.Compare, frame) -> None:
        """a op b op c as b10621 runs it: (a op b) op c, each with its operator."""
        for op in reversed(node.ops):
            self.write(f"environment.compare_values({op.op!r}, ")
        self.visit(node.expr, frame)
        for op in node.ops:
            self.write(", ")
            self.visit(op.expr, frame)
            self.write(")")

    def _output_child_to_const(self, node, frame, finalize):
        """No output folded at compile time with Python's semantics: every expression prints at render time."""
        if isinstance(node, nodes.TemplateData):
            return super()._output_child_to_const(node, frame, finalize)
        raise nodes.Impossible()


class _Lookup(dict):
    """Every filter or test name is known when the template compiles; an unknown one fails only when it runs,
    as in b10621."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, name):
        self[name] = fn = self._make(name)
        return fn

    def get(self, name, default=None):
        return self[name]

    def __contains__(self, name) -> bool:
        return True


class _Environment(SandboxedEnvironment):
    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset(["+", "-", "*", "/", "%", "//", "**"])
    intercepted_unops = frozenset(["-"])

    def call_binop(self, context, operator, left, right):
        return tv.binop(operator, left, right)

    def call_unop(self, context, operator, arg):
        return tv.negate(arg)

    def seen(self, value):
        return tv.seen(value)

    def concat_values(self, values):
        return tv.concat(values)

    def compare_values(self, op, left, right):
        return tv.compare_op(op, left, right)

    def getattr(self, obj, attribute):
        """obj.name: the built-in of that name for obj's type first, then an object's key (member_expression)."""
        if isinstance(obj, (LoopContext, Namespace)):
            value = super().getattr(obj, attribute)
        elif isinstance(obj, Macro):
            raise tv.JinjaError("Function has no builtins")
        else:
            tv.builtin_used(obj, attribute)
            value = tv.method(obj, attribute)
            if value is None:
                value = (
                    obj[attribute]
                    if isinstance(obj, dict) and attribute in obj
                    else self.undefined(obj=obj, name=attribute)
                )
        return self._accessed(obj, value, "object_access")

    def getitem(self, obj, argument):
        """obj[key]: an object's key, then a built-in; an array's or string's index."""
        if isinstance(obj, (LoopContext, Namespace)):
            value = super().getitem(obj, argument)
        elif isinstance(argument, slice):
            tv.builtin_used(obj, "slice")
            if not isinstance(obj, (list, tuple, str)):
                raise tv.JinjaError(f"Unknown (built-in) filter 'slice' for type {tv.type_name(obj)}")
            if argument.step == 0:
                raise tv.JinjaError("slice step cannot be zero")
            return obj[argument]
        else:
            value = self._item(obj, argument)
        kind = "array_access" if tv.is_int(argument) else "object_access" if isinstance(argument, str) else ""
        return self._accessed(obj, value, kind)

    @staticmethod
    def _accessed(obj, value, kind: str):
        usage = tv.USAGE.get()
        if usage is not None:  # member_expression: the object and the value read, and how
            usage.mark(obj)
            usage.mark(value)
            if kind:
                usage.op(obj, kind)
        return value

    def _item(self, obj, argument):
        if isinstance(argument, tv.Undefined):
            return self.undefined(obj=obj, name="object_property")
        if isinstance(argument, (list, dict, Namespace)):
            raise tv.JinjaError(f"Type: {tv.type_name(argument)} is not allowed as object key")
        if isinstance(obj, tv.Undefined):
            return self.undefined(obj=obj, name="object_property")
        if isinstance(obj, dict):
            try:
                return obj[argument]
            except (KeyError, TypeError):
                pass
            bound = tv.method(obj, tv.as_string(argument))
            return bound if bound is not None else self.undefined(obj=obj, name=str(argument))
        if isinstance(obj, (list, tuple, str)):
            if tv.is_int(argument):
                index = argument + len(obj) if argument < 0 and not isinstance(obj, str) else argument
                return obj[index] if 0 <= index < len(obj) else self.undefined(obj=obj, name=str(argument))
            if not isinstance(argument, str):
                raise tv.JinjaError(f"Cannot access property with non-string/non-number: got {tv.type_name(argument)}")
        elif not isinstance(argument, str):
            raise tv.JinjaError(f"Cannot access property with non-string: got {tv.type_name(argument)}")
        bound = tv.method(obj, argument)
        return bound if bound is not None else self.undefined(obj=obj, name=argument)


def _finalize(value):
    return tv.output(value)


def _source(source: str) -> str:
    """The source as b10621's lexer reads it: newlines normalized, and its first text dropped when only blanks
    follow that text's first character up to a {% or {# tag (its lstrip_blocks walks back to the start of the
    source and takes that character too)."""
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    m = re.search(r"\{[%{#]", source)
    if m and m.start() >= 1 and m.group() != "{{" and all(c in " \t\v\f" for c in source[1 : m.start()]):
        return source[m.start() :]
    return source


@lru_cache(maxsize=8)
def compile_template(source: str) -> jinja2.Template:
    env = _Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        optimized=False,
        undefined=tv.Undefined,
        finalize=_finalize,
        extensions=["jinja2.ext.loopcontrols", _Generation],
    )
    env.filters = _Lookup(tv.make_filter)
    env.filters.update({_LOOP_ITEMS: tv.loop_items, _LOOP_PAIRS: tv.loop_pairs})
    env.tests = _Lookup(tv.make_test)
    env.globals = {
        "raise_exception": _raise,
        "namespace": tv.namespace,
        "range": tv.range_,
        "tojson": tv.tojson_global,
        "strftime_now": tv.strftime_now,
    }
    return env.from_string(_source(source))


def render(
    source: str, messages: list, add_generation_prompt: bool = False, tools: list | None = None, **kwargs
) -> str:
    """The template rendered with b10621's context: add_generation_prompt is only defined when true, tools only
    when given, and the template works on its own copy of the values (it may append to them)."""
    context = {"messages": messages, **kwargs}
    if add_generation_prompt:
        context["add_generation_prompt"] = True
    if tools is not None:  # absent from the context unless the request carries tools
        context["tools"] = tools
    context = copy.deepcopy(context)
    try:
        return compile_template(source).render(**context)
    except TemplateError:
        raise
    except Exception as exc:
        raise TemplateError(f"{type(exc).__name__}: {exc}") from exc


class _Probe(str):
    """A string of a probe's context: its own object, so that reading it is told apart from reading an equal
    string elsewhere."""

    __slots__ = ()


def _fresh(value, memo: dict):
    """A copy of a context value, each string in it its own object (as each is its own value upstream)."""
    if isinstance(value, str):
        return _Probe(value)
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, dict):
        out = {k: _fresh(v, memo) for k, v in value.items()}
    elif isinstance(value, (list, tuple)):
        out = type(value)(_fresh(v, memo) for v in value)
    else:
        out = value
    memo[id(value)] = out
    return out


def render_usage(source: str, context: dict) -> tuple[str | None, dict, tv.Usage]:
    """One of b10621's capability probes (caps_try_execute): the template rendered on a copy of the whole
    context while noting which of its values the template reads. Returns the output (None when the render
    fails), the copy (where to look the probed values up) and the usage."""
    copied = _fresh(context, {})
    usage = tv.Usage()
    token = tv.USAGE.set(usage)
    try:
        out = compile_template(source).render(**copied)
    except Exception:  # noqa: BLE001 - a probe that fails says so by its missing output
        out = None
    finally:
        tv.USAGE.reset(token)
    return out, copied, usage
