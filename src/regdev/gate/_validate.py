"""The reference validator: a plain interpreter over the tool schemas, in the fixed order.

Rules of this file:

* The checks run in five steps and the first failure decides, so a refusal names one cause:

  1. shape:  ``not-an-object``, ``missing-tool``, ``bad-arguments``
  2. name:   ``wrong-tool`` (a forced tool choice names another tool), ``unknown-tool``
  3. fields: ``missing-<arg>`` in the order of ``required``, then ``unknown-argument``
  4. types:  ``type-<arg>`` in the order of ``properties``
  5. ranges: ``range-<arg>`` in the order of ``properties`` (minimum, maximum, the exclusive
     forms, enum, const, minLength, maxLength)

* A nested object property is checked level by level: its own fields, types and ranges run
  after every check of its parent, and its codes name the dotted path (``missing-cfg.speed``).
  Dots in names are not escaped (codes stay plain to read), so a property named ``a.b``
  shares its codes with the property ``b`` of an object ``a``; each code still names one
  cause, and the schema's author can tell them apart by avoiding dots in names.
* This module is the readable reference: any faster validator must return the same code for
  every input, and refusal messages come from here. Each schema is read once, into one
  ``_Level`` per object level with the fixed parts of its messages; ``explain`` words the
  refusal for a code the compiled validator found, going straight to the place it names.
* Untrusted text (an unknown tool or argument name, a string value) enters a message only
  escaped and cut short, and never enters a code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from ..core._observation import Refusal
from ..core._text import escape_text
from ._schema import (
    a_json_type,
    is_number,
    json_equal,
    json_type_name,
    matches_type,
)
from ._tools import REGISTER_TOOLS, ToolSet

__all__ = ["ReferenceValidator", "describe_schema", "show_value"]

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


def _bounds(schema: Mapping[str, Any]) -> str:
    """Describe the numeric and length bounds of a schema, e.g. ``0..15`` or ``> 0``."""
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


def _got(value: object) -> str:
    """A wrong value for a type message: ``string "3"``, ``boolean true``, ``an array``."""
    name = json_type_name(value)
    if name in _SHOWN_BY_TYPE or name.startswith("Python "):
        return a_json_type(value)
    return f"{name} {show_value(value)}"


def describe_schema(schema: object) -> str:
    """What a schema allows, for a message, e.g. ``"an integer 0..15"``."""
    if schema is True or schema == {}:
        return "any value"
    if schema is False:
        return "no value"
    assert isinstance(schema, Mapping)
    types = schema.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    kind = " or ".join(_A[n] for n in names) if names else "a value"
    bounds = _bounds(schema)
    return f"{kind} {bounds}" if bounds else kind


def _type_ok(schema: object, value: object) -> bool:
    if type(schema) is bool:
        return schema
    assert isinstance(schema, Mapping)
    types = schema.get("type")
    if types is None:
        return True
    if type(types) is str:
        return matches_type(value, types)
    return any(matches_type(value, name) for name in types)


def _range_ok(schema: Mapping[str, Any], value: object) -> bool:
    if is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return False
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            return False
    elif type(value) is str:
        if "minLength" in schema and len(value) < schema["minLength"]:
            return False
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return False
    if "enum" in schema and not any(json_equal(value, item) for item in schema["enum"]):
        return False
    return not ("const" in schema and not json_equal(value, schema["const"]))


@dataclass(frozen=True, slots=True)
class _Field:
    """One property of an object level, with the parts of its messages worked out once."""

    name: str
    label: str  # the dotted path in codes and messages, e.g. "limits.low"
    schema: Any  # its subschema: a dict, or true/false
    allowed: str  # describe_schema(schema), e.g. "an integer 0..15"
    bounds: str  # _bounds(schema) for a dict, else ""
    nested: _Level | None  # its own level when the schema is a dict


@dataclass(frozen=True, slots=True)
class _Level:
    """One object level of a tool's input schema, read once (``_level`` builds it)."""

    prefix: str  # "" for the arguments, "limits." below them
    fields: dict[str, _Field]  # the properties, in declared order
    missing: dict[str, tuple[str, str]]  # required name -> (code, message), in order
    closed: bool  # additionalProperties is false
    takes: str  # the end of an unknown-argument message: "; write_register takes: addr, data"


def _level(schema: Mapping[str, Any], tool: str, prefix: str) -> _Level:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    fields = {}
    for name, sub in properties.items():
        is_schema = isinstance(sub, Mapping)
        fields[name] = _Field(name, prefix + name, sub, describe_schema(sub),
                              _bounds(sub) if is_schema else "",
                              _level(sub, tool, f"{prefix}{name}.") if is_schema else None)
    missing = {}
    for name in schema.get("required", ()):
        allowed = fields[name].allowed if name in fields else describe_schema(True)
        missing[name] = (f"missing-{prefix}{name}",
                         f"missing required argument {prefix}{name} ({allowed})")
    allowed = ", ".join(prefix + p for p in properties) or "no arguments"
    where = f"{tool} takes" if not prefix else f"{prefix[:-1]} takes"
    return _Level(prefix, fields, missing, schema.get("additionalProperties") is False,
                  f"; {where}: {allowed}")


def _unknown(level: _Level, key: object) -> Refusal:
    if type(key) is str:
        name = show_value(level.prefix + key)
    else:  # decoded JSON has string keys only: Python data given to check() directly
        name = f"{level.prefix}{_python_repr(key)} (a key of Python type {type(key).__name__})"
    return Refusal("validate", "unknown-argument", f"unknown argument {name}{level.takes}")


def _python_repr(value: object) -> str:
    """``repr(value)`` escaped and cut short, for a value that is not JSON data."""
    if type(value) is int:
        return show_value(value)  # an integer too long for repr() is named by its size
    try:
        return escape_text(repr(value), 40)
    except Exception:  # a repr that fails (an integer too long inside a tuple, a user class)
        return f"a Python {type(value).__name__}"


def _wrong_type(field: _Field, value: object) -> Refusal:
    return Refusal("validate", f"type-{field.label}",
                   f"{field.label} must be {field.allowed}, got {_got(value)}")


def _out_of_range(field: _Field, value: object) -> Refusal:
    schema = field.schema
    if type(value) is str and ("minLength" in schema or "maxLength" in schema):
        length_ok = schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
        if not length_ok:
            return Refusal("validate", f"range-{field.label}",
                           f"{field.label} has length {len(value)}; allowed: {field.allowed}")
    return Refusal("validate", f"range-{field.label}",
                   f"{field.label} {show_value(value)} is outside {field.bounds}")


def _check_level(level: _Level, value: dict[str, Any]) -> Refusal | None:
    """Fields, types and ranges of one object level, then its nested objects."""
    for name, (code, message) in level.missing.items():
        if name not in value:
            return Refusal("validate", code, message)
    if level.closed:
        for key in value:
            if key not in level.fields:
                return _unknown(level, key)
    for name, field in level.fields.items():
        if name in value and not _type_ok(field.schema, value[name]):
            return _wrong_type(field, value[name])
    for name, field in level.fields.items():
        if name in value and isinstance(field.schema, Mapping) and not _range_ok(
                field.schema, value[name]):
            return _out_of_range(field, value[name])
    for name, field in level.fields.items():
        if field.nested is not None and type(value.get(name)) is dict:
            refusal = _check_level(field.nested, value[name])
            if refusal is not None:
                return refusal
    return None


def _first_extra(level: _Level, value: dict[str, Any]) -> Refusal | None:
    """The unknown-argument refusal of the first closed level (in the order ``_check_level``
    visits them) that holds a key outside its properties, if any."""
    if level.closed:
        for key in value:
            if key not in level.fields:
                return _unknown(level, key)
    for name, field in level.fields.items():
        if field.nested is not None and type(value.get(name)) is dict:
            refusal = _first_extra(field.nested, value[name])
            if refusal is not None:
                return refusal
    return None


#: What a field code names: ("missing" | "type" | "range", keys from the arguments down to the
#: level, the level, the property name); None when two places give the same code.
_Target = tuple[str, tuple[str, ...], _Level, str] | None


def _targets(level: _Level, path: tuple[str, ...], into: dict[str, _Target]) -> None:
    """Map every missing-, type- and range- code of a level and those below it to its place."""
    places = [("missing", name) for name in level.missing]
    places += [(kind, name) for name in level.fields for kind in ("type", "range")]
    for kind, name in places:
        code = f"{kind}-{level.prefix}{name}"
        into[code] = None if code in into else (kind, path, level, name)
    for name, field in level.fields.items():
        if field.nested is not None:
            _targets(field.nested, (*path, name), into)


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
        self._targets: dict[str, dict[str, _Target]] = {}
        for name, level in self._levels.items():
            self._targets[name] = {}
            _targets(level, (), self._targets[name])

    @property
    def tools(self) -> ToolSet:
        """The tools it validates against."""
        return self._tools

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
            return Refusal("validate", "not-an-object",
                           f"a tool call must be a JSON object, got {a_json_type(call)}{hint}")
        if "tool" not in call or type(call["tool"]) is not str:
            got = "" if "tool" not in call else f" (got {a_json_type(call['tool'])})"
            return Refusal("validate", "missing-tool",
                           f"the call names no tool{got}; available tools: {self._names}")
        if type(call.get("arguments")) is not dict:
            if "arguments" not in call:
                message = "the call has no arguments; send them as a JSON object"
            else:
                got = call["arguments"]
                message = f"arguments must be a JSON object, got {a_json_type(got)}"
                if type(got) is str:
                    message += " (a string holding JSON is still a string)"
            return Refusal("validate", "bad-arguments", message)
        name, arguments = call["tool"], call["arguments"]
        if tool_choice is not None and name != tool_choice:
            return Refusal("validate", "wrong-tool",
                           f"this step requires tool {tool_choice}, got {show_value(name)}")
        level = self._levels.get(name)
        if level is None:
            return Refusal("validate", "unknown-tool",
                           f"unknown tool {show_value(name)}; available tools: {self._names}")
        return _check_level(level, arguments)

    def explain(self, call: object, code: str, tool_choice: str | None = None) -> Refusal:
        """The refusal for ``call`` whose verdict ``code`` is already known (the gate's way to
        word what the compiled validator refused): the same :class:`Refusal` as
        :meth:`check`, made without checking the call again.

        It goes straight to the place the code names (``range-limits.low``: the property
        ``low`` of the object ``limits``) and words the message from parts worked out when the
        validator was made. When it cannot tell the place that way it runs :meth:`check`: for
        the shape and name codes (which stop early anyway), and for a code two places share
        (a property named ``a.b`` beside an object ``a`` holding ``b``).

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
            refusal = self.check(call, tool_choice) or Refusal(
                "validate", code, f"the call is invalid ({code})")
        return refusal

    def _explain(self, tool: str, arguments: dict[str, Any], code: str) -> Refusal | None:
        """The refusal ``code`` names, or None when the place is unclear or the code does not
        hold there."""
        targets = self._targets.get(tool)
        if targets is None:
            return None
        if code == "unknown-argument":
            return _first_extra(self._levels[tool], arguments)
        target = targets.get(code)
        if target is None:
            return None
        kind, path, level, name = target
        value: Any = arguments
        for key in path:
            value = value.get(key)
            if type(value) is not dict:
                return None
        if kind == "missing":
            return None if name in value else Refusal("validate", code, level.missing[name][1])
        if name not in value:
            return None
        field, item = level.fields[name], value[name]
        if kind == "type":
            return None if _type_ok(field.schema, item) else _wrong_type(field, item)
        if not isinstance(field.schema, Mapping) or _range_ok(field.schema, item):
            return None
        return _out_of_range(field, item)

    def __call__(self, call: object, tool_choice: str | None = None) -> str | None:
        """Validate ``call`` and return only the verdict code (None when valid)."""
        refusal = self.check(call, tool_choice)
        return None if refusal is None else refusal.code
