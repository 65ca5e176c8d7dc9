"""The schema compiler: exact verdicts, the generated source, injection safety, schema errors."""

from __future__ import annotations

import ast
import json
import linecache
import math
import subprocess
import sys
import traceback
from decimal import Decimal
from enum import IntEnum
from fractions import Fraction
from itertools import combinations, product
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ARRAYS, CONFIGURE, ROOT
from regdev import (
    REGISTER_TOOLS,
    Gate,
    ReferenceValidator,
    RegisterFile,
    SchemaError,
    Tool,
    ToolSet,
    compile_validator,
    tool_definitions,
)
from regdev.bench._bench import BENCH_TOOLS
from regdev.cli._main import main
from regdev.gate._compile import BIND, compile_refusals, generate_source
from regdev.gate._parse import load_json
from regdev.gate._runtime import RUNTIME_NAMES

check = compile_validator()
reference = ReferenceValidator()


def write(**arguments: Any) -> dict[str, Any]:
    return {"tool": "write_register", "arguments": arguments}


# --- verdicts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (write(addr=True, data=1), "type-addr"),  # a bool is not an integer
        (write(addr=1, data=False), "type-data"),
        (write(addr=Decimal("3.0"), data=Decimal("1E+2")), None),  # integral: integers
        (write(addr=15.0, data=255.0), None),
        (write(addr=Decimal("-0.0"), data=-0.0), None),
        (write(addr=Decimal("15.5"), data=1), "type-addr"),
        (write(addr=15.5, data=1), "type-addr"),
        (write(addr=Decimal("1E+400"), data=1), "range-addr"),  # huge, never int()-ed
        (write(addr=Decimal("-1E+400"), data=1), "range-addr"),
        (write(addr=Decimal("1E+999999999"), data=1), "range-addr"),
        (write(addr=1, data=2**64 + 1), "range-data"),  # compared exactly
        (write(addr=1, data=-(2**64)), "range-data"),
        (write(addr=1, data=10**4000), "range-data"),
        (write(addr=Decimal("1.5E+1"), data=Decimal("2.55E+2")), None),
        (write(addr=Decimal("1.6E+1"), data=1), "range-addr"),
        (write(addr=float("inf"), data=1), "type-addr"),
        (write(addr=float("nan"), data=1), "type-addr"),
        (write(addr=Decimal("NaN"), data=1), "type-addr"),
        (write(addr=Decimal("sNaN"), data=1), "type-addr"),
        (write(addr=None, data=1), "type-addr"),
        (write(addr=[3], data=1), "type-addr"),
        (write(addr=1, data=1, extra=None), "unknown-argument"),
        (write(addr=1), "missing-data"),
        ({"tool": "read_register", "arguments": {"addr": 1, "data": 1}}, "unknown-argument"),
        ({"tool": "read_register", "arguments": {}}, "missing-addr"),
        ({"tool": "read_register", "arguments": {"addr": 0}}, None),
        ({"tool": "Read_register", "arguments": {"addr": 0}}, "unknown-tool"),
        ({"tool": 1, "arguments": {}}, "missing-tool"),
        ({"tool": "read_register", "arguments": "{}"}, "bad-arguments"),
        ([], "not-an-object"),
    ],
)
def test_exact_numbers_and_each_step(call: Any, expected: str | None) -> None:
    """JSON numbers are judged exactly, without int() or float() on the value."""
    assert check(call) == expected, check.source
    assert reference(call) == expected


def test_wrong_tool_comes_before_unknown_tool() -> None:
    """A forced tool choice refuses any other name, offered or not, as wrong-tool."""
    assert check({"tool": "nope", "arguments": {}}, tool_choice="read_register") == "wrong-tool"
    assert check({"tool": "nope", "arguments": {}}) == "unknown-tool"
    assert check({"tool": "read_register", "arguments": {"addr": 1}},
                 tool_choice="read_register") is None


def test_an_int_subclass_is_an_integer_as_in_the_reference() -> None:
    """The int fast path falls back to the full test, so an IntEnum value still counts."""

    class Addr(IntEnum):
        THREE = 3
        BIG = 99

    assert check(write(addr=Addr.THREE, data=1)) is None
    assert check(write(addr=Addr.BIG, data=1)) == reference(write(addr=Addr.BIG, data=1))
    assert check(write(addr=Addr.BIG, data=1)) == "range-addr"



# --- the name step and the fields step, every branch of their generated form -----------------


class _Name(str):
    """A tool name that is a str subclass: refused as missing-tool, as the reference does."""


class _TouchyName(str):
    """A str subclass that raises when compared or hashed: the check must refuse it without
    running any of its code (as the reference does, by its type alone)."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("compared")

    def __hash__(self) -> int:
        raise RuntimeError("hashed")


_REFUSAL_KINDS = [
    write(data=1),  # missing-addr
    write(addr=1),  # missing-data
    write(),
    write(addr=1, data=2, x=3),
    write(data=1, x=3),  # missing-addr, by the first test
    write(addr=1, x=3),  # missing-data, with len(a) == 2: by the KeyError
    write(addr="1", data=2),
    write(addr=16, data=2),
    write(addr=1, data=2),
    {"tool": "read_register", "arguments": {}},
    {"tool": "read_register", "arguments": {"x": 1}},
    {"tool": "read_register", "arguments": {"addr": 1, "x": 1}},
    {"tool": "read_register", "arguments": {"addr": 1}},
    {"tool": "erase", "arguments": {}},
    {"tool": None, "arguments": {}},
    {"arguments": {}},
    {"tool": "write_register"},
    {"tool": "write_register", "arguments": []},
    [],
]


@pytest.mark.parametrize("choice", [None, "write_register", "read_register", "erase"])
@pytest.mark.parametrize("call", _REFUSAL_KINDS)
def test_each_refusal_kind_with_and_without_a_tool_choice(call: Any, choice: str | None) -> None:
    """Every step's verdict with the tool choice unset, set to the call's tool and to another:
    the reference's code (and the shape step before wrong-tool)."""
    expected = reference(call, tool_choice=choice)
    assert check(call, choice) == expected
    assert check(call, tool_choice=choice) == expected


def test_tool_choice_and_missing_fields_in_their_order() -> None:
    assert check(write(data=1)) == "missing-addr"
    assert check(write(data=1), "write_register") == "missing-addr"
    assert check(write(data=1), "read_register") == "wrong-tool"
    assert check(write(addr=1, x=3)) == "missing-data"
    assert check(write(data=1, x=3)) == "missing-addr"
    assert check({"tool": None, "arguments": {}}, "read_register") == "missing-tool"
    assert check({"tool": "write_register", "arguments": 1}, "read_register") == "bad-arguments"


@pytest.mark.parametrize("kind", [_Name, _TouchyName])
@pytest.mark.parametrize("choice", [None, "write_register", "read_register"])
@pytest.mark.parametrize("arguments", [{"data": 1}, {"addr": 1, "data": 2}, {"addr": 1}, {},
                                       "{}", None])
def test_a_str_subclass_tool_name_is_missing_tool_without_running_its_code(
        kind: type[str], choice: str | None, arguments: Any) -> None:
    """A tool name of a str subclass (no JSON decoder makes one) is refused as missing-tool
    before the arguments are looked at, as the reference does, and its methods never run."""
    for name in ("write_register", "read_register", "erase"):
        call = {"tool": kind(name), "arguments": arguments}
        assert reference(call, tool_choice=choice) == "missing-tool"
        assert check(call, choice) == "missing-tool"
        refusal = compile_refusals()(call, choice)
        assert refusal is not None and refusal is not BIND
        assert refusal.code == "missing-tool"  # type: ignore[union-attr]


def _fields_tool(schema: dict[str, Any]) -> ToolSet:
    return ToolSet([Tool(name="t", description="test tool", input_schema=schema)])


_INT = {"type": "integer"}
#: Object schemas for the fields step: closed with every property required (first name by
#: `in`, then one len()), one required name (by `in`), some required (len() first), open, a
#: required name whose schema checks nothing (never fetched), a required name outside the
#: properties, and the same forms on a nested level.
_FIELD_SCHEMAS = [
    {"properties": {"a": _INT}, "required": ["a"], "additionalProperties": False},
    {"properties": {"a": _INT, "b": _INT}, "required": ["a", "b"],
     "additionalProperties": False},
    {"properties": {"a": _INT, "b": _INT, "c": _INT}, "required": ["c", "a", "b"],
     "additionalProperties": False},
    {"properties": {"a": {}, "b": _INT, "c": True}, "required": ["a", "b", "c"],
     "additionalProperties": False},
    {"properties": {"a": _INT, "b": {}, "c": True}, "required": ["b", "c", "a"],
     "additionalProperties": False},
    {"properties": {"a": _INT, "b": _INT}, "required": ["a"], "additionalProperties": False},
    {"properties": {"a": {}, "b": _INT}, "required": ["a"], "additionalProperties": False},
    {"properties": {"a": _INT, "b": _INT, "c": _INT}, "required": ["b", "a"],
     "additionalProperties": False},
    {"properties": {"a": _INT, "b": _INT}, "required": ["a", "b"]},
    {"properties": {"a": _INT, "b": _INT}, "required": ["b"]},
    {"properties": {"a": _INT}, "required": ["a", "b"], "additionalProperties": False},
    {"properties": {"a": _INT}, "required": ["b", "a"]},
    {"properties": {}, "additionalProperties": False},
    {"properties": {"o": {"type": "object", "properties": {"a": _INT, "b": _INT},
                          "required": ["a", "b"], "additionalProperties": False}},
     "required": ["o"], "additionalProperties": False},
]


@pytest.mark.parametrize("schema", _FIELD_SCHEMAS)
def test_every_set_of_names_gets_the_reference_fields_verdict(schema: dict[str, Any]) -> None:
    """Every subset of the property names, the names outside them and an extra name, as the
    arguments (on a nested level too): the compiled check's code, and the gate's compiled
    check's refusal, are the reference's."""
    tools = _fields_tool({"type": "object", **schema})
    compiled, gate, oracle = compile_validator(tools), compile_refusals(tools), \
        ReferenceValidator(tools)
    names = [*schema["properties"], *(n for n in schema.get("required", [])
                                      if n not in schema["properties"]),
             *schema["properties"].get("o", {}).get("properties", {}), "x", "y"]
    seen = set()
    for size in range(len(names) + 1):
        for chosen in combinations(names, size):
            for order in (chosen, chosen[::-1]):
                arguments = dict.fromkeys(order, 1)
                for call in ({"tool": "t", "arguments": arguments},
                             {"tool": "t", "arguments": {"o": arguments}}):
                    expected = oracle.check(call)
                    code = compiled(call)
                    assert code == (expected.code if expected else None), (call, compiled.source)
                    verdict = gate(call)
                    assert (verdict if verdict is not BIND else None) == expected, call
                    seen.add(code)
    missing = {f"missing-{n}" for n in schema.get("required", [])}
    missing |= {f"missing-o.{n}" for n in schema["properties"].get("o", {}).get("required", [])}
    assert missing <= seen  # every missing name was found by one of the calls


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, "missing-c"),
    ({"a": 1, "b": 2}, "missing-c"),
    ({"c": 1}, "missing-a"),
    ({"c": 1, "b": 2}, "missing-a"),
    ({"c": 1, "a": 2}, "missing-b"),
    ({"c": 1, "a": 2, "x": 3}, "missing-b"),  # three names, one missing: the KeyError path
    ({"c": 1, "x": 2, "y": 3}, "missing-a"),
    ({"c": 1, "x": 2, "a": 3, "y": 4}, "missing-b"),
    ({"c": 1, "a": 2, "b": 3, "x": 4}, "unknown-argument"),
    ({"c": 1, "a": 2, "b": 3}, None),
])
def test_closed_all_required_missing_names_in_required_order(arguments: dict[str, Any],
                                                             expected: str | None) -> None:
    tools = _fields_tool({"type": "object", **_FIELD_SCHEMAS[2]})
    compiled = compile_validator(tools)
    call = {"tool": "t", "arguments": arguments}
    assert compiled(call) == expected
    oracle = ReferenceValidator(tools).check(call)
    assert (oracle.code if oracle else None) == expected

configure = compile_validator(ToolSet([CONFIGURE]))


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"mode": "fast"}, None),
        ({"mode": 1.0}, None),
        ({"mode": True}, "range-mode"),
        ({"mode": "fast", "level": 1}, "range-level"),
        ({"mode": "fast", "level": 2}, None),  # minimum 1.5 for an integer is 2
        ({"mode": "fast", "level": Decimal("2.0")}, None),
        ({"mode": "fast", "level": 9}, None),
        ({"mode": "fast", "level": 10}, "range-level"),  # exclusiveMaximum 9.5
        ({"mode": "fast", "level": Decimal("1.5")}, "type-level"),
        ({"mode": "fast", "gain": Decimal("2.4999999999999999999")}, None),
        ({"mode": "fast", "gain": Decimal("2.5")}, "range-gain"),
        ({"mode": "fast", "gain": None}, None),
        ({"mode": "fast", "off": None}, "type-off"),
        ({"mode": "fast", "label": "\U0001f600" * 4}, None),
        ({"mode": "fast", "label": ""}, "range-label"),
        ({"mode": "fast", "limits": {}}, "missing-limits.low"),
        ({"mode": "fast", "limits": {"low": 0, "deep": {}}}, "missing-limits.deep.x"),
        ({"mode": "fast", "limits": {"low": 0, "deep": {"x": "z"}}}, "range-limits.deep.x"),
        ({"mode": "fast", "limits": {"low": -1, "deep": {}}}, "range-limits.low"),
        ({"mode": "bad", "limits": {}}, "range-mode"),
    ],
)
def test_subset_keywords_compiled(arguments: dict[str, Any], expected: str | None) -> None:
    """Every keyword of the subset, and nested objects level by level, as the reference does."""
    call = {"tool": "configure", "arguments": arguments}
    assert configure(call) == expected, configure.source
    assert ReferenceValidator(ToolSet([CONFIGURE]))(call) == expected


arrays = compile_validator(ToolSet([ARRAYS]))
arrays_reference = ReferenceValidator(ToolSet([ARRAYS]))
_BLOCK = list(range(0, 240, 15))  # 16 values in 0..255


_ARRAY_CASES: list[tuple[dict[str, Any], str | None]] = [
        ({"data": _BLOCK}, None),
        ({"data": [3.0, Decimal("1E+2"), Decimal("255.000")]}, None),  # integral: integers
        ({"data": []}, "range-data"),  # minItems 1
        ({"data": [*_BLOCK, 1]}, "range-data"),  # 17 items
        ({"data": 5}, "type-data"),
        ({"data": "[1, 2]"}, "type-data"),  # a string holding JSON is a string
        ({"data": (1, 2)}, "type-data"),  # a tuple is not a JSON array
        ({"data": [1, 300]}, "range-data[]"),
        ({"data": [1, 2**64 + 1]}, "range-data[]"),  # compared exactly
        ({"data": [1, Decimal("255.0000000000000000001")]}, "type-data[]"),
        ({"data": [1, Decimal("1E+400")]}, "range-data[]"),
        ({"data": [1, True]}, "type-data[]"),
        ({"data": [1, "2", 300]}, "type-data[]"),  # the first bad element decides
        ({"data": [300, "2"]}, "range-data[]"),
        ({"data": [*_BLOCK, "x"]}, "range-data"),  # the array's own count before its elements
        ({"data": ["x"], "pair": 3}, "type-pair"),  # every type before any element
        ({"data": [300], "pair": ["a", 3]}, "range-data[]"),  # properties in order
        ({"data": [1], "pair": ["a", 4]}, None),
        ({"data": [1], "pair": ["a", Decimal("4.0")]}, None),
        ({"data": [1], "pair": []}, None),
        ({"data": [1], "pair": [1]}, "type-pair[0]"),
        ({"data": [1], "pair": ["a", 3]}, "range-pair[1]"),  # multipleOf 2
        ({"data": [1], "pair": ["a", 4, None]}, "type-pair[]"),  # items false: no third item
        ({"data": [1], "points": [{"x": 1}, {"x": 1, "y": 2}]}, None),
        ({"data": [1], "points": [{"x": 1}, {"x": 1.0}]}, "range-points"),  # JSON-equal
        ({"data": [1], "points": [{"x": 1}, {"x": True}]}, "type-points[].x"),
        ({"data": [1], "points": [{"x": 1}, {}]}, "missing-points[].x"),
        ({"data": [1], "points": [{"x": 1, "z": 0}]}, "unknown-argument"),
        ({"data": [1], "points": [{"x": "1"}, {}]}, "type-points[].x"),  # element by element
        ({"data": [1], "matrix": [[1, 2], [3]]}, None),
        ({"data": [1], "matrix": [[1, 2, 3]]}, "range-matrix[]"),
        ({"data": [1], "matrix": [[1], [4]]}, "range-matrix[][]"),
        ({"data": [1], "matrix": [[1], 4]}, "type-matrix[]"),
        ({"data": [1], "options": {}}, "range-options"),
        ({"data": [1], "options": {"a": 1, "b": 2, "c": 3}}, "range-options"),
        ({"data": [1], "options": {"a": 1}}, None),
        ({"data": [1], "step": Decimal("0.3")}, None),
        ({"data": [1], "step": Decimal("0.35")}, "range-step"),
        ({"data": [1], "step": Decimal("1E+999999999")}, None),  # exact, no division
        ({"data": [1], "step": Decimal("1E-999999999")}, "range-step"),
        ({"data": [1], "step": 0.5}, None),  # 0.5 is exact
        ({"data": [1], "step": 0.3}, None),  # a float is the decimal its repr writes: 0.3
        ({"data": [1], "step": 0.35}, "range-step"),
        ({"data": [1], "step": 1e300}, None),
        ({"data": [1], "step": 5e-324}, "range-step"),
        ({"data": [1], "step": 7}, None),
]


@pytest.mark.parametrize(("arguments", "expected"), _ARRAY_CASES)
def test_array_keywords_compiled(arguments: dict[str, Any], expected: str | None) -> None:
    """Arrays, their elements in order, counts of properties and exact multipleOf: the
    compiled validator and the reference give the same code."""
    call = {"tool": "arrays", "arguments": arguments}
    assert arrays(call) == expected, arrays.source
    assert arrays_reference(call) == expected


def test_array_elements_are_one_loop_with_int_fast_paths() -> None:
    """An integer array is checked by one loop over its elements, bounds as constants, and no
    element check runs before the array's own count."""
    block = compile_validator([{"name": "write_registers", "inputSchema": ARRAYS.input_schema
                                | {"properties": {"data": ARRAYS.input_schema["properties"]
                                                  ["data"]}}}])
    body = block.source[block.source.index("if name == 'write_registers':"):]
    lines = [line.strip() for line in body.splitlines()]
    assert lines[lines.index("if type(v0) is not list:"):][:10] == [
        "if type(v0) is not list:", "return 'type-data'",
        "if len(v0) < 1 or len(v0) > 16:", "return 'range-data'",
        "for e0 in v0:",
        "if type(e0) is not int and (type(e0) in _NOT_NUMBERS or not is_integer(e0)):",
        "return 'type-data[]'",
        "if e0 < 0 or e0 > 255:", "return 'range-data[]'",
        "return None"]


# --- the generated source ---------------------------------------------------------------------


def test_source_is_attached_and_shaped_for_speed() -> None:
    """The source is on the function; int fast paths and constant bounds are in it."""
    assert check.tool_names == ("write_register", "read_register")
    assert "def check(call, tool_choice=None):" in check.source
    assert ("if type(v0) is not int and (type(v0) in _NOT_NUMBERS or not is_integer(v0)):"
            in check.source)
    assert "if v0 < 0 or v0 > 15:" in check.source
    assert "if v1 < 0 or v1 > 255:" in check.source
    assert "if len(a) != 2:" in check.source
    imported = {alias.name for node in ast.walk(ast.parse(check.source))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(ast.parse(check.source))
                 if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "math", "decimal"}
    # minimum 1.5 and exclusiveMaximum 9.5, made whole for an integer
    assert "(v3 < 2 or v3 >= 10)" in configure.source


def test_source_is_registered_for_tracebacks() -> None:
    """linecache holds the source under a readable fake name, so tracebacks show its lines."""
    assert check.filename.startswith("<regdev compiled validator ")
    first = linecache.getline(check.filename, 1)
    assert first == check.source.splitlines(True)[0]

    class Key(str):
        """A key that is equal to "tool" by hash, and refuses to be compared."""

        def __hash__(self) -> int:
            return hash("tool")

        def __eq__(self, other: object) -> bool:
            raise RuntimeError("compared")

    with pytest.raises(RuntimeError) as info:
        check({Key("x"): 1})
    shown = "".join(traceback.format_exception(info.value))
    assert check.filename in shown
    assert "name = call.get('tool')" in shown


INJECTIONS = [
    "'); import os; os._exit(3); ('",
    '"""\nraise SystemExit(4)\n"""',
    "'''\nraise SystemExit(5)\n'''",
    "\nraise SystemExit(6)\n#",
    "\\'); raise SystemExit(7) #",
    "\r\nraise SystemExit(8)",
    "\u2028raise SystemExit(9)",
    "{0}{v}%s",
    "\x00\x0c",
    "x' if True else raise SystemExit(10) #",
]


def _evil_tools() -> list[dict[str, Any]]:
    tools = []
    for i, evil in enumerate(INJECTIONS):
        tools.append({
            "name": evil,
            "description": evil,
            "title": evil,
            "inputSchema": {
                "type": "object",
                "title": evil,
                "description": evil,
                "$comment": evil,
                "properties": {
                    evil: {"type": "string", "enum": [evil, f"{evil}{i}"], "description": evil,
                           "default": evil, "examples": [evil]},
                    f"c{i}": {"const": evil},
                    f"d{i}": {"const": [evil, {evil: evil}]},
                    f"o{i}": {"type": "object", "properties": {evil: {"const": evil}},
                              "required": [evil], "additionalProperties": False},
                    f"a{i}": {"type": "array", "description": evil, "minItems": 1,
                              "uniqueItems": True, "prefixItems": [{"const": evil}],
                              "items": {"type": "object", "description": evil,
                                        "properties": {evil: {"enum": [evil]}},
                                        "required": [evil], "additionalProperties": False,
                                        "maxProperties": 1}},
                    f"{evil}[]": {"type": "array", "items": {
                        "type": "array", "items": {"const": evil, "multipleOf": 0.1}}},
                },
                "required": [evil, f"c{i}"],
                "additionalProperties": False,
            },
        })
    return tools


def test_schema_strings_cannot_inject_code() -> None:
    """Injection strings in every schema field compile to inert literals with the same codes."""
    tools = _evil_tools()
    evil_check = compile_validator(tools)  # a SystemExit or os._exit here would fail the test
    tree = ast.parse(evil_check.source)
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign", "FunctionDef"}
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert defined == {*RUNTIME_NAMES, "check"} | {
        n for n in defined if n.startswith(("_L", "_T"))}
    ref = ReferenceValidator(ToolSet.from_definitions(tools))
    for i, evil in enumerate(INJECTIONS):
        calls = [
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil}},
            {"tool": evil, "arguments": {evil: evil}},
            {"tool": evil, "arguments": {evil: "nope", f"c{i}": evil}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"o{i}": {}}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"o{i}": {evil: "x"}}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"d{i}": [evil, {evil: evil}]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, evil + "!": 1}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": [evil, {evil: evil}],
                                         f"{evil}[]": [[evil], []]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": []}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": ["x"]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": [evil, {}]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": [evil, {evil: 1}]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"a{i}": [evil, evil]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"{evil}[]": [[evil, 1]]}},
            {"tool": evil, "arguments": {evil: evil, f"c{i}": evil, f"{evil}[]": [[evil], 1]}},
        ]
        codes = [evil_check(call) for call in calls]
        assert codes == [ref(call) for call in calls]
        pairs = [(call, code) for call, code in zip(calls, codes, strict=True) if code]
        assert [ref.explain(call, code) for call, code in pairs] == [
            ref.check(call) for call, _ in pairs]
        assert codes[:5] == [None, f"missing-c{i}", f"range-{evil}", f"missing-o{i}.{evil}",
                             f"range-o{i}.{evil}"]
        assert codes[7:] == [None, f"range-a{i}", f"range-a{i}[0]", f"missing-a{i}[].{evil}",
                             f"range-a{i}[].{evil}", f"range-a{i}", f"range-{evil}[][][]",
                             f"type-{evil}[][]"]


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "object", "properties": {"a": {"pattern": "x"}}},
         "/0/inputSchema/properties/a/pattern"),
        ({"type": "object", "properties": {"a": {"properties": {"b": {"format": "uri"}}}}},
         "/0/inputSchema/properties/a/properties/b/format"),
        ({"type": "object", "additionalProperties": {"type": "string"}},
         "/0/inputSchema/additionalProperties"),
        ({"type": "object", "enum": [{}]}, "/0/inputSchema/enum"),
        ({"type": "object", "const": {}}, "/0/inputSchema/const"),
        ({"type": "object", "properties": {"a": {"enum": [(1, 2)]}}},
         "/0/inputSchema/properties/a/enum/0"),
        ({"type": "object", "properties": {"a": {"const": {"k": b"x"}}}},
         "/0/inputSchema/properties/a/const/k"),
        ({"type": "object", "properties": {1: {}}}, "/0/inputSchema/properties"),
        ({"type": "object", "properties": {"a": {"minimum": float("nan")}}},
         "/0/inputSchema/properties/a/minimum"),
        ({"type": "object", "properties": {"a~/b": {"$ref": "#"}}},
         "/0/inputSchema/properties/a~0~1b/$ref"),
        ({"type": "object", "properties": {"a": {"multipleOf": 0}}},
         "/0/inputSchema/properties/a/multipleOf"),
        ({"type": "object", "properties": {"a": {"multipleOf": -1.5}}},
         "/0/inputSchema/properties/a/multipleOf"),
        ({"type": "object", "properties": {"a": {"multipleOf": "2"}}},
         "/0/inputSchema/properties/a/multipleOf"),
        ({"type": "object", "properties": {"a": {"minItems": -1}}},
         "/0/inputSchema/properties/a/minItems"),
        ({"type": "object", "properties": {"a": {"maxItems": 1.5}}},
         "/0/inputSchema/properties/a/maxItems"),
        ({"type": "object", "properties": {"a": {"maxProperties": True}}},
         "/0/inputSchema/properties/a/maxProperties"),
        ({"type": "object", "properties": {"a": {"uniqueItems": "yes"}}},
         "/0/inputSchema/properties/a/uniqueItems"),
        ({"type": "object", "properties": {"a": {"items": 3}}},
         "/0/inputSchema/properties/a/items"),
        ({"type": "object", "properties": {"a": {"items": [{"type": "string"}]}}},
         "/0/inputSchema/properties/a/items"),  # the pre-2020 tuple form: prefixItems now
        ({"type": "object", "properties": {"a": {"prefixItems": []}}},
         "/0/inputSchema/properties/a/prefixItems"),
        ({"type": "object", "properties": {"a": {"prefixItems": [{}, {"pattern": "x"}]}}},
         "/0/inputSchema/properties/a/prefixItems/1/pattern"),
        ({"type": "object", "properties": {"a": {"items": {"properties": {
            "b": {"format": "uri"}}}}}}, "/0/inputSchema/properties/a/items/properties/b/format"),
        ({"type": "object", "properties": {"a": {"additionalItems": False}}},
         "/0/inputSchema/properties/a/additionalItems"),
        ({"type": "object", "properties": {"a": {"contains": {}}}},
         "/0/inputSchema/properties/a/contains"),
        ({"type": "object", "minProperties": 1}, "/0/inputSchema/minProperties"),
        ({"type": "object", "maxProperties": 1}, "/0/inputSchema/maxProperties"),
    ],
)
def test_schema_errors_name_keyword_and_pointer(schema: dict[str, Any], pointer: str) -> None:
    """Unsupported keywords and malformed values are refused at compile time, with a pointer."""
    with pytest.raises(SchemaError) as info:
        compile_validator([{"name": "t", "inputSchema": schema}])
    assert info.value.pointer == pointer
    assert f"`{pointer}`" in str(info.value)


def test_deeply_nested_constants_are_refused_not_crashed() -> None:
    """A const nested past the compiler's limit is a SchemaError, not a parser crash."""
    value: Any = 1
    for _ in range(100):
        value = [value]
    with pytest.raises(SchemaError, match="levels deep"):
        compile_validator([{"name": "t", "inputSchema": {
            "type": "object", "properties": {"a": {"const": value}}}}])


def test_deeply_nested_arrays_are_refused_not_crashed() -> None:
    """Arrays nested past the schema depth limit are a SchemaError naming the place."""
    schema: Any = {"type": "integer"}
    for _ in range(100):
        schema = {"type": "array", "items": schema}
    with pytest.raises(SchemaError, match="levels deep") as info:
        compile_validator([{"name": "t", "inputSchema": {
            "type": "object", "properties": {"a": schema}}}])
    assert info.value.pointer.startswith("/0/inputSchema/properties/a/items/items/")


def test_tools_argument_forms() -> None:
    """None, a ToolSet and MCP definitions compile; a dict or a string is a TypeError."""
    definitions = [tool.definition() for tool in REGISTER_TOOLS.values()]
    assert compile_validator(definitions).source == check.source
    assert compile_validator(REGISTER_TOOLS).source == check.source
    for wrong in ({"tools": definitions}, "write_register"):
        with pytest.raises(TypeError, match="ToolSet or a list"):
            compile_validator(wrong)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="needs `name` and `inputSchema`"):
        compile_validator([{"name": "x"}])


# --- the gate uses it -------------------------------------------------------------------------


def test_gate_asks_the_reference_only_to_word_what_the_compiled_check_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid call never reaches the reference validator; a refusal of a tool's own
    arguments, or of an element of its own array of leaves, is worded by the compiled check
    itself; a nested object's is explained from its code, without the reference checking the
    call again."""
    gate = Gate(tools=ToolSet([*BENCH_TOOLS.values(), ARRAYS]))
    asked: list[Any] = []
    checked: list[Any] = []
    reference = gate._validators[None].reference  # the default session's: every tool
    explain, check = reference.explain, reference.check
    monkeypatch.setattr(reference, "explain", lambda call, code, choice=None: asked.append(
        code) or explain(call, code, choice))
    monkeypatch.setattr(reference, "check", lambda call, choice=None: checked.append(
        call) or check(call, choice))
    ok = gate.handle('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}')
    assert ok.ok and asked == [] and checked == []
    bad = gate.handle('{"tool": "write_register", "arguments": {"addr": 16, "data": 7}}')
    assert bad.code == "range-addr" and bad.message == "addr 16 is outside 0..15"
    assert asked == [] and checked == []
    block = gate.handle('{"tool": "write_registers", "arguments": {"addr": 0, '
                        '"data": [1, 2, 300]}}')
    assert block.code == "range-data[]" and block.message == "data[2] 300 is outside 0..255"
    assert asked == [] and checked == []
    nested = gate.handle('{"tool": "arrays", "arguments": {"data": [1], "points": [{"x": 1}, '
                         '{"y": 2}]}}')
    assert nested.code == "missing-points[].x"
    assert nested.message == "missing required argument points[1].x (a number)"
    assert asked == ["missing-points[].x"] and checked == []


# --- standalone modules -----------------------------------------------------------------------

_EDGES = ["-1", "0", "15", "16", "255", "256", "3.0", "1E+2", "15.5", '"3"', "true", "null",
          "1E+400", "18446744073709551617", "-0.0", "[]"]
_RUNNER = """
import json, sys
from decimal import Decimal
sys.modules["regdev"] = None  # any import of regdev fails
sys.path.insert(0, sys.argv[1])
import validator
calls = json.loads(sys.stdin.read(), parse_float=Decimal)
print(json.dumps([validator.check(c, tool_choice=t) for c, t in calls]))
"""


def _corpus() -> str:
    calls = []
    for tool, addr, data in product(["write_register", "read_register"], _EDGES, _EDGES):
        calls.append(f'[{{"tool": "{tool}", "arguments": {{"addr": {addr}, "data": {data}}}}}, '
                     "null]")
        calls.append(f'[{{"tool": "{tool}", "arguments": {{"addr": {addr}}}}}, null]')
    calls += ['[[], null]', '[{"arguments": {}}, null]', '[{"tool": "x", "arguments": {}}, null]',
              '[{"tool": "x", "arguments": {}}, "read_register"]',
              '[{"tool": "read_register", "arguments": "{}"}, null]']
    return "[" + ", ".join(calls) + "]"


def test_standalone_module_agrees_without_regdev(tmp_path: Path) -> None:
    """`regdev compile -o` writes a module that runs with regdev blocked and agrees in process."""
    assert main(["compile", "-o", str(tmp_path / "validator.py")]) == 0
    corpus = _corpus()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _RUNNER, str(tmp_path)],
                          input=corpus, capture_output=True, text=True, check=True)
    theirs = json.loads(done.stdout)
    ours = [check(c, tool_choice=t) for c, t in json.loads(corpus, parse_float=Decimal)]
    assert theirs == ours
    assert len(ours) == 2 * 16 * 16 * 2 + 5
    assert {"range-addr", "range-data", "type-addr", "type-data", "unknown-argument",
            "unknown-tool", "wrong-tool", None} <= set(ours)


def test_standalone_module_checks_arrays_without_regdev(tmp_path: Path) -> None:
    """A module compiled from a tools file with arrays, multipleOf and uniqueItems runs with
    regdev blocked (the runtime helpers are copied in) and agrees with the one in process."""
    tools = tmp_path / "tools.json"
    tools.write_bytes(msgspec.json.Encoder(decimal_format="number").encode(
        [ARRAYS.definition()]))
    assert main(["compile", "--tools", str(tools), "-o", str(tmp_path / "validator.py")]) == 0
    corpus = msgspec.json.Encoder(decimal_format="number").encode([
        [{"tool": "arrays", "arguments": arguments}, None]
        for arguments, _ in _ARRAY_CASES if "(1, 2)" not in repr(arguments)]).decode()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _RUNNER, str(tmp_path)],
                          input=corpus, capture_output=True, text=True, check=True)
    ours = [arrays(c, tool_choice=t) for c, t in json.loads(corpus, parse_float=Decimal)]
    assert json.loads(done.stdout) == ours
    assert {"range-data[]", "type-pair[0]", "missing-points[].x", "range-points",
            "range-matrix[][]", "range-step", None} <= set(ours)


@pytest.mark.parametrize("bound", ["0.1", "0.3", "2.675", "1E-7", "-0.1", "0.5",
                                   "123456.789", "0.30000000000000004", "1E+400"])
@pytest.mark.parametrize("keyword", ["minimum", "maximum", "exclusiveMinimum",
                                     "exclusiveMaximum"])
def test_float_against_a_decimal_bound_by_its_repr(keyword: str, bound: str) -> None:
    """A float value next to a decimal bound gets the verdict of the decimal its repr writes
    (the compiled check compares a float with a float constant and a test chosen for that
    bound, not with the Decimal)."""
    schema = {"type": "object", "properties": {"x": {"type": "number", keyword: Decimal(bound)}}}
    compiled = compile_validator([{"name": "t", "inputSchema": schema}])
    fails = {"minimum": lambda x, b: x < b, "maximum": lambda x, b: x > b,
             "exclusiveMinimum": lambda x, b: x <= b,
             "exclusiveMaximum": lambda x, b: x >= b}[keyword]
    near = float(Decimal(bound)) if abs(Decimal(bound)) < 10**300 else 1e300
    for x in (near, math.nextafter(near, math.inf), math.nextafter(near, -math.inf),
              Decimal(bound), int(near), int(near) + 1, near * 2, 0.0):
        written = Fraction(repr(x)) if type(x) is float else Fraction(x)
        expected = "range-x" if fails(written, Fraction(Decimal(bound))) else None
        assert compiled({"tool": "t", "arguments": {"x": x}}) == expected, (x, compiled.source)


def test_extra_keys_beside_optional_ones_are_counted() -> None:
    """With a few optional arguments, an extra key is found by counting the ones present
    (no keys() <= set test), whichever optional ones the call holds."""
    schema = {"type": "object", "additionalProperties": False, "required": ["mode"],
              "properties": {"mode": {"type": "string"}, "reason": {"type": "string"},
                             "level": {"type": "integer"}}}
    compiled = compile_validator([{"name": "t", "inputSchema": schema}])
    assert "len(a) != 1 + (v1 is not _MISSING) + (v2 is not _MISSING)" in compiled.source
    assert "keys() <=" not in compiled.source
    for arguments, expected in [({"mode": "a"}, None), ({"mode": "a", "x": 1}, "unknown-argument"),
                                ({"mode": "a", "reason": "b", "level": 1}, None),
                                ({"mode": "a", "level": 1, "x": None}, "unknown-argument"),
                                ({"mode": "a", "reason": "b", "level": 1, "x": 1},
                                 "unknown-argument"),
                                ({"reason": "b", "level": 1}, "missing-mode")]:
        assert compiled({"tool": "t", "arguments": arguments}) == expected, arguments


def _tools_of(schemas: dict[str, Any]) -> ToolSet:
    """Tools named by ``schemas``' keys, each with one property ``x`` (a handler that echoes)."""
    return ToolSet([Tool(name, "", {"type": "object", "properties": {"x": schema}},
                         handler=lambda device, a: a) for name, schema in schemas.items()])


#: Decimal bounds: a float's repr, a float's exact binary value (more digits than a repr
#: holds), a short decimal no float holds, a small integer, and past the floats' range.
_bounds = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Decimal(repr(f))),
    st.floats(allow_nan=False, allow_infinity=False).map(Decimal),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-10**6,
                max_value=10**6),
    st.integers(-(10**30), 10**30).map(Decimal),
    st.sampled_from([Decimal("1E+400"), Decimal("-1E+400"), Decimal("1E-400"),
                     Decimal("-1E-400"), Decimal("1E+23"), Decimal("0.1")]))

_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "const",
                    "enum")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bound=_bounds, data=st.data())
def test_float_bounds_enum_const_get_the_gates_verdict(bound: Decimal, data: Any) -> None:
    """A number in a call decoded with json.loads (a float) gets, from the compiled check and
    the reference, the verdict the gate gives the raw text, against every number keyword."""
    near = float(bound)
    if math.isfinite(near):
        x = data.draw(st.sampled_from([near, math.nextafter(near, math.inf),
                                       math.nextafter(near, -math.inf)])
                      | st.floats(allow_nan=False, allow_infinity=False), label="x")
    else:
        x = data.draw(st.floats(allow_nan=False, allow_infinity=False), label="x")
    text = json.dumps(x)  # the float's repr: the text a model wrote, decoded both ways
    schemas: dict[str, Any] = {
        f"t_{keyword}": {"type": "number", keyword: [bound, 7] if keyword == "enum" else bound}
        for keyword in _NUMBER_KEYWORDS}
    whole = bound.to_integral_value()
    schemas.update({f"i_{keyword}": {"type": "integer", keyword: bound}
                    for keyword in _NUMBER_KEYWORDS[:4]})
    schemas.update({"i_const": {"type": "integer", "const": whole},
                    "i_enum": {"type": "integer", "enum": [whole]}})
    tools = _tools_of(schemas)
    gate = Gate(RegisterFile(), tools)
    compiled = compile_validator(tools)
    oracle = ReferenceValidator(tools)
    for name in schemas:
        raw = f'{{"tool": "{name}", "arguments": {{"x": {text}}}}}'
        observation = gate.handle(raw)
        expected = None if observation.ok else observation.code
        call = json.loads(raw)
        refusal = oracle.check(call)
        assert (compiled(call), refusal.code if refusal else None) == (expected, expected), (
            name, bound, x, expected)


_SET_SPEED = {"tools": [{"name": "set_speed", "inputSchema": {
    "type": "object", "additionalProperties": False, "required": ["rpm", "ramp"],
    "properties": {"rpm": {"type": "integer", "minimum": 0, "maximum": 3000},
                   "ramp": {"type": "number", "minimum": 0, "multipleOf": 0.1}}}}]}


@pytest.mark.parametrize(("ramp", "expected"), [
    ("0.3", None), ("0.7", None), ("2.9", None), ("1e-1", None), ("0.35", "range-ramp"),
    ("0.30000000000000004", "range-ramp"), ("0.05", "range-ramp"), ("1e-17", "range-ramp")])
def test_standalone_float_call_gets_the_gates_verdict(tmp_path: Path, ramp: str,
                                                      expected: str | None) -> None:
    """A call decoded with json.loads (floats) gets, from the module `regdev compile` writes,
    the verdict the gate gives its raw text: 0.3 is a multiple of 0.1."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(_SET_SPEED))
    assert main(["compile", "--tools", str(path), "-o", str(tmp_path / "validator.py")]) == 0
    text = f'{{"tool": "set_speed", "arguments": {{"rpm": 100, "ramp": {ramp}}}}}'
    runner = _RUNNER.replace("parse_float=Decimal", "")  # plain json.loads: floats
    done = subprocess.run([sys.executable, "-I", "-S", "-c", runner, str(tmp_path)],
                          input=f"[[{text}, null]]", capture_output=True, text=True, check=True)
    tools = ToolSet.from_json(path.read_bytes())
    handled = [Tool(t.name, t.description, t.input_schema, handler=lambda device, a: a)
               for t in tools.values()]
    gate = Gate(RegisterFile(), ToolSet(handled))
    observation = gate.handle(text)
    assert json.loads(done.stdout) == [expected]
    assert (None if observation.ok else observation.code) == expected
    floats = {"type": "object", "properties": {"ramp": {"multipleOf": 0.1}}}  # a float schema
    python = compile_validator([{"name": "set_speed", "inputSchema": floats}])
    assert python({"tool": "set_speed", "arguments": {"ramp": json.loads(ramp)}}) == expected


_LIMITS = {"tools": [{"name": name, "inputSchema": {
    "type": "object", "properties": {"x": {"type": "number", **schema}}}}
    for name, schema in [("at_most", {"maximum": 0.1}), ("at_least", {"minimum": 0.3}),
                         ("above", {"exclusiveMinimum": 0.1}),
                         ("below", {"exclusiveMaximum": 1e23}),
                         ("same", {"const": 0.1}), ("one_of", {"enum": [0.1, 0.7, 1e23]}),
                         ("distinct", {"type": "array", "uniqueItems": True})]]}


@pytest.mark.parametrize(("tool", "x", "expected"), [
    ("at_most", "0.1", None), ("at_most", "0.10000000000000002", "range-x"),
    ("at_least", "0.3", None), ("at_least", "0.29999999999999993", "range-x"),
    ("above", "0.1", "range-x"), ("above", "0.10000000000000002", None),
    ("below", "1e23", "range-x"), ("below", "9.999999999999997e22", None),
    ("same", "0.1", None), ("same", "0.09999999999999999", "range-x"),
    ("one_of", "0.1", None), ("one_of", "0.7", None), ("one_of", "1e23", None),
    ("one_of", "100000000000000000000000", None), ("one_of", "0.3", "range-x"),
    ("distinct", "[1e23, 100000000000000000000000]", "range-x"),
    ("distinct", "[0.1, 0.10000000000000002, 1]", None)])
def test_standalone_float_bounds_get_the_gates_verdict(tmp_path: Path, tool: str, x: str,
                                                       expected: str | None) -> None:
    """Bounds, const, enum and uniqueItems: the module `regdev compile` writes, given a call
    decoded with json.loads, gives the gate's verdict on its raw text ({"x": 0.1} meets
    "maximum": 0.1)."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(_LIMITS))
    assert main(["compile", "--tools", str(path), "-o", str(tmp_path / "validator.py")]) == 0
    text = f'{{"tool": "{tool}", "arguments": {{"x": {x}}}}}'
    runner = _RUNNER.replace("parse_float=Decimal", "")  # plain json.loads: floats
    done = subprocess.run([sys.executable, "-I", "-S", "-c", runner, str(tmp_path)],
                          input=f"[[{text}, null]]", capture_output=True, text=True, check=True)
    tools = ToolSet.from_json(path.read_bytes())
    gate = Gate(RegisterFile(), _tools_of({t.name: t.input_schema["properties"]["x"]
                                           for t in tools.values()}))
    observation = gate.handle(text)
    assert json.loads(done.stdout) == [expected]
    assert (None if observation.ok else observation.code) == expected


def test_compile_command_with_a_tools_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--tools reads MCP definitions (array or tools/list result) with exact numbers."""
    tools = {"tools": [{"name": "set_gain", "inputSchema": {
        "type": "object", "properties": {"gain": {"type": "number", "maximum": 1.1}},
        "required": ["gain"]}}]}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    assert main(["compile", "--tools", str(path)]) == 0
    source = capsys.readouterr().out
    namespace: dict[str, Any] = {}
    exec(compile(source, "validator.py", "exec"), namespace)
    gain = namespace["check"]
    assert namespace["TOOL_NAMES"] == ("set_gain",)
    assert gain({"tool": "set_gain", "arguments": {"gain": Decimal("1.1")}}) is None
    assert gain({"tool": "set_gain", "arguments": {"gain": Decimal("1.1000000000000000001")}}) \
        == "range-gain"
    assert "Decimal('1.1')" in source


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("[", "the tool definitions are not JSON"),
        ('{"tools": 5}', "expected a JSON array of tool definitions"),
        ('[{"name": "t", "inputSchema": {"type": "object", "properties": '
         '{"a": {"pattern": "x"}}}}]',
         "keyword `pattern` is not supported - at `/0/inputSchema/properties/a/pattern`"),
        ('{"tools": [{"name": "t", "inputSchema": {"type": "object", "oneOf": []}}]}',
         "keyword `oneOf` is not supported - at `/tools/0/inputSchema/oneOf`"),
    ],
)
def test_compile_command_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       content: str | None, message: str) -> None:
    """A missing or bad tools file is one line on stderr and exit 2; nothing is written."""
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content)
    status = main(["compile", "--tools", str(path), "-o", str(tmp_path / "out.py")])
    _, err = capsys.readouterr()
    assert status == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out.py").exists()


@pytest.mark.parametrize("content", ["[]", '{"tools": []}', " [ ]\n"])
def test_compile_command_refuses_a_file_of_no_tools(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    content: str) -> None:
    """No tools would compile a validator refusing every call: exit 2, nothing written."""
    path = tmp_path / "tools.json"
    path.write_text(content)
    status = main(["compile", "--tools", str(path), "-o", str(tmp_path / "out.py")])
    assert (status, capsys.readouterr()) == (2, ("", (
        f"regdev compile: error: {path} declares no tools (an array of MCP tools/list "
        'entries, or {"tools": [...]}, with at least one)\n')))
    assert not (tmp_path / "out.py").exists()


def test_generate_source_is_deterministic() -> None:
    """The same tools give the same module text (so a written module can be diffed)."""
    assert generate_source() == generate_source() == check.source


@pytest.mark.parametrize(("fmt", "name"), [("openai", "OpenAI"), ("anthropic", "Anthropic")])
def test_compile_command_names_a_provider_format(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], fmt: str,
                                                 name: str) -> None:
    """`regdev tools --format openai|anthropic` output given to compile: a hint to use mcp."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tool_definitions(fmt)))
    status = main(["compile", "--tools", str(path)])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err == (f"regdev compile: error: {path} looks like the {name} format; regdev "
                   "compile reads MCP tools/list entries (regdev tools --format mcp)\n")
    path.write_text(json.dumps(tool_definitions("mcp")))  # the hinted format compiles
    assert main(["compile", "--tools", str(path)]) == 0


# --- bounds past Decimal's exponent range ------------------------------------------------

#: Bounds a JSON file can hold that Decimal's default context cannot (its exponents stop at
#: 999999): abs() or arithmetic on them raises decimal.Overflow; comparisons are exact.
HUGE_BOUNDS = ["1e1000000", "-1e1000000", "1e999999999", "-1e999999999999999999",
               "1e-1000000", "-1e-999999999", "1.5e999999999", "0e999999999"]
#: Values that meet those bounds at their own scale, and ordinary ones.
HUGE_VALUES = [Decimal(text) for text in HUGE_BOUNDS] + [
    Decimal("1E+999999998"), Decimal("1E+1000001"), Decimal("-1E+1000001"), Decimal("0E-5"),
    Decimal("1E-1000001"), Decimal("2.5"), 0, 1, -1, 10**4000, "x", None]


@pytest.mark.parametrize("keyword", ["minimum", "maximum", "exclusiveMinimum",
                                     "exclusiveMaximum", "const"])
@pytest.mark.parametrize("kind", ["integer", "number", ["integer", "string"], "string"])
def test_a_bound_past_decimals_exponent_range_compiles_and_agrees(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], keyword: str, kind: Any) -> None:
    """Each numeric keyword with a bound past Decimal's exponent range, for every type:
    `regdev compile` writes the module (no traceback), and the compiled validator, the
    reference and the written module agree on values at that scale and ordinary ones."""
    for bound in HUGE_BOUNDS:
        schema_text = (f'{{"type": "object", "properties": {{"x": {{"type": '
                       f'{json.dumps(kind)}, "{keyword}": {bound}}}}}}}')
        tools_file = tmp_path / "tools.json"
        tools_file.write_text(f'[{{"name": "t", "inputSchema": {schema_text}}}]')
        out = tmp_path / "checker.py"
        assert main(["compile", "--tools", str(tools_file), "-o", str(out)]) == 0, bound
        assert "Traceback" not in capsys.readouterr().err
        tools = ToolSet([Tool("t", "t", load_json(schema_text), handler=lambda _d, _a: {})])
        compiled, ref = compile_validator(tools), ReferenceValidator(tools)
        namespace: dict[str, Any] = {}
        exec(compile(out.read_text(), str(out), "exec"), namespace)
        gate = Gate(tools=tools)
        for value in HUGE_VALUES:
            call = {"tool": "t", "arguments": {"x": value}}
            expected = ref.check(call)
            code = expected.code if expected else None
            assert compiled(call) == code == namespace["check"](call), (bound, value)
            observation = gate.handle_call(call)
            assert observation.code == code or (code is None and observation.ok), observation


def test_a_huge_integral_number_is_bound_as_its_exact_decimal() -> None:
    """An integral number of more than 4300 digits (1e999999999) meets an integer schema
    without bounds; binding leaves it the exact Decimal (an int would take gigabytes),
    while one of at most 4300 digits, and zero at any exponent, becomes an int."""
    seen: list[Any] = []
    tool = Tool("t", "t", {"type": "object", "properties": {"x": {"type": "integer"}}},
                handler=lambda _device, arguments: seen.append(arguments["x"]) or {})
    gate = Gate(tools=ToolSet([tool]))
    for text, bound in [("1e999999999", Decimal("1E+999999999")), ("-1e4300", Decimal("-1E+4300")),
                        ("1e4299", 10**4299), ("0e999999999999", 0), ("2.5e1", 25)]:
        assert gate.handle(f'{{"tool": "t", "arguments": {{"x": {text}}}}}').ok, text
        assert type(seen[-1]) is type(bound) and seen[-1] == bound


def test_validator_doc_shows_the_generated_code() -> None:
    """docs/validator.md's listing of the register tools' check is the generated code, line
    for line, up to the ``...`` that stands for the rest."""
    text = (ROOT / "docs" / "validator.md").read_text(encoding="utf-8")
    start = text.index("def check(call, tool_choice=None):")
    shown = text[start:text.index("\n```", start)].splitlines()
    shown = shown[:[line.strip() for line in shown].index("...")]
    generated = generate_source()
    lines = generated[generated.index("def check(call"):].splitlines()
    assert len(shown) > 30
    assert shown == lines[:len(shown)]
