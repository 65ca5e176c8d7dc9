"""The reference validator: a plain interpreter over the tool schemas, in the fixed order.

Rules of this file:

* The checks run in five steps and the first failure decides, so a refusal names one cause:

  1. shape:  ``not-an-object``, ``missing-tool``, ``bad-arguments``
  2. name:   ``wrong-tool`` (a forced tool choice names another tool), ``unknown-tool``
  3. fields: ``missing-<arg>`` in the order of ``required``, then ``unknown-argument``
  4. types:  ``type-<arg>`` in the order of ``properties``
  5. ranges: ``range-<arg>`` in the order of ``properties``: a number's bounds (minimum,
     maximum, the exclusive forms, multipleOf), a string's length (minLength, maxLength), an
     array's count and uniqueness (minItems, maxItems, uniqueItems), an object's count of
     properties (minProperties, maxProperties), then enum and const

* What a property holds is checked after every check of its level, in the order of
  properties: a nested object level by level (its own fields, types and ranges; its codes
  name the dotted path, ``missing-cfg.speed``), an array element by element in index order,
  each element wholly (its type, its ranges, then what it holds) before the next, so the
  first bad element decides. An element's codes name the array with ``[]`` for an element
  of ``items`` and ``[N]`` for position N of ``prefixItems`` (``type-data[]``,
  ``range-pair[0]``, ``missing-points[].x``); its messages name the element's index
  (``data[3] 300 is outside 0..255``).
* Dots and brackets in names are not escaped (codes stay plain to read), so a property named
  ``a.b`` shares its codes with the property ``b`` of an object ``a``; each code still names
  one cause, and the schema's author can tell them apart by avoiding such names.
* This module is the readable reference: any faster validator must return the same code for
  every input, and refusal messages come from here. Each schema is read once, into one
  :class:`ArgumentNode` per place a value can sit and one :class:`ArgumentLevel` per object
  level; ``explain`` words the refusal for a code the compiled validator found, going straight
  to the place it names. The compiled check (``_compile.py``) uses only this module's public
  names: these two, and the wording helpers at the end.
* Untrusted text (an unknown tool or argument name, a string value) enters a message only
  escaped and cut short, and never enters a code.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from ..core._observation import Refusal, refuse
from ..core._text import escape_text
from ._runtime import is_multiple, json_first_repeat, written_number
from ._schema import (
    a_json_type,
    is_number,
    json_equal,
    json_type_name,
    matches_type,
)
from ._tools import REGISTER_TOOLS, ToolSet

__all__ = [
    "ArgumentLevel",
    "ArgumentNode",
    "ReferenceValidator",
    "describe_schema",
    "element_refusal",
    "got_value",
    "missing_refusal",
    "out_of_range",
    "range_parts",
    "show_value",
    "type_prefix",
    "unknown_argument",
]

_A = {"integer": "an integer", "number": "a number", "string": "a string", "object": "an object",
      "array": "an array", "boolean": "a boolean", "null": "null"}
_SHOWN_BY_TYPE = frozenset({"object", "array", "null"})


def show_value(value: object, limit: int = 40) -> str:
    """Render a decoded JSON value for a one-line message, escaped and at most ``limit`` chars."""
    kind = type(value)
    if kind is str:
        return '"' + escape_text(cast(str, value), limit - 2) + '"'
    if kind is int:
        bits = cast(int, value).bit_length()
        if bits > 128:  # never build a huge decimal string
            return f"an integer of about {int(bits * 0.30103)} digits"
        text = str(value)
    elif kind is bool:
        return "true" if value else "false"
    elif value is None:
        return "null"
    elif kind is Decimal or kind is float:
        text = str(value)
    elif kind is dict:
        return "an object"
    elif kind is list:
        return "an array"
    else:
        text = kind.__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plural(count: int, word: str, plural: str = "") -> str:
    """``1 item``, ``2 items``; ``plural`` when the word does not just take an s."""
    return f"{count} {word}" if count == 1 else f"{count} {plural or word + 's'}"


def _count_range(low: object, high: object, word: str, plural: str = "") -> str:
    """A count allowed by two bounds, e.g. ``1..16 items``, ``at least 1 item``; "" if none."""
    many = plural or word + "s"
    if low is not None and high is not None:
        return f"{show_value(low)}..{show_value(high)} {many}"
    if low is not None:
        return f"at least {show_value(low)} {word if low == 1 else many}"
    if high is not None:
        return f"at most {show_value(high)} {word if high == 1 else many}"
    return ""


def _bounds(schema: Mapping[str, Any]) -> str:
    """Describe the value bounds of a schema, e.g. ``0..15``, ``> 0``, ``one of 1, 2``."""
    parts = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        parts.append(f"{show_value(low)}..{show_value(high)}")
    elif low is not None:
        parts.append(f">= {show_value(low)}")
    elif high is not None:
        parts.append(f"<= {show_value(high)}")
    if "exclusiveMinimum" in schema:
        parts.append(f"> {show_value(schema['exclusiveMinimum'])}")
    if "exclusiveMaximum" in schema:
        parts.append(f"< {show_value(schema['exclusiveMaximum'])}")
    if "multipleOf" in schema:
        parts.append(f"(a multiple of {show_value(schema['multipleOf'])})")
    short, long = schema.get("minLength"), schema.get("maxLength")
    if short is not None or long is not None:
        parts.append(f"of length {show_value(short if short is not None else 0)}.."
                     f"{show_value(long) if long is not None else ''}".rstrip("."))
    if "enum" in schema:
        parts.append("one of " + ", ".join(show_value(v, 20) for v in schema["enum"][:8])
                     + (", ..." if len(schema["enum"]) > 8 else ""))
    if "const" in schema:
        parts.append(f"equal to {show_value(schema['const'])}")
    return " ".join(parts)


def _violation(schema: Mapping[str, Any]) -> str:
    """What a value failing the bounds of ``schema`` is, after the value in a range refusal:
    ``is outside 0..15``, ``is below 1``, ``is not one of "A", "B"``, ``is not equal to 3``;
    failures of several bounds are joined by "or" (``is above 9 or not one of 1, 2``).
    "" when the schema has no bound (minimum, maximum, their exclusive forms, enum, const)."""
    parts = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        parts.append(f"outside {show_value(low)}..{show_value(high)}")
    elif low is not None:
        parts.append(f"below {show_value(low)}")
    elif high is not None:
        parts.append(f"above {show_value(high)}")
    if "exclusiveMinimum" in schema:
        parts.append(f"not above {show_value(schema['exclusiveMinimum'])}")
    if "exclusiveMaximum" in schema:
        parts.append(f"not below {show_value(schema['exclusiveMaximum'])}")
    if "enum" in schema:
        parts.append("not one of " + ", ".join(show_value(v, 20) for v in schema["enum"][:8])
                     + (", ..." if len(schema["enum"]) > 8 else ""))
    if "const" in schema:
        parts.append(f"not equal to {show_value(schema['const'])}")
    return "is " + " or ".join(parts) if parts else ""


def _shape(schema: Mapping[str, Any], depth: int) -> str:
    """Describe what an array's items or an object's count of properties must be, e.g.
    ``with 1..16 items, each an integer 0..255``; "" when the schema says nothing of either."""
    parts = []
    count = _count_range(schema.get("minItems"), schema.get("maxItems"), "item")
    if count:
        parts.append(f"with {count}")
    if schema.get("uniqueItems") is True:
        parts.append("unique")
    prefix = schema.get("prefixItems") or []
    for index, sub in enumerate(prefix):
        parts.append(f"item {index} {describe_schema(sub, depth + 1)}")
    items = schema.get("items", True)
    if items is False:
        parts.append("no more items" if prefix else "no items")
    elif items is not True and items != {}:
        each = describe_schema(items, depth + 1)
        parts.append(f"then each {each}" if prefix else f"each {each}")
    count = _count_range(schema.get("minProperties"), schema.get("maxProperties"),
                         "property", "properties")
    if count:
        parts.append(f"with {count}")
    return ", ".join(parts)


def _got(value: object) -> str:
    """A wrong value for a type message: ``string "3"``, ``boolean true``, ``an array``."""
    kind = type(value)
    if kind is str:  # the usual wrong type (a number sent as a string), as show_value words it
        return 'string "' + escape_text(cast(str, value), 38) + '"'
    if kind is bool:
        return "boolean true" if value else "boolean false"
    name = json_type_name(value)
    if name in _SHOWN_BY_TYPE or name.startswith("Python "):
        return a_json_type(value)
    return f"{name} {show_value(value)}"


#: Past this many levels of items in items, an item is described by its type alone.
_DESCRIBE_DEPTH = 2


def describe_schema(schema: object, depth: int = 0) -> str:
    """What a schema allows, for a message, e.g. ``"an integer 0..15"`` or ``"an array with
    1..16 items, each an integer 0..255"``."""
    if schema is True or schema == {}:
        return "any value"
    if schema is False:
        return "no value"
    assert isinstance(schema, Mapping)
    types = schema.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    kind = " or ".join(_A[n] for n in names) if names else "a value"
    if depth >= _DESCRIBE_DEPTH:
        return kind
    bounds = _bounds(schema)
    text = f"{kind} {bounds}" if bounds else kind
    shape = _shape(schema, depth)
    return f"{text} {shape}" if shape.startswith("with") else (
        f"{text}, {shape}" if shape else text)


def _type_ok(node: ArgumentNode, value: object) -> bool:
    if node.types is None:
        return node.schema is not False
    for name in node.types:  # noqa: SIM110 - a loop, not any() over a generator (per element)
        if matches_type(value, name):
            return True
    return False


#: The keywords of the ranges step.
_RANGE_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                             "multipleOf", "minLength", "maxLength", "minItems", "maxItems",
                             "uniqueItems", "minProperties", "maxProperties", "enum", "const"})


def _range_failure(schema: Mapping[str, Any], value: object) -> str | None:
    """The first range keyword ``value`` fails, in the fixed order, or None."""
    if type(value) is int or is_number(value):
        # a float, in the call or in the schema, is the decimal its repr writes
        number: Any = written_number(value)
        if "minimum" in schema and number < written_number(schema["minimum"]):
            return "minimum"
        if "maximum" in schema and number > written_number(schema["maximum"]):
            return "maximum"
        low = schema.get("exclusiveMinimum")
        if low is not None and number <= written_number(low):
            return "exclusiveMinimum"
        high = schema.get("exclusiveMaximum")
        if high is not None and number >= written_number(high):
            return "exclusiveMaximum"
        if "multipleOf" in schema and not is_multiple(number, schema["multipleOf"]):
            return "multipleOf"
    elif type(value) is str:
        if "minLength" in schema and len(value) < schema["minLength"]:
            return "minLength"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return "maxLength"
    elif type(value) is list:
        if "minItems" in schema and len(value) < schema["minItems"]:
            return "minItems"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return "maxItems"
        if schema.get("uniqueItems") is True and json_first_repeat(value) is not None:
            return "uniqueItems"
    elif type(value) is dict:
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            return "minProperties"
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            return "maxProperties"
    if "enum" in schema and not any(json_equal(value, item) for item in schema["enum"]):
        return "enum"
    if "const" in schema and not json_equal(value, schema["const"]):
        return "const"
    return None


def _child(where: str, name: str) -> str:
    """The path of a property inside an object at ``where`` ("" for the arguments)."""
    return f"{where}.{name}" if where else name


@dataclass(frozen=True, slots=True)
class ArgumentNode:
    """One place a value can sit (a property of an object, or an element of an array), with
    the parts of its messages worked out once."""

    label: str  # the place in codes: "data", "limits.low", "data[]", "pair[0]", "pts[].x"
    schema: Any  # its schema: a dict, or true/false
    types: tuple[str, ...] | None  # its ``type`` names; None when any type will do
    ranged: bool  # its schema has a keyword of the ranges step
    allowed: str  # describe_schema(schema), e.g. "an integer 0..15"
    violation: str  # _violation(schema) for a dict, else "": "is outside 0..15"
    level: ArgumentLevel | None  # its object level, when the schema is a dict
    prefix: tuple[ArgumentNode, ...]  # the elements prefixItems describes, in order
    items: ArgumentNode | None  # the elements past them (``items``); None when any is allowed
    element: bool = False  # an element of an array (not a property)
    past: int = -1  # for the node of ``items``: how many prefixItems come before it


@dataclass(frozen=True, slots=True)
class ArgumentLevel:
    """One object level of a tool's input schema, read once (``_level`` builds it)."""

    tool: str
    label: str  # the object's place in codes: "" for the arguments, "limits", "pts[]"
    fields: dict[str, ArgumentNode]  # the properties, in declared order
    required: tuple[str, ...]  # in declared order
    closed: bool  # additionalProperties is false


def _node(schema: Any, label: str, tool: str, element: bool = False,
          past: int = -1) -> ArgumentNode:
    if not isinstance(schema, Mapping):
        return ArgumentNode(label, schema, None, False, describe_schema(schema), "", None, (), None,
                     element, past)
    prefix = tuple(_node(sub, f"{label}[{index}]", tool, True)
                   for index, sub in enumerate(schema.get("prefixItems") or ()))
    items = (_node(schema["items"], f"{label}[]", tool, True, len(prefix))
             if "items" in schema else None)
    types = schema.get("type")
    return ArgumentNode(label, schema, (types,) if type(types) is str else types and tuple(types),
                 not _RANGE_KEYWORDS.isdisjoint(schema), describe_schema(schema),
                 _violation(schema), _level(schema, tool, label), prefix, items, element,
                 past)


def _level(schema: Mapping[str, Any], tool: str, label: str) -> ArgumentLevel:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    fields = {name: _node(sub, _child(label, name), tool) for name, sub in properties.items()}
    return ArgumentLevel(tool, label, fields, tuple(schema.get("required", ())),
                  schema.get("additionalProperties") is False)


def _missing(level: ArgumentLevel, name: str, where: str) -> Refusal:
    field = level.fields.get(name)
    allowed = field.allowed if field is not None else describe_schema(True)
    return refuse(f"missing-{_child(level.label, name)}",
                  f"missing required argument {_child(where, name)} ({allowed})")


def _unknown(level: ArgumentLevel, key: object, where: str) -> Refusal:
    if type(key) is str:
        name = show_value(_child(where, key))
    else:  # decoded JSON has string keys only: Python data given to check() directly
        name = (f"{_child(where, _python_repr(key))} "
                f"(a key of Python type {type(key).__name__})")
    allowed = ", ".join(_child(where, p) for p in level.fields) or "no arguments"
    return refuse("unknown-argument",
                  f"unknown argument {name}; {where or level.tool} takes: {allowed}")


def _python_repr(value: object) -> str:
    """``repr(value)`` escaped and cut short, for a value that is not JSON data."""
    if type(value) is int:
        return show_value(value)  # an integer too long for repr() is named by its size
    try:
        return escape_text(repr(value), 40)
    except Exception:  # a repr that fails (an integer too long inside a tuple, a user class)
        return f"a Python {type(value).__name__}"


def _wrong_type(node: ArgumentNode, value: object, where: str) -> Refusal:
    if node.schema is False and node.element:  # an element no schema allows
        array = where[:where.rindex("[")]
        past = "" if node.past < 0 else f"; {array} holds at most {_plural(node.past, 'item')}"
        return refuse(f"type-{node.label}", f"{where} is not allowed{past}")
    return refuse(f"type-{node.label}",
                  f"{where} must be {node.allowed}, got {_got(value)}")


def _out_of_range(node: ArgumentNode, value: Any, where: str) -> Refusal | None:
    """The range refusal of ``value`` at ``node`` (``where`` its concrete path), or None."""
    if not node.ranged:
        return None
    schema = node.schema
    keyword = _range_failure(schema, value)
    if keyword is None:
        return None
    if keyword in ("minLength", "maxLength"):
        message = f"{where} has length {len(value)}; allowed: {node.allowed}"
    elif keyword in ("minItems", "maxItems"):
        message = f"{where} has {_plural(len(value), 'item')}; allowed: {node.allowed}"
    elif keyword in ("minProperties", "maxProperties"):
        message = (f"{where} has {_plural(len(value), 'property', 'properties')}; "
                   f"allowed: {node.allowed}")
    elif keyword == "uniqueItems":
        first, again = cast(tuple[int, int], json_first_repeat(value))
        message = (f"{where}[{again}] repeats {where}[{first}] ({show_value(value[again])}); "
                   f"the items of {where} must be unique")
    elif keyword == "multipleOf":
        message = (f"{where} {show_value(value)} is not a multiple of "
                   f"{show_value(schema['multipleOf'])}")
    elif keyword == "enum" and type(value) is str and _string_enum(schema):
        message = f"{where} {show_value(value)} {_not_one_of(value, schema['enum'])}"
    else:
        message = f"{where} {show_value(value)} {node.violation}"
    return refuse(f"range-{node.label}", message)


#: The most characters one allowed string of an ``enum`` takes in a refusal (names such as
#: a register map's ``"REGISTER.FIELD"``, up to 129, are shown in full).
ENUM_SHOWN = 140
#: The most characters a refusal spends on an ``enum``'s strings; past it, how many more.
ENUM_LIST_SHOWN = 1500
#: How many of the closest strings a refusal names first, and how close they must be
#: (``difflib.get_close_matches``' ``n`` and ``cutoff``).
CLOSEST, CLOSE_ENOUGH = 3, 0.6


def _string_enum(schema: Mapping[str, Any]) -> bool:
    """True when the schema's ``enum`` holds strings only (then a refusal names the
    closest)."""
    items = schema.get("enum")
    return type(items) is list and bool(items) and all(type(i) is str for i in items)


def _not_one_of(value: str, items: list[str]) -> str:
    """Why ``value`` fails a string ``enum``, for a model: the closest strings first, in full
    (:data:`ENUM_SHOWN` characters each, escaped), found by :mod:`difflib` regardless of
    case, then the others in the schema's order, up to :data:`ENUM_LIST_SHOWN` characters:
    ``is not one of the 9 allowed; closest: "CTRL.MODE"; the others: "CTRL.EN", ...``, or
    ``is not one of "A", "B"`` when none is close."""
    by_fold: dict[str, str] = {}
    for item in items:
        by_fold.setdefault(item.casefold(), item)
    close = [by_fold[match] for match in difflib.get_close_matches(
        value[:ENUM_SHOWN].casefold(), list(by_fold), CLOSEST, CLOSE_ENOUGH)]
    others = [item for item in items if item not in close]
    shown: list[str] = []
    used = 0
    for item in others:
        text = show_value(item, ENUM_SHOWN)
        if shown and used + len(text) > ENUM_LIST_SHOWN:
            break
        shown.append(text)
        used += len(text) + 2
    more = len(others) - len(shown)
    rest = ", ".join(shown) + (f", and {more} more" if more else "")
    if not close:
        return f"is not one of {rest}"
    closest = ", ".join(show_value(item, ENUM_SHOWN) for item in close)
    return (f"is not one of the {len(items)} allowed; closest: {closest}"
            + (f"; the others: {rest}" if others else ""))


def _check_level(level: ArgumentLevel, value: dict[Any, Any], where: str) -> Refusal | None:
    """Fields, types and ranges of one object level (``where`` its concrete path), then what
    its properties hold: nested objects and array elements, in the order of properties."""
    for name in level.required:
        if name not in value:
            return _missing(level, name, where)
    if level.closed:
        for key in value:
            if key not in level.fields:
                return _unknown(level, key, where)
    for name, node in level.fields.items():
        if name in value and not _type_ok(node, value[name]):
            return _wrong_type(node, value[name], _child(where, name))
    for name, node in level.fields.items():
        if name in value:
            refusal = _out_of_range(node, value[name], _child(where, name))
            if refusal is not None:
                return refusal
    for name, node in level.fields.items():
        if name in value:
            refusal = _inside(node, value[name], _child(where, name))
            if refusal is not None:
                return refusal
    return None


def _inside(node: ArgumentNode, value: object, where: str) -> Refusal | None:
    """What a value holds, once its own type and ranges passed: an object's level, or an
    array's elements."""
    if type(value) is dict and node.level is not None:
        return _check_level(node.level, value, where)
    if type(value) is list and (node.prefix or node.items is not None):
        return _elements(node, value, where)
    return None


def _elements(node: ArgumentNode, value: list[Any], where: str) -> Refusal | None:
    """Each element in order, each wholly (type, ranges, what it holds): the first bad
    element decides."""
    for index, item in enumerate(value):
        if index < len(node.prefix):
            child = node.prefix[index]
        elif node.items is None:
            return None
        else:
            child = node.items
        if not _type_ok(child, item):
            return _wrong_type(child, item, f"{where}[{index}]")
        if child.ranged and _range_failure(child.schema, item) is not None:
            return _out_of_range(child, item, f"{where}[{index}]")
        if type(item) is dict or type(item) is list:
            refusal = _inside(child, item, f"{where}[{index}]")
            if refusal is not None:
                return refusal
    return None


def _first_extra(level: ArgumentLevel, value: dict[Any, Any], where: str) -> Refusal | None:
    """The unknown-argument refusal of the first closed level (in the order ``_check_level``
    visits them) that holds a key outside its properties, if any."""
    if level.closed:
        for key in value:
            if key not in level.fields:
                return _unknown(level, key, where)
    for name, node in level.fields.items():
        if name in value:
            refusal = _first_extra_in(node, value[name], _child(where, name))
            if refusal is not None:
                return refusal
    return None


def _first_extra_in(node: ArgumentNode, value: object, where: str) -> Refusal | None:
    if type(value) is dict and node.level is not None:
        return _first_extra(node.level, value, where)
    if type(value) is list:
        for index, item in enumerate(value):
            child = node.prefix[index] if index < len(node.prefix) else node.items
            if child is None:
                break
            refusal = _first_extra_in(child, item, f"{where}[{index}]")
            if refusal is not None:
                return refusal
    return None


# --- wording for the compiled check ------------------------------------------------------------
# The gate's compiled check (``_compile.py``, message mode) words the refusals of a tool's own
# arguments where it finds them, from these parts worked out here once, so both validators
# say the same words by construction; every other refusal it hands to :meth:`explain`.


def missing_refusal(level: ArgumentLevel, name: str) -> Refusal:
    """The refusal of a tool call whose argument ``name`` (required at ``level``, the
    arguments object) is absent: a constant."""
    return _missing(level, name, "")


def type_prefix(node: ArgumentNode) -> str:
    """What the type refusal of an argument says before the value: ``"addr must be an
    integer 0..15, got "`` (then :func:`got_value` of the value)."""
    return f"{node.label} must be {node.allowed}, got "


def got_value(value: object) -> str:
    """A wrong value as a type refusal shows it: ``string "3"``, ``boolean true``."""
    return _got(value)


#: Range keywords whose refusal reads ``<where> <value> <violation>`` (``is outside 0..15``,
#: ``is not one of 1, 2``).
_BOUNDS_WORDED = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                            "enum", "const"})


def range_parts(node: ArgumentNode) -> tuple[str, str] | None:
    """``(before, after)`` the value in the range refusal of an argument whose range keywords
    are all bounds (``"addr "``, ``" is outside 0..15"``), else None (:func:`out_of_range`
    words it: the message depends on the keyword that failed)."""
    if not node.ranged or not _RANGE_KEYWORDS.intersection(node.schema) <= _BOUNDS_WORDED:
        return None
    if _string_enum(node.schema):  # the closest strings depend on the value
        return None
    return f"{node.label} ", f" {node.violation}"


def out_of_range(node: ArgumentNode, value: object) -> Refusal:
    """The range refusal of argument ``node`` holding ``value`` (which fails its ranges)."""
    refusal = _out_of_range(node, value, node.label)
    assert refusal is not None
    return refusal


def element_refusal(node: ArgumentNode, array: list[Any], element: object, where: str,
                    past: int) -> Refusal:
    """The refusal of ``element``, the first element of ``array`` (an argument named
    ``where``) past its ``past`` positional ones to fail ``node`` (leaf elements: their
    checks depend on the value alone, so the first element that is that very object is the
    one that failed)."""
    index = next(i for i in range(past, len(array)) if array[i] is element)
    place = f"{where}[{index}]"
    if not _type_ok(node, element):
        return _wrong_type(node, element, place)
    refusal = _out_of_range(node, element, place)
    assert refusal is not None
    return refusal


def unknown_argument(level: ArgumentLevel, arguments: dict[Any, Any]) -> Refusal:
    """The refusal of arguments that hold a name ``level`` (the arguments object, closed)
    does not declare: the first such name."""
    for key in arguments:
        if key not in level.fields:
            return _unknown(level, key, "")
    raise ValueError("no unknown argument")  # pragma: no cover - the check found one


#: A route from the arguments to a place: property names, and prefixItems positions (ints).
_Route = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a missing-, type- or range- code points.

    ``route`` leads from the arguments to the object (missing) or the value (type, range).
    When the place is inside the elements ``items`` describes (any index: ``pts[].x``),
    ``route`` leads to that array instead, ``array`` is its node, and explain() looks for the
    first bad element there.
    """

    kind: str  # "missing" | "type" | "range"
    route: _Route
    level: ArgumentLevel | None  # for missing
    name: str  # the property, for missing
    node: ArgumentNode | None  # for type and range
    array: ArgumentNode | None


def _add(into: dict[str, _Target | None], code: str, target: _Target) -> None:
    into[code] = None if code in into else target  # a code two places share: no target


def _targets_level(level: ArgumentLevel, route: _Route, array: ArgumentNode | None,
                   into: dict[str, _Target | None]) -> None:
    """Map every missing-, type- and range- code of a level, and those below it, to its place."""
    for name in level.required:
        _add(into, f"missing-{_child(level.label, name)}",
             _Target("missing", route, level, name, None, array))
    for name, node in level.fields.items():
        _targets_node(node, route if array is not None else (*route, name), array, into)


def _targets_node(node: ArgumentNode, route: _Route, array: ArgumentNode | None,
                  into: dict[str, _Target | None]) -> None:
    for kind in ("type", "range"):
        _add(into, f"{kind}-{node.label}", _Target(kind, route, None, "", node, array))
    if node.level is not None:
        _targets_level(node.level, route, array, into)
    for index, child in enumerate(node.prefix):
        _targets_node(child, route if array is not None else (*route, index), array, into)
    if node.items is not None:
        # the route stops at the outermost array whose element is not known by its index
        _targets_node(node.items, route, array or node, into)


def _follow(value: Any, route: _Route) -> tuple[Any, str] | None:
    """The value at the end of ``route`` and its path, or None when it is not there."""
    where = ""
    for step in route:
        if type(step) is int:
            if type(value) is not list or len(value) <= step:
                return None
            where = f"{where}[{step}]"
        else:
            if type(value) is not dict or step not in value:
                return None
            where = _child(where, cast(str, step))
        value = value[step]
    return value, where


#: Codes of the shape and name steps: explain() has check() word them (it stops early).
_CALL_CODES = frozenset({"not-an-object", "missing-tool", "bad-arguments", "wrong-tool",
                         "unknown-tool"})


class ReferenceValidator:
    """The readable validator over a tool set (see the module docstring for the order).

    The schemas are read once, when it is made: each object level's properties, required
    names and the fixed parts of its messages.

    Args:
        tools: the tools offered to the caller; the built-in register tools by default.
    """

    def __init__(self, tools: ToolSet = REGISTER_TOOLS) -> None:
        self._tools = tools
        self._names = ", ".join(tools) or "none"
        self._levels = {name: _level(tool.input_schema, name, "") for name, tool in tools.items()}
        self._targets: dict[str, dict[str, _Target | None]] = {}
        for name, level in self._levels.items():
            self._targets[name] = {}
            _targets_level(level, (), None, self._targets[name])

    @property
    def tools(self) -> ToolSet:
        """The tools it validates against."""
        return self._tools

    def level(self, tool: str) -> ArgumentLevel:
        """The arguments object of ``tool`` as read (its properties' nodes and the fixed parts
        of their messages), for the compiled check to word refusals from.

        Raises:
            KeyError: no such tool.
        """
        return self._levels[tool]

    def check(self, call: object, tool_choice: str | None = None) -> Refusal | None:
        """Validate one canonical call ``{"tool": NAME, "arguments": {...}}``.

        Args:
            call: the decoded call (any JSON value; the shape step refuses non-objects).
            tool_choice: when set, this step forces that tool and any other name is
                ``wrong-tool``.

        Returns:
            None when the call is valid, else the first failure as a validate-stage
            :class:`Refusal`.
        """
        if type(call) is not dict:
            hint = "; send one call at a time" if type(call) is list else ""
            return refuse("not-an-object",
                          f"a tool call must be a JSON object, got {a_json_type(call)}{hint}")
        if "tool" not in call or type(call["tool"]) is not str:
            got = "" if "tool" not in call else f" (got {a_json_type(call['tool'])})"
            return refuse("missing-tool",
                          f"the call names no tool{got}; available tools: {self._names}")
        if type(call.get("arguments")) is not dict:
            if "arguments" not in call:
                message = "the call has no arguments; send them as a JSON object"
            else:
                got = call["arguments"]
                message = f"arguments must be a JSON object, got {a_json_type(got)}"
                if type(got) is str:
                    message += " (a string holding JSON is still a string)"
            return refuse("bad-arguments", message)
        name, arguments = call["tool"], call["arguments"]
        if tool_choice is not None and name != tool_choice:
            return refuse("wrong-tool",
                          f"this step requires tool {tool_choice}, got {show_value(name)}")
        level = self._levels.get(name)
        if level is None:
            return refuse("unknown-tool",
                          f"unknown tool {show_value(name)}; available tools: {self._names}")
        return _check_level(level, arguments, "")

    def explain(self, call: object, code: str, tool_choice: str | None = None) -> Refusal:
        """The refusal for ``call`` whose verdict ``code`` is already known (the gate's way to
        word what the compiled validator refused): the same :class:`Refusal` as
        :meth:`check`, made without checking the call again.

        It goes straight to the place the code names (``range-limits.low``: the property
        ``low`` of the object ``limits``) and words the message from parts worked out when the
        validator was made; for a place inside an array's elements (``range-data[]``) it
        checks that array's elements only, to find the first bad one. When it cannot tell the
        place that way it runs :meth:`check`: for the shape and name codes (which stop early
        anyway), and for a code two places share (a property named ``a.b`` beside an object
        ``a`` holding ``b``).

        Args:
            call: the decoded call.
            code: its verdict code, as ``compile_validator(tools)(call, tool_choice)`` returns
                it (not None).
            tool_choice: the tool this step forces, if any.

        Returns:
            The validate-stage :class:`Refusal`; when ``code`` does not hold for ``call`` (a
            caller's mistake), the one :meth:`check` gives, or a generic one naming ``code``
            if the call is valid.
        """
        refusal = None
        if code not in _CALL_CODES and type(call) is dict:
            name, arguments = call.get("tool"), call.get("arguments")
            if type(name) is str and type(arguments) is dict and (tool_choice is None
                                                                  or tool_choice == name):
                refusal = self._explain(name, arguments, code)
        if refusal is None:
            refusal = self.check(call, tool_choice) or refuse(
                code, f"the call is invalid ({code})")
        return refusal

    def _explain(self, tool: str, arguments: dict[str, Any], code: str) -> Refusal | None:
        """The refusal ``code`` names, or None when the place is unclear or the code does not
        hold there."""
        targets = self._targets.get(tool)
        if targets is None:
            return None
        if code == "unknown-argument":
            return _first_extra(self._levels[tool], arguments, "")
        target = targets.get(code)
        if target is None:
            return None
        found = _follow(arguments, target.route)
        if found is None:
            return None
        value, where = found
        if target.array is not None:
            if type(value) is not list:
                return None
            refusal = _elements(target.array, value, where)
            return refusal if refusal is not None and refusal.code == code else None
        if target.kind == "missing":
            assert target.level is not None
            if type(value) is not dict or target.name in value:
                return None
            return _missing(target.level, target.name, where)
        node = target.node
        assert node is not None
        if target.kind == "type":
            return None if _type_ok(node, value) else _wrong_type(node, value, where)
        return _out_of_range(node, value, where)

    def __call__(self, call: object, tool_choice: str | None = None) -> str | None:
        """Validate ``call`` and return only the verdict code (None when valid)."""
        refusal = self.check(call, tool_choice)
        return None if refusal is None else refusal.code
