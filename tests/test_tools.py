"""The tool registry: a tool is immutable, its schema a private deep copy read the same by all."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
import pytest

from conftest import ARRAYS, EXAMPLES
from regdev import (
    READ_REGISTER,
    REGISTER_TOOLS,
    WRITE_REGISTER,
    Gate,
    ReferenceValidator,
    Register,
    RegisterFile,
    RegisterMap,
    Tool,
    ToolSet,
    compile_validator,
    map_tools,
)
from regdev.devices._rdl import load_map
from regdev.gate._maptools import _MapTools


def schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"addr": {"type": "integer", "minimum": 0,
                                                      "maximum": 15}},
            "required": ["addr"], "additionalProperties": False}


def test_changing_a_schema_after_the_tool_was_made_changes_nothing() -> None:
    """The dict passed in and the one input_schema returns are copies: both validators agree."""
    given = schema()
    tool = Tool("t", "", given)
    tools = ToolSet([tool])
    compiled, reference = compile_validator(tools), ReferenceValidator(tools)
    given["properties"]["addr"]["maximum"] = 99
    tool.input_schema["properties"]["addr"]["maximum"] = 99
    call = {"tool": "t", "arguments": {"addr": 50}}
    assert compiled(call) == reference(call) == "range-addr"
    assert tool.input_schema == schema() == tool.definition()["inputSchema"]
    assert tool.bind({"addr": 3.0}) == {"addr": 3}  # type: ignore[dict-item]


def test_the_register_tools_share_no_schema_object() -> None:
    """write_register and read_register declare addr from one dict; each tool has its own."""
    write = WRITE_REGISTER.input_schema
    write["properties"]["addr"]["maximum"] = 255
    assert READ_REGISTER.input_schema["properties"]["addr"]["maximum"] == 15
    assert WRITE_REGISTER.input_schema["properties"]["addr"]["maximum"] == 15
    assert WRITE_REGISTER.input_schema is not WRITE_REGISTER.input_schema


def test_a_tool_cannot_be_changed() -> None:
    """Setting or deleting any attribute is an AttributeError, the schema included."""
    tool = Tool("t", "", schema())
    for name in ("name", "read_only", "input_schema", "handler"):
        with pytest.raises(AttributeError):
            setattr(tool, name, None)
        with pytest.raises(AttributeError):
            delattr(tool, name)
    assert (tool.name, tool.read_only, tool.handler) == ("t", False, None)


def test_equal_tools_compare_and_hash_equal_and_survive_copy_and_pickle() -> None:
    """Equality ignores the handler (as before); copies and pickles give equal tools."""
    one = Tool("t", "d", schema(), read_only=True, handler=None)
    two = Tool("t", "d", schema(), read_only=True, handler=lambda device, args: {})
    assert one == two and hash(one) == hash(two)
    assert one != Tool("t", "d", schema()) and one != Tool("t", "other", schema(),
                                                             read_only=True)
    assert copy.deepcopy(one) is one and copy.copy(one) is one
    assert pickle.loads(pickle.dumps(one)) == one
    assert "input_schema={'type': 'object'" in repr(one)


def test_a_mapping_that_is_not_a_dict_is_copied_into_one() -> None:
    """The declared type is Mapping: any mapping is taken, as a plain dict."""
    tool = Tool("t", "", MappingProxyType(schema()))
    assert type(tool.input_schema) is dict and tool.input_schema == schema()


def test_bind_makes_integral_elements_of_integer_arrays_int() -> None:
    """3.0 and 1e2 reach the device as ints in arrays too, by items and prefixItems; what
    needs no change is returned as it is, and the caller's arguments are never changed."""
    tool = ARRAYS
    usual = {"data": [1, 2, 3]}
    assert tool.bind(usual) is usual
    given = {"data": [1, 2.0, Decimal("1E+2")], "pair": ["a", Decimal("4.0")],
             "matrix": [[1, 3.0], [2]], "points": [{"x": 1.0}], "step": Decimal("0.5")}
    bound = tool.bind(given)
    assert bound == {"data": [1, 2, 100], "pair": ["a", 4], "matrix": [[1, 3], [2]],
                     "points": [{"x": 1.0}], "step": Decimal("0.5")}
    assert [type(v) for v in bound["data"]] == [int, int, int]
    assert type(bound["matrix"][0][1]) is int and type(bound["points"][0]["x"]) is float
    assert bound["points"] is given["points"]  # nothing in it is an integer schema's
    assert given["data"] == [1, 2.0, Decimal("1E+2")] and type(given["data"][1]) is float


def test_a_declared_result_bound_is_checked_and_is_what_the_register_tools_can_answer() -> None:
    """result_bytes is None or a positive int; the register tools declare the size of their
    largest result, which is exactly what their handlers can answer."""
    assert Tool("t", "", schema()).result_bytes is None
    for bad in (0, -1, 2.5, "22", True):
        with pytest.raises(ValueError, match="result_bytes must be None or a positive int"):
            Tool("t", "", schema(), result_bytes=bad)  # type: ignore[arg-type]
    largest = len(msgspec.json.encode({"addr": 15, "data": 255}))
    assert WRITE_REGISTER.result_bytes == READ_REGISTER.result_bytes == largest == 22
    bounded = Tool("t", "", schema(), result_bytes=30)
    assert pickle.loads(pickle.dumps(bounded)).result_bytes == 30


def test_a_named_map_without_fields_declares_its_largest_result_and_writes_on_one_path() -> None:
    """The register tools of a map whose registers are named but have no fields declare the
    size of their largest result (the longest name's), as the default map's do, and a write
    or read there answers what a gate over it measures: the named register's result."""
    regmap = RegisterMap([Register("A", 0), Register("LONGEST_NAME", 1), Register(None, 2)],
                         name="named")
    tools = map_tools(regmap)
    largest = len(msgspec.json.encode({"addr": 1, "data": 255, "register": "LONGEST_NAME"}))
    assert tools["write_register"].result_bytes == tools["read_register"].result_bytes \
        == largest
    gate = Gate(RegisterFile(regmap=regmap))
    written = gate.handle('{"tool": "write_register", "arguments": {"addr": 1, "data": 255}}')
    assert written.result == {"addr": 1, "data": 255, "register": "LONGEST_NAME"}
    assert len(msgspec.json.encode(written.result)) == largest
    assert gate.handle('{"tool": "read_register", "arguments": {"addr": 2}}').result == {
        "addr": 2, "data": 0}
    assert gate.device.read(1) == 255


def test_a_result_is_measured_unless_its_bound_is_within_the_cap() -> None:
    """A gate skips measuring only results whose declared bound fits its output cap: a tool
    that breaks its own bound is not caught, a tool without one always is, and the register
    tools are measured (and refused) under a cap below their bound."""
    def big(device: Any, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"text": "x" * 100}

    liar = Tool("liar", "", schema(), handler=big, result_bytes=10)
    honest = Tool("honest", "", schema(), handler=big)
    gate = Gate(tools=ToolSet([liar, honest]), max_output_bytes=50)
    assert gate.handle('{"tool": "liar", "arguments": {"addr": 1}}').ok
    assert gate.handle('{"tool": "honest", "arguments": {"addr": 1}}').code == "output-too-large"
    small = Gate(max_output_bytes=21)
    assert small.handle('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}').ok
    refused = small.handle('{"tool": "write_register", "arguments": {"addr": 15, "data": 255}}')
    assert refused.code == "output-too-large"
    assert refused.message == ("write_register ran and its effect stands, but its result is 22 "
                               "bytes, over the cap of 21 bytes")


def test_the_default_maps_tools_are_pinned_word_for_word() -> None:
    """The default map's tools (the seed tools) as models see them: names, descriptions,
    schemas and hints, word for word (tests/data/default_map_tools.json, the golden copy)."""
    golden = json.loads((Path(__file__).parent / "data" / "default_map_tools.json").read_text())
    offered = map_tools(RegisterMap.default())
    assert [tool.definition() for tool in offered.values()] == golden
    assert [tool.definition() for tool in Gate().tools.values()] == golden
    assert [WRITE_REGISTER.definition(), READ_REGISTER.definition()] == golden


def test_the_default_tools_are_built_by_the_map_tool_builder() -> None:
    """write_register and read_register are the default map's tools, declared once: the map
    builder's handlers, with no hook where the default map has nothing to check."""
    assert map_tools(RegisterMap.default()) is REGISTER_TOOLS
    assert list(REGISTER_TOOLS) == ["write_register", "read_register"]
    for tool in (WRITE_REGISTER, READ_REGISTER):
        assert tool is REGISTER_TOOLS[tool.name]
        assert getattr(tool.handler, "__func__", None) is getattr(_MapTools, tool.name)
        assert (tool.rules, tool.changes, tool.repeat_risk) == (None, None, None)
    assert REGISTER_TOOLS.standalone_rules is None


def test_a_bare_map_is_worded_as_the_default_map_for_its_size() -> None:
    """A map of 8 unnamed read-write registers gets the default wording with its own size
    and range, no list of registers, a result bound of its widths, and no rule hooks."""
    tools = map_tools(RegisterMap([Register(None, addr) for addr in range(8)]))
    write, read = tools["write_register"], tools["read_register"]
    assert write.description == (
        "Write one byte to one of the device's 8 registers. addr is the register address "
        "(integer 0..7); data is the value (integer 0..255). Returns the address and the "
        "value the register holds after the write.")
    assert read.description == (
        "Read one of the device's 8 registers. addr is the register address (integer 0..7). "
        "Returns the address and its current value (0..255).")
    assert write.input_schema["properties"]["addr"] == {
        "type": "integer", "minimum": 0, "maximum": 7, "description": "Register address, 0..7."}
    assert write.result_bytes == read.result_bytes == len('{"addr":7,"data":255}') == 21
    assert (write.rules, write.changes, write.repeat_risk, read.rules) == (None,) * 4
    assert "read_registers" in tools  # only the default map keeps to the two tools


class _LowNibble(RegisterFile):
    """A register file that stores the low nibble of what is written (a stuck bus line)."""

    def write(self, addr: int, data: int) -> int:
        return super().write(addr, data & 0x0F)


def test_a_register_without_fields_that_holds_another_value_says_so_as_the_default_does() -> None:
    """One write handler: a named register without fields fails with the default map's
    words ("holds 15 after writing 255"), and the default device's message is unchanged."""
    named = RegisterMap([Register("CTRL", 0), Register("DATA", 1)], name="two")
    failed = Gate(_LowNibble(regmap=named)).handle(
        '{"tool": "write_register", "arguments": {"addr": 1, "data": 255}}')
    assert (failed.code, failed.message) == (
        "device-error", "the device failed: register DATA (0x01) holds 15 after writing 255")
    default = Gate(_LowNibble()).handle(
        '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}')
    assert default.message == "the device failed: register 3 holds 15 after writing 255"


class _LowNibbleTable(RegisterFile):
    """A register file whose table writes store the low nibble of each value (a stuck bus
    line under a typed value's burst)."""

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        return super().write_table(table, addr, [value & 0x0F for value in data])


def test_a_typed_value_that_holds_other_registers_shows_them_in_hex() -> None:
    """A typed value whose registers read back other than written fails naming both in hex,
    as a register's mismatch does ("holds [0x00, 0x08] after writing [0x00, 0xC8]"), never
    as decimal lists."""
    regmap = load_map(EXAMPLES / "thermostat.rdl")
    failed = Gate(_LowNibbleTable(regmap=regmap)).handle(
        '{"tool": "write_value", "arguments": {"name": "SETPOINT", "value": 20}}')
    assert (failed.code, failed.message) == (
        "device-error",
        "the device failed: value SETPOINT holds [0x00, 0x08] after writing [0x00, 0xC8]")
