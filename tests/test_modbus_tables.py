"""Modbus's four tables: holding registers, input registers, coils and discrete inputs of a
map, 16-bit registers, requests at the protocol's limits; against a plain pymodbus server (its
own datastore, no regdev code on the device side) and regdev's simulator."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from modbus_servers import PlainTables
from regdev import Gate, MapError, Register, RegisterMap, RegisterRangeError
from regdev.devices._modbus import ModbusDevice, _runs
from regdev.devices._modbus_codec import (
    TCP,
    ClientConnection,
    ReadCoils,
    ReadDiscrete,
    ReadInput,
    ReadReply,
    WriteCoil,
    WriteCoils,
    WriteMultipleReply,
    WriteSingleReply,
    encode_reply,
    frame,
)

#: A meter: 16-bit holding registers, input registers, coils and a discrete input.
METER = RegisterMap([
    Register("SETPOINT", 0, width=16, description="Setpoint, 0.1 degC"),
    Register("LIMIT", 1, width=16),
    Register("VOLTS", 0, table="input", width=16),
    Register("AMPS", 1, table="input", width=16),
    Register("RELAY", 0, table="coil"),
    Register("LAMP", 1, table="coil"),
    Register("DOOR", 0, table="discrete"),
], name="meter")
PATIENT = 10.0


def call(gate: Gate, tool: str, **arguments: Any) -> dict[str, Any]:
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


@pytest.fixture
def plain() -> Iterator[tuple[PlainTables, ModbusDevice]]:
    with PlainTables(holding_value=0x1234, input_value=0xBEEF) as server, \
            ModbusDevice(server.url, timeout=PATIENT, regmap=METER) as device:
        yield server, device


def test_a_plain_pymodbus_server_is_read_in_every_table(
        plain: tuple[PlainTables, ModbusDevice]) -> None:
    """03, 04, 01, 02 through the gate: 16-bit values and bits, as pymodbus's datastore holds."""
    _, device = plain
    gate = Gate(device)
    assert call(gate, "read_register", addr=0, table="holding")["result"] == {
        "addr": 0, "data": 0x1234, "register": "SETPOINT"}
    assert call(gate, "read_register", addr=1, table="input")["result"] == {
        "table": "input", "addr": 1, "data": 0xBEEF, "register": "AMPS"}
    assert call(gate, "read_registers", addr=0, table="coil", count=2)["result"] == {
        "addr": 0, "table": "coil", "data": [0, 0]}
    assert call(gate, "read_register", addr=0, table="discrete")["result"]["data"] == 1
    assert device.snapshot() == [0x1234, 0x1234, 0xBEEF, 0xBEEF, 0, 0, 1]


def test_a_plain_pymodbus_server_is_written_in_holding_and_coils(
        plain: tuple[PlainTables, ModbusDevice]) -> None:
    """06, 16 with 16-bit values, 05 and 15 on coils: executed once each, read back equal."""
    server, device = plain
    gate = Gate(device)
    assert call(gate, "write_register", addr=0, table="holding", data=65535)["ok"]
    assert call(gate, "write_registers", addr=0, table="holding", data=[7, 40000])["ok"]
    assert call(gate, "write_register", addr=1, table="coil", data=1)["ok"]
    assert call(gate, "write_registers", addr=0, table="coil", data=[1, 0])["ok"]
    assert server.executed[(6, 0, (65535,))] == 1
    assert server.executed[(16, 0, (7, 40000))] == 1
    assert server.executed[(5, 1, (1,))] == 1
    assert server.executed[(15, 0, (1, 0))] == 1
    assert device.read_table("holding", 0, 2) == [7, 40000]
    assert device.read_table("coil", 0, 2) == [1, 0]


@pytest.mark.parametrize(("arguments", "code", "message"), [
    ({"addr": 0, "table": "input", "data": 1}, "read-only-register",
     "register VOLTS (input 0x0000) is read-only: the input table cannot be written (input "
     "registers and discrete inputs are the device's); read it with read_register"),
    ({"addr": 0, "table": "discrete", "data": 0}, "read-only-register",
     "register DOOR (discrete 0x0000) is read-only: the discrete table cannot be written "
     "(input registers and discrete inputs are the device's); read it with read_register"),
    ({"addr": 0, "table": "holding", "data": 65536}, "range-data",
     "data 65536 is outside 0..65535"),
    ({"addr": 0, "table": "coil", "data": 2}, "range-data",
     "data 2 is outside 0..1 (register RELAY (coil 0x0000) is 1 bit wide)"),
    ({"addr": 1, "table": "discrete", "data": 1}, "no-register",
     "addr 1 of the discrete table is not a register of this device; registers: SETPOINT=0x00 "
     "(16-bit), LIMIT=0x01 (16-bit), VOLTS=input 0x00 (16-bit) (read-only), AMPS=input 0x01 "
     "(16-bit) (read-only), RELAY=coil 0x00, LAMP=coil 0x01, DOOR=discrete 0x00 (read-only)"),
])
def test_the_gate_refuses_before_the_wire(plain: tuple[PlainTables, ModbusDevice],
                                          arguments: dict[str, Any], code: str,
                                          message: str) -> None:
    """A write to an input register or a discrete input, a value past 65535 or past a coil's
    bit, an address of no register: refused at validate, nothing sent to the server."""
    server, device = plain
    seen = call(Gate(device), "write_register", **arguments)
    assert (seen["ok"], seen["stage"], seen["code"], seen["message"]) == (
        False, "validate", code, message)
    assert server.writes() == 0


def test_the_device_refuses_a_read_only_table_too(
        plain: tuple[PlainTables, ModbusDevice]) -> None:
    """Defence in depth: write_table on input registers is refused, nothing sent."""
    server, device = plain
    with pytest.raises(Exception, match="the input table is read-only"):
        device.write_table("input", 0, [1])
    with pytest.raises(RegisterRangeError, match=r"data 65536 is outside 0\.\.65535"):
        device.write_table("holding", 0, [65536])
    assert server.writes() == 0


def test_the_tools_take_a_table_when_the_map_has_several() -> None:
    """write_register's schema: addr, a required table enum of the map's tables, data 0..65535."""
    schema = Gate(device=None, tools=None).tools["write_register"].input_schema
    assert "table" not in schema["properties"]  # the default map: unchanged
    from regdev import map_tools  # noqa: PLC0415 - here, where it is the subject

    schema = map_tools(METER)["write_register"].input_schema
    assert schema["required"] == ["addr", "table", "data"]
    assert schema["properties"]["table"]["enum"] == ["holding", "input", "coil", "discrete"]
    assert schema["properties"]["data"]["maximum"] == 65535


def test_a_map_modbus_cannot_carry_is_refused() -> None:
    """A 32-bit register: Modbus registers are 16 bits; one line naming it, nothing opened."""
    regmap = RegisterMap([Register("TOTAL", 0, width=32)])
    with pytest.raises(MapError, match=r"register TOTAL \(0x00\) is 32 bits wide; a Modbus "
                                       r"register is 16"):
        ModbusDevice("modbus+tcp://127.0.0.1:9", regmap=regmap)


def test_reads_are_split_at_the_protocols_limits_never_inside_a_value() -> None:
    """125 registers a read; a span marked as one value starts a new request."""
    assert _runs(list(range(300))) == [(0, 125), (125, 125), (250, 50)]
    assert _runs(list(range(130)), whole=[(123, 4)]) == [(0, 123), (123, 7)]
    assert _runs(list(range(2100)), 2000) == [(0, 2000), (2000, 100)]


def test_coil_requests_are_the_specifications_bytes() -> None:
    """05 sends 0xFF00 for 1; 15 packs the first coil in the low bit; 01/02/04 decode."""
    codec = ClientConnection(TCP, 1, 0)
    assert codec.send(WriteCoil(3, 1))[7:] == struct.pack(">BHH", 5, 3, 0xFF00)
    codec.receive_data(frame(TCP, 1, encode_reply(WriteSingleReply(3, 0xFF00), 5), 0))
    assert codec.next_event() == WriteSingleReply(3, 0xFF00)
    assert codec.send(WriteCoils(0, (1, 0, 1, 1, 0, 0, 0, 0, 1)))[7:] == bytes(
        [15, 0, 0, 0, 9, 2, 0b00001101, 0b00000001])
    codec.receive_data(frame(TCP, 1, encode_reply(WriteMultipleReply(0, 9), 15), 1))
    assert codec.next_event() == WriteMultipleReply(0, 9)
    for tid, (request, function) in enumerate(((ReadCoils(0, 10), 1), (ReadDiscrete(0, 10), 2)),
                                              start=2):
        codec.send(request)
        codec.receive_data(frame(TCP, 1, bytes([function, 2, 0b10000001, 0b10]), tid))
        assert codec.next_event() == ReadReply((1, 0, 0, 0, 0, 0, 0, 1, 0, 1))
    codec.send(ReadInput(0, 2))
    codec.receive_data(frame(TCP, 1, struct.pack(">BBHH", 4, 4, 0xBEEF, 1), 4))
    assert codec.next_event() == ReadReply((0xBEEF, 1))


@pytest.mark.timeout(90)
def test_the_simulator_serves_every_table_of_a_map(tmp_path: Path) -> None:
    """regdev firmware-sim --modbus-tcp --map: 04, 01, 02, 05 and 16-bit 06 as the map says."""
    path = tmp_path / "meter.json"
    path.write_text(METER.to_json())
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "firmware-sim" / "regdev_firmware_sim.py"),
         "--modbus-tcp", "127.0.0.1:0", "--map", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("modbus+tcp://"), process.stderr.read() if process.stderr else ""
        with ModbusDevice(url, timeout=PATIENT, regmap=METER) as device:
            gate = Gate(device)
            assert call(gate, "write_register", addr=0, table="holding", data=50000)["ok"]
            assert call(gate, "write_register", addr=1, table="coil", data=1)["ok"]
            assert device.snapshot() == [50000, 0, 0, 0, 0, 1, 0]
            assert device.read_table("discrete", 0, 1) == [0]
            with pytest.raises(RegisterRangeError):
                device.read_table("input", 0, 3)  # no register at input 2: nothing sent
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_the_shell_names_registers_of_every_table() -> None:
    """read VOLTS is read_register in the input table; write LAMP 1 a coil; read 0 holding."""
    from regdev.agents._shell import shell_call  # noqa: PLC0415 - the subject

    assert json.loads(shell_call(["read", "VOLTS"], METER)) == {
        "tool": "read_register", "arguments": {"addr": 0, "table": "input"}}
    assert json.loads(shell_call(["write", "LAMP", "1"], METER)) == {
        "tool": "write_register", "arguments": {"addr": 1, "table": "coil", "data": 1}}
    assert json.loads(shell_call(["read", "0"], METER)) == {
        "tool": "read_register", "arguments": {"addr": 0, "table": "holding"}}


def test_demo_and_replay_on_a_map_of_tables_over_a_plain_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """regdev demo --map meter --port: holding calls carry their table; replay reads a coil."""
    from conftest import run  # noqa: PLC0415 - the CLI, in this process

    path = tmp_path / "meter.json"
    path.write_text(METER.to_json())
    with PlainTables(holding_value=0x1234, input_value=0xBEEF) as server:
        status, out, _ = run(capsys, "demo", "--no-audit", "--map", str(path), "--port",
                             server.url)
        assert status == 0, out
        assert "accepted  write_registers" in out and "accepted  read_registers" in out
        calls = tmp_path / "calls.jsonl"
        lines = [{"raw": json.dumps({"tool": "read_register",
                                     "arguments": {"addr": 0, "table": "discrete"}}),
                  "expect": "ok"},
                 {"raw": json.dumps({"tool": "write_register",
                                     "arguments": {"addr": 1, "table": "input", "data": 5}}),
                  "expect": "read-only-register"}]
        calls.write_text("".join(json.dumps(line) + "\n" for line in lines))
        status, out, _ = run(capsys, "replay", "--no-audit", "--map", str(path), "--port",
                             server.url, str(calls), "--json")
        records = [json.loads(line) for line in out.splitlines()]
        assert status == 0 and all(record["expect_met"] for record in records[:-1])
        assert records[0]["result"] == {"table": "discrete", "addr": 0, "data": 1,
                                        "register": "DOOR"}


@pytest.mark.timeout(90)
def test_pymodbus_own_client_reads_the_simulators_tables(tmp_path: Path) -> None:
    """The field's oracle: pymodbus's client reads what the simulator serves in each table."""
    from pymodbus.client import ModbusTcpClient  # noqa: PLC0415 - the oracle, here only

    regmap = RegisterMap([Register("SP", 0, width=16, reset=0xCAFE),
                          Register("V", 3, table="input", width=16, access="r", reset=230),
                          Register("RELAY", 2, table="coil", reset=1),
                          Register("DOOR", 1, table="discrete", reset=1)])
    path = tmp_path / "m.json"
    path.write_text(regmap.to_json())
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "firmware-sim" / "regdev_firmware_sim.py"),
         "--modbus-tcp", "127.0.0.1:0", "--map", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        host_port = process.stdout.readline().strip().removeprefix("modbus+tcp://")
        host, _, port = host_port.partition("?")[0].rpartition(":")
        client = ModbusTcpClient(host, port=int(port), timeout=PATIENT)
        assert client.connect()
        try:
            assert client.read_holding_registers(0, count=1, device_id=1).registers == [0xCAFE]
            assert client.read_input_registers(3, count=1, device_id=1).registers == [230]
            assert client.read_coils(2, count=1, device_id=1).bits[0] is True
            assert client.read_discrete_inputs(1, count=1, device_id=1).bits[0] is True
            assert not client.write_coil(2, False, device_id=1).isError()
            assert client.read_coils(2, count=1, device_id=1).bits[0] is False
            assert client.read_input_registers(0, count=1, device_id=1).isError()  # no register
        finally:
            client.close()
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.timeout(90)
def test_every_table_over_rtu_framing() -> None:
    """RTU (over TCP): 04, 01, 02 replies framed by their byte count; 05 and 15 by size."""
    from regdev_modbus_sim import Background, ModbusModel  # noqa: PLC0415 - pymodbus's side

    with Background("rtu", model=ModbusModel(regmap=METER)) as server:
        url = server.url if server.url.startswith("modbus+") else f"modbus+rtu://{server.url}"
        with ModbusDevice(url, timeout=PATIENT, regmap=METER) as device:
            assert device.write_table("coil", 0, [1, 1]) == [1, 1]
            assert device.write_table("coil", 1, [0]) == [0]
            assert device.write_table("holding", 0, [0xFFFF, 0x8000]) == [0xFFFF, 0x8000]
            assert device.snapshot() == [0xFFFF, 0x8000, 0, 0, 1, 0, 0]


def test_an_identity_input_register_is_checked_on_connect() -> None:
    """A chip ID in an input register: read with 04 when a command connects; another value
    is a mismatch naming it."""
    regmap = RegisterMap([Register("SP", 0, width=16),
                          Register("ID", 0, table="input", width=16, reset=0xBEEF,
                                   identity=True)])
    with PlainTables(input_value=0xBEEF) as server, \
            ModbusDevice(server.url, timeout=PATIENT, regmap=regmap) as device:
        assert device.map_mismatch() is None
    with PlainTables(input_value=0x1234) as server, \
            ModbusDevice(server.url, timeout=PATIENT, regmap=regmap) as device:
        assert device.map_mismatch() == ("its identity register ID (input 0x0000) holds "
                                         "0x1234, where the map says 0xBEEF (another chip)")
