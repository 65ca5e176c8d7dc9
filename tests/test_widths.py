"""Register widths from the map: 8, 16, 32 and 64 bits, fields and enums at every width,
addresses past 255, in process, through the gate, in the compiled check; and the backends
that keep 8-bit registers (regdev's serial protocol, the C firmware) refusing wider maps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run
from regdev import (
    Field,
    Gate,
    MapError,
    Register,
    RegisterFile,
    RegisterMap,
    RegisterRangeError,
    SerialDevice,
    map_tools,
)
from regdev.devices._rdl import load_map

#: A 16-bit device: a plain register, one with an enumerated field in its high byte, a 32-bit
#: and a 64-bit counter, at addresses past 255.
WIDE = RegisterMap([
    Register("SETPOINT", 0x100, width=16, description="Setpoint in 0.1 degC"),
    Register("CTRL", 0x101, width=16, fields=(
        Field("EN", 0, 0), Field("MODE", 8, 15, encode=(("IDLE", 0), ("RUN", 0xA5))))),
    Register("TOTAL", 0x102, width=32),
    Register("ENERGY", 0x103, width=64, access="r", reset=2**64 - 1),
], name="drive")


def handle(gate: Gate, tool: str, **arguments: Any) -> dict[str, Any]:
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


def test_a_map_of_wide_registers_reads_back_from_its_json_form() -> None:
    """width 16, 32, 64 in the JSON form, fields and enums in the high bits, round-tripped."""
    text = WIDE.to_json()
    first = json.loads(text)["registers"][0]
    assert (first["addr"], first["width"]) == (0x100, 16)
    again = RegisterMap.from_json(text)
    assert again == WIDE and again.digest() == WIDE.digest()
    assert [(r.width, r.top) for r in again] == [(16, 0xFFFF), (16, 0xFFFF), (32, 2**32 - 1),
                                                 (64, 2**64 - 1)]
    ctrl = again.named("CTRL")
    assert ctrl is not None and ctrl.reserved_mask == 0x00FE
    assert ctrl.decode(0xA501) == {"EN": 1, "MODE": "RUN"}


def test_the_default_map_and_its_json_form_are_unchanged() -> None:
    """No width or table key for an 8-bit holding register: old readers read the same file."""
    text = RegisterMap.default().to_json()
    assert '"width"' not in text and '"table"' not in text
    assert RegisterMap.default().widest == 8 and RegisterMap.default().top == 255


@pytest.mark.parametrize(("register", "why"), [
    ({"addr": 0, "width": 12}, "`registers[0].width`: the width must be one of 8, 16, 32, 64 "
                               "(bits), got 12"),
    ({"addr": 0, "width": 16, "reset": 65536}, "register at 0: reset must be an integer "
                                               "0..65535, got 65536"),
    ({"addr": 0, "width": 16, "fields": [{"name": "F", "lsb": 8, "msb": 16}]},
     "`registers[0].fields[0]`: bits [16:8] are not within 15..0 (msb >= lsb)"),
    ({"addr": 0, "table": "coil", "width": 8}, "`registers[0].width`: a coil is one bit: its "
                                               "width must be 1, got 8"),
    ({"addr": 0, "table": "input", "access": "rw"}, "the input table is read-only"),
])
def test_a_bad_width_is_refused_naming_the_place(register: dict[str, Any], why: str) -> None:
    """A width that is none of 8/16/32/64, a value or field past it: one MapError line."""
    text = json.dumps({"format": "regdev-map", "version": 1, "registers": [register]})
    with pytest.raises(MapError) as info:
        RegisterMap.from_json(text, "m.json")
    assert why in str(info.value)
    assert str(info.value).startswith("m.json: ")


def test_the_register_file_holds_values_as_wide_as_its_registers() -> None:
    """0..65535 in a 16-bit register, 65536 refused, nothing written; 64-bit reset kept."""
    device = RegisterFile(regmap=WIDE)
    assert device.write(0x100, 65535) == 65535
    with pytest.raises(RegisterRangeError, match=r"data 65536 is outside 0\.\.65535"):
        device.write(0x100, 65536)
    assert device.read(0x100) == 65535
    assert device.write(0x102, 2**32 - 1) == 2**32 - 1
    assert device.read(0x103) == 2**64 - 1
    assert device.write_masked(0x101, 0xFF00, 0xA500) == 0xA500
    assert device.identify() == "regdev register file, 4 x 16..64-bit (in process)"


def test_the_register_file_refuses_a_table_it_does_not_have() -> None:
    """In process: holding registers only; a coil map is one line, never a half device."""
    regmap = RegisterMap([Register("RELAY", 0, table="coil")])
    with pytest.raises(MapError, match=r"register RELAY \(coil 0x0000\) is in the coil table"):
        RegisterFile(regmap=regmap)


def test_the_gate_bounds_data_by_each_register_width() -> None:
    """The schema says 0..2**64-1 (the widest); a rule gives range-data for a narrower one."""
    gate = Gate(RegisterFile(regmap=WIDE))
    schema = map_tools(WIDE)["write_register"].input_schema
    assert schema["properties"]["data"]["maximum"] == 2**64 - 1
    assert handle(gate, "write_register", addr=0x100, data=65535) == {
        "ok": True, "tool": "write_register",
        "result": {"addr": 0x100, "data": 65535, "register": "SETPOINT"}}
    seen = handle(gate, "write_register", addr=0x100, data=65536)
    assert (seen["stage"], seen["code"]) == ("validate", "range-data")
    assert seen["message"] == ("data 65536 is outside 0..65535 (register SETPOINT (0x100) is "
                               "16 bits wide)")
    seen = handle(gate, "write_registers", addr=0x100, data=[1, 0xA501, 2**32])
    assert (seen["code"], seen["message"]) == (
        "range-data[]", "data[2] 4294967296 is outside 0..4294967295 (register TOTAL (0x102) "
                        "is 32 bits wide)")
    assert handle(gate, "write_register", addr=0x102, data=2**32 - 1)["ok"]
    assert handle(gate, "read_register", addr=0x103)["result"]["data"] == 2**64 - 1


def test_fields_and_enums_work_at_sixteen_bits() -> None:
    """write_field sets bits 15:8 by name; a value that is no enum member is field-value."""
    gate = Gate(RegisterFile(regmap=WIDE))
    seen = handle(gate, "write_field", field="CTRL.MODE", value="RUN")
    assert seen["ok"] and seen["result"]["data"] == 0xA500
    assert seen["result"]["fields"] == {"EN": 0, "MODE": "RUN"}
    seen = handle(gate, "write_register", addr=0x101, data=0x1200)
    assert (seen["code"], seen["message"]) == (
        "field-value", "data 0x1200 would set CTRL.MODE to 18, which is not one of its values: "
                       "IDLE=0, RUN=165")


def test_the_compiled_check_bounds_data_by_width(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """regdev compile --map: the standalone module gives the gate's range-data per register."""
    path = tmp_path / "wide.json"
    path.write_text(WIDE.to_json())
    status, out, _ = run(capsys, "compile", "--map", str(path))
    assert status == 0
    namespace: dict[str, Any] = {}
    exec(compile(out, "compiled", "exec"), namespace)
    check = namespace["check"]
    assert check({"tool": "write_register",
                  "arguments": {"addr": 0x100, "data": 65535}}) is None
    assert check({"tool": "write_register",
                  "arguments": {"addr": 0x100, "data": 65536}}) == "range-data"
    assert check({"tool": "write_register",
                  "arguments": {"addr": 0x103, "data": 2**64}}) == "range-data"


def test_systemrdl_regwidth_and_accesswidth(tmp_path: Path) -> None:
    """regwidth 16 with a 16-bit bus word: addresses count words; 32 bits over a 16-bit bus."""
    path = tmp_path / "w.rdl"
    path.write_text(
        "addrmap wide {\n  default regwidth = 16;\n  default accesswidth = 16;\n"
        "  reg { field { sw = rw; } V[15:0] = 0x1234; } A @ 0x0;\n"
        "  reg { field { sw = rw; } V[7:0]; field { sw = r; } S[15:12] = 3; } B @ 0x2;\n"
        "  reg { regwidth = 32; field { sw = rw; } V[31:0]; } C @ 0x4;\n};\n")
    regmap = load_map(path)
    assert [(r.name, r.addr, r.width, r.reset) for r in regmap] == [
        ("A", 0, 16, 0x1234), ("B", 1, 16, 0x3000), ("C", 2, 32, 0)]


def test_serial_and_the_c_firmware_keep_eight_bit_registers() -> None:
    """A SerialDevice with a 16-bit map is refused before any port is opened, naming why."""
    with pytest.raises(MapError, match=r"register SETPOINT \(0x100\) is 16 bits wide; regdev's "
                                       r"serial protocol carries 8-bit registers"):
        SerialDevice("loop://", regmap=WIDE)
    assert RegisterMap.default().serial_problem() is None


def test_the_shell_and_replay_drive_sixteen_bit_registers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """regdev shell --map: write SETPOINT 0xBEEF, 0x10000 refused; replay --map likewise."""
    import io  # noqa: PLC0415 - one test's stdin

    path = tmp_path / "wide.json"
    path.write_text(WIDE.to_json())
    monkeypatch.setattr("sys.stdin", io.StringIO(
        "write SETPOINT 0xBEEF\nwrite SETPOINT 0x10000\nread TOTAL\n"))
    status, out, _ = run(capsys, "shell", "--no-audit", "--map", str(path))
    assert status == 1  # the refused write (docs/cli.md)
    assert "accepted  write_register: register SETPOINT (0x100) = 0xbeef" in out
    assert ("refused   validate/range-data (retryable): data 65536 is outside 0..65535 "
            "(register SETPOINT (0x100) is 16 bits wide)") in out
    calls = tmp_path / "calls.jsonl"
    call = {"tool": "write_register", "arguments": {"addr": 0x102, "data": 4000000000}}
    calls.write_text(json.dumps({"raw": json.dumps(call), "expect": "ok"}) + "\n")
    status, out, _ = run(capsys, "replay", "--no-audit", "--map", str(path), str(calls),
                         "--json")
    assert status == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["ok"] and lines[0]["result"]["data"] == 4000000000
    assert {"addr": 0x102, "name": "TOTAL", "data": 4000000000} in lines[-1]["registers"]


def test_systemrdl_tables_in_regfiles(tmp_path: Path) -> None:
    """regdev_table on a regfile: its registers in that table, addresses from the regfile's."""
    path = tmp_path / "meter.rdl"
    path.write_text(
        'property regdev_table { type = string; component = reg | regfile; };\n'
        "addrmap meter {\n  default regwidth = 16;\n"
        "  reg { field { sw = rw; } V[15:0]; } SETPOINT @ 0x0;\n"
        '  regfile { regdev_table = "input";\n'
        "    reg { field { sw = r; } V[15:0]; } VOLTS @ 0x0;\n"
        "    reg { field { sw = r; } V[15:0]; } AMPS @ 0x2; } inputs @ 0x100;\n"
        '  regfile { regdev_table = "coil";\n'
        "    reg { regwidth = 8; field { sw = rw; } ON[0:0]; } RELAY[2] @ 0x0; } coils @ 0x200;\n"
        "};\n")
    regmap = load_map(path)
    assert [(r.name, r.table, r.addr, r.width, r.access) for r in regmap] == [
        ("SETPOINT", "holding", 0, 16, "rw"), ("VOLTS", "input", 0, 16, "r"),
        ("AMPS", "input", 1, 16, "r"), ("RELAY[0]", "coil", 0, 1, "rw"),
        ("RELAY[1]", "coil", 1, 1, "rw")]
    bad = tmp_path / "bad.rdl"
    bad.write_text(path.read_text().replace('"input"', '"inputs"'))
    with pytest.raises(MapError, match=r"regdev_table = 'inputs' \(tables are holding, input, "
                                       r"coil, discrete\) is not supported by regdev"):
        load_map(bad)


def test_the_c_firmware_refuses_a_wide_map(tmp_path: Path) -> None:
    """gen_regmap.py: a 16-bit map is one line naming the register, no header written."""
    import subprocess  # noqa: PLC0415 - the generator is a script
    import sys  # noqa: PLC0415

    from conftest import ROOT  # noqa: PLC0415

    path = tmp_path / "wide.json"
    path.write_text(WIDE.to_json())
    done = subprocess.run([sys.executable, str(ROOT / "firmware-sim" / "c" / "gen_regmap.py"),
                           "--map", str(path), "-o", str(tmp_path / "regmap.h")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert ("the C firmware cannot hold this map: register SETPOINT (0x100) is 16 bits wide"
            in done.stderr)
    assert not (tmp_path / "regmap.h").exists()
    path.write_text(RegisterMap([Register(None, 256)]).to_json())
    done = subprocess.run([sys.executable, str(ROOT / "firmware-sim" / "c" / "gen_regmap.py"),
                           "--map", str(path), "-o", str(tmp_path / "regmap.h")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "register 256 is at address 256; regdev's serial protocol carries addresses " \
           "0..255" in done.stderr


def test_the_compiled_check_knows_tables(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """regdev compile --map with tables: a write to an input register is read-only-register."""
    regmap = RegisterMap([Register("SP", 0, width=16), Register("V", 0, table="input"),
                          Register("C", 0, table="coil")])
    path = tmp_path / "t.json"
    path.write_text(regmap.to_json())
    status, out, _ = run(capsys, "compile", "--map", str(path))
    assert status == 0
    namespace: dict[str, Any] = {}
    exec(compile(out, "compiled", "exec"), namespace)
    check = namespace["check"]
    write = {"tool": "write_register", "arguments": {"addr": 0, "table": "input", "data": 1}}
    assert check(write) == "read-only-register"
    write["arguments"]["table"] = "coil"
    assert check(write) is None
    write["arguments"]["data"] = 2
    assert check(write) == "range-data"
    assert check({"tool": "write_register", "arguments": {"addr": 0, "data": 1}}) == \
        "missing-table"


def test_a_policy_guards_a_sixteen_bit_register_by_its_range() -> None:
    """{register = "SETPOINT", min = 1000}: 999 passes, 40000 asks for approval (refused
    without an approver), bounded by 0..65535, not 0..255."""
    from regdev import Policy  # noqa: PLC0415 - the subject

    policy = Policy.from_dict({"registers": {"protected": [
        {"register": "SETPOINT", "min": 1000}]}})
    gate = Gate(RegisterFile(regmap=WIDE), policy=policy)
    assert handle(gate, "write_register", addr=0x100, data=999)["ok"]
    seen = handle(gate, "write_register", addr=0x100, data=40000)
    assert (seen["ok"], seen["stage"]) == (False, "authorize"), seen


def test_regdev_map_shows_widths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """regdev map: the widths in the heading and each wider register's width on its row."""
    path = tmp_path / "wide.json"
    path.write_text(WIDE.to_json())
    status, out, _ = run(capsys, "map", str(path))
    assert status == 0
    assert out.splitlines()[1] == "4 registers of 16, 32, 64 bits"
    assert "0x100  SETPOINT  rw      0x00   Setpoint in 0.1 degC (16 bits)" in out


def test_the_register_file_moves_many_registers_in_one_hold() -> None:
    """read_table / write_table: 20 16-bit registers at once, all or nothing (past 16)."""
    regmap = RegisterMap([Register(f"R{n}", n, width=16) for n in range(20)]
                         + [Register("RO", 20, width=16, access="r")])
    device = RegisterFile(regmap=regmap)
    assert device.write_table("holding", 0, list(range(1000, 1020))) == list(range(1000, 1020))
    assert device.read_table("holding", 0, 20) == list(range(1000, 1020))
    with pytest.raises(RegisterRangeError, match="read-only"):
        device.write_table("holding", 0, [7] * 21)  # the last is read-only: nothing written
    assert device.read_table("holding", 0, 1) == [1000]
    with pytest.raises(Exception, match="no coil table"):
        device.read_table("coil", 0, 1)
