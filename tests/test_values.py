"""Typed values: declarations checked at load, the codec, read_value and write_value in units."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from pymodbus.client.mixin import ModbusClientMixin

from conftest import EXAMPLES
from regdev import Gate, RegisterFile, RegisterMap
from regdev.core._errors import MapError, PolicyError
from regdev.devices._rdl import load_map
from regdev.devices._regmap import Register
from regdev.devices._values import Value, ValueCodec
from support.strategies import typed_value_cases

THERMOSTAT = EXAMPLES / "thermostat.rdl"
DATATYPE = ModbusClientMixin.DATATYPE


@pytest.fixture(scope="module")
def thermostat() -> RegisterMap:
    """The example map with typed values, compiled from SystemRDL once."""
    return load_map(THERMOSTAT)


def handle(gate: Gate, raw: str) -> dict[str, Any]:
    observation: dict[str, Any] = gate.handle(raw).to_dict()
    return observation


def call(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


# --- reading and writing in units -----------------------------------------------------------


def test_read_value_gives_the_value_in_its_unit_with_its_raw_registers(
        thermostat: RegisterMap) -> None:
    """Each kind of value reads in its unit, with its first address and raw registers."""
    gate = Gate(RegisterFile(regmap=thermostat))
    seen = {name: handle(gate, call("read_value", name=name))["result"]
            for name in ("SETPOINT", "TEMP", "MODE", "W", "W_SF", "ROOM", "ENABLED")}
    assert seen["SETPOINT"] == {"name": "SETPOINT", "value": Decimal("20.0"), "unit": "degC",
                                "addr": 0, "raw": [0, 200]}
    assert seen["TEMP"] == {"name": "TEMP", "value": Decimal("21.5"), "unit": "degC",
                            "addr": 2, "raw": [0x41, 0xAC, 0, 0]}
    assert seen["MODE"]["value"] == "OFF"
    assert seen["W_SF"]["value"] == -1 and seen["W"]["value"] == Decimal("0.0")
    assert seen["ROOM"]["value"] == "" and seen["ENABLED"]["value"] is True
    text = gate.handle(call("read_value", name="SETPOINT")).to_json()
    assert '"value":20.0,"unit":"degC"' in text  # a JSON number, exact


def test_write_value_checks_the_range_exactly_and_the_resolution_with_its_own_code(
        thermostat: RegisterMap) -> None:
    """21.55 at a resolution of 0.1 names 21.5 or 21.6; the bounds are exact decimals."""
    gate = Gate(RegisterFile(regmap=thermostat))
    refused = handle(gate, '{"tool":"write_value","arguments":{"name":"SETPOINT",'
                           '"value":21.55}}')
    assert refused["code"] == "resolution" and refused["stage"] == "validate"
    assert "21.55 at a resolution of 0.1: 21.5 or 21.6" in refused["message"]
    over = handle(gate, '{"tool":"write_value","arguments":{"name":"SETPOINT",'
                        '"value":35.000000000000000000001}}')
    assert over["code"] == "range-value"
    assert over["message"] == ("SETPOINT takes 5..35 degC, got 35.000000000000000000001 "
                               "degC")
    for text, raw in (("35", [1, 94]), ("5.0", [0, 50]), ("3.5e1", [1, 94]), ("21.5", [0, 215])):
        done = handle(gate, '{"tool":"write_value","arguments":{"name":"SETPOINT",'
                            f'"value":{text}}}}}')
        assert done["ok"] and done["result"]["raw"] == raw, done
    assert handle(gate, call("read_registers", addr=0, count=2))["result"]["data"] == [0, 215]
    assert handle(gate, call("write_value", name="SETPOINT", value="warm"))["code"] == (
        "type-value")
    assert handle(gate, call("write_value", name="TEMP", value=1))["code"] == "range-name"


def test_enum_string_and_bool_values_are_written_by_name_and_text(
        thermostat: RegisterMap) -> None:
    """An enumerated name, text that fits (padded) and a bool convert; too long is refused."""
    gate = Gate(RegisterFile(regmap=thermostat))
    assert handle(gate, call("write_value", name="MODE", value="HEAT"))["result"]["raw"] == [1]
    assert handle(gate, call("write_value", name="ROOM", value="hal"))["result"] == {
        "name": "ROOM", "value": "hal", "addr": 11, "raw": [104, 97, 108, 0]}
    long = handle(gate, call("write_value", name="ROOM", value="kitchen"))
    assert long["code"] == "range-value" and "at most 4 bytes" in long["message"]
    assert handle(gate, call("write_value", name="ROOM", value="h\u00e9"))["code"] == (
        "range-value")
    assert handle(gate, call("write_value", name="ENABLED", value=False))["result"]["raw"] == [0]
    assert handle(gate, call("write_value", name="MODE", value="FAST"))["code"] == "range-value"


def test_a_scale_factor_value_converts_at_the_factor_the_device_holds(
        thermostat: RegisterMap) -> None:
    """value = raw x 10^sf: 1234.5 W at sf -1 is raw 12345; 1234.55 is refused, nothing sent."""
    device = RegisterFile(regmap=thermostat)
    gate = Gate(device)
    done = handle(gate, '{"tool":"write_value","arguments":{"name":"W","value":1234.5}}')
    assert done["result"] == {"name": "W", "value": Decimal("1234.5"), "unit": "W", "addr": 7,
                              "raw": [0x30, 0x39]}
    writes = device.write_count
    refused = handle(gate, '{"tool":"write_value","arguments":{"name":"W","value":1234.55}}')
    assert refused["code"] == "resolution" and refused["stage"] == "execute"
    assert "1234.55 at a resolution of 0.1: 1234.5 or 1234.6" in refused["message"]
    assert device.write_count == writes
    over = handle(gate, call("write_value", name="W", value=2001))
    assert over["code"] == "range-value" and over["message"] == "W takes 0..2000 W, got 2001 W"


class _Counting(RegisterFile):
    """A register file that counts the calls a tool makes of it."""

    def __init__(self, regmap: RegisterMap) -> None:
        super().__init__(regmap=regmap)
        self.calls: list[str] = []

    def read(self, addr: int) -> int:
        self.calls.append("read")
        return super().read(addr)

    def write(self, addr: int, data: int) -> int:
        self.calls.append("write")
        return super().write(addr, data)

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        self.calls.append(f"write_block {addr} {list(data)}")
        return super().write_block(addr, data)

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        self.calls.append(f"write_masked {addr}")
        return super().write_masked(addr, mask, data)

    def read_table(self, table: str, addr: int, count: int) -> list[int]:
        self.calls.append(f"read_table {table} {addr} {count}")
        return super().read_table(table, addr, count)

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        self.calls.append(f"write_table {table} {addr} {list(data)}")
        return super().write_table(table, addr, data)


def test_a_multi_register_value_is_one_block_write_and_one_block_read(
        thermostat: RegisterMap) -> None:
    """All of a value's registers move in one device call: no torn read, no half write."""
    device = _Counting(thermostat)
    gate = Gate(device)
    assert handle(gate, call("write_value", name="SETPOINT", value=22))["ok"]
    assert handle(gate, call("read_value", name="TEMP"))["ok"]
    assert handle(gate, call("read_value", name="W"))["ok"]  # W and W_SF: one block
    assert device.calls == ["write_table holding 0 [0, 220]", "read_table holding 2 4",
                            "read_table holding 7 4"]


def test_a_raw_write_into_a_ranged_values_registers_is_refused_naming_the_value(
        thermostat: RegisterMap) -> None:
    """write_register, write_registers (a block covering one of them, or all of them with
    data in range) and write_field on SETPOINT's or W's registers are value-register at
    validate, naming the value and its range; nothing reaches the device; registers of values
    without a range (MODE, ROOM) are written raw as before."""
    device = _Counting(thermostat)
    gate = Gate(device)
    refused = handle(gate, call("write_register", addr=0, data=99))
    assert (refused["stage"], refused["code"]) == ("validate", "value-register")
    assert refused["message"] == (
        "data is for register SETPOINT_HI (0x00), which holds part of value SETPOINT (int16, "
        "5..35 degC, registers 0x00..0x01): a raw write could put it outside its range; "
        "write it in units with write_value")
    whole = handle(gate, call("write_registers", addr=0, data=[0, 215]))  # 21.5 degC
    assert whole["code"] == "value-register" and "data[0]" in whole["message"]
    block = handle(gate, call("write_registers", addr=6, data=[1, 0]))  # MODE, then W_HI
    assert block["code"] == "value-register"
    assert block["message"].startswith("data[1] is for register W_HI (0x07), which holds "
                                       "part of value W (uint16, 0..2000 W, registers "
                                       "0x07..0x08)")
    field = handle(gate, call("write_field", field="SETPOINT_LO.v", value=1))
    assert field["code"] == "value-register"
    assert field["message"].startswith("SETPOINT_LO.v is a field of register SETPOINT_LO")
    assert device.calls == []
    assert handle(gate, call("write_register", addr=6, data=7))["ok"]  # MODE: no range
    assert handle(gate, call("write_registers", addr=0x0B, data=[72, 73]))["ok"]  # ROOM
    assert device.read_block(0, 2) == [0, 200]


def test_a_float_without_nan_and_a_plain_map_guard_their_values_registers() -> None:
    """On a map of plain 16-bit registers (no field, no gap: write_register has no other
    rule) an int16 with a range and a float32 that takes no NaN are guarded, and their
    neighbours, an int16 without a range and a float32 with allow_nan, are written raw."""
    regmap = RegisterMap([Register(None, a, width=16) for a in range(8)], values=[
        Value("T", 0, "int16", byte_order="big", min=Decimal(-40), max=Decimal(125)),
        Value("F", 1, "float32", word_order="big", byte_order="big"),
        Value("N", 3, "int16", byte_order="big"),
        Value("G", 4, "float32", word_order="big", byte_order="big", allow_nan=True)])
    gate = Gate(RegisterFile(regmap=regmap))
    for addr in (0, 1, 2):
        assert handle(gate, call("write_register", addr=addr, data=0x7FC0))["code"] == (
            "value-register"), addr
    refused = handle(gate, call("write_registers", addr=1, data=[0x7FC0, 0]))
    assert "value F (float32, finite numbers only, registers 0x01..0x02)" in refused["message"]
    for addr in (3, 4, 5, 6, 7):
        assert handle(gate, call("write_register", addr=addr, data=0x7FC0))["ok"], addr
    assert handle(gate, call("read_value", name="G"))["result"]["value"] == "NaN"
    assert handle(gate, call("read_value", name="T"))["result"]["value"] == 0


def test_a_float_holding_nan_reads_as_the_documented_value() -> None:
    """NaN and the infinities read as "NaN", "Infinity", "-Infinity"; a write of one is refused
    unless the map allows them."""
    regmap = RegisterMap([Register(None, a) for a in range(8)], values=[
        Value("F", 0, "float32", word_order="big"),
        Value("G", 4, "float32", word_order="big", allow_nan=True)])
    device = RegisterFile(regmap=regmap)
    gate = Gate(device)
    for pattern, shown in ((b"\x7f\xc0\x00\x00", "NaN"), (b"\x7f\x80\x00\x00", "Infinity"),
                           (b"\xff\x80\x00\x00", "-Infinity")):
        device.write_block(0, list(pattern))
        assert handle(gate, call("read_value", name="F"))["result"]["value"] == shown
    refused = handle(gate, call("write_value", name="F", value="NaN"))
    assert refused["code"] == "range-value" and "NaN" in refused["message"]
    assert handle(gate, call("write_value", name="G", value="-Infinity"))["result"]["raw"] == [
        0xFF, 0x80, 0, 0]


# --- declarations refused at load -----------------------------------------------------------


_REGISTERS = [{"addr": addr} for addr in range(8)]


@pytest.mark.parametrize(("value", "problem"), [
    ({"name": "V", "addr": 0, "type": "int32", "count": 2, "word_order": "big"},
     "value V: an int32 is 32 bits, wider than its 2 registers of 8 bits"),
    ({"name": "V", "addr": 0, "type": "int16", "scale": "0", "word_order": "big"},
     "value V: scale 0 makes every raw value 0"),
    ({"name": "V", "addr": 0, "type": "string", "count": 0},
     "value V: a string of length 0"),
    ({"name": "V", "addr": 0, "type": "int16", "byte_order": "big", "word_order": "little"},
     "value V: contradictory orders"),
    ({"name": "V", "addr": 0, "type": "float32"},
     "value V: a float32 over 4 registers needs a declared order"),
    ({"name": "V", "addr": 0, "type": "int16", "word_order": "big", "scale_factor": "U"},
     "value V: scale_factor `U` must name an int16 value"),
    ({"name": "V", "addr": 6, "type": "int32", "word_order": "big"},
     "value V: its 4 registers from 6 reach 8, which is not a register"),
])
def test_a_bad_value_is_refused_at_load_naming_its_file_and_line(
        tmp_path: Path, value: dict[str, Any], problem: str) -> None:
    """Each bad declaration is one line: the file, the value's line, the value, the problem."""
    others = [{"name": "U", "addr": 4, "type": "uint8"}]
    document = {"format": "regdev-map", "version": 1, "registers": _REGISTERS,
                "values": [*others, value]}
    path = tmp_path / "map.json"
    text = json.dumps(document, indent=2)
    path.write_text(text)
    line = text.splitlines().index('      "name": "V",') + 1
    with pytest.raises(MapError) as caught:
        load_map(path)
    assert str(caught.value).startswith(f"{path}:{line}: {problem}"), str(caught.value)


def test_overlapping_values_are_refused_at_load(tmp_path: Path) -> None:
    """Two values over one register: the second names the first and the register."""
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"format": "regdev-map", "version": 1, "registers": _REGISTERS,
                                "values": [{"name": "A", "addr": 0, "type": "uint16",
                                            "word_order": "big"},
                                           {"name": "B", "addr": 1, "type": "uint8"}]}))
    with pytest.raises(MapError, match=r"map.json:1: value B: it overlaps value A at register 1"):
        load_map(path)


@pytest.mark.parametrize(("change", "problem"), [
    (('regdev_scale = "0.1";', 'regdev_scale = "0";'),
     "regdev_scale 0 makes every raw value 0: give a nonzero scale"),
    (('regdev_word_order = "big";\n        regdev_scale', '\n        regdev_scale'),
     'an int16 over 2 registers needs a declared order: regdev_word_order (or '
     'regdev_byte_order) "big" or "little"'),
    (('regdev_min = "5"', 'regdev_min = "50"'), "regdev_min 50 is above regdev_max 35"),
])
def test_a_bad_value_in_systemrdl_names_the_rdl_file_line_and_property(
        tmp_path: Path, change: tuple[str, str], problem: str) -> None:
    """A value declared with regdev_* properties is checked where it is written, and the
    message names SystemRDL's property (regdev_word_order), not the JSON key."""
    text = THERMOSTAT.read_text()
    assert change[0] in text
    text = text.replace(*change)
    path = tmp_path / "bad.rdl"
    path.write_text(text)
    line = next(number for number, each in enumerate(text.splitlines(), 1)
                if 'regdev_value = "SETPOINT"' in each)
    with pytest.raises(MapError) as raised:
        load_map(path)
    assert re.fullmatch(rf"{re.escape(str(path))}:{line}:\d+: value SETPOINT: "
                        rf"{re.escape(problem)}", str(raised.value)), str(raised.value)


def test_values_round_trip_through_the_json_form(thermostat: RegisterMap) -> None:
    """The JSON form keeps every value exactly (decimals as strings); the default map's
    JSON has no values key."""
    again = RegisterMap.from_json(thermostat.to_json())
    assert again == thermostat and again.values == thermostat.values
    assert "values" not in RegisterMap.default().to_dict()
    assert not RegisterMap.default().values


# --- the codec against pymodbus's (the field's oracle) --------------------------------------


def _swap(register: int) -> int:
    return ((register & 0xFF) << 8) | (register >> 8)


def _pymodbus(value: Any, kind: str, word: str, byte: str) -> list[int]:
    """pymodbus's registers (16 bits) for ``value``, bytes swapped within each register for
    ``byte == "little"`` (pymodbus orders words; its bytes in a register are big-endian)."""
    data_type = DATATYPE[kind.upper()]
    registers = ModbusClientMixin.convert_to_registers(value, data_type, word_order=word)  # type: ignore[arg-type]
    return [_swap(r) for r in registers] if byte == "little" else registers


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    return a == b


@settings(max_examples=300, deadline=None)
@given(typed_value_cases())
def test_every_type_and_order_round_trips_against_pymodbus(case: tuple[Any, ...]) -> None:
    """16-bit registers: regdev's registers equal pymodbus's convert_to_registers (bytes
    swapped for byte order little), and each decodes the other's to the same value."""
    kind, value, word, byte = case
    count = len(_pymodbus(value, kind, "big", "big"))
    codec = ValueCodec(Value("V", 0, kind, count=count if kind == "string" else None,
                             word_order=word, byte_order=byte, encoding="utf-8"),
                       16, count, word, byte)
    theirs = _pymodbus(value, kind, word, byte)
    assert codec.to_registers(value) == theirs
    back = ModbusClientMixin.convert_from_registers(
        [_swap(r) for r in theirs] if byte == "little" else theirs, DATATYPE[kind.upper()],
        word_order=word)  # type: ignore[arg-type]
    assert _same(codec.from_registers(theirs), value) and _same(back, value)


@settings(max_examples=200, deadline=None)
@given(typed_value_cases())
def test_on_8_bit_registers_the_bytes_are_pymodbus_bytes_in_the_declared_order(
        case: tuple[Any, ...]) -> None:
    """8-bit registers: big order is pymodbus's bytes as they come; little is them reversed
    (pymodbus's word order little, each register's bytes swapped)."""
    kind, value, order, _ = case
    big = b"".join(r.to_bytes(2, "big") for r in _pymodbus(value, kind, "big", "big"))
    expected = list(big if order == "big" else b"".join(
        r.to_bytes(2, "big") for r in _pymodbus(value, kind, "little", "little")))
    # (pymodbus pads a string to whole 16-bit registers before it reverses them; a value
    # spans at most 16 registers)
    assume(kind != "string" or (order == "big" and len(big) <= 16))
    codec = ValueCodec(Value("V", 0, kind, count=len(big) if kind == "string" else None,
                             word_order=order, encoding="utf-8"), 8, len(big), order, order)
    assert codec.to_registers(value) == expected
    assert _same(codec.from_registers(expected), value)


@pytest.mark.parametrize("number", [-0.0, 1e-45, 1.1754942e-38, -3.4028234663852886e38, 21.5])
def test_float32_edges_keep_their_bits_through_engineering_units(number: float) -> None:
    """-0.0, subnormals, the extremes: raw -> units -> raw gives the same float32 bits."""
    codec = ValueCodec(Value("F", 0, "float32", word_order="big", byte_order="big"), 16, 2,
                       "big", "big")
    bits = struct.pack(">f", number)
    registers = [int.from_bytes(bits[:2], "big"), int.from_bytes(bits[2:], "big")]
    units = codec.engineering(codec.from_registers(registers))
    raw, problem = codec.raw_of(units)
    assert problem is None and struct.pack(">f", raw) == bits  # type: ignore[arg-type]
    assert math.copysign(1, float(units)) == math.copysign(1, number)  # type: ignore[arg-type]


# --- 16-bit registers over Modbus, against a plain pymodbus server ---------------------------


#: 16-bit holding registers, input registers and a coil, with typed values over them.
METER = RegisterMap([
    *(Register(f"H{addr}", addr, width=16) for addr in range(4)),
    *(Register(f"I{addr}", addr, table="input", width=16) for addr in range(2)),
    Register("RELAY", 0, table="coil"),
], name="meter", values=[
    Value("SETPOINT", 0, "float32", word_order="big", byte_order="big", unit="degC",
          min="-40", max="125"),
    Value("LIMIT", 2, "int32", word_order="little", byte_order="big", scale="0.01",
          unit="A"),
    Value("ENERGY", 0, "uint32", table="input", word_order="big", byte_order="big",
          scale="0.1", unit="kWh", access="r"),
    Value("RELAY_ON", 0, "bool", table="coil"),
])


def test_a_float32_over_two_16_bit_holding_registers_drives_a_plain_pymodbus_server() -> None:
    """One FC16 carries both registers of a value, as pymodbus's convert_to_registers lays them
    out; an input-table value reads in units, decoded as pymodbus decodes it."""
    from regdev.devices._modbus import ModbusDevice  # noqa: PLC0415
    from support.modbus_servers import PlainTables  # noqa: PLC0415 - the pymodbus server's helper

    with PlainTables(input_value=0xBEEF) as server, \
            ModbusDevice(server.url, timeout=10.0, regmap=METER) as device:
        gate = Gate(device)
        done = handle(gate, call("write_value", name="SETPOINT", value=21.5))
        assert done["result"]["raw"] == ModbusClientMixin.convert_to_registers(
            21.5, DATATYPE.FLOAT32) == [0x41AC, 0]
        assert server.executed[16, 0, (0x41AC, 0)] == 1
        limit = handle(gate, '{"tool":"write_value","arguments":{"name":"LIMIT","value":-12.34}}')
        assert limit["result"]["raw"] == ModbusClientMixin.convert_to_registers(
            -1234, DATATYPE.INT32, word_order="little")
        assert handle(gate, call("read_value", name="LIMIT"))["result"]["value"] == Decimal(
            "-12.34")
        energy = handle(gate, call("read_value", name="ENERGY"))["result"]
        assert energy["value"] == Decimal(ModbusClientMixin.convert_from_registers(  # type: ignore[arg-type]
            [0xBEEF, 0xBEEF], DATATYPE.UINT32)) * Decimal("0.1")
        relay = handle(gate, call("write_value", name="RELAY_ON", value=True))
        assert relay["result"]["raw"] == [1]
        assert handle(gate, call("read_value", name="SETPOINT"))["result"]["value"] == Decimal(
            "21.5")


# --- the policy, the shell, compile ----------------------------------------------------------


def test_a_policy_protects_a_typed_value_by_name(thermostat: RegisterMap) -> None:
    """protected = ["SETPOINT", "ROOM"] guards their registers: write_value, and a register
    write under ROOM (a value without a range, whose registers stay writable raw), need
    approval; the other values do not."""
    from regdev import Policy, RegisterPolicy  # noqa: PLC0415

    policy = Policy(registers=RegisterPolicy(protected=frozenset({"SETPOINT", "ROOM"})))
    device = RegisterFile(regmap=thermostat)
    gate = Gate(device, policy=policy)
    for raw in (call("write_value", name="SETPOINT", value=21), call(
            "write_value", name="ROOM", value="hall"), call("write_register", addr=0x0C,
                                                             data=65)):
        assert handle(gate, raw)["code"] == "approval-denied", raw
    assert device.read_block(0, 2) == [0, 200]
    assert device.read_block(0x0B, 4) == [0, 0, 0, 0]
    assert handle(gate, call("write_value", name="MODE", value="COOL"))["ok"]


def test_the_shell_reads_and_writes_a_value_in_its_unit(thermostat: RegisterMap) -> None:
    """`read W` prints the value in its unit with its raw registers; `write SETPOINT 21.55`
    passes the number on as written, and is refused for its resolution."""
    from regdev.agents._shell import describe, shell_call  # noqa: PLC0415

    gate = Gate(RegisterFile(regmap=thermostat))
    assert describe(gate.handle(shell_call(["write", "W", "1234.5"], thermostat))) == (
        "accepted  write_value: W = 1234.5 W (raw 0x30 0x39)")
    assert describe(gate.handle(shell_call(["read", "W"], thermostat))) == (
        "accepted  read_value: W = 1234.5 W (raw 0x30 0x39)")
    assert gate.handle(shell_call(["write", "SETPOINT", "21.55"], thermostat)).code == (
        "resolution")
    assert describe(gate.handle(shell_call(["write", "ROOM", "hall"], thermostat))) == (
        'accepted  write_value: ROOM = "hall" (raw 0x68 0x61 0x6c 0x6c)')


def test_compile_refuses_a_map_whose_value_checks_a_module_cannot_make(
        capsys: pytest.CaptureFixture[str]) -> None:
    """regdev compile --map with writable typed values: one line, exit 2, nothing written;
    the standalone rules leave read_value and write_value to the gate, never crash on them."""
    from conftest import run  # noqa: PLC0415
    from regdev.gate._maprules import map_changes, map_finding  # noqa: PLC0415
    from regdev.gate._maptools import rule_table  # noqa: PLC0415

    status, out, err = run(capsys, "compile", "--map", str(THERMOSTAT))
    assert status == 2 and not out and "typed values are checked by the gate" in err
    table = rule_table(load_map(THERMOSTAT))
    assert map_finding(table, "write_value", {"name": "SETPOINT", "value": 1}) is None
    assert map_changes(table, "write_value", {"name": "SETPOINT", "value": 1}) == (0, 1)


def test_an_approval_question_is_in_units(thermostat: RegisterMap) -> None:
    """A protected value's question says the value asked for and the value held, in units."""
    from regdev.gate._maptools import read_codec  # noqa: PLC0415
    from regdev.gate._policy import ApprovalRequest  # noqa: PLC0415
    from regdev.server._approval import describe  # noqa: PLC0415

    device = RegisterFile(regmap=thermostat)
    codec = thermostat.value("SETPOINT")
    assert codec is not None
    registers, sf = read_codec(device, thermostat, codec)
    now = codec.unit_text(codec.engineering(codec.from_registers(registers), sf))
    request = ApprovalRequest("default", "write_value",
                              {"name": "SETPOINT", "value": Decimal("21.5")}, 0)
    assert describe(request, 0, thermostat, now) == (
        "a caller in session default asks to write 21.5 degC to SETPOINT, which holds "
        "20.0 degC (protected registers 0x00..0x01). Approve this write?")


@pytest.mark.parametrize(("width", "word", "byte", "expected"), [
    (32, "big", "big", [0x40358000, 0x00000000]),
    (32, "little", "big", [0x00000000, 0x40358000]),
    (32, "big", "little", [0x00803540, 0x00000000]),
    (64, "big", "big", [0x4035800000000000]),
    (64, "big", "little", [0x0000000000803540]),
])
def test_wider_registers_hold_a_float64_in_the_declared_orders(
        width: int, word: str, byte: str, expected: list[int]) -> None:
    """32- and 64-bit registers from the map: 21.5 as IEEE 754 float64 (0x4035800000000000),
    words and bytes in the declared orders, read back to 21.5."""
    regmap = RegisterMap([Register(f"R{addr}", addr, width=width) for addr in range(2)],
                         values=[Value("F", 0, "float64", word_order=word, byte_order=byte)])
    codec = regmap.value("F")
    assert codec is not None and codec.count == 64 // width
    assert codec.to_registers(21.5) == expected
    assert codec.engineering(codec.from_registers(expected)) == Decimal("21.5")


def test_a_policy_range_in_units_needs_approval_only_within_it(thermostat: RegisterMap) -> None:
    """protected = [{value = "SETPOINT", min = 30}]: 30.5 degC asks (denied without an
    approver), 25 does not; a register write under the value is refused before the policy
    (SETPOINT has a range: its registers are written in units only)."""
    from regdev import Policy  # noqa: PLC0415

    policy = Policy.model_validate({"registers": {"protected": [
        {"value": "SETPOINT", "min": "30"}]}})
    gate = Gate(RegisterFile(regmap=thermostat), policy=policy)
    over = handle(gate, '{"tool":"write_value","arguments":{"name":"SETPOINT","value":30.5}}')
    assert over["code"] == "approval-denied"
    assert over["message"].startswith("value SETPOINT (values 30.. degC) is protected")
    assert handle(gate, call("write_value", name="SETPOINT", value=25))["ok"]
    assert handle(gate, call("write_register", addr=1, data=1))["code"] == "value-register"
    with pytest.raises(PolicyError, match="no typed value `SETPONT`"):
        Gate(RegisterFile(regmap=thermostat), policy=Policy.model_validate(
            {"registers": {"protected": [{"value": "SETPONT", "max": 1}]}}))
