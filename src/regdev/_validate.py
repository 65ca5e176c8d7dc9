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
* This module is the readable reference: any faster validator must return the same code for
  every input, and refusal messages come from here.
* Untrusted text (an unknown tool or argument name, a string value) enters a message only
  escaped and cut short, and never enters a code.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ._observation import Refusal
from ._schema import (
    a_json_type,
    escape_text,
    is_number,
    iter_properties,
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
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        if value.bit_length() > 128:  # never build a huge decimal string
            return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        text = str(value)
    elif type(value) is Decimal or type(value) is float:
        text = str(value)
    elif type(value) is str:
        return '"' + escape_text(value, limit - 2) + '"'
    elif type(value) is dict:
        return "an object"
    elif type(value) is list:
        return "an array"
    else:
        text = type(value).__name__
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


def _range_message(name: str, schema: Mapping[str, Any], value: object) -> str:
    if type(value) is str and ("minLength" in schema or "maxLength" in schema):
        length_ok = schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
        if not length_ok:
            return f"{name} has length {len(value)}; allowed: {describe_schema(schema)}"
    return f"{name} {show_value(value)} is outside {_bounds(schema)}"


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], tool: str, prefix: str
) -> Refusal | None:
    """Fields, types and ranges of one object level, then its nested objects."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    for name in schema.get("required", ()):
        if name not in value:
            sub = properties.get(name, True)
            return Refusal("validate", f"missing-{prefix}{name}",
                           f"missing required argument {prefix}{name} ({describe_schema(sub)})")
    if schema.get("additionalProperties") is False:
        for key in value:
            if key not in properties:
                allowed = ", ".join(prefix + p for p in properties) or "no arguments"
                where = f"{tool} takes" if not prefix else f"{prefix[:-1]} takes"
                return Refusal("validate", "unknown-argument",
                               f"unknown argument {show_value(prefix + key)}; {where}: {allowed}")
    for name, sub in properties.items():
        if name in value and not _type_ok(sub, value[name]):
            return Refusal(
                "validate", f"type-{prefix}{name}",
                f"{prefix}{name} must be {describe_schema(sub)}, got {_got(value[name])}",
            )
    for name, sub in properties.items():
        if name in value and isinstance(sub, Mapping) and not _range_ok(sub, value[name]):
            return Refusal("validate", f"range-{prefix}{name}",
                           _range_message(prefix + name, sub, value[name]))
    for name, sub in iter_properties(schema):
        if type(value.get(name)) is dict and isinstance(sub, Mapping):
            refusal = _check_object(sub, value[name], tool, f"{prefix}{name}.")
            if refusal is not None:
                return refusal
    return None


class ReferenceValidator:
    """The readable validator over a tool set (see the module docstring for the order).

    Args:
        tools: the tools offered to the caller; the built-in register tools by default.
    """

    def __init__(self, tools: ToolSet = REGISTER_TOOLS) -> None:
        self.tools = tools

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
        names = ", ".join(self.tools) or "none"
        if type(call) is not dict:
            hint = "; send one call at a time" if type(call) is list else ""
            return Refusal("validate", "not-an-object",
                           f"a tool call must be a JSON object, got {a_json_type(call)}{hint}")
        if "tool" not in call or type(call["tool"]) is not str:
            got = "" if "tool" not in call else f" (got {a_json_type(call['tool'])})"
            return Refusal("validate", "missing-tool",
                           f"the call names no tool{got}; available tools: {names}")
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
        tool = self.tools.get(name)
        if tool is None:
            return Refusal("validate", "unknown-tool",
                           f"unknown tool {show_value(name)}; available tools: {names}")
        return _check_object(tool.input_schema, arguments, name, "")

    def __call__(self, call: object, tool_choice: str | None = None) -> str | None:
        """Validate ``call`` and return only the verdict code (None when valid)."""
        refusal = self.check(call, tool_choice)
        return None if refusal is None else refusal.code
