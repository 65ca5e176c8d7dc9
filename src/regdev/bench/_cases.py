"""The cases of ``regdev bench --tools FILE``: calls generated from a tool set's schemas.

Rules of this file:

* For each tool, one valid call first (every declared argument, each a value its schema
  takes, away from the bounds; a ``multipleOf`` of a fraction gets a power-of-two multiple
  of it, a whole multiple as floats too, so the peers that divide floats agree on it and
  can be timed), then one mutation of that call per keyword the schema uses,
  each named by what it breaks: ``wrong type``, ``out of range``, ``missing required``,
  ``unknown argument``, ``bad enum``, ``too long`` (a string), ``array too long``, ``bad
  element`` (one element of an array broken), ``not a multiple``. A nested object's
  arguments get the same mutations, named by their dotted path (``motor.rpm``).
* regdev decides what each case expects: its compiled check's verdict on the decoded call.
  A mutation that regdev still accepts (a type list that takes a string too) is dropped, and
  a tool whose generated call regdev refuses (a register map's own rules) gets no cases; the
  caller is told which (:attr:`Generated.skipped`).
* Each case holds the call as JSON text (numbers written as the schema's decimals) and as
  ``json.loads`` decodes it (fractions as ``float``), the form every peer takes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

import msgspec

from ..gate._schema import is_integer, is_number
from ..gate._tool import ToolSet
from ._bench import Case

__all__ = ["Generated", "case_of", "generate_cases"]

_encode = msgspec.json.Encoder(decimal_format="number").encode


def case_of(title: str, about: str, raw: str, code: str | None) -> Case:
    """A case from its JSON text: ``call`` is that text as ``json.loads`` decodes it.

    Raises:
        ValueError: ``raw`` is not JSON text.
    """
    return Case(title, about, json.loads(raw), code, raw)


@dataclass
class Generated:
    """What :func:`generate_cases` made.

    Attributes:
        cases: the cases, tool by tool, each tool's valid call first.
        skipped: one sentence per tool or mutation left out, and why.
    """

    cases: list[Case] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _types(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if kind is None:
        return []
    return [kind] if isinstance(kind, str) else list(kind)


def _number_in(schema: Mapping[str, Any], integer: bool) -> Any:
    """A number the schema's bounds and ``multipleOf`` take, away from the bounds."""
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    low = None if low is None else Decimal(repr(low) if isinstance(low, float) else low)
    high = None if high is None else Decimal(repr(high) if isinstance(high, float) else high)
    if low is not None and high is not None:  # near the low end: a map's block stays inside
        value = low + 1 if integer and high - low >= 2 else low + (high - low) / 4
    elif low is not None:
        value = low + 1
    elif high is not None:
        value = high - 1
    else:
        value = Decimal(1)
    step = schema.get("multipleOf")
    if step is not None:
        step = Decimal(repr(step) if isinstance(step, float) else step)
        value = (value / step).to_integral_value(ROUND_CEILING) * step
        if high is not None and value > high:
            value -= step
        if step != step.to_integral_value():
            # a power-of-two multiple: as floats too it is a whole multiple of the step, so
            # the peers that divide floats agree and can be timed on it
            twos = [step * 2**j for j in range(64)]
            inside = [v for v in twos if v <= value and (low is None or v >= low)]
            if inside:
                value = inside[-1]
    if integer or value == value.to_integral_value():
        whole = int(value.to_integral_value(ROUND_CEILING))
        if Decimal(whole) == value or integer:
            return whole
    return value.normalize()


def valid_value(schema: Any) -> Any:
    """A value ``schema`` (of the supported subset) takes, built from its keywords."""
    if not isinstance(schema, Mapping):
        return 1
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    types = _types(schema) or ["object" if "properties" in schema else
                               "array" if "items" in schema or "prefixItems" in schema else
                               "integer"]
    kind = next((t for t in types if t != "null"), types[0])
    if kind in ("integer", "number"):
        return _number_in(schema, kind == "integer")
    if kind == "string":
        size = max(int(schema.get("minLength", 0)), min(4, int(schema.get("maxLength", 4))))
        return "abcd"[:size] if size <= 4 else "a" * size
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        prefix = [valid_value(s) for s in schema.get("prefixItems", [])]
        items = schema.get("items", {})
        count = max(int(schema.get("minItems", 0)), 2 if items is not False else 0)
        count = min(count, int(schema.get("maxItems", count)))
        values = prefix[:count]
        item = valid_value(items) if items is not False else None
        members = items.get("enum") if isinstance(items, Mapping) else None
        while len(values) < count:
            if not schema.get("uniqueItems"):
                values.append(item)
            elif isinstance(members, list) and len(values) < len(members):
                values.append(members[len(values)])
            else:
                values.append(_distinct(item, len(values)))
        return values
    if kind == "object":
        properties = schema.get("properties", {})
        required = list(schema.get("required", []))
        names = required + [n for n in properties if n not in required]
        limit = schema.get("maxProperties")
        if limit is not None:
            names = names[:max(int(limit), len(required))]
        return {name: valid_value(properties.get(name, {})) for name in names}
    return 1


def _distinct(item: Any, index: int) -> Any:
    """A variant of ``item`` for the ``index``-th element of a uniqueItems array."""
    if type(item) is int:
        return item + index
    if type(item) is str:
        return f"{item}{index}"
    return item


def _wrong_type(schema: Mapping[str, Any]) -> Any:
    """A value of a type ``schema`` does not take."""
    types = _types(schema)
    for candidate in ("x", 1, [1], {"x": 1}, True):
        name = {str: "string", int: "integer", list: "array", dict: "object",
                bool: "boolean"}[type(candidate)]
        if name not in types and not (name == "integer" and "number" in types):
            return candidate
    return None


def _above(schema: Mapping[str, Any]) -> Any | None:
    """A number past the schema's upper bound, else under its lower bound, else None."""
    for key, sign in (("maximum", 1), ("exclusiveMaximum", 1), ("minimum", -1),
                      ("exclusiveMinimum", -1)):
        if key in schema and is_number(schema[key]):
            bound = schema[key]
            bound = Decimal(repr(bound)) if isinstance(bound, float) else Decimal(bound)
            value = bound + sign
            step = schema.get("multipleOf")
            if step is not None:  # stay a multiple, so only the bound is broken
                step = Decimal(repr(step) if isinstance(step, float) else step)
                value = (bound / step).to_integral_value(ROUND_CEILING) * step + sign * step
                if sign < 0:
                    value = ((bound / step).to_integral_value(ROUND_CEILING) - 1) * step
            return int(value) if value == value.to_integral_value() else value.normalize()
    return None


def _not_multiple(schema: Mapping[str, Any], good: Any) -> Any | None:
    step = schema.get("multipleOf")
    if step is None or not is_number(good):
        return None
    step = Decimal(repr(step) if isinstance(step, float) else step)
    value = Decimal(good) + step / 2
    if "integer" in _types(schema) and not is_integer(value):
        value = Decimal(good) + 1 if step != 1 else None  # type: ignore[assignment]
        if value is None or (value / step) == (value / step).to_integral_value():
            return None
    return int(value) if value == value.to_integral_value() else value.normalize()


def _mutations(schema: Mapping[str, Any], good: Any, path: str
               ) -> Iterator[tuple[str, Callable[[Any], Any]]]:
    """``(what it breaks, a function of the good value giving the broken one)`` for one
    argument's schema; nested objects and array elements recursively."""
    yield (f"wrong type {path}" if path else "arguments not an object"), (
        lambda _: _wrong_type(schema))
    past = _above(schema)
    if past is not None:
        yield f"out of range {path}", lambda _: past
    other = _not_multiple(schema, good)
    if other is not None:
        yield f"not a multiple {path}", lambda _: other
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        first = enum[0]
        stranger: Any = ("not-" + "-".join(e for e in enum if isinstance(e, str))[:40]
                         if isinstance(first, str) else
                         max((e for e in enum if is_number(e)), default=0) + 1)
        yield f"bad enum {path}", lambda _: stranger
    if "maxLength" in schema and type(good) is str:
        yield f"too long {path}", lambda _: "x" * (int(schema["maxLength"]) + 1)
    if type(good) is list:
        if "maxItems" in schema and good:
            yield f"array too long {path}", lambda v: v + [v[-1]] * (
                int(schema["maxItems"]) + 1 - len(v))
        items = schema.get("items")
        if good and isinstance(items, Mapping) and not schema.get("prefixItems"):
            inner = list(_mutations(items, good[0], f"{path}[0]"))
            if inner:
                what, broken = (next((m for m in inner if m[0].startswith("out of range")),
                                     inner[0]))
                yield (f"bad element {path}[0] ({what.split(' ' + path)[0]})",
                       functools.partial(_break_first, broken))
    if type(good) is dict:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if required:
            yield f"missing required {path}.{required[0]}", lambda v: {
                k: x for k, x in v.items() if k != required[0]}
        if schema.get("additionalProperties") is False:
            yield f"unknown argument {path}.extra_arg", lambda v: {**v, "extra_arg": 1}
        for name, sub in properties.items():
            if name in good and isinstance(sub, Mapping):
                for what, broken in _mutations(sub, good[name], f"{path}.{name}"):
                    yield what, functools.partial(_break_key, name, broken)


def _break_first(broken: Callable[[Any], Any], value: list[Any]) -> list[Any]:
    """``value`` with its first element broken."""
    return [broken(value[0]), *value[1:]]


def _break_key(name: str, broken: Callable[[Any], Any], value: dict[str, Any]
               ) -> dict[str, Any]:
    """``value`` with its member ``name`` broken."""
    return {**value, name: broken(value[name])}


def generate_cases(tools: ToolSet, check: Callable[[Any], str | None],
                   runs: Callable[[str], str | None] | None = None) -> Generated:
    """One valid call per tool, then one mutation per keyword its schema uses.

    Args:
        tools: the tool set (schemas of the supported subset).
        check: regdev's compiled check (``compile_validator(tools)``): it decides each
            case's expected verdict.
        runs: the whole gate's verdict on a call's raw text (None: it ran); a tool whose
            generated valid call the gate refuses (a register map's rules, the device) gets
            no cases, so the gate row times the same calls as the others.

    Returns:
        The :class:`Generated` cases, and what was left out and why.
    """
    made = Generated()
    for name, tool in tools.items():
        schema = tool.input_schema
        good = valid_value(schema)
        if type(good) is not dict:
            made.skipped.append(f"{name}: its arguments are not an object")
            continue
        raw = _encode({"tool": name, "arguments": good}).decode()
        valid = case_of(f"{name}: valid", f"a valid call: {_short(raw)}", raw, None)
        code = check(valid.call)
        if code is None and runs is not None:
            code = runs(raw)
        if code is not None:
            made.skipped.append(f"{name}: regdev refuses the generated call ({code}): "
                                f"{_short(raw)}")
            continue
        made.cases.append(valid)
        seen = set()
        for said, broken in _mutations(schema, good, ""):
            what = said.replace(" .", " ")
            arguments = broken(good)
            raw = _encode({"tool": name, "arguments": arguments}).decode()
            case = case_of(f"{name}: {what}", f"{what}: {_short(raw)}", raw, None)
            code = check(case.call)
            if code is None:
                made.skipped.append(f"{name}: {what}: regdev accepts it, so it breaks "
                                    "nothing")
                continue
            if raw in seen:
                continue
            seen.add(raw)
            made.cases.append(Case(case.title, f"{case.about} (refused: {code})", case.call,
                                   code, raw))
    return made


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
