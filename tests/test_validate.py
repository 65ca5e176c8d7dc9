"""The reference validator: the seed probe, the fixed order, messages, and the schema subset."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ARRAYS, CONFIGURE
from regdev import Gate, ReferenceValidator, Refusal, SchemaError, Tool, ToolSet, compile_validator
from regdev.gate._validate import got_value
from support.strategies import python_calls

validator = ReferenceValidator()
compiled = compile_validator()  # held to the same table (tests/test_compile.py has more)


def check(call: Any, tool_choice: str | None = None) -> str | None:
    return validator(call, tool_choice)


def write(**arguments: Any) -> dict[str, Any]:
    return {"tool": "write_register", "arguments": arguments}


# --- the seed probe (design.md), in forced-tool mode ------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"tool": "write_register", "arguments": {"addr": 3, "data": 255}}, None),
        ({"tool": "write_register", "arguments": {"data": 1}}, "missing-addr"),
        ({"tool": "write_register", "arguments": {"addr": "3", "data": 1}}, "type-addr"),
        ({"tool": "write_register", "arguments": {"addr": 16, "data": 1}}, "range-addr"),
        ({"tool": "write_register", "arguments": {"addr": 3, "data": 300}}, "range-data"),
        ({"tool": "erase_chip", "arguments": {"addr": 3, "data": 1}}, "wrong-tool"),
    ],
)
def test_seed_probe_forced_write_register(call: dict[str, Any], expected: str | None) -> None:
    """The worked example from the design, with write_register forced, in both validators."""
    assert check(call, tool_choice="write_register") == expected
    assert compiled(call, tool_choice="write_register") == expected


# --- the five steps in order ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ([write(addr=1, data=1)], "not-an-object"),
        ("write_register", "not-an-object"),
        (None, "not-an-object"),
        ({"arguments": {"addr": 1}}, "missing-tool"),
        ({"tool": None, "arguments": {"addr": 1}}, "missing-tool"),
        ({"tool": 7, "arguments": {}}, "missing-tool"),
        ({"tool": "read_register"}, "bad-arguments"),
        ({"tool": "read_register", "arguments": None}, "bad-arguments"),
        ({"tool": "read_register", "arguments": '{"addr": 1}'}, "bad-arguments"),
        ({"tool": "read_register", "arguments": [1]}, "bad-arguments"),
        # shape before name: a bad tool with bad arguments is a shape failure
        ({"tool": "erase_chip", "arguments": None}, "bad-arguments"),
        # name is exact: case and whitespace count
        ({"tool": "Read_register", "arguments": {"addr": 1}}, "unknown-tool"),
        ({"tool": "read_register ", "arguments": {"addr": 1}}, "unknown-tool"),
        ({"tool": "", "arguments": {}}, "unknown-tool"),
        # fields: missing in declared order, before extras
        (write(), "missing-addr"),
        (write(addr=1), "missing-data"),
        (write(register=3, value=200), "missing-addr"),
        (write(addr=1, data=2, extra=3), "unknown-argument"),
        # fields before types
        (write(addr="x"), "missing-data"),
        (write(addr="x", data=1, extra=1), "unknown-argument"),
        # types in declared order, before ranges
        (write(addr=99, data="x"), "type-data"),
        (write(addr="x", data="y"), "type-addr"),
        (write(addr=True, data=1), "type-addr"),
        (write(addr=1, data=False), "type-data"),
        (write(addr=Decimal("3.5"), data=1), "type-addr"),
        (write(addr=3.5, data=1), "type-addr"),
        (write(addr=None, data=1), "type-addr"),
        # ranges in declared order, compared exactly
        (write(addr=16, data=256), "range-addr"),
        (write(addr=-1, data=0), "range-addr"),
        (write(addr=15, data=256), "range-data"),
        (write(addr=15, data=2**64 + 1), "range-data"),
        (write(addr=Decimal("1E+400"), data=0), "range-addr"),
        (write(addr=Decimal("-1E+400"), data=0), "range-addr"),
        # integral numbers are integers
        (write(addr=Decimal("3.0"), data=Decimal("1E+2")), None),
        (write(addr=15.0, data=255.0), None),
        (write(addr=0, data=0), None),
        (write(addr=Decimal("-0.0"), data=0), None),
    ],
)
def test_first_failure_decides(call: Any, expected: str | None) -> None:
    """Shape, name, fields, types, ranges: the earliest failing step names the code."""
    assert check(call) == expected
    assert compiled(call) == expected, compiled.source


def test_wrong_tool_only_when_forced() -> None:
    """Without a forced tool an unknown name is unknown-tool; with one it is wrong-tool."""
    call = {"tool": "read_register", "arguments": {"addr": 1}}
    assert check(call) is None
    assert check(call, tool_choice="write_register") == "wrong-tool"
    assert check(call, tool_choice="read_register") is None


def test_messages_say_what_is_wrong_and_what_is_allowed() -> None:
    """Messages name the argument, the value and the allowed range, on one line."""
    messages = {
        "range-addr": validator.check(write(addr=16, data=1)),
        "type-addr": validator.check(write(addr="3", data=1)),
        "missing-data": validator.check(write(addr=1)),
        "unknown-argument": validator.check(write(addr=1, data=1, colour="red")),
    }
    assert messages["range-addr"].message == "addr 16 is outside 0..15"  # type: ignore[union-attr]
    assert messages["type-addr"].message == 'addr must be an integer 0..15, got string "3"'  # type: ignore[union-attr]
    assert messages["missing-data"].message == (  # type: ignore[union-attr]
        "missing required argument data (an integer 0..255)")
    assert messages["unknown-argument"].message == (  # type: ignore[union-attr]
        'unknown argument "colour"; write_register takes: addr, data')


def test_untrusted_text_is_escaped_and_cut_short_in_messages() -> None:
    """An injected name never reaches a code and reaches a message escaped and truncated."""
    evil = "x\n\u202e" + "A" * 500
    unknown = validator.check({"tool": evil, "arguments": {}})
    extra = validator.check(write(addr=1, data=1, **{evil: 1}))
    for refusal in (unknown, extra):
        assert refusal is not None
        assert "\n" not in refusal.message and "\u202e" not in refusal.message
        assert len(refusal.message) < 200
        assert "A" * 100 not in refusal.message
    assert unknown.code == "unknown-tool"  # type: ignore[union-attr]
    assert extra.code == "unknown-argument"  # type: ignore[union-attr]


def test_huge_integers_are_shown_without_building_their_digits() -> None:
    """A range message for a giant integer stays short."""
    refusal = validator.check(write(addr=1, data=10**4000))
    assert refusal is not None and refusal.code == "range-data"
    assert len(refusal.message) < 100


arrays = ReferenceValidator(ToolSet([ARRAYS]))


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ({"data": [1, 2, 300]}, "range-data[]", "data[2] 300 is outside 0..255"),
        ({"data": [1, "2"]}, "type-data[]",
         'data[1] must be an integer 0..255, got string "2"'),
        ({"data": []}, "range-data",
         "data has 0 items; allowed: an array with 1..16 items, each an integer 0..255"),
        ({"data": 7}, "type-data",
         "data must be an array with 1..16 items, each an integer 0..255, got integer 7"),
        ({}, "missing-data",
         "missing required argument data (an array with 1..16 items, each an integer 0..255)"),
        ({"data": [1], "pair": ["a", 3]}, "range-pair[1]", "pair[1] 3 is not a multiple of 2"),
        ({"data": [1], "pair": ["a", 2, "b"]}, "type-pair[]",
         "pair[2] is not allowed; pair holds at most 2 items"),
        ({"data": [1], "pair": [5]}, "type-pair[0]", "pair[0] must be a string, got integer 5"),
        ({"data": [1], "points": [{"x": 1}, {"y": 2}]}, "missing-points[].x",
         "missing required argument points[1].x (a number)"),
        ({"data": [1], "points": [{"x": 1, "z": 2}]}, "unknown-argument",
         'unknown argument "points[0].z"; points[0] takes: points[0].x, points[0].y'),
        ({"data": [1], "points": [{"x": 1}, {"x": 2}, {"x": Decimal("1.0")}]}, "range-points",
         "points[2] repeats points[0] (an object); the items of points must be unique"),
        ({"data": [1], "matrix": [[1], [2, 3, 3]]}, "range-matrix[]",
         "matrix[1] has 3 items; allowed: an array with at most 2 items, each an integer <= 3"),
        ({"data": [1], "matrix": [[1], [2, 4]]}, "range-matrix[][]",
         "matrix[1][1] 4 is above 3"),
        ({"data": [1], "options": {}}, "range-options",
         "options has 0 properties; allowed: an object with 1..2 properties"),
        ({"data": [1], "step": Decimal("0.35")}, "range-step",
         "step 0.35 is not a multiple of 0.1"),
    ],
)
def test_array_messages_name_the_element(arguments: dict[str, Any], code: str,
                                         message: str) -> None:
    """An element's refusal names its index; an array's names its count and what is allowed;
    explain() words the compiled code the same way."""
    call = {"tool": "arrays", "arguments": arguments}
    refusal = arrays.check(call)
    assert refusal == Refusal("validate", code, message)
    assert arrays.explain(call, code) == refusal


@pytest.mark.parametrize(
    ("bounds", "value", "message"),
    [
        ({"enum": ["A", "B"]}, "C", 'x "C" is not one of "A", "B"'),
        ({"const": 3}, 4, "x 4 is not equal to 3"),
        ({"minimum": 0, "maximum": 15}, 16, "x 16 is outside 0..15"),
        ({"minimum": 1}, 0, "x 0 is below 1"),
        ({"maximum": 9}, 10, "x 10 is above 9"),
        ({"exclusiveMinimum": 0}, 0, "x 0 is not above 0"),
        ({"exclusiveMaximum": 5}, 5, "x 5 is not below 5"),
        ({"maximum": 9, "enum": [1, 2, 12]}, 12, "x 12 is above 9 or not one of 1, 2, 12"),
    ],
)
def test_a_bound_refusal_says_how_the_value_fails_it(bounds: dict[str, Any], value: Any,
                                                     message: str) -> None:
    """Each bound keyword is worded as what the value is (never "is outside one of"), by
    the reference validator and by the gate's compiled check alike."""
    schema = {"type": "object", "properties": {"x": bounds}, "additionalProperties": False}
    tools = ToolSet([Tool("t", "t", schema, handler=lambda _d, _a: {})])
    call = {"tool": "t", "arguments": {"x": value}}
    assert ReferenceValidator(tools).check(call) == Refusal("validate", "range-x", message)
    observation = Gate(tools=tools).handle_call(call)
    assert (observation.code, observation.message) == ("range-x", message)


def test_explain_finds_the_first_bad_element_without_checking_the_call_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """For an element code explain() checks that array's elements only, not the call."""
    call = {"tool": "arrays", "arguments": {"data": [1, 2, 3, 300, 400]}}
    monkeypatch.setattr(arrays, "check", lambda *args: pytest.fail("checked again"))
    assert arrays.explain(call, "range-data[]") == Refusal(
        "validate", "range-data[]", "data[3] 300 is outside 0..255")


# --- a richer tool set: the whole subset -------------------------------------------------------

custom = ReferenceValidator(ToolSet([CONFIGURE]))


def conf(**arguments: Any) -> str | None:
    return custom({"tool": "configure", "arguments": arguments})


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"mode": "fast"}, None),
        ({"mode": 1.0}, None),  # JSON equality: 1.0 == 1
        ({"mode": True}, "range-mode"),  # but true != 1
        ({"mode": "FAST"}, "range-mode"),
        ({"mode": "fast", "anything": [1]}, None),  # additionalProperties defaults to true
        ({"mode": "fast", "label": ""}, "range-label"),
        ({"mode": "fast", "label": "abcd"}, None),
        ({"mode": "fast", "label": "abcde"}, "range-label"),
        ({"mode": "fast", "label": "\U0001f600" * 4}, None),  # code points, not UTF-16 units
        ({"mode": "fast", "label": 5}, "type-label"),
        ({"mode": "fast", "gain": None}, None),
        ({"mode": "fast", "gain": 0}, "range-gain"),
        ({"mode": "fast", "gain": Decimal("2.5")}, "range-gain"),
        ({"mode": "fast", "gain": Decimal("2.4999999999999999999")}, None),
        ({"mode": "fast", "gain": "1"}, "type-gain"),
        ({"mode": "fast", "version": 2.0}, None),
        ({"mode": "fast", "version": 3}, "range-version"),
        ({"mode": "fast", "limits": {"low": 1}}, None),
        ({"mode": "fast", "limits": {}}, "missing-limits.low"),
        ({"mode": "fast", "limits": {"low": 1, "x": 1}}, "unknown-argument"),
        ({"mode": "fast", "limits": {"low": -1}}, "range-limits.low"),
        ({"mode": "fast", "limits": []}, "type-limits"),
        # level by level: the parent's range failure comes before the child's missing field
        ({"mode": "bad", "limits": {}}, "range-mode"),
        ({}, "missing-mode"),
    ],
)
def test_subset_keywords(arguments: dict[str, Any], expected: str | None) -> None:
    """enum, const, lengths, exclusive bounds, type lists and nested objects."""
    assert conf(**arguments) == expected


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "object", "properties": {"a": {"pattern": "x"}}},
         "/inputSchema/properties/a/pattern"),
        ({"type": "object", "additionalProperties": {"type": "string"}},
         "/inputSchema/additionalProperties"),
        ({"type": "object", "properties": {"a": {"type": "int"}}},
         "/inputSchema/properties/a/type"),
        ({"type": "object", "properties": {"a": {"minimum": "0"}}},
         "/inputSchema/properties/a/minimum"),
        ({"type": "object", "properties": {"a": {"minimum": True}}},
         "/inputSchema/properties/a/minimum"),
        ({"type": "object", "properties": {"a": {"maxLength": -1}}},
         "/inputSchema/properties/a/maxLength"),
        ({"type": "object", "required": ["a", "a"]}, "/inputSchema/required"),
        ({"type": "object", "properties": {"a/b": {"$ref": "#"}}},
         "/inputSchema/properties/a~1b/$ref"),
        ({"type": "object", "enum": [{}]}, "/inputSchema/enum"),
        ({"type": "object", "const": {"a": 1}}, "/inputSchema/const"),
        ({"type": "object", "properties": {"a": {"const": (1, 2)}}},
         "/inputSchema/properties/a/const"),
        ({"type": "object", "properties": {"a": {"enum": [1, {"b": {3}}]}}},
         "/inputSchema/properties/a/enum/1/b"),
        ({"type": "object", "properties": {None: {}}}, "/inputSchema/properties"),
        ({"type": "array"}, "/inputSchema"),
        ({"properties": {}}, "/inputSchema"),
    ],
)
def test_schema_errors_name_keyword_and_pointer(schema: dict[str, Any], pointer: str) -> None:
    """Unsupported keywords and malformed values are refused at declaration, with a pointer."""
    with pytest.raises(SchemaError) as info:
        Tool(name="t", description="", input_schema=schema)
    assert info.value.pointer == pointer
    assert pointer in str(info.value)


def test_annotations_are_accepted() -> None:
    """Annotation keywords are allowed and do not affect validity: a value unlike the
    default or the examples is still valid, and the type still decides."""
    tools = ToolSet([Tool(name="t", description="", input_schema={
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "title": "T",
        "properties": {"a": {"type": "integer", "description": "d", "default": 1,
                             "examples": [1]}}})])
    reference, compiled = ReferenceValidator(tools), compile_validator(tools)
    for arguments, code in (({"a": 5}, None), ({}, None), ({"a": "1"}, "type-a")):
        call = {"tool": "t", "arguments": arguments}
        found = reference.check(call)
        assert (found.code if found else None) == code == compiled(call), arguments


def test_tool_set_from_mcp_definitions() -> None:
    """MCP tools/list entries become a tool set; a bad entry names its index."""
    tools = ToolSet.from_definitions([CONFIGURE.definition()])
    assert list(tools) == ["configure"]
    with pytest.raises(SchemaError) as info:
        ToolSet.from_definitions([CONFIGURE.definition(), {"name": "x", "inputSchema": {
            "type": "object", "properties": {"a": {"format": "uri"}}}}])
    assert info.value.pointer == "/1/inputSchema/properties/a/format"


def test_duplicate_tool_names_are_refused() -> None:
    """Two tools with one name cannot be offered together."""
    with pytest.raises(SchemaError, match="declared twice"):
        ToolSet([CONFIGURE, CONFIGURE])


_REFERENCE, _COMPILED = ReferenceValidator(), compile_validator()


@given(python_calls(), st.sampled_from([None, "write_register"]))
def test_check_and_explain_never_raise_on_python_data(call: Any, tool_choice: str | None) -> None:
    """Any Python value, JSON data or not: check() and explain() answer, never raise."""
    validator = _REFERENCE
    refusal = validator.check(call, tool_choice)
    code = _COMPILED(call, tool_choice)
    assert (refusal.code if refusal is not None else None) == code
    if code is not None:
        assert validator.explain(call, code, tool_choice) == refusal


@pytest.mark.parametrize(("key", "shown"), [
    (5, "5 (a key of Python type int)"),
    (("a\n", 1), "('a\\\\n', 1) (a key of Python type tuple)"),
    (10**5000, "an integer of about 5000 digits (a key of Python type int)"),
], ids=["int", "tuple", "huge-int"])
def test_a_key_that_is_not_a_string_is_named_escaped(key: object, shown: str) -> None:
    """check() names a non-str argument key by its escaped repr, with its Python type."""
    refusal = ReferenceValidator().check(
        {"tool": "write_register", "arguments": {"addr": 3, "data": 1, key: 1}})
    assert refusal == Refusal("validate", "unknown-argument",
                              f"unknown argument {shown}; write_register takes: addr, data")


@pytest.mark.parametrize(("value", "shown"), [
    ("3", 'string "3"'), ("", 'string ""'), ("a\nb`", 'string "a\\nb\\x60"'),
    ("x" * 50, 'string "' + "x" * 35 + '..."'), (True, "boolean true"),
    (False, "boolean false"), (None, "null"), ([1], "an array"), ({}, "an object"),
    (Decimal("3.5"), "number 3.5"), (2.5, "number 2.5")])
def test_a_wrong_value_is_shown_as_before(value: object, shown: str) -> None:
    """The type refusal's words for a wrong value (the compiled check's and the reference's):
    a string escaped and cut at 40 characters with its quotes, the rest by its JSON type."""
    assert got_value(value) == shown
