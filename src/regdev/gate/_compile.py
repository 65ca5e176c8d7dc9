"""The schema compiler: tool schemas -> specialised Python source -> one ``check`` function.

Rules of this file:

* The generated ``check(call, tool_choice=None)`` returns exactly the code the reference
  validator (``_validate.py``) returns, in the same order: shape, name, fields (``required``
  order, then extras), types (``properties`` order), ranges (``properties`` order), then what
  the properties hold, in ``properties`` order: nested objects level by level with dotted
  codes, array elements one by one in index order (``type-data[]``, ``range-pair[0]``). The
  tests prove it on generated inputs.
* Structure after fastjsonschema: one generator method per keyword, chosen from the ordered
  tables below; each one checks its keyword's value before it emits anything (on top of
  :func:`check_input_schema`, which runs first), so an unexpected value is a
  :class:`SchemaError`, never odd code. A keyword without a generator is refused.
* Nothing from a schema is pasted into the source as text. A ``str`` or small ``int`` enters
  through ``str.__repr__`` / ``int.__repr__`` (the base methods, so a subclass cannot change
  them); any other value becomes a module constant whose expression is built by
  :func:`_render` from the same two reprs. Names in comments are repr()s too, and repr()
  never contains a line break.
* Speed: the tool name picks its checks with string compares (few tools) or one dict lookup
  (many); ``type(x) is int`` runs before the slower Decimal/float integer test, and a value
  whose type is exactly str, bool, None, list or dict is refused without it; bounds are
  constants in the source, made whole numbers for ``integer`` properties (exact: ``x >= 1.5``
  is ``x >= 2`` for an integer x); a float value, the decimal its repr writes, meets a
  decimal bound as a float constant and a test chosen so the answer is that decimal's;
  extra arguments are found with ``len()`` when every property is required, or when the
  optional ones (up to :data:`_COUNTED`) are counted.
  Nothing calls ``int()`` or ``float()`` on a value.
* The generated module imports only ``math`` and ``decimal``: the JSON semantics it calls
  (``is_integer``, ``is_number``, ``json_equal``, ``json_in``, ``json_first_repeat``,
  ``is_multiple``, ``is_multiple_of``) are copied from ``_runtime.py``, so ``regdev compile``
  writes a module that runs without regdev.
"""

from __future__ import annotations

import hashlib
import linecache
import math
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Protocol, cast

from .._version import __version__
from ..core._errors import SchemaError
from ..core._observation import Refusal, code_entry
from ..core._text import escape_text
from ._render import INT64 as _INT64
from ._render import int_literal as _int
from ._render import render_json as _render
from ._render import render_value
from ._render import str_literal as _str
from ._runtime import RUNTIME_SOURCE, written_number
from ._runtime import coefficient_exponent as _coefficient_exponent
from ._schema import (
    ANNOTATION_KEYWORDS,
    TYPE_NAMES,
    check_input_schema,
    is_integer,
    is_number,
    json_pointer,
)
from ._tools import REGISTER_TOOLS, ToolSet
from ._validate import (
    ArgumentLevel,
    ReferenceValidator,
    element_refusal,
    got_value,
    missing_refusal,
    out_of_range,
    range_parts,
    show_value,
    type_prefix,
    unknown_argument,
)

__all__ = ["BIND", "INLINE_TOOLS", "CompiledValidator", "RefusalCheck", "compile_refusals",
           "compile_validator", "generate_source", "render_value"]

#: Up to this many tools, ``check`` compares the name with each tool's name in turn and runs
#: its checks inline; above it, one dict lookup finds a per-tool function (measured: a
#: function call costs more than a few string compares).
INLINE_TOOLS = 4
#: Up to this many optional properties, all fetched, an object's extra keys are found by
#: counting the ones present (``len(a) != 1 + (v1 is not _MISSING)``), not by ``keys() <=``.
_COUNTED = 3


class CompiledValidator(Protocol):
    """What :func:`compile_validator` returns: a function with its source attached.

    Attributes:
        source: the generated Python module source (also shown in tracebacks).
        filename: the fake file name the source is registered under in :mod:`linecache`.
        tool_names: the tools it accepts, in declared order.
    """

    source: str
    filename: str
    tool_names: tuple[str, ...]

    def __call__(self, call: object, tool_choice: str | None = None) -> str | None:
        """Return None for a valid canonical call, else the first failure's verdict code."""


#: A failure test with its strictness turned: ``x < F`` and ``x <= F``, ``x > F`` and ``x >= F``.
_TURNED = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _nearest_float(number: object) -> float:
    """The float nearest an int or a Decimal (an infinity past the floats' range)."""
    try:
        return float(cast(Any, number))
    except OverflowError:  # an int past the floats' range (a Decimal gives inf)
        return math.copysign(math.inf, cast(Any, number))


def _repr_of(near: float) -> Decimal | None:
    """The decimal a finite float's repr writes; None for an infinity."""
    return Decimal(repr(near)) if math.isfinite(near) else None


def _float_test(bound: object, op: str) -> tuple[str, float]:
    """``(op2, b)`` with ``x op2 b`` exactly when ``Decimal(repr(x)) op bound``, for every
    finite float ``x``: ``bound`` an int or a Decimal, ``b = float(bound)``. Rounding to the
    nearest float is monotonic, so when ``x != b`` the float comparison gives the decimal
    one's answer; at ``x == b`` the answer is ``Decimal(repr(b)) op bound``, known here, and
    when it is not ``b op b`` the test turns strict or not (``x <= b`` for ``x < bound``)."""
    near = _nearest_float(bound)
    written = _repr_of(near)
    if written is None or _COMPARE[op](written, bound) == _COMPARE[op](near, near):
        return op, near
    return _TURNED[op], near


def _whole(bound: object, rounding: str) -> int | None:
    """``bound`` rounded to a whole number (floor or ceiling), or None when it is too large."""
    if isinstance(bound, int):
        return int.__int__(bound)  # the value of an int subclass, by the base method
    if isinstance(bound, float) and abs(bound) < _INT64:
        return math.floor(bound) if rounding == ROUND_FLOOR else math.ceil(bound)
    # (-_INT64 < bound < _INT64, not abs(): a comparison is exact, while abs() rounds to the
    # decimal context and overflows past its exponent range, as for Decimal('1E+1000000').)
    if isinstance(bound, Decimal) and bound.is_finite() and -_INT64 < bound < _INT64:
        return int(bound.to_integral_value(rounding=rounding))
    return None


# --- the type keyword: fixed expressions, chosen by name, never built from schema text --------

#: True when ``{v}`` is of that JSON type (same meaning as ``_schema.matches_type``).
_TYPE_IS = {
    "null": "{v} is None",
    "boolean": "type({v}) is bool",
    "string": "type({v}) is str",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "integer": "type({v}) is int or is_integer({v})",
    "number": "type({v}) is int or is_number({v})",
}
#: True when ``{v}`` is not of that JSON type (the single-type case, one test shorter).
_TYPE_IS_NOT = {
    "null": "{v} is not None",
    "boolean": "type({v}) is not bool",
    "string": "type({v}) is not str",
    "object": "type({v}) is not dict",
    "array": "type({v}) is not list",
    "integer": "type({v}) is not int and (type({v}) in _NOT_NUMBERS or not is_integer({v}))",
    # a finite float passes at once (``v - v`` is 0.0); inf and NaN go on to is_number
    "number": "type({v}) is not int and (type({v}) is not float or {v} - {v}) and "
              "(type({v}) in _NOT_NUMBERS or not is_number({v}))",
}
#: Cheap tests first when a type list is joined with ``or``.
_TYPE_ORDER = ("null", "boolean", "string", "object", "array", "integer", "number")
#: The Python type of a decoded value of each JSON type that ``len()`` applies to.
_PYTHON_TYPE = {"string": "str", "array": "list", "object": "dict"}
_NUMERIC = frozenset({"integer", "number"})


#: A range failure: (guard, condition); the condition applies only where the guard holds
#: (e.g. ``is_number(v0)`` when the property allows numbers and other types), "" for always.
_Fail = tuple[str, str]


def _join(fails: list[_Fail]) -> str:
    """One condition for a property's range failures, each guard written once."""
    groups: dict[str, list[str]] = {}
    for guard, condition in fails:
        groups.setdefault(guard, []).append(condition)
    parts = []
    for guard, conditions in groups.items():
        either = " or ".join(conditions)
        if not guard:
            parts.append(either)
        else:
            parts.append(f"{guard} and ({either})" if len(conditions) > 1
                         else f"{guard} and {either}")
    return " or ".join(parts)


def _child(label: str, name: str) -> str:
    """The code label of a property of the object at ``label`` ("" for the arguments)."""
    return f"{label}.{name}" if label else name


def _return_refusal(code: str, message: str) -> str:
    """The source of ``return`` of the refusal ``code`` whose message is the expression
    ``message``, at the stage the table of codes gives it (looked up here, once, at compile
    time: the generated check builds the Refusal directly)."""
    entry = code_entry(code)
    if entry is None or len(entry.stages) != 1:
        raise ValueError(f"{code!r} is not a verdict code of one stage in the table")
    return f"return _Refusal({_str(entry.stages[0])}, {_str(code)}, {message})"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


class _Property:
    """What the compiler knows about one place a value sits (a property of the level it
    writes, or an element of an array) while it writes its checks."""

    def __init__(self, name: str, schema: object, var: str, required: bool, label: str) -> None:
        self.name = name
        self.schema = schema
        self.var = var
        self.required = required  # for an element: always there
        self.label = label  # the place in codes: "limits.low", "data[]"
        #: the JSON types a value can have once the type step passed (None: any)
        self.types: frozenset[str] | None = None
        if isinstance(schema, dict) and "type" in schema:
            declared = schema["type"]
            self.types = frozenset(declared if type(declared) is list else [declared])
        self.type_fail: str | None = None  # condition over var, or "" for the false schema
        self.range_fails: list[_Fail] = []  # (guard, condition) pairs over var
        self.contents: list[str] = []  # lines checking what it holds (object, elements)
        #: in the gate's module, a tool's own array of integers, whose element loop sets
        #: ``rebind`` for an integer that is not an int
        self.int_elements = False

    def may_be(self, *names: str) -> bool:
        return self.types is None or not self.types.isdisjoint(names)

    def only(self, *names: str) -> bool:
        return self.types is not None and self.types <= frozenset(names)

    @property
    def fetched(self) -> bool:
        return bool(self.type_fail or self.range_fails or self.contents)


class _Compiler:
    """Writes the source of one validator module for a tool set.

    Args:
        wording: None for the module of :func:`generate_source` (verdict codes only, standard
            library only); the tools' reference validator for the gate's module
            (:func:`compile_refusals`), whose failures return refusals worded from its parts.
    """

    def __init__(self, wording: ReferenceValidator | None = None) -> None:
        self.wording = wording
        #: Objects the gate's module refers to by name (refusals, message parts, schema
        #: nodes): given to it in its namespace, never written into its source.
        self.objects: dict[str, object] = {}
        self.shared: dict[tuple[str, ...], str] = {}  # names of objects used twice
        #: True while writing the lines of a tool's arguments object in the gate's module,
        #: where ``name``, ``a`` and ``tool_choice`` are in scope and a failure returns a
        #: refusal; nested levels (their own functions) return codes there too.
        self.top = False
        self.level_of: ArgumentLevel | None = None  # the reference's reading of that object
        self.constants: list[str] = []  # "_K0 = ..." lines
        self.functions: list[list[str]] = []  # nested levels and per-tool functions
        self.levels = 0
        self.element_vars = 0
        # Range keywords in the order they are tried (all give one code: range-<arg>).
        self.range_generators = (
            ("minimum", self._minimum),
            ("maximum", self._maximum),
            ("exclusiveMinimum", self._exclusive_minimum),
            ("exclusiveMaximum", self._exclusive_maximum),
            ("multipleOf", self._multiple_of),
            ("minLength", self._min_length),
            ("maxLength", self._max_length),
            ("minItems", self._min_items),
            ("maxItems", self._max_items),
            ("uniqueItems", self._unique_items),
            ("minProperties", self._min_properties),
            ("maxProperties", self._max_properties),
            ("enum", self._enum),
            ("const", self._const),
        )
        # Keywords handled by the level and element writers, in the order they run.
        self.level_keywords = ("required", "additionalProperties", "type", "properties",
                               "prefixItems", "items")
        self.known = (frozenset(self.level_keywords) | {k for k, _ in self.range_generators}
                      | ANNOTATION_KEYWORDS)

    # -- constants --

    def constant(self, value: object, pointer: str) -> str:
        """An expression for a schema value: a literal for str and int, else a module constant."""
        if isinstance(value, str):
            return _str(value)
        if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
            return _int(value)
        return self.named(_render(value, pointer))

    def named(self, expression: str) -> str:
        name = f"_K{len(self.constants)}"
        self.constants.append(f"{name} = {expression}")
        return name

    def obj(self, value: object, what: str) -> str:
        """The name of an object given to the gate's module (``what`` describes it in a
        comment, as a repr: one line, whatever a schema holds)."""
        name = f"_W{len(self.objects)}"
        self.objects[name] = value
        self.constants.append(f"# {name}: {_str(what)}")
        return name

    # -- what a failure returns: a code, or in the gate's module a refusal --

    def fail(self, code: str) -> str:
        """``return`` of a failure worded elsewhere: the code; at a tool's top level in the
        gate's module, the reference's refusal for it (:meth:`ReferenceValidator.explain`:
        a nested object's or an array element's place, found again)."""
        if self.top:
            return f"return _explain(name, a, {_str(code)}, tool_choice)"
        return f"return {_str(code)}"

    def fail_missing(self, name: str, label: str) -> str:
        if self.top and self.level_of is not None:
            key = ("missing", self.level_of.tool, name)
            if key not in self.shared:
                refusal = missing_refusal(self.level_of, name)
                self.shared[key] = self.obj(refusal, refusal.code)
            return f"return {self.shared[key]}"
        return f"return {_str('missing-' + _child(label, name))}"

    def fail_unknown(self) -> str:
        if self.top and self.level_of is not None:
            return f"return _unknown_argument({self.obj(self.level_of, 'the arguments')}, a)"
        return "return 'unknown-argument'"

    def fail_type(self, prop: _Property, value: str) -> str:
        code = f"type-{prop.label}"
        if self.top and self.level_of is not None:
            before = self.obj(type_prefix(self.level_of.fields[prop.name]), code)
            return _return_refusal(code, f"{before} + _got({value})")
        return f"return {_str(code)}"

    def fail_range(self, prop: _Property) -> str:
        code = f"range-{prop.label}"
        if self.top and self.level_of is not None:
            node = self.level_of.fields[prop.name]
            parts = range_parts(node)
            if parts is None:
                return f"return _out_of_range({self.obj(node, code)}, {prop.var})"
            before, after = (self.obj(part, code) for part in parts)
            return _return_refusal(code, f"{before} + _show({prop.var}) + {after}")
        return f"return {_str(code)}"

    # -- keyword generators: each checks its value, then returns failure conditions --

    def _bound(self, prop: _Property, keyword: str, pointer: str, op: str) -> list[_Fail]:
        bound = cast(dict[str, Any], prop.schema)[keyword]
        if not is_number(bound):
            raise SchemaError(f"`{keyword}` must be a number", pointer)
        bound = written_number(bound)  # a float in the schema: the decimal its repr writes
        if not prop.may_be("integer", "number"):
            return []  # never applies: the type step let through no number
        guard = "" if prop.only("integer", "number") else f"is_number({prop.var})"
        if prop.types == frozenset({"integer"}):
            # For an integer x the failure x < 1.5 is x < 2 and x >= 1.5 is x >= 2 (ceiling);
            # x > 1.5 is x > 1 and x <= 1.5 is x <= 1 (floor).
            whole = _whole(bound, ROUND_CEILING if op in ("<", ">=") else ROUND_FLOOR)
            if whole is not None:
                bound = whole
        # A float value is the decimal its repr writes (what the JSON text said), compared
        # with a float constant and a test chosen so that the answer is that decimal's.
        op2, near = _float_test(bound, op)
        if op2 == op and Decimal(near) == bound:  # one constant serves every value
            if type(bound) is not int:
                bound = near  # equal, and a float compares with a float far faster
            return [(guard, f"{prop.var} {op} {self.constant(bound, pointer)}")]
        v = prop.var
        exact = f"{v} {op} {self.constant(bound, pointer)}"  # an int or a Decimal: exactly
        if not math.isfinite(near):  # every finite float is on one side of the bound
            if _COMPARE[op](0.0, near):
                return [(guard, f"(type({v}) is float or {exact})")]
            return [(guard, f"(type({v}) is not float and {exact})")]
        return [(guard, f"({v} {op2} {self.constant(near, pointer)} if type({v}) is float "
                        f"else {exact})")]

    def _minimum(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._bound(prop, "minimum", pointer, "<")

    def _maximum(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._bound(prop, "maximum", pointer, ">")

    def _exclusive_minimum(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._bound(prop, "exclusiveMinimum", pointer, "<=")

    def _exclusive_maximum(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._bound(prop, "exclusiveMaximum", pointer, ">=")

    def _multiple_of(self, prop: _Property, pointer: str) -> list[_Fail]:
        divisor = cast(dict[str, Any], prop.schema)["multipleOf"]
        if not is_number(divisor) or divisor <= 0:
            raise SchemaError("`multipleOf` must be a number above 0", pointer)
        if not prop.may_be("integer", "number"):
            return []
        guard = "" if prop.only("integer", "number") else f"is_number({prop.var})"
        v = prop.var
        whole = _whole(divisor, ROUND_FLOOR) if is_integer(divisor) else None
        if whole is not None:
            # an int value by the % operator (exact); the rest by the exact runtime test
            return [(guard, f"({v} % {_int(whole)} if type({v}) is int "
                            f"else not is_multiple({v}, {_int(whole)}))")]
        # the divisor as m * 10**f, read once, here (a float by its shortest decimal)
        m, f = _coefficient_exponent(divisor)
        return [(guard, f"not is_multiple_of({v}, {self.constant(m, pointer)}, "
                        f"{self.constant(f, pointer)})")]

    def _length(self, prop: _Property, keyword: str, pointer: str, op: str,
                kind: str) -> list[_Fail]:
        """minLength and the other counts: ``len(value)`` against a limit, for one type."""
        limit = cast(dict[str, Any], prop.schema)[keyword]
        if not is_integer(limit) or limit < 0:
            raise SchemaError(f"`{keyword}` must be a non-negative integer", pointer)
        if not prop.may_be(kind) or (op == "<" and limit == 0):
            return []  # never applies: no value of that type, or a minimum of 0
        guard = "" if prop.only(kind) else f"type({prop.var}) is {_PYTHON_TYPE[kind]}"
        # len() is below 2**63 (a Py_ssize_t), so a larger limit compares as 2**63 does: a
        # maximum never fails, a minimum always does; no int() of a Decimal('1E+400000').
        whole = _INT64 if limit >= _INT64 else _whole(limit, ROUND_FLOOR)
        assert whole is not None  # an integral limit below 2**63 is always made whole
        return [(guard, f"len({prop.var}) {op} {_int(whole)}")]

    def _min_length(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "minLength", pointer, "<", "string")

    def _max_length(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "maxLength", pointer, ">", "string")

    def _min_items(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "minItems", pointer, "<", "array")

    def _max_items(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "maxItems", pointer, ">", "array")

    def _min_properties(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "minProperties", pointer, "<", "object")

    def _max_properties(self, prop: _Property, pointer: str) -> list[_Fail]:
        return self._length(prop, "maxProperties", pointer, ">", "object")

    def _unique_items(self, prop: _Property, pointer: str) -> list[_Fail]:
        unique = cast(dict[str, Any], prop.schema)["uniqueItems"]
        if type(unique) is not bool:
            raise SchemaError("`uniqueItems` must be a boolean", pointer)
        if not unique or not prop.may_be("array"):
            return []
        guard = "" if prop.only("array") else f"type({prop.var}) is list"
        return [(guard, f"json_first_repeat({prop.var}) is not None")]

    def _enum(self, prop: _Property, pointer: str) -> list[_Fail]:
        items = cast(dict[str, Any], prop.schema)["enum"]
        if type(items) is not list:
            raise SchemaError("`enum` must be an array", pointer)
        v = prop.var
        if items and all(type(i) is str for i in items):
            # JSON-equal to a string means: exactly a str, and equal.
            members = self.named("frozenset({" + ", ".join(map(_str, items)) + "})")
            guard = "" if prop.only("string") else f"type({v}) is not str or "
            return [("", f"{guard}{v} not in {members}")]
        if items and prop.only("integer", "number") and all(
                is_number(i) and type(i) in (int, float, Decimal) for i in items):
            # v is a finite number here; int and Decimal hash and compare exactly, and a float
            # is the decimal its repr writes: it is in the enum when its repr is a member.
            written = [written_number(i) for i in items]
            floats = [(w, _nearest_float(w)) for w in written]
            floats = [(w, near) for w, near in floats if _repr_of(near) == w]
            if len(floats) == len(written) and all(Decimal(n) == w for w, n in floats):
                # each member is a float's exact value and its repr: one set serves all
                members = self.named("frozenset({" + ", ".join(
                    self.constant(w if type(w) is int else n, pointer)
                    for w, n in floats) + "})")
                return [("", f"{v} not in {members}")]
            exact = self.named("frozenset({" + ", ".join(self.constant(w, pointer)
                                                         for w in written) + "})")
            near = self.named("frozenset({" + ", ".join(self.constant(n, pointer)
                                                        for _, n in floats) + "})")
            return [("", f"({v} not in {near} if type({v}) is float else {v} not in {exact})")]
        rendered = [_render(i, f"{pointer}/{n}") for n, i in enumerate(items)]
        members = self.named("(" + "".join(r + ", " for r in rendered) + ")")
        return [("", f"not json_in({v}, {members})")]

    def _const(self, prop: _Property, pointer: str) -> list[_Fail]:
        value = cast(dict[str, Any], prop.schema)["const"]
        v = prop.var
        if type(value) is str:
            guard = "" if prop.only("string") else f"type({v}) is not str or "
            return [("", f"{guard}{v} != {_str(value)}")]
        if prop.only("integer", "number") and is_number(value) and type(value) in (
                int, float, Decimal):
            # a float is the decimal its repr writes: equal when its repr is the constant
            written = written_number(value)
            near = _nearest_float(written)
            exact = f"{v} != {self.constant(written, pointer)}"
            if _repr_of(near) != written:  # no float's repr writes it: a float is not equal
                return [("", f"(type({v}) is float or {exact})")]
            if Decimal(near) == written:  # a float's exact value and its repr
                same = written if type(written) is int else near
                return [("", f"{v} != {self.constant(same, pointer)}")]
            return [("", f"({v} != {self.constant(near, pointer)} if type({v}) is float "
                         f"else {exact})")]
        return [("", f"not json_equal({v}, {self.constant(value, pointer)})")]

    def _type(self, prop: _Property, pointer: str) -> str | None:
        if prop.schema is False:
            return ""  # no value is allowed: present means wrong
        if prop.types is None:
            return None
        declared = cast(dict[str, Any], prop.schema)["type"]
        names = declared if type(declared) is list else [declared]
        if not names or any(n not in TYPE_NAMES for n in names):
            raise SchemaError(f"`type` must be one of {', '.join(TYPE_NAMES)} or a non-empty "
                              "list of them", pointer)
        chosen = [t for t in _TYPE_ORDER if t in prop.types]
        if "number" in chosen and "integer" in chosen:
            chosen.remove("integer")  # every integer is a number
        if len(chosen) == 1:
            return _TYPE_IS_NOT[chosen[0]].format(v=prop.var)
        return "not (" + " or ".join(_TYPE_IS[t].format(v=prop.var) for t in chosen) + ")"

    # -- one place a value sits: its type, its ranges, what it holds --

    def slot(self, prop: _Property, pointer: str) -> None:
        """Work out a property's or an element's type failure, range failures and the lines
        checking what it holds (nested levels become functions in :attr:`functions`)."""
        if not isinstance(prop.schema, (bool, dict)):
            raise SchemaError("a schema must be an object or a boolean", pointer)
        prop.type_fail = self._type(prop, pointer + "/type")
        if not isinstance(prop.schema, dict):
            return
        for keyword in prop.schema:
            if keyword not in self.known:
                raise SchemaError(f"keyword `{escape_text(str(keyword))}` is not supported",
                                  f"{pointer}/{json_pointer((keyword,))[1:]}")
        for keyword, generate in self.range_generators:
            if keyword in prop.schema:
                prop.range_fails += generate(prop, f"{pointer}/{keyword}")
        if prop.may_be("object"):
            nested = self.function(prop.schema, prop.label, pointer)
            if nested is not None:
                back = ("return _explain(name, a, failed, tool_choice)" if self.top
                        else "return failed")
                prop.contents += self._when(prop, "object", [
                    f"failed = {nested}({prop.var})", "if failed is not None:", f"    {back}"])
        if prop.may_be("array"):
            elements = self.elements(prop, pointer)
            if elements:
                prop.contents += self._when(prop, "array", elements)

    @staticmethod
    def _when(prop: _Property, kind: str, lines: list[str]) -> list[str]:
        """``lines`` run when the value is of JSON type ``kind``; unguarded when it can be
        nothing else by now (always there, and the type step allowed only that)."""
        if prop.required and prop.only(kind):
            return lines
        return [f"if type({prop.var}) is {_PYTHON_TYPE[kind]}:", *_indent(lines)]

    def elements(self, prop: _Property, pointer: str) -> list[str]:
        """Lines checking an array's elements in index order, each wholly before the next:
        ``prefixItems`` position by position, then every element past them (``items``)."""
        schema = cast(dict[str, Any], prop.schema)
        prefix = schema.get("prefixItems", [])
        if type(prefix) is not list or not prefix:
            if "prefixItems" in schema:
                raise SchemaError("`prefixItems` must be a non-empty array of schemas",
                                  pointer + "/prefixItems")
            prefix = []
        v, lines = prop.var, []
        for index, sub in enumerate(prefix):
            var, body = self.element(sub, f"{prop.label}[{index}]",
                                     f"{pointer}/prefixItems/{index}")
            if body:
                lines += [f"if len({v}) > {index}:", f"    {var} = {v}[{index}]", *_indent(body)]
        items = schema.get("items", True)
        if items is False:
            lines += [f"if len({v}) > {len(prefix)}:",
                      f"    {self.fail(f'type-{prop.label}[]')}"]
        elif items is not True:
            worded = None  # a tool's own array of leaves: its element's refusal worded here
            if self.top and self.level_of is not None and prop.var.startswith("v"):
                node = self.level_of.fields[prop.name].items
                assert node is not None
                worded = (self.obj(node, f"the elements of {prop.label}"), v,
                          _str(prop.label), len(prefix))
            var, body = self.element(items, f"{prop.label}[]", f"{pointer}/items", worded)
            if worded is not None and not prefix and prop.types == frozenset({"array"}) \
                    and body[:1] == [
                    f"if {_TYPE_IS_NOT['integer'].format(v=var)}:"]:
                # an integer element: the loop notes one to bind (3.0) as the arguments do
                prop.int_elements = True
                body[:2] = [f"if type({var}) is not int:",
                            f"    if type({var}) in _NOT_NUMBERS or not is_integer({var}):",
                            f"    {body[1]}",
                            "    rebind = True"]
            if body:
                lines += [f"for {var} in {v if not prefix else f'{v}[{len(prefix)}:]'}:",
                          *_indent(body)]
        return lines

    def element(self, schema: object, label: str, pointer: str,
                worded: tuple[str, str, str, int] | None = None) -> tuple[str, list[str]]:
        """The variable and the lines checking one element: type, ranges, what it holds.

        ``worded`` (the gate's module, an element of a tool's own array: the reference's
        node of the elements, the array's variable, its name, the positions before them) has
        a leaf element's failure return its refusal (:func:`element_refusal`)."""
        var = f"e{self.element_vars}"
        self.element_vars += 1
        prop = _Property(label, schema, var, True, label)
        self.slot(prop, pointer)
        fail_type, fail_range = self.fail(f"type-{label}"), self.fail(f"range-{label}")
        if worded is not None and not prop.contents:
            node, array, where, past = worded
            fail_type = fail_range = (f"return _element_refusal({node}, {array}, {var}, "
                                      f"{where}, {past})")
        if prop.type_fail == "":
            return var, [fail_type]  # the false schema: none allowed
        body = []
        if prop.type_fail:
            body += [f"if {prop.type_fail}:", f"    {fail_type}"]
        if prop.range_fails:
            body += [f"if {_join(prop.range_fails)}:", f"    {fail_range}"]
        return var, body + prop.contents

    # -- one object level --

    def level(self, schema: Mapping[str, Any], label: str, pointer: str) -> list[str] | None:
        """The body (variable ``a``, no indent) checking one object level, None if it checks
        nothing. Nested levels become functions in :attr:`functions`."""
        for keyword in schema:
            if keyword not in self.known:
                raise SchemaError(f"keyword `{escape_text(str(keyword))}` is not supported",
                                  f"{pointer}/{json_pointer((keyword,))[1:]}")
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if type(properties) is not dict:
            raise SchemaError("`properties` must be an object", pointer + "/properties")
        if type(required) is not list or any(type(n) is not str for n in required):
            raise SchemaError("`required` must be an array of strings", pointer + "/required")
        closed = schema.get("additionalProperties", True)
        if type(closed) is not bool:
            raise SchemaError("`additionalProperties` is supported only as true or false",
                              pointer + "/additionalProperties")
        if closed is False and any(name not in properties for name in required):
            # a required name outside the properties is present by now, and is extra
            return [*self._missing(required, label), self.fail_unknown()]

        props = [_Property(name, sub, f"v{i}", name in required, _child(label, name))
                 for i, (name, sub) in enumerate(properties.items())]
        for prop in props:
            self.slot(prop, f"{pointer}/properties/{json_pointer((prop.name,))[1:]}")

        # step 3: fields. A dict shorter than the required names lacks one: each name is
        # tested, in `required` order (a model's usual mistake costs a len() and an `in` or
        # two, no KeyError). Else the required values checked later are fetched at once, in
        # a try (free on the way through: one dict lookup per field where `in` then [] is
        # two); a KeyError there (a name missing and an unknown one in its place) tests them.
        body: list[str] = []
        fetched = [prop for prop in props if prop.required and prop.fetched]
        if required:
            body += [f"if len(a) < {len(required)}:",
                     *_indent(self._missing(required, label, short=True))]
        if fetched:
            body += ["try:",
                     *(f"    {prop.var} = a[{_str(prop.name)}]" for prop in fetched),
                     "except KeyError:",
                     *_indent(self._missing(required, label)),
                     "    raise"]
        # the other required names: with every fetched one present, the first of these that
        # is missing is the first missing name
        fetched_names = {prop.name for prop in fetched}
        body += self._missing([n for n in required if n not in fetched_names], label)
        optional = [prop for prop in props if not prop.required]
        for prop in optional:  # the optional values, fetched once
            if prop.fetched:
                body.append(f"{prop.var} = a.get({_str(prop.name)}, _MISSING)")
        if closed is False:
            if properties and 0 < len(optional) <= _COUNTED and all(
                    prop.fetched for prop in optional):
                # every key is a required one or a fetched optional one, or it is extra:
                # counting those present costs less than a keys() <= frozenset test
                present = " + ".join(f"({prop.var} is not _MISSING)" for prop in optional)
                body += [f"if len(a) != {len(required)} + {present}:",
                         f"    {self.fail_unknown()}"]
            else:
                body += self._extras(properties, required)

        # step 4: types, then step 5: ranges, in the order of properties. In the gate's
        # module an integer that is not an int (3.0) sets `rebind` on its way past the type
        # test (BIND at the end: Tool.bind makes it an int), at no cost for an int.
        integers = [prop for prop in props if self.top and prop.types == frozenset({"integer"})
                    and prop.type_fail]
        if integers or any(prop.int_elements for prop in props):
            body.append("rebind = False")
        for prop in props:
            if prop.type_fail == "":
                body += [f"if {_str(prop.name)} in a:",
                         f"    {self.fail_type(prop, f'a[{_str(prop.name)}]')}"]
            elif prop in integers:
                v = prop.var
                test = f"type({v}) is not int"
                body += [f"if {test if prop.required else f'{v} is not _MISSING and {test}'}:",
                         f"    if type({v}) in _NOT_NUMBERS or not is_integer({v}):",
                         f"        {self.fail_type(prop, v)}",
                         "    rebind = True"]
            elif prop.type_fail:
                body += self._if(prop, prop.type_fail, self.fail_type(prop, prop.var))
        for prop in props:
            if prop.range_fails:
                body += self._if(prop, _join(prop.range_fails), self.fail_range(prop))

        # then what each property holds: a nested object level by level, an array's elements
        for prop in props:
            body += prop.contents
        if self.top:
            body += self._bind(props, bool(integers) or any(p.int_elements for p in props))
        if not body:
            return None
        return [*body, "return None"]

    def _missing(self, names: list[str], label: str, *, short: bool = False) -> list[str]:
        """Lines returning ``missing-<name>`` for the first of ``names`` not in ``a``; when
        ``short`` (``a`` is known to lack one of them), the last is not tested."""
        lines = [line for name in names for line in (
            f"if {_str(name)} not in a:", f"    {self.fail_missing(name, label)}")]
        if short and lines:
            lines[-2:] = [lines[-1][4:]]
        return lines

    @staticmethod
    def _if(prop: _Property, condition: str, fail: str) -> list[str]:
        if not prop.required:
            if " or " in condition:
                condition = f"({condition})"
            condition = f"{prop.var} is not _MISSING and {condition}"
        return [f"if {condition}:", f"    {fail}"]

    def _extras(self, properties: dict[str, Any], required: list[str]) -> list[str]:
        """Lines for ``additionalProperties: false``: any key outside ``properties``."""
        fail = [f"    {self.fail_unknown()}"]
        if not properties:
            return ["if a:", *fail]
        if len(required) == len(properties):
            # every property is required and present: any other key makes the dict longer
            return [f"if len(a) != {len(properties)}:", *fail]
        names = self.named("frozenset({" + ", ".join(map(_str, properties)) + "})")
        return [f"if len(a) != {len(required)} and not a.keys() <= {names}:", *fail]

    @staticmethod
    def _bind(props: list[_Property], integers: bool) -> list[str]:
        """In the gate's module, at the end of a valid tool call: ``return _BIND`` when
        :meth:`Tool.bind` may change the arguments (an integral number that is not an
        ``int``, which set ``rebind``, or a value that may hold numbers), so the gate binds
        only then."""
        for prop in props:
            if prop.types is not None and prop.types.isdisjoint(("integer", "object", "array")):
                continue  # bind leaves these as they are
            if prop.int_elements:
                continue  # its loop sets rebind
            if prop.types != frozenset({"integer"}) and isinstance(prop.schema, dict):
                return ["return _BIND"]  # a number, an object or an array: bind looks
        return ["if rebind:", "    return _BIND"] if integers else []

    def function(self, schema: Mapping[str, Any], label: str, pointer: str) -> str | None:
        """Write a nested level as a function; its name, or None when it checks nothing.
        (Its failures return codes, in the gate's module too.)"""
        top, self.top = self.top, False
        try:
            body = self.level(schema, label, pointer)
        finally:
            self.top = top
        if body is None:
            return None
        self.levels += 1
        name = f"_L{self.levels}"
        self.functions.append([f"def {name}(a):", f"    # the object {_str(label)}",
                               *_indent(body)])
        return name

    # -- the module --

    def module(self, tools: ToolSet, *, rules: bool = False) -> str:
        """The standalone module: ``check(call, tool_choice=None)`` over a whole call,
        returning verdict codes (see :func:`compile_validator`); with ``rules``, the tool
        set's own rules (:attr:`ToolSet.standalone_rules`) after the schema's."""
        def body(name: str, schema: Mapping[str, Any], pointer: str) -> list[str]:
            return self.level(schema, "", pointer) or ["return None"]

        own = tools.standalone_rules if rules else None
        source = self._assemble(
            tools, body, params="a", fallback="return 'unknown-tool'",
            header=_HEADER, head=_CHECK_HEAD if own is None else _SCHEMA_CHECK_HEAD,
            constants="constants from the schemas", functions_note="")
        if own is None:
            return source
        return (source + "\n\n# --- the tools' own rules (a register map's), after the schema's "
                "---\n\n" + own.strip("\n") + "\n\n\n" + _CHECK_WITH_RULES)

    def refusal_module(self, tools: ToolSet) -> str:
        """The gate's module: ``refusal(name, a, tool_choice=None)`` over a call's tool name
        and arguments, its failures worded (see :func:`compile_refusals`)."""
        wording = self.wording
        assert wording is not None

        def body(name: str, schema: Mapping[str, Any], pointer: str) -> list[str]:
            self.top, self.level_of = True, wording.level(name)
            try:
                return self.level(schema, "", pointer) or ["return None"]
            finally:
                self.top, self.level_of = False, None

        return self._assemble(
            tools, body, params="name, a, tool_choice",
            fallback="return _name_refusal(name, a, tool_choice)", header=_GATE_HEADER,
            head=_REFUSAL_HEAD, constants="constants from the schemas, and the wording's parts",
            functions_note=" (their failures return codes)")

    def _assemble(self, tools: ToolSet,
                  body: Callable[[str, Mapping[str, Any], str], list[str]], *, params: str,
                  fallback: str, header: str, head: str, constants: str,
                  functions_note: str) -> str:
        """A module's source: each tool's ``body`` (a list of lines over ``a``) dispatched on
        its name, inline in the head's function for up to :data:`INLINE_TOOLS` tools, else
        as functions ``_T<i>(params)`` in a table; ``fallback`` answers any other name."""
        names = list(tools)
        inline = len(names) <= INLINE_TOOLS
        dispatch: list[str] = []
        table: list[str] = []
        for index, name in enumerate(names):
            pointer = f"/{index}/inputSchema"
            schema = tools[name].input_schema
            check_input_schema(schema, pointer)
            lines = body(name, schema, pointer)
            if inline:
                dispatch += [f"    if name == {_str(name)}:",
                             *("        " + line for line in lines)]
            else:
                self.functions.append([f"def _T{index}({params}):", f"    # the tool {_str(name)}",
                                       *("    " + line for line in lines)])
                table.append(f"    {_str(name)}: _T{index},")
        if inline:
            dispatch.append(f"    {fallback}")
        else:
            dispatch = ["    tool = _TOOLS.get(name)",
                        "    if tool is None:",
                        f"        {fallback}",
                        f"    return tool({params})"]
        constant_lines = ["_MISSING = object()",
                          "_NOT_NUMBERS = frozenset({str, bool, type(None), list, dict})",
                          "TOOL_NAMES = (" + "".join(_str(n) + ", " for n in names) + ")",
                          *self.constants]
        sections = [header.format(version=__version__, count=len(names)),
                    RUNTIME_SOURCE,
                    f"# --- {constants} ---\n\n" + "\n".join(constant_lines)]
        if self.functions:
            sections.append("# --- nested objects" + (" and tools" if not inline else "")
                            + f"{functions_note} ---")
            sections += ["\n".join(f) for f in self.functions]
        if not inline:
            sections.append("_TOOLS = {\n" + "\n".join(table) + "\n}")
        sections.append(head + "\n".join(dispatch))
        return "\n\n\n".join(section.strip("\n") for section in sections) + "\n"


_HEADER = '''\
"""A tool-call validator generated by regdev {version} for {count} tool(s); do not edit.

``check(call, tool_choice=None)`` returns None when ``call`` is a valid canonical tool call
``{{"tool": NAME, "arguments": {{...}}}}``, else the verdict code of the first failure, checked
in the order shape, name, fields, types, ranges, then what each argument holds: nested objects
level by level, array elements in index order (see regdev's docs/validator.md). Needs only
the standard library. ``TOOL_NAMES`` lists the tools.
"""

from __future__ import annotations

import math
from decimal import Decimal

__all__ = ["TOOL_NAMES", "check"]

# --- JSON semantics (copied from regdev.gate._runtime) ---
'''

_CHECK_HEAD = '''\
def check(call, tool_choice=None):
    """None when ``call`` is valid, else the first failure's verdict code."""
    if type(call) is not dict:
        return 'not-an-object'
    name = call.get('tool')
    if type(name) is not str:
        return 'missing-tool'
    a = call.get('arguments')
    if type(a) is not dict:
        return 'bad-arguments'
    if tool_choice is not None and name != tool_choice:
        return 'wrong-tool'
'''


#: The schema's check when the tools have rules of their own: ``check`` runs it, then them.
_SCHEMA_CHECK_HEAD = _CHECK_HEAD.replace(
    "def check(call, tool_choice=None):",
    "def _schema_check(call, tool_choice=None):").replace(
    "None when ``call`` is valid", "None when ``call`` passes the schemas")

_CHECK_WITH_RULES = '''\
def check(call, tool_choice=None):
    """None when ``call`` is valid, else the first failure's verdict code: the schema's, then
    the tools' own rules (what regdev's gate checks after the schema, and the registers the
    map makes read-only, which its gate refuses at authorize)."""
    code = _schema_check(call, tool_choice)
    if code is not None:
        return code
    return tool_rules(call['tool'], call['arguments'])
'''


_GATE_HEADER = '''\
"""The gate's check, generated by regdev {version} for {count} tool(s); do not edit.

``refusal(name, a, tool_choice=None)`` checks the arguments ``a`` (a dict) of a call of tool
``name`` (a str) in the order of ``check`` (regdev's docs/validator.md) and returns None when
the call is valid, ``_BIND`` when it is valid and ``Tool.bind`` may change its arguments, else
the first failure's Refusal. A failure of the arguments themselves is worded here, from parts
regdev's reference validator worked out (``_W`` names, given in the namespace); any other
(the tool name, a nested object, an array's elements) is worded by the reference validator
(``_explain``, ``_name_refusal``). Not standalone: the names above come from regdev.
"""

from __future__ import annotations

import math
from decimal import Decimal

# --- JSON semantics (copied from regdev.gate._runtime) ---
'''

_REFUSAL_HEAD = '''\
def refusal(name, a, tool_choice=None):
    """None when the call is valid, _BIND when valid but to bind, else its Refusal."""
    if tool_choice is not None and name != tool_choice:
        return _name_refusal(name, a, tool_choice)
'''


def _tool_set(tools: ToolSet | Iterable[Mapping[str, Any]] | None) -> ToolSet:
    if tools is None:
        return REGISTER_TOOLS
    if isinstance(tools, ToolSet):
        return tools
    if isinstance(tools, (str, bytes, Mapping)):
        raise TypeError("tools must be a ToolSet or a list of MCP tool definitions "
                        f"(dicts with `name` and `inputSchema`), got {type(tools).__name__}")
    return ToolSet.from_definitions(list(tools))


def generate_source(tools: ToolSet | Iterable[Mapping[str, Any]] | None = None) -> str:
    """The validator module's source for a tool set (what ``regdev compile`` writes).

    Args:
        tools: None for the built-in register tools, a :class:`ToolSet`, or a list of MCP
            ``tools/list`` entries (dicts with ``name`` and ``inputSchema``).

    Returns:
        Python source of a module that imports only ``math`` and ``decimal`` and defines
        ``check(call, tool_choice=None) -> str | None`` and ``TOOL_NAMES``. For a tool set
        with rules of its own (:attr:`ToolSet.standalone_rules`: the tools of a register map),
        ``check`` runs them after the schema's checks, so its verdict is the one the gate
        gives before authorize (``no-register``, ``reserved-bits``, ``field-value``, ...),
        and ``read-only-register`` for a write to a register the map makes read-only (the
        gate's verdict at authorize when no policy file adds or overrides anything).

    Raises:
        SchemaError: a schema is malformed or uses a keyword outside the supported subset; the
            message names the keyword and its JSON Pointer (e.g. ``/0/inputSchema/pattern``).
        TypeError: ``tools`` is neither a ToolSet nor a list of definitions.
    """
    return _Compiler().module(_tool_set(tools), rules=True)


def compile_validator(
    tools: ToolSet | Iterable[Mapping[str, Any]] | None = None,
) -> CompiledValidator:
    """Compile tool schemas into one fast ``check`` function.

    The function checks a canonical call ``{"tool": NAME, "arguments": {...}}`` in the fixed
    order (shape, name, fields, types, ranges; see ``docs/validator.md``) and returns None when
    it is valid, else the first failure's verdict code, e.g. ``"range-addr"``; the code is
    always the one :class:`~regdev.ReferenceValidator` gives. ``check(call, tool_choice=NAME)``
    refuses a call to any other tool as ``wrong-tool``. The generated source is on
    ``check.source`` and shows in tracebacks.

    Args:
        tools: None for the built-in register tools, a :class:`ToolSet`, or a list of MCP
            ``tools/list`` entries (dicts with ``name`` and ``inputSchema``). Numbers in
            schemas compare exactly; a ``float``, in a schema or in a call, is read as the
            decimal its ``repr`` writes (``1.1``, not the float's binary value), the number
            the JSON text said, so a call decoded with ``json.loads`` gets the verdict its
            text gets decoded exactly.

    Returns:
        The compiled ``check(call, tool_choice=None) -> str | None``.

    Raises:
        SchemaError: a schema is malformed or uses a keyword outside the supported subset; the
            message names the keyword and its JSON Pointer.
        TypeError: ``tools`` is neither a ToolSet nor a list of definitions.
    """
    tool_set = _tool_set(tools)
    source = _Compiler().module(tool_set)
    namespace: dict[str, Any] = {"__name__": "regdev_compiled_validator"}
    filename = _load(source, "regdev compiled validator", namespace)
    check = namespace["check"]
    check.source = source
    check.filename = filename
    check.tool_names = tuple(tool_set)
    return cast(CompiledValidator, check)


class _Bind:
    """The type of :data:`BIND`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BIND"


#: What the gate's check returns for a valid call whose arguments :meth:`Tool.bind` may change
#: (an integral number that is not an ``int``, or a value that holds numbers).
BIND = _Bind()

#: What the gate's check returns: None (valid, as it is), :data:`BIND` (valid, bind it) or the
#: first failure's refusal.
Verdict = Refusal | _Bind | None


class RefusalCheck:
    """The gate's validate stage for one tool set: :func:`compile_refusals` makes it.

    Attributes:
        refusal: the generated ``refusal(name, arguments, tool_choice=None) -> Verdict`` over a
            call whose tool name is a str and whose arguments are a dict (``name`` any str:
            an unknown tool is refused).
        source: its module's source (also shown in tracebacks).
        filename: the fake file name the source is registered under in :mod:`linecache`.
        reference: the reference validator its refusals are worded by (and as).
    """

    def __init__(self, refusal: Any, source: str, filename: str,
                 reference: ReferenceValidator) -> None:
        self.refusal = refusal
        self.source = source
        self.filename = filename
        self.reference = reference

    def __call__(self, call: object, tool_choice: str | None = None) -> Verdict:
        """The verdict on a decoded canonical call (any value): the shape step here (a call
        that is not an object with a string ``tool`` and object ``arguments`` is worded by the
        reference), then :attr:`refusal`."""
        if type(call) is dict:
            name, arguments = call.get("tool"), call.get("arguments")
            if type(name) is str and type(arguments) is dict:
                verdict: Verdict = self.refusal(name, arguments, tool_choice)
                return verdict
        return self.reference.check(call, tool_choice)


def compile_refusals(
    tools: ToolSet | Iterable[Mapping[str, Any]] | None = None,
    reference: ReferenceValidator | None = None,
) -> RefusalCheck:
    """Compile the gate's validate stage: the compiled check with its refusals worded.

    The generated function checks as :func:`compile_validator`'s ``check`` does, in the same
    order, and returns the first failure as the very :class:`Refusal` that
    :meth:`ReferenceValidator.check` gives (the reference stays the oracle the tests compare
    with). The refusals of a tool's own arguments (missing, unknown, type, range) are worded
    in the generated code, from constant parts the reference worked out; the others by the
    reference (:meth:`~ReferenceValidator.explain`).

    Args:
        tools: as for :func:`compile_validator`.
        reference: the reference validator of the same tools (made when None).

    Returns:
        The :class:`RefusalCheck`.

    Raises:
        SchemaError: a schema is outside the supported subset (as for
            :func:`compile_validator`).
        TypeError: ``tools`` is neither a ToolSet nor a list of definitions.
    """
    tool_set = _tool_set(tools)
    if reference is None:
        reference = ReferenceValidator(tool_set)
    compiler = _Compiler(reference)
    source = compiler.refusal_module(tool_set)

    def explain_at(name: str, arguments: dict[str, Any], code: str,
                   tool_choice: str | None) -> Refusal:
        return reference.explain({"tool": name, "arguments": arguments}, code, tool_choice)

    def name_refusal(name: str, arguments: dict[str, Any],
                     tool_choice: str | None) -> Refusal | None:
        return reference.check({"tool": name, "arguments": arguments}, tool_choice)

    namespace: dict[str, Any] = {
        "__name__": "regdev_gate_check", **compiler.objects, "_BIND": BIND,
        "_Refusal": Refusal, "_got": got_value, "_show": show_value,
        "_out_of_range": out_of_range, "_unknown_argument": unknown_argument,
        "_element_refusal": element_refusal,
        "_explain": explain_at, "_name_refusal": name_refusal}
    filename = _load(source, "regdev gate check", namespace)
    return RefusalCheck(namespace["refusal"], source, filename, reference)


def _load(source: str, what: str, namespace: dict[str, Any]) -> str:
    """Execute a generated module's source in ``namespace`` and register it in
    :mod:`linecache` under a readable fake file name (as attrs does); return that name."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    filename = f"<{what} {digest}>"
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, RecursionError, MemoryError) as error:  # pragma: no cover - a bug
        raise SchemaError(f"the schemas could not be compiled: {error}", "") from None
    exec(code, namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename
