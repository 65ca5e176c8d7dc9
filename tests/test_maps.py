"""Register maps: the model and its JSON form, SystemRDL, the device's behaviour for every
access kind (in process and over the serial line to the simulator), the map's tools and
rules, the policy's defaults, atomic field writes, and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import regdev_firmware_sim as sim
from conftest import EXAMPLES, KINDS, ROOT, run
from regdev import (
    REGISTER_TOOLS,
    ApprovalRequest,
    Device,
    DeviceRefused,
    Field,
    Gate,
    MapError,
    Policy,
    PolicyError,
    Register,
    RegisterFile,
    RegisterMap,
    RegisterPolicy,
    RegisterRangeError,
    SerialDevice,
    map_tools,
)
from regdev.agents._shell import shell_call
from regdev.cli._main import main
from regdev.devices import _protocol as wire
from regdev.devices._rdl import load_map
from support.firmware import CountingFirmware, sim_process, sim_thread
from support.strategies import registers_with_fields

SENSOR = EXAMPLES / "sensor.rdl"


@pytest.fixture(scope="module")
def sensor() -> RegisterMap:
    """The example map, compiled from SystemRDL once."""
    return load_map(SENSOR)


def handle(gate: Gate, tool: str, **arguments: Any) -> dict[str, Any]:
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


# --- the map and its JSON form ----------------------------------------------------------------


def test_the_example_map_reads_as_written(sensor: RegisterMap) -> None:
    """SystemRDL to the model: names, addresses (arrays unrolled, a gap), access, resets,
    enums, write-1-to-clear, clear-on-read and the protected property."""
    assert [(r.name, r.addr) for r in sensor] == [
        ("ID", 0), ("CTRL", 1), ("STATUS", 2), ("CALIB", 3), ("DATA[0]", 4), ("DATA[1]", 5),
        ("DATA[2]", 6), ("DATA[3]", 7), ("SAMPLE", 8), ("EVENTS", 10)]
    ident, ctrl, status = sensor.at(0), sensor.at(1), sensor.at(2)
    assert ident is not None and ctrl is not None and status is not None
    assert (ident.access, ident.reset, ident.writable_mask) == ("r", 0x5A, 0)
    assert ctrl.fields[1].encode == (("SLEEP", 0), ("ONESHOT", 1), ("CONTINUOUS", 2))
    assert (ctrl.reserved_mask, ctrl.writable_mask) == (0b1100_1000, 0b0011_0111)
    assert (status.reset, status.woclr_mask, status.reserved_mask) == (0x10, 0x70, 0x8E)
    assert sensor.at(10).rclr_mask == 0xFF  # type: ignore[union-attr]
    assert sensor.protected() == {3} and sensor.read_only() == {0, 8, 10}
    assert sensor.at(9) is None and sensor.find_field("CTRL.MODE") == (ctrl, ctrl.fields[1])


def test_json_form_round_trips(sensor: RegisterMap, tmp_path: Path) -> None:
    """to_json, then from_json (and a file through load_map), gives the same map."""
    text = sensor.to_json()
    assert RegisterMap.from_json(text) == sensor
    path = tmp_path / "sensor.json"
    path.write_text(text)
    assert load_map(path) == sensor
    document = json.loads(text)
    assert document["format"] == "regdev-map" and document["version"] == 1
    assert document["registers"][1]["reserved_mask"] == 0xC8


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["registers"][1].update(colour=1),
     "`registers[1].colour`: unknown key; allowed: "),
    (lambda d: d["registers"][1].update(woclr_mask=1),
     "`registers[1].woclr_mask`: is 1, but the fields make it 0"),
    (lambda d: d["registers"][1]["fields"][0].update(msb=8),
     "`registers[1].fields[0]`: bits [8:0] are not within 7..0 (msb >= lsb)"),
    (lambda d: d["registers"][1]["fields"][1].update(reset=5),
     "`registers[1].fields[1]`: reset 5 does not fit its 2 bit(s) (0..3)"),
    (lambda d: d["registers"][2].update(addr=1),
     "register STATUS (0x01): address 0x01 is taken by CTRL (0x01) too"),
    (lambda d: d["registers"][1]["fields"][0].update(lsb=1, msb=1),
     "register CTRL, field MODE: its bits 2:1 overlap field EN (bit 1)"),
    (lambda d: d.update(version=2), 'not a regdev map: expected "format": "regdev-map"'),
    (lambda d: d["registers"][0].update(addr=True), "`registers[0].addr`: must be an integer"),
])
def test_a_bad_json_map_is_one_line_naming_the_place(
        sensor: RegisterMap, change: Callable[[dict[str, Any]], None], message: str) -> None:
    """Every key is checked; the message names the file and the place."""
    document = json.loads(sensor.to_json())
    change(document)
    with pytest.raises(MapError) as info:
        RegisterMap.from_json(json.dumps(document), "m.json")
    assert str(info.value).startswith("m.json: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_key_given_twice_is_refused() -> None:
    """A repeated key would let the last one win silently."""
    text = '{"format": "regdev-map", "version": 1, "version": 1, "registers": []}'
    with pytest.raises(MapError, match='key "version" appears twice'):
        RegisterMap.from_json(text, "m.json")


def test_the_default_map_is_todays_device() -> None:
    """16 unnamed read-write registers, reset 0, and the two seed tools unchanged."""
    default = RegisterMap.default()
    assert [r.addr for r in default] == list(range(16)) and default.is_default
    assert all(r.name is None and r.reset == 0 and r.writable_mask == 0xFF for r in default)
    assert map_tools(default) is REGISTER_TOOLS
    assert Gate().tools is REGISTER_TOOLS and RegisterFile().regmap is default


# --- SystemRDL errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("addrmap a {\n  reg { field {sw=rw} F[7:0]; } R @ 0;\n};\n",
     "x.rdl:2:21: missing ';' at '}'"),
    ("addrmap a {\n  reg { regwidth = 128; field {} F[127:0]; } R @ 0;\n};\n",
     "x.rdl:2:9: register R: regwidth 128 (regdev registers are 8, 16, 32 or 64 bits) is not "
     "supported by regdev"),
    ("addrmap a {\n  default regwidth = 8;\n  reg { field {sw=rw; counter;} F[7:0]; } R @ 0;\n};\n",
     "x.rdl:3:23: field R.F: counter (counters) is not supported by regdev"),
    ("addrmap a {\n  default regwidth = 8;\n  reg { field {onwrite = woset;} F[7:0]; } R @ 0;\n"
     "};\n", "x.rdl:3:16: field R.F: onwrite = woset is not supported by regdev"),
    ("addrmap a {\n  default regwidth = 8;\n  regfile { reg { field {} F[7:0]; } R @ 0; } B @ 0;"
     "\n};\n", "x.rdl:3:47: regfile B (regdev maps are one addrmap of registers) is not "
               "supported by regdev"),
    ("addrmap a {\n  default regwidth = 8;\n  reg { regdev_protected = true; field {} F[7:0]; } "
     "R @ 0;\n};\n", "x.rdl:3:9: Unrecognized property 'regdev_protected' (declare it first: "
                     "property regdev_protected { type = boolean; component = reg; };)"),
])
def test_systemrdl_errors_are_one_line_with_file_and_line(tmp_path: Path, text: str,
                                                          message: str,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The compiler's first error, or the construct regdev refuses, with file:line:column."""
    monkeypatch.chdir(tmp_path)
    Path("x.rdl").write_text(text)
    with pytest.raises(MapError) as info:
        load_map("x.rdl")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_without_systemrdl_compiler_the_message_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rdl extra is imported only to read SystemRDL; its absence is one line."""
    monkeypatch.setitem(sys.modules, "systemrdl", None)  # `import systemrdl` raises
    with pytest.raises(MapError, match=r"needs the systemrdl-compiler package: .*\[rdl\]"):
        load_map(SENSOR)


# --- the device: every access kind ----------------------------------------------------------



class Kinds:
    """The access kinds, checked the same way on any device with the map KINDS."""

    def __init__(self, device: Device, hardware: Callable[[int, int], object]) -> None:
        self.device = device
        self.hardware = hardware  # sets bits as the hardware would

    def check_all(self) -> None:
        device = self.device
        # reset values, and what a read shows (reserved and write-only bits read 0)
        assert device.snapshot() == [0x5A, 0xC4, 0x00, 0x00]
        # a read-only register is refused by the device itself
        with pytest.raises((RegisterRangeError, DeviceRefused)):
            device.write(0, 0x01)
        assert device.read(0) == 0x5A
        # reserved bit 3 set: refused, nothing written
        with pytest.raises((RegisterRangeError, DeviceRefused)):
            device.write(1, 0x08 | 0x01)
        assert device.read(1) == 0xC4
        # rw bits stored, read-only RDY kept, write-only W stored but read 0, ERR written 0 kept
        assert device.write(1, 0x33) == 0xC7
        # write 1 to clear: ERR bit 6 cleared, bit 7 kept
        assert device.write(1, 0x43) == 0x87
        # a masked write changes only its bits
        assert device.write_masked(1, 0x03, 0x01) == 0x85
        # clear on read: the hardware counts, a read returns the count and clears it
        self.hardware(2, 0x05)
        assert device.snapshot()[2] == 0x05  # a dump does not clear
        assert device.read(2) == 0x05 and device.read(2) == 0x00
        # a block write is all or nothing: a read-only register in it writes nothing
        with pytest.raises((RegisterRangeError, DeviceRefused)):
            device.write_block(2, [0, 7])
        assert device.read(3) == 0x00
        assert device.write_block(3, [0x42]) == [0x42]
        assert device.read_block(0, 4) == [0x5A, 0x85, 0x00, 0x42]
        device.reset()
        assert device.snapshot() == [0x5A, 0xC4, 0x00, 0x00]


def test_every_access_kind_in_process() -> None:
    """The register file honours the map."""
    registers = RegisterFile(regmap=KINDS)
    Kinds(registers, registers.hardware_set).check_all()


@contextmanager
def kinds_over_serial() -> Iterator[tuple[SerialDevice, RegisterFile]]:
    registers = RegisterFile(regmap=KINDS)
    with sim_thread(sim.Firmware(registers)) as url, \
            SerialDevice(url, timeout=2, regmap=KINDS) as device:
        yield device, registers


@pytest.mark.timeout(60)
def test_every_access_kind_over_the_serial_line() -> None:
    """The same, through the wire protocol to the simulator (e DATA for a refusal)."""
    with kinds_over_serial() as (device, registers):
        Kinds(device, registers.hardware_set).check_all()


@pytest.mark.timeout(60)
def test_the_simulator_serving_a_bridge_map_is_no_bridge(sensor: RegisterMap) -> None:
    """A map with a bus served by the Python simulator (which says its reset epoch, as the
    bridge never does): not a bridge, so a snapshot shows the clear-on-read register's value
    without clearing it, and a reset leaves nothing."""
    bused = json.loads(sensor.to_json())
    bused["bus"] = {"kind": "i2c", "address": 0x48}
    regmap = RegisterMap.from_json(json.dumps(bused))
    registers = RegisterFile(regmap=regmap)
    registers.hardware_set(0x0A, 0x07)  # EVENTS.COUNT, clear-on-read
    with sim_thread(sim.Firmware(registers)) as url, \
            SerialDevice(url, timeout=2, regmap=regmap) as device:
        assert (device.is_bridge(), device.reset_leaves()) == (False, None)
        assert device.snapshot()[-1] == 0x07
        assert registers.snapshot()[-1] == 0x07  # not cleared


@pytest.mark.timeout(60)
def test_the_simulator_script_serves_a_json_map(sensor: RegisterMap, tmp_path: Path) -> None:
    """`python firmware-sim/regdev_firmware_sim.py --map sensor.json` (standard library)."""
    path = tmp_path / "sensor.json"
    path.write_text(sensor.to_json())
    with sim_process("--tcp", "127.0.0.1:0", "--map", str(path)) as (port, _), \
            SerialDevice(port, timeout=2, regmap=sensor) as device:
        assert device.read(0) == 0x5A and device.read(2) == 0x10
        assert device.write_masked(1, 0x06, 0x04) == 0x04
        assert device.snapshot() == [0x5A, 0x04, 0x10, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.timeout(60)
def test_regdev_firmware_sim_reads_systemrdl(sensor: RegisterMap) -> None:
    """`regdev firmware-sim --map examples/sensor.rdl` compiles the map and serves it."""
    regdev = str(Path(sys.executable).with_name("regdev"))
    process = subprocess.Popen([regdev, "firmware-sim", "--tcp", "127.0.0.1:0", "--map",
                                str(SENSOR)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        with SerialDevice(port, timeout=2, regmap=sensor) as device:
            assert device.read_block(0, 3) == [0x5A, 0x00, 0x10]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.timeout(60)
def test_the_example_replay_over_the_serial_line_matches_in_process(
        capsys: pytest.CaptureFixture[str], sensor: RegisterMap, tmp_path: Path) -> None:
    """examples/sensor-calls.jsonl against the simulator serving the example map: every
    expectation met, and the same registers after as in process."""
    path = tmp_path / "sensor.json"
    path.write_text(sensor.to_json())
    calls = str(EXAMPLES / "sensor-calls.jsonl")
    with sim_process("--tcp", "127.0.0.1:0", "--map", str(path)) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--map", str(path), calls)
    assert (status, err) == (0, "")
    over_serial = [json.loads(line) for line in out.splitlines()]
    status, out, _ = run(capsys, "replay", "--no-audit", "--json", "--map", str(SENSOR), calls)
    assert over_serial == [json.loads(line) for line in out.splitlines()]
    assert all(line["expect_met"] for line in over_serial[:-1])


def _refused_by_the_script(path: Path) -> subprocess.CompletedProcess[str]:
    """The simulator script alone on ``--map path``: it must exit 2 with nothing on stdout."""
    done = subprocess.run([sys.executable, str(ROOT / "firmware-sim" / "regdev_firmware_sim.py"),
                           "--tcp", "127.0.0.1:0", "--map", str(path)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    return done


def test_a_bad_map_for_the_simulator_is_one_line(tmp_path: Path) -> None:
    """The script alone: exit 2 and the map's error, nothing served."""
    path = tmp_path / "bad.json"
    path.write_text('{"format": "regdev-map", "version": 1, "registers": [{"addr": -1}]}')
    done = _refused_by_the_script(path)
    assert done.stderr == ("regdev_firmware_sim.py: error: "
                           f"{path}: `registers[0].addr`: must be an integer 0..4294967295\n")


@pytest.mark.parametrize(("register", "why"), [
    ('{"addr": 300}', "register 300 is at address 300; regdev's serial protocol carries "
                      "addresses 0..255 (one byte on the wire)"),
    ('{"addr": 0, "width": 16}', "register 0 is 16 bits wide; regdev's serial protocol "
                                 "carries 8-bit registers (one byte each on the wire)"),
    ('{"addr": 0, "table": "coil"}', "register coil 0 is in the coil table; regdev's serial "
                                     "protocol carries holding registers only (use Modbus)"),
])
def test_the_serial_simulator_refuses_a_map_its_protocol_cannot_carry(
        tmp_path: Path, register: str, why: str) -> None:
    """A map of wider registers, another table or addresses past 255: exit 2, one line why."""
    path = tmp_path / "wide.json"
    path.write_text('{"format": "regdev-map", "version": 1, "registers": [' + register + "]}")
    done = _refused_by_the_script(path)
    assert done.stderr == ("regdev_firmware_sim.py: error: the map cannot be served on "
                           f"regdev's serial protocol: {why} (serve it with --modbus-tcp or "
                           "--modbus-rtu)\n")


@pytest.mark.parametrize("name", ["sensor.rdl", "sensor.RDL"])
def test_the_simulator_script_tells_how_to_get_the_json_form_of_an_rdl_map(
        tmp_path: Path, name: str) -> None:
    """The script alone, given SystemRDL: exit 2, one line saying how to get the compiled
    JSON form (or to serve it with regdev firmware-sim), never Python's JSON error."""
    path = tmp_path / name
    path.write_bytes(SENSOR.read_bytes())
    done = _refused_by_the_script(path)
    assert done.stderr == (
        f"regdev_firmware_sim.py: error: {path} is SystemRDL: run as a script, the simulator "
        f"reads a map only in its compiled JSON form; make it with `regdev map {path} --json "
        f"-o {path.with_suffix('.json')}`, or serve the map with `regdev firmware-sim --map "
        f"{path}`\n")


@pytest.mark.parametrize(("text", "place"), [
    ('{"format": "regdev-map"}\n{"more": 1}\n', "line 2, column 1"),
    ("addrmap a {};\n", "line 1, column 1"),
    ("", "line 1, column 1"),
])
def test_the_simulator_script_names_where_a_map_is_not_json(
        tmp_path: Path, text: str, place: str) -> None:
    """A --map that is not JSON: its place in regdev's words, and how the JSON form is made."""
    path = tmp_path / "map.txt"
    path.write_text(text)
    done = _refused_by_the_script(path)
    assert done.stderr == (
        f"regdev_firmware_sim.py: error: {path}: not a map in the compiled JSON form (not "
        f"valid JSON at {place}); the simulator run as a script reads a map in its compiled "
        "JSON form, made from SystemRDL by `regdev map FILE.rdl --json -o FILE.json`\n")


def test_the_simulator_help_says_what_map_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """regdev firmware-sim --help: --map takes SystemRDL or the JSON form (the script alone,
    the JSON form)."""
    assert main(["firmware-sim", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert ("regdev firmware-sim reads SystemRDL (.rdl) or its compiled JSON form; this file "
            "run as a script reads the JSON form alone (make it with regdev map FILE.rdl "
            "--json -o FILE.json)") in shown


def test_a_serial_read_of_a_clear_on_read_register_is_sent_once(sensor: RegisterMap) -> None:
    """A retried read would find the bits cleared: reads of EVENTS are never resent."""
    faults = sim.Faults({"drop": 1.0}, after=1, count=1)  # the read's reply, not the identify's
    registers = RegisterFile(regmap=sensor)
    registers.hardware_set(10, 3)
    with sim_thread(sim.Firmware(registers), faults) as url, \
            SerialDevice(url, timeout=0.3, retries=3, regmap=sensor) as device:
        with pytest.raises(Exception, match="clear-on-read bits, and its value is lost"):
            device.read(10)
        assert registers.snapshot()[9] == 0  # it ran once, and cleared the count
        assert device.read(0) == 0x5A  # an ordinary read after it


class WithoutExtension(sim.Firmware):
    """A device that does not implement the block and masked-write frames: e SYNTAX."""

    def answer(self, request: Any) -> Any:
        if isinstance(request, (wire.ReadBlockRequest, wire.WriteBlockRequest,
                                wire.MaskedWriteRequest)):
            return wire.ErrorReply(request.seq, "SYNTAX")
        return super().answer(request)


@pytest.mark.timeout(60)
def test_a_device_without_the_extension_refuses_field_writes_for_good(
        sensor: RegisterMap) -> None:
    """e SYNTAX to an M frame is device-error (final: not executed), not a busy line."""
    firmware = WithoutExtension(RegisterFile(regmap=sensor))
    with sim_thread(firmware) as url, SerialDevice(url, timeout=2, regmap=sensor) as device:
        seen = handle(Gate(device), "write_field", field="CTRL.EN", value=1)
        assert (seen["code"], seen["retryable"]) == ("device-error", False)
        assert "does not take the M frame" in seen["message"]
        assert handle(Gate(device), "write_register", addr=1, data=1)["ok"]


# --- the tools, the rules and the policy ----------------------------------------------------


def test_each_rule_is_one_code_naming_register_and_field(sensor: RegisterMap) -> None:
    """The rules run after ranges, before authorize, one code each."""
    gate = Gate(RegisterFile(regmap=sensor))
    cases = [
        (("write_register", {"addr": 9, "data": 1}), "no-register",
         "addr 9 is not a register of this device; registers: ID=0x00 (read-only), CTRL=0x01"),
        (("read_registers", {"addr": 8, "count": 3}), "no-register",
         "the block of 3 registers from addr 8 reaches 9, which is not a register"),
        (("write_field", {"field": "STATUS.READY", "value": 0}), "range-field",
         'field "STATUS.READY" is not one of the 11 allowed; closest: "STATUS.POR", '
         '"STATUS.CRC", "STATUS.OVF"; the others: "CTRL.EN", "CTRL.MODE", "CTRL.RATE", '
         '"CALIB.OFFSET", "DATA[0].VALUE", "DATA[1].VALUE", "DATA[2].VALUE", "DATA[3].VALUE"'),
        (("write_register", {"addr": 2, "data": 0x80}), "reserved-bits",
         "data 0x80 sets reserved bit(s) 0x80 of register STATUS (0x02); send them as 0"),
        (("write_field", {"field": "CTRL.RATE", "value": "HZ2"}), "field-value",
         "CTRL.RATE takes one of HZ1=0, HZ4=1, HZ16=2, HZ64=3 (by name or number), got \"HZ2\""),
        (("write_field", {"field": "CALIB.OFFSET", "value": 256}), "range-value",
         "value 256 is outside 0..255"),
        (("write_register", {"addr": 1, "data": 0x06}), "field-value",
         "data 0x06 would set CTRL.MODE to 3, which is not one of its values: SLEEP=0, "
         "ONESHOT=1, CONTINUOUS=2"),
    ]
    for (tool, arguments), code, message in cases:
        seen = handle(gate, tool, **arguments)
        assert (seen["code"], seen["stage"]) == (code, "validate"), seen
        assert seen["message"].startswith(message), seen["message"]
    assert RegisterFile(regmap=sensor).snapshot() == gate.device.snapshot()  # nothing ran


def test_field_writes_by_name_and_number_change_only_their_field(sensor: RegisterMap) -> None:
    """write_field: enum name or number, one masked write; read_fields decodes."""
    gate = Gate(RegisterFile(regmap=sensor))
    assert handle(gate, "write_register", addr=1, data=0x21)["ok"]  # EN=1, RATE=HZ16
    result = handle(gate, "write_field", field="CTRL.MODE", value="ONESHOT")["result"]
    assert result == {"field": "CTRL.MODE", "value": "ONESHOT", "addr": 1, "data": 0x23,
                      "register": "CTRL",
                      "fields": {"EN": 1, "MODE": "ONESHOT", "RATE": "HZ16"}}
    assert handle(gate, "write_field", field="CTRL.MODE", value=2)["result"]["value"] == \
        "CONTINUOUS"
    assert handle(gate, "read_fields", register="CTRL")["result"]["fields"] == {
        "EN": 1, "MODE": "CONTINUOUS", "RATE": "HZ16"}
    cleared = handle(gate, "write_field", field="STATUS.POR", value=1)["result"]
    assert cleared["fields"]["POR"] == 0 and cleared["data"] == 0


def test_a_read_only_refusal_names_what_made_the_register_read_only(
        sensor: RegisterMap) -> None:
    """The map's read-only register is blamed on the map; one the policy adds, on the policy
    (never on a map that says nothing of it); so is every register with no map given."""
    policy = Policy(registers=RegisterPolicy(read_only=frozenset({5})))
    gate = Gate(RegisterFile(regmap=sensor), policy=policy)
    by_map = handle(gate, "write_register", addr=0, data=1)
    by_policy = handle(gate, "write_register", addr=5, data=1)
    assert (by_map["code"], by_map["message"]) == (
        "read-only-register",
        "register ID (0x00) is read-only in this device's register map; no call can write it")
    assert (by_policy["code"], by_policy["message"]) == (
        "read-only-register",
        f"register {sensor.label(5)} is read-only by the gate's policy; no call can write it")
    plain = Gate(policy=Policy(registers=RegisterPolicy(read_only=frozenset({0}))))
    assert handle(plain, "write_register", addr=0, data=1)["message"] == (
        "register 0 is read-only by the gate's policy; no call can write it")


def test_policy_defaults_come_from_the_map_and_the_file_overrides(
        sensor: RegisterMap, tmp_path: Path) -> None:
    """Read-only from access; protected from regdev_protected, unless the policy lists
    protected itself."""
    def verdict(policy: Policy | None, addr: int) -> str | None:
        gate = Gate(RegisterFile(regmap=sensor), policy=policy)
        return handle(gate, "write_register", addr=addr, data=1).get("code")

    assert verdict(None, 0) == "read-only-register"
    assert verdict(None, 3) == "approval-denied"
    assert verdict(Policy(registers=RegisterPolicy(protected=frozenset())), 3) is None
    assert verdict(Policy(registers=RegisterPolicy(protected=frozenset({4}))), 4) == \
        "approval-denied"
    assert verdict(Policy(registers=RegisterPolicy(read_only=frozenset({5}))), 5) == \
        "read-only-register"
    asked: list[ApprovalRequest] = []
    approving = Policy(approve=lambda request: asked.append(request) or True)
    assert verdict(approving, 3) is None and asked[0].addr == 3
    with pytest.raises(PolicyError, match="register 9 is not a register of the device's map"):
        Gate(RegisterFile(regmap=sensor),
             policy=Policy(registers=RegisterPolicy(read_only=frozenset({9}))))


def test_field_tools_are_offered_and_described_from_the_map(sensor: RegisterMap) -> None:
    """The tools name the registers and fields; write_field's enum is every writable
    REG.FIELD, and no read-only one."""
    tools = map_tools(sensor)
    assert {"write_register", "read_register", "read_registers", "write_field",
            "read_fields"} <= set(tools)
    schema = tools["write_field"].input_schema
    assert schema["properties"]["field"]["enum"] == [
        "CTRL.EN", "CTRL.MODE", "CTRL.RATE", "STATUS.POR", "STATUS.OVF", "STATUS.CRC",
        "CALIB.OFFSET", "DATA[0].VALUE", "DATA[1].VALUE", "DATA[2].VALUE", "DATA[3].VALUE"]
    described = tools["write_field"].description
    assert "CTRL.MODE (bits 2:1, SLEEP=0 ONESHOT=1 CONTINUOUS=2)" in described
    assert ("Read-only fields, which no call can write (read them with read_fields): "
            "ID.PART, STATUS.READY, SAMPLE.TEMP, EVENTS.COUNT.") in described
    assert "ID=0x00 (read-only): Device identification; CTRL=0x01" in (
        tools["write_register"].description)
    assert tools["read_register"].idempotent is False  # EVENTS clears on read


# --- atomic field writes ------------------------------------------------------------------------

#: One register of eight one-bit fields.
BITS = RegisterMap([Register("FLAGS", 0, fields=tuple(Field(f"F{i}", i, i) for i in range(8)))])


def set_fields_concurrently(set_field: Callable[[Gate, int, threading.Barrier], None],
                            rounds: int = 20) -> list[int]:
    """Eight threads set eight different fields of one register at once; the register's value
    after each round (all eight set: 0xFF)."""
    finals = []
    for _ in range(rounds):
        gate = Gate(RegisterFile(regmap=BITS))
        barrier = threading.Barrier(8)
        threads = [threading.Thread(target=set_field, args=(gate, bit, barrier))
                   for bit in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        finals.append(gate.device.read(0))
    return finals


def atomic_write_field(gate: Gate, bit: int, barrier: threading.Barrier) -> None:
    """The tool: write_field, one masked write under the device's lock."""
    barrier.wait()
    assert handle(gate, "write_field", field=f"FLAGS.F{bit}", value=1)["ok"]


def naive_read_then_write(gate: Gate, bit: int, barrier: threading.Barrier) -> None:
    """What a model does with write_register alone: read, set its bit, write back. The
    barrier between the read and the write lets every thread read before any writes, as
    can happen whenever two calls interleave."""
    old = handle(gate, "read_register", addr=0)["result"]["data"]
    barrier.wait()
    assert handle(gate, "write_register", addr=0, data=old | 1 << bit)["ok"]


def test_concurrent_field_writes_all_land() -> None:
    """With write_field every field is set, in every round."""
    assert set_fields_concurrently(atomic_write_field) == [0xFF] * 20


def test_the_same_check_fails_with_a_naive_read_then_write() -> None:
    """The check above is not vacuous: the naive helper loses every field but one."""
    finals = set_fields_concurrently(naive_read_then_write, rounds=3)
    assert all(bin(value).count("1") == 1 for value in finals), finals


@pytest.mark.timeout(60)
def test_concurrent_field_writes_over_the_serial_line_all_land() -> None:
    """Over serial each field write is one masked-write frame, done by the device."""
    registers = RegisterFile(regmap=BITS)
    with sim_thread(sim.Firmware(registers)) as url, \
            SerialDevice(url, timeout=2, regmap=BITS) as device:
        gate = Gate(device)
        barrier = threading.Barrier(8)
        threads = [threading.Thread(target=atomic_write_field, args=(gate, bit, barrier))
                   for bit in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert registers.read(0) == 0xFF


def test_a_backend_without_masked_writes_refuses_rather_than_read_and_write() -> None:
    """The Device default never reads and writes apart: device-error, nothing written."""

    class Plain(Device):
        def __init__(self) -> None:
            self._regmap = BITS
            self.value = 0

        def read(self, addr: int) -> int:
            return self.value

        def write(self, addr: int, data: int) -> int:
            self.value = data
            return data

        def reset(self) -> None:
            self.value = 0

        def snapshot(self) -> list[int]:
            return [self.value]

    device = Plain()
    seen = handle(Gate(device), "write_field", field="FLAGS.F1", value=1)
    assert seen["code"] == "device-error" and "atomically" in seen["message"]
    assert device.value == 0


# --- the command line ---------------------------------------------------------------------------


def test_regdev_map_prints_the_table_and_the_json(capsys: pytest.CaptureFixture[str],
                                                  sensor: RegisterMap) -> None:
    """The register table, and --json that reads back to the same map."""
    status, out, _ = run(capsys, "map", str(SENSOR))
    assert status == 0
    assert "0x01  CTRL     rw      0x00   Control: enable and conversion mode." in out
    assert ("      [2:1]   MODE       rw                     reset 0     SLEEP=0 ONESHOT=1 "
            "CONTINUOUS=2;  Conversion mode.") in out
    assert "      [7:6, 3] reserved (read as 0, write as 0)" in out
    assert "(protected: writes need approval)" in out
    status, out, _ = run(capsys, "map", str(SENSOR), "--json")
    assert status == 0 and RegisterMap.from_json(out) == sensor


def test_a_bad_map_on_the_command_line_is_exit_2_and_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every command with --map: one line, file:line, no traceback."""
    bad = tmp_path / "bad.rdl"
    bad.write_text("addrmap a {\n  reg { field {sw=rw} F[7:0]; } R @ 0;\n};\n")
    for command in (["map", str(bad)], ["call", "--no-audit", "--map", str(bad), "{}"],
                    ["tools", "--map", str(bad)], ["compile", "--map", str(bad)]):
        status, out, err = run(capsys, *command)
        assert (status, out) == (2, ""), command
        assert err == (f"regdev {command[0]}: error: {bad}:2:21: missing ';' at '}}'\n")


_WHAT_A_MAP_IS = ("; a register map is SystemRDL (a file named .rdl) or its compiled JSON "
                  "form (regdev map FILE.rdl --json)")


@pytest.mark.parametrize(("text", "why"), [
    ('{"format": "regdev-map"}\n{"more": 1}\n',
     "more text after the end of the JSON document, at byte 25"),
    ("addrmap a {};\n", "unexpected `a` at byte 0" + _WHAT_A_MAP_IS),
    ("", "the input is empty" + _WHAT_A_MAP_IS),
    ('{"format": "regdev-map", "registers": [', "the text ends at byte 39, before the JSON "
     "document does (a string, array or object is not closed, or a value is missing)"),
    (' \n {"format": "regdev-map", "format": "regdev-map"}',
     'key "format" appears twice in one object'),
    ("[1, 2,]", "a comma with no item after it before `]`, at byte 6"),
])
def test_a_map_that_is_not_json_is_said_in_regdevs_words(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, why: str) -> None:
    """A --map (or regdev map FILE) that is neither .rdl nor JSON: regdev's words for where
    the JSON breaks (never Python's "Extra data: line 2 column 1 (char 25)"), and what a map
    file is only when the text does not start like JSON (``{`` or ``[``); the same for every
    command that takes --map."""
    path = tmp_path / "map.txt"
    path.write_text(text)
    for command in (["map", str(path)], ["tools", "--map", str(path)],
                    ["firmware-sim", "--tcp", "127.0.0.1:0", "--map", str(path)]):
        status, out, err = run(capsys, *command)
        assert (status, out) == (2, ""), command
        assert err == f"regdev {command[0]}: error: {path}: not valid JSON: {why}\n"
        assert "char" not in err and "Expecting" not in err and "Extra data" not in err


def test_replay_of_the_example_map_meets_every_expectation(
        capsys: pytest.CaptureFixture[str]) -> None:
    """examples/sensor-calls.jsonl: every access kind and every rule, as expected."""
    status, out, _ = run(capsys, "replay", "--no-audit", "--map", str(SENSOR),
                         str(EXAMPLES / "sensor-calls.jsonl"), "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert all(line["expect_met"] for line in lines[:-1])
    codes = {line["code"] for line in lines[:-1]}
    assert {"no-register", "range-field", "reserved-bits", "field-value",
            "read-only-register", "approval-denied", "range-data[]"} <= codes
    assert [row["data"] for row in lines[-1]["registers"]] == [0x5A, 0x03, 0x00, 0, 1, 2, 3,
                                                             4, 0, 0]


def test_the_map_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """regdev demo --map examples/sensor.rdl: fields by name, retries, a final refusal."""
    status, out, _ = run(capsys, "demo", "--no-audit", "--map", str(SENSOR))
    assert status == 0
    assert "accepted  read_fields: register ID (0x00) = 0x5a PART=0x5a" in out
    assert ('refused   validate/field-value (retryable): CTRL.MODE takes one of SLEEP=0, '
            'ONESHOT=1, CONTINUOUS=2 (by name or number), got "UNKNOWN"') in out
    assert ("accepted  write_field: CTRL.MODE = ONESHOT; register CTRL (0x01) = 0x02 EN=0 "
            "MODE=ONESHOT RATE=HZ1") in out
    assert "refused   validate/reserved-bits (retryable)" in out
    assert "accepted  read_registers: registers 4..7 = 0x11 0x22 0x33 0x44" in out
    assert "loop stopped: rejected (read-only-register" in out
    assert "  0x01 CTRL     0x35  EN=1  MODE=CONTINUOUS  RATE=HZ64" in out
    assert "left out" not in out


#: A map of another chip (an SX1276-like radio): names, an enumerated field, no reserved bit,
#: a protected register the demo must not write.
RADIO = """\
property regdev_protected { type = boolean; component = reg; };
addrmap sx {
    default regwidth = 8; default sw = rw; default hw = r;
    reg { field { sw = r; hw = na; } Version[7:0] = 0x12; } RegVersion @ 0x42;
    reg { enum mode_e { SLEEP = 0; STDBY = 1; TX = 3; RX = 5; };
          field { encode = mode_e; } Mode[2:0] = 1; field { } LowFreq[7:3] = 0; } RegOpMode @ 0x01;
    reg { regdev_protected = true; field { } OutputPower[7:0] = 0x4F; } RegPaConfig @ 0x09;
    reg { field { } Frf[7:0] = 0x6C; } RegFrfMsb @ 0x06;
    reg { field { } Frf[7:0] = 0x80; } RegFrfMid @ 0x07;
};
"""


def test_the_demo_runs_on_any_map(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """regdev demo --map of another chip: made from the map (its identity register, an enum
    by name, a block), never writing the protected register; a step the map cannot show is
    left out with a line saying so; the run is as scripted (exit 0)."""
    radio = tmp_path / "radio.rdl"
    radio.write_text(RADIO)
    status, out, err = run(capsys, "demo", "--no-audit", "--map", str(radio))
    assert (status, err) == (0, "")
    assert ("left out: a reserved bit: the map has no register with reserved bits the demo "
            "may write") in out
    assert "accepted  read_fields: register RegVersion (0x42) = 0x12 Version=0x12" in out
    assert 'RegOpMode.Mode takes one of SLEEP=0, STDBY=1, TX=3, RX=5' in out
    assert "accepted  write_field: RegOpMode.Mode = SLEEP" in out
    assert "accepted  read_registers: registers 6..7 = 0x11 0x22" in out
    assert "loop stopped: rejected (read-only-register" in out
    assert "RegPaConfig" not in out.split("registers after the session:")[0].split(
        "tools:")[1]
    status, out, err = run(capsys, "demo", "--no-audit", "--json", "--map", str(radio))
    assert json.loads(out.splitlines()[-2])["as_scripted"] is True


@pytest.mark.parametrize("name", ["sensor.rdl", "thermostat.rdl", "bme280.rdl", "sx1276.rdl"])
def test_the_demo_runs_as_scripted_on_each_example_map(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    """regdev demo --map of each example map runs as scripted (exit 0): it writes no register
    of a typed value with a range (those take write_value; a raw write is refused
    value-register) nor a protected one."""
    status, out, err = run(capsys, "demo", "--no-audit", "--json", "--map", str(EXAMPLES / name))
    assert (status, err) == (0, "")
    assert json.loads(out.splitlines()[-2])["as_scripted"] is True
    assert "value-register" not in out



def test_tools_and_compile_take_the_map(capsys: pytest.CaptureFixture[str]) -> None:
    """regdev tools --map lists the map's tools in each format; compile compiles them."""
    for format_ in ("mcp", "openai", "anthropic"):
        status, out, _ = run(capsys, "tools", "--map", str(SENSOR), "--format", format_)
        assert status == 0
        names = [t.get("name") or t["function"]["name"] for t in json.loads(out)]
        assert "write_field" in names and "read_fields" in names, format_
    status, out, _ = run(capsys, "compile", "--map", str(SENSOR))
    namespace: dict[str, Any] = {}
    exec(compile(out, "compiled", "exec"), namespace)
    check = namespace["check"]
    assert check({"tool": "write_field", "arguments": {"field": "CTRL.EN", "value": 1}}) is None
    assert check({"tool": "write_field", "arguments": {"field": "X.Y", "value": 1}}) == \
        "range-field"


def test_the_shell_takes_names(capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """read STATUS, write CTRL.MODE ONESHOT, write CTRL 0x01, dump with names."""
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(
        "read STATUS\nwrite CTRL.MODE ONESHOT\nwrite CTRL.MODE FAST\nwrite DATA[1] 0x10\n"
        "read NOPE\ndump\n"))
    status, out, _ = run(capsys, "shell", "--no-audit", "--map", str(SENSOR))
    assert status == 1  # FAST and NOPE were refused (docs/cli.md)
    assert "accepted  read_fields: register STATUS (0x02) = 0x10 READY=0 POR=1" in out
    assert "accepted  write_field: CTRL.MODE = ONESHOT; register CTRL (0x01) = 0x02" in out
    assert "refused   validate/field-value (retryable): CTRL.MODE takes one of" in out
    assert "accepted  write_register: register DATA[1] (0x05) = 0x10 VALUE=0x10" in out
    assert "error: no register `NOPE`; registers: ID, CTRL, STATUS" in out
    assert "  0x05 DATA[1]  0x10  VALUE=0x10" in out


def test_shell_words_with_and_without_a_map(sensor: RegisterMap) -> None:
    """Numbers keep their meaning; names need a map."""
    assert json.loads(shell_call(["read", "2"], sensor)) == {
        "tool": "read_register", "arguments": {"addr": 2}}
    assert json.loads(shell_call(["write", "CTRL.RATE", "3"], sensor)) == {
        "tool": "write_field", "arguments": {"field": "CTRL.RATE", "value": 3}}
    with pytest.raises(ValueError, match="ADDR must be a number"):
        shell_call(["read", "STATUS"])


@pytest.mark.parametrize(("words", "message"), [
    (["read"], "usage: read REG"),
    (["write"], "usage: write REG DATA, or write REG.FIELD VALUE"),
    (["read", "ID.PART"], "read takes a register, not a field: `read ID` shows its fields"),
    (["read", "CTRL.EN"], "read takes a register, not a field: `read CTRL` shows its fields"),
])
def test_shell_usage_with_a_map_speaks_of_names(sensor: RegisterMap, words: list[str],
                                                 message: str) -> None:
    """With a map the usage names registers (REG), not addresses, and a field given to read
    points at its register, whose read shows the fields."""
    with pytest.raises(ValueError) as refused:
        shell_call(words, sensor)
    assert str(refused.value) == message


# --- the register's behaviour against a bit-by-bit reference ----------------------------------


class BitModel:
    """What each bit does, written bit by bit from the table in docs/maps.md (independently
    of Register.written and Register.read_effect)."""

    def __init__(self, register: Register) -> None:
        self.kind: list[tuple[str, str | None, str | None] | None] = [None] * 8  # None: reserved
        self.bits = [0] * 8
        for field in register.fields:
            for bit in range(field.lsb, field.msb + 1):
                self.kind[bit] = (field.access, field.onwrite, field.onread)
                self.bits[bit] = field.reset >> (bit - field.lsb) & 1

    def value(self, readable_only: bool = True) -> int:
        return sum(bit << i for i, (bit, kind) in enumerate(zip(self.bits, self.kind,
                                                                  strict=True))
                   if kind is not None and (kind[0] != "w" or not readable_only))

    def write(self, mask: int, data: int) -> bool:
        """False when refused (nothing written)."""
        if all(kind is None or kind[0] == "r" for kind in self.kind):
            return False
        if any(self.kind[i] is None and mask >> i & data >> i & 1 for i in range(8)):
            return False
        for i, kind in enumerate(self.kind):
            if kind is None or not mask >> i & 1 or kind[0] == "r":
                continue
            if kind[1] == "woclr":
                if data >> i & 1:
                    self.bits[i] = 0
            else:
                self.bits[i] = data >> i & 1
        return True

    def read(self) -> int:
        shown = self.value()
        for i, kind in enumerate(self.kind):
            if kind is not None and kind[2] == "rclr":
                self.bits[i] = 0
        return shown

    def hardware(self, bits: int) -> None:
        for i, kind in enumerate(self.kind):
            if kind is not None and bits >> i & 1:
                self.bits[i] = 1


operations = st.lists(st.tuples(st.sampled_from(["write", "masked", "read", "hardware"]),
                                st.integers(0, 255), st.integers(0, 255)), max_size=20)


@given(registers_with_fields(), operations)
def test_the_register_file_behaves_bit_by_bit_as_documented(
        register: Register, steps: list[tuple[str, int, int]]) -> None:
    """Any register of any fields: every write, masked write, read and hardware event gives
    what the bit-by-bit reference gives."""
    device = RegisterFile(regmap=RegisterMap([register]))
    model = BitModel(register)
    assert device.snapshot() == [model.value()]
    for kind, first, second in steps:
        if kind in ("write", "masked"):
            mask = 0xFF if kind == "write" else first
            accepted = model.write(mask, second)
            try:
                after = device.write_masked(0, mask, second)
            except RegisterRangeError:
                assert not accepted
            else:
                assert accepted and after == model.value()
        elif kind == "read":
            assert device.read(0) == model.read()
        else:
            device.hardware_set(0, first)
            model.hardware(first)
        assert device.snapshot() == [model.value()]


# --- block writes -----------------------------------------------------------------------------


def test_a_block_write_is_all_or_nothing_in_process(sensor: RegisterMap) -> None:
    """write_registers: every value checked first; one refusal writes nothing."""
    gate = Gate(RegisterFile(regmap=sensor))
    before = gate.device.snapshot()
    for data, code, message in (
            ([1, 2, 300, 4], "range-data[]", "data[2] 300 is outside 0..255"),
            ([0x21, 0x80], "reserved-bits", "data[1] 0x80 sets reserved bit(s) 0x80 of register "
                                           "STATUS (0x02)"),
            ([0x06], "field-value", "data[0] 0x06 would set CTRL.MODE to 3")):
        seen = handle(gate, "write_registers", addr=1, data=data)
        assert (seen["code"], seen["message"][:len(message)]) == (code, message)
    seen = handle(gate, "write_registers", addr=7, data=[1, 2, 3])
    assert seen["code"] == "no-register" and seen["message"].startswith(
        "the block of 3 registers from addr 7 reaches 9, which is not a register")
    assert handle(gate, "write_registers", addr=6, data=[1, 2, 3])["code"] == \
        "read-only-register"  # SAMPLE at 8
    assert gate.device.snapshot() == before
    result = handle(gate, "write_registers", addr=4, data=[9, 8, 7, 6])["result"]
    assert result == {"addr": 4, "data": [9, 8, 7, 6]}
    assert handle(gate, "write_registers", addr=1, data=[1, 0x10])["result"]["data"] == [1, 0]


@pytest.mark.timeout(60)
def test_a_block_write_over_the_serial_line_is_one_frame(sensor: RegisterMap) -> None:
    """Over serial, write_registers is one P frame and write_field one M frame."""
    firmware = CountingFirmware(RegisterFile(regmap=sensor))
    with sim_thread(firmware) as url, SerialDevice(url, timeout=2, regmap=sensor) as device:
        gate = Gate(device)
        assert handle(gate, "write_registers", addr=4, data=[1, 2, 3, 4])["ok"]
        assert handle(gate, "write_field", field="CTRL.EN", value=1)["ok"]
        assert handle(gate, "read_registers", addr=4, count=4)["result"]["data"] == [1, 2, 3, 4]
    assert (firmware.executed["P"], firmware.executed["M"], firmware.executed["G"]) == (1, 1, 1)
    assert firmware.executed["W"] == firmware.executed["R"] == 0
    assert firmware.registers.snapshot()[:5] == [0x5A, 0x01, 0x10, 0, 1]


# --- what a map's text may hold, and how a refusal quotes it --------------------------------


def test_a_json_map_is_decoded_as_strictly_as_a_tool_call() -> None:
    """The compiled JSON form is read by the gate's strict decoder: a lone surrogate escape
    in a description (no character, so no UTF-8 text for a tool's description) is refused in
    the gate's words, and an editor's byte-order mark is skipped as in a policy file."""
    with pytest.raises(MapError) as refused:
        RegisterMap.from_json('{"format": "regdev-map", "version": 1, "registers": [{"addr": '
                              '0, "name": "A", "description": "x\\ud800"}]}', "m.json")
    assert str(refused.value) == ("m.json: not valid JSON: invalid \\u escape \\ud800: a "
                                  "lone surrogate (half of a UTF-16 pair) is not a character")
    marked = RegisterMap.from_json(b"\xef\xbb\xbf" + RegisterMap.default().to_json().encode())
    assert marked == RegisterMap.default()


def test_a_map_file_that_is_not_utf8_is_said_the_same_way_in_either_form(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A SystemRDL file with a byte that is not UTF-8 (a C1 control, 0x9B, in a `desc`) is
    refused as a JSON map is: `invalid UTF-8: byte N is 0xXX`, never Python's codec text; so
    are the compiled JSON form read through the library and through the simulator script."""
    rdl = tmp_path / "ansidesc.rdl"
    rdl.write_bytes(b'addrmap t { default regwidth = 8; reg { desc = "a\x9b31m b"; '
                    b"field { sw = rw; } v[8]; } A @ 0; };\n")
    assert run(capsys, "map", str(rdl)) == (
        2, "", f"regdev map: error: {rdl}: not valid SystemRDL: invalid UTF-8: byte 49 is "
               "0x9B\n")
    with pytest.raises(MapError) as refused:
        RegisterMap.from_json(b'{"format": "regdev-map", \xff}', "m.json")
    assert str(refused.value) == "m.json: not valid JSON: invalid UTF-8: byte 25 is 0xFF"
    with pytest.raises(MapError) as refused:
        RegisterMap.from_json('{"format": "regdev-map"}\n{}', "m.json")
    assert str(refused.value) == ("m.json: not valid JSON: more text after the end of the JSON "
                                  "document, at byte 25")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe")
    done = _refused_by_the_script(binary)
    assert done.stderr.startswith(
        f"regdev_firmware_sim.py: error: {binary}: not a map in the compiled JSON form (invalid "
        "UTF-8: byte 0 is 0xFF); ")


def _one_register(name: object, **more: Any) -> str:
    """The compiled JSON form of a map with one register at 0 called ``name``."""
    return json.dumps({"format": "regdev-map", "version": 1,
                       "registers": [{"name": name, "addr": 0, **more}]})


IDENTIFIER = "(a letter or _, then letters, digits, _; array indices as in DATA[2])"


@pytest.mark.parametrize(("text", "why"), [
    (_one_register("A" * 100_000), "`registers[0]`: register at 0: the name is 100000 "
     "characters long, more than 64: `AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...`"),
    (_one_register("A\x1b[31mRED\x1b[0m"), "`registers[0]`: register at 0: the name must "
     f"be an identifier {IDENTIFIER}, got `A\\x1b[31mRED\\x1b[0m`"),
    (_one_register(""), "`registers[0]`: register at 0: the name is empty (give an "
     "identifier: a letter or _, then letters, digits, _)"),
    (_one_register("CTRL", fields=[{"name": "F" * 65, "lsb": 0, "msb": 0}]),
     "`registers[0].fields[0]`: the name is 65 characters long, more than 64: "
     "`FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF...`"),
    (_one_register("CTRL", fields=[{"name": "F", "lsb": 0, "msb": 0,
                                    "encode": {"X\x1b[5m": 1}}]),
     "`registers[0].fields[0]`: an enum name must be an identifier (a letter or _, then "
     "letters, digits, _), got `X\\x1b[5m`"),
    (_one_register("CTRL", description="d" * 4097), "`registers[0]`: register CTRL: the "
     "description is 4097 characters long, more than 4096"),
    (json.dumps({"format": "regdev-map", "version": 1, "name": "N" * 65,
                 "registers": [{"addr": 0}]}),
     "the map's name is 65 characters long, more than 64: "
     "`NNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNN...`"),
    (json.dumps({"format": "regdev-map", "version": 1, "name": "a b\x1b\u202e",
                 "registers": [{"addr": 0}]}),
     "the map's name has a control or format character: `a b\\x1b\\u202e` (printable "
     "characters only)"),
    (_one_register("CTRL", access="r\x1bw"), "`registers[0]`: register CTRL: access must be "
     "rw, r or w, got `r\\x1bw`"),
    ('{"format": "regdev-map", "version": 1, "registers": [{"addr": 0, "\\u001b[2J": 1}]}',
     "`registers[0].\\x1b[2J`: unknown key; allowed: access, addr, description, fields, "
     "identity, name, protected, rclr_mask, reserved_mask, reset, table, width, woclr_mask"),
])
def test_map_names_are_bounded_and_quoted_in_one_escape_style(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, why: str) -> None:
    """Names longer than 64 characters, descriptions longer than 4096, empty names and names
    with control characters are refused in one printable line naming the register, the text
    quoted escaped once (escape_text's `\\x1b`, never with a Python repr's quotes beside a
    `\\u001b`), and an empty name said to be empty."""
    path = tmp_path / "map.json"
    path.write_text(text, encoding="utf-8")
    status, out, err = run(capsys, "map", str(path))
    assert (status, out, err) == (2, "", f"regdev map: error: {path}: {why}\n")
    assert "\\u00" not in err and "got '" not in err and err.isascii()


def test_names_at_the_limits_are_taken(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    """A 64-character register name, field name, enum name and map name, and a 4096-character
    description, make a map; the names reach the tools' descriptions whole."""
    name, field, enum = "R" * 64, "F" * 64, "E" * 64
    text = json.dumps({"format": "regdev-map", "version": 1, "name": "M" * 64,
                       "description": "d" * 4096,
                       "registers": [{"name": name, "addr": 0, "description": "d" * 4096,
                                      "fields": [{"name": field, "lsb": 0, "msb": 1,
                                                  "encode": {enum: 1}}]}]})
    regmap = RegisterMap.from_json(text, "m.json")
    assert (regmap.registers[0].name, regmap.registers[0].fields[0].name) == (name, field)
    path = tmp_path / "map.json"
    path.write_text(text, encoding="utf-8")
    status, out, _ = run(capsys, "tools", "--map", str(path))
    assert status == 0 and f"{name}.{field}" in out and f"{enum}=1" in out


# --- hostile SystemRDL: bounded before the compiler runs, or around it ---------------------------

_ONE_REG = "addrmap m {{ default regwidth = 8; reg {{ field {{}} F[7:0] = {}; }} R @ 0; }};\n"
#: The reproductions: (file name, text, what the one line says).
HOSTILE_RDL = [
    ("reset.rdl", _ONE_REG.format("+".join(["1"] * 20000)),
     ":1: a statement of more than 500 tokens"),
    ("parens.rdl", _ONE_REG.format("(" * 5000 + "1" + ")" * 5000),
     ":1: brackets nested more than 64 deep"),
    ("defines.rdl", "`define D0 1\n" + "".join(f"`define D{i} `D{i - 1}+1\n"
                                               for i in range(1, 3000)) + _ONE_REG.format("`D2999"),
     ":65: `define macros chained more than 64 deep"),
    ("sum.rdl", _ONE_REG.format("+".join(["0"] * 10000)),
     ":1: a statement of more than 500 tokens"),
    ("perl.rdl", "<% while(1){} %>\n" + _ONE_REG.format("0"),
     ": embedded Perl (<% ... %>) is not supported by regdev: a map file runs no code"),
    ("array.rdl", "addrmap m { default regwidth = 8; reg { field {} F[7:0] = 0; } "
                  "R[100000000] @ 0; };\n",
     ":1:64: register R[100000000], which makes more than the 65536 registers a SystemRDL "
     "map holds"),
]


@pytest.mark.parametrize(("name", "text", "said"), HOSTILE_RDL,
                         ids=[case[0] for case in HOSTILE_RDL])
def test_a_hostile_systemrdl_file_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str,
        said: str) -> None:
    """A 20,000-term reset, 5000 nested parentheses, 3000 chained `define, a 10,000-term sum,
    a Perl loop and R[100000000]: each refused in one line naming the file, exit 2."""
    path = tmp_path / name
    path.write_text(text)
    status, out, err = run(capsys, "map", str(path))
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev map: error: {path}{said}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_compiler_crash_is_one_line(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    """The 20,000-term expression in an included file (which the bounds do not read) crashes
    the compiler's parser: the child process dies, regdev says so in one line, exit 2."""
    (tmp_path / "body.rdl").write_text(HOSTILE_RDL[0][1])
    path = tmp_path / "top.rdl"
    path.write_text('`include "body.rdl"\n')
    status, out, err = run(capsys, "map", str(path))
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev map: error: {path}: the SystemRDL compiler "), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_map_file_over_a_mebibyte_is_refused_unread(tmp_path: Path) -> None:
    """Either form: more than 1 MiB is one line, before anything parses it."""
    for name in ("big.json", "big.rdl"):
        path = tmp_path / name
        path.write_bytes(b" " * ((1 << 20) + 1))
        with pytest.raises(MapError) as caught:
            load_map(path)
        assert str(caught.value) == (f"{path}: the file is larger than 1048576 bytes, more "
                                     "than a register map of 256 registers can need")


# --- the map's descriptions reach the model ------------------------------------------------------

def radio() -> RegisterMap:
    """A radio's map whose descriptions carry units, a formula, an ESC and 4096 characters."""
    return RegisterMap([
        Register("RegOpMode", 1, description="Operating mode.", fields=(
            Field("Mode", 0, 2, encode={"SLEEP": 0, "STDBY": 1, "TX": 3},
                  enum_descriptions={"TX": "transmit, then \x1b[31mSTDBY"},
                  description="Transceiver mode."),)),
        Register("RegRssiValue", 0x1B, description="RSSI = -157 + value, in dBm.", fields=(
            Field("Rssi", 0, 7, "r", description="Current RSSI; dBm = -157 + value."),)),
        Register("RegNotes", 0x20, description="x" * 4096),
    ], name="sx1276")


def test_descriptions_reach_the_tool_definitions_bounded_and_escaped() -> None:
    """Register, field and enum descriptions (a formula, units) are in the tools'
    descriptions; escaped (no ESC reaches a model) and cut to 200 characters each."""
    tools = map_tools(radio())
    read, fields = tools["read_register"].description, tools["read_fields"].description
    assert "RegRssiValue=0x1B (read-only): RSSI = -157 + value, in dBm" in read
    assert "Rssi (bits 7:0, read-only): Current RSSI; dBm = -157 + value" in fields
    assert ("RegOpMode.Mode (bits 2:0, SLEEP=0 STDBY=1 TX=3): Transceiver mode. TX: "
            "transmit, then \\x1b[31mSTDBY") in tools["write_field"].description
    assert read.endswith("RegNotes=0x20: " + "x" * 197 + "....")  # cut, then the period
    for tool in tools.values():
        assert tool.description.isascii() and tool.description.isprintable(), tool.name


def test_enum_descriptions_come_from_systemrdl_and_the_json_form(sensor: RegisterMap) -> None:
    """An enum member's desc is read from SystemRDL, kept by the JSON form, and shown."""
    mode = sensor.find_field("CTRL.MODE")
    assert mode is not None
    assert mode[1].enum_descriptions == (("SLEEP", "no conversions"),
                                         ("ONESHOT", "one conversion, then sleep"),
                                         ("CONTINUOUS", "convert at the rate of RATE"))
    assert RegisterMap.from_json(sensor.to_json()) == sensor
    assert "ONESHOT: one conversion, then sleep" in map_tools(sensor)["write_field"].description


def test_block_tools_state_the_bound_their_schema_has(sensor: RegisterMap) -> None:
    """A map of 10 registers: read_registers and write_registers say 1..10, as their
    schemas' maximum and maxItems do (not 1..16)."""
    tools = map_tools(sensor)
    read, write = tools["read_registers"], tools["write_registers"]
    assert read.input_schema["properties"]["count"]["maximum"] == 10
    assert write.input_schema["properties"]["data"]["maxItems"] == 10
    assert read.description.startswith("Read 1..10 consecutive registers")
    assert write.description.startswith("Write 1..10 consecutive registers")
    assert "16" not in read.description + write.description


# --- the standalone module gives the gate's verdicts ---------------------------------------------


def test_the_standalone_module_and_the_gate_agree_on_the_map_rules(
        capsys: pytest.CaptureFixture[str], sensor: RegisterMap) -> None:
    """`regdev compile --map`: a read-only register, reserved bits, a bad enum value, a gap,
    a block over a gap: the module's code is the gate's (no policy file) for each."""
    status, out, _ = run(capsys, "compile", "--map", str(SENSOR))
    assert status == 0
    namespace: dict[str, Any] = {}
    exec(compile(out, "compiled", "exec"), namespace)
    check = namespace["check"]
    calls = [
        ("write_register", {"addr": 0, "data": 1}, "read-only-register"),
        ("write_register", {"addr": 2, "data": 0x80}, "reserved-bits"),
        ("write_register", {"addr": 1, "data": 0x06}, "field-value"),
        ("write_field", {"field": "CTRL.RATE", "value": "HZ2"}, "field-value"),
        ("write_field", {"field": "CTRL.MODE", "value": 3.0}, "field-value"),
        ("write_register", {"addr": 9, "data": 1}, "no-register"),
        ("read_registers", {"addr": 8, "count": 3}, "no-register"),
        ("write_registers", {"addr": 6, "data": [1, 2, 3, 4]}, "no-register"),
        ("write_registers", {"addr": 7, "data": [1, 2]}, "read-only-register"),
        ("write_registers", {"addr": 1, "data": [1, 0x80]}, "reserved-bits"),
        ("write_field", {"field": "STATUS.READY", "value": 1}, "range-field"),
        ("write_field", {"field": "CTRL.MODE", "value": "ONESHOT"}, None),
        ("write_register", {"addr": 4.0, "data": 1e1}, None),
        ("read_fields", {"register": "EVENTS"}, None),
    ]
    for tool, arguments, code in calls:
        call = {"tool": tool, "arguments": arguments}
        seen = Gate(RegisterFile(regmap=sensor)).handle(json.dumps(call)).to_dict()
        assert check(call) == seen.get("code") == code, (call, seen)


# --- an unknown field's refusal, and `regdev map`'s table ----------------------------------------

LONG = RegisterMap([Register(f"RegPaRampConfiguration{n}", n, fields=(
    Field("LowNoiseAmplifierBoostHighFrequency", 0, 3, encode={"OFF": 0, "ON": 0xA}),))
    for n in range(12)], name="long")


def test_an_unknown_field_is_answered_with_the_closest_names_in_full() -> None:
    """A field name off by a letter: the closest names first, each in full (not cut to 15
    characters), then all the others (not only 8)."""
    gate = Gate(RegisterFile(regmap=LONG))
    seen = handle(gate, "write_field", field="RegPaRampConfiguration3.LowNoiseAmplifierBoost",
                  value="ON")
    names = [f"RegPaRampConfiguration{n}.LowNoiseAmplifierBoostHighFrequency"
             for n in range(12)]
    assert seen["code"] == "range-field"
    assert seen["message"] == (
        'field "RegPaRampConfiguration3.LowNoiseAmp..." is not one of the 12 allowed; '
        f'closest: "{names[3]}", "{names[9]}", "{names[8]}"; the others: '
        + ", ".join(f'"{name}"' for name in names[:3] + names[4:8] + names[10:]))
    assert gate.handle(json.dumps({"tool": "write_field", "arguments": {
        "field": "nothing.like.it", "value": 1}})).to_dict()["message"] == (
        'field "nothing.like.it" is not one of ' + ", ".join(f'"{name}"' for name in names))


def test_the_map_table_keeps_its_columns_with_long_names_and_shows_hex(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`regdev map`: a field name of 35 characters widens its column for every field (the
    access column starts at the same place on each line); a 4-bit field's values in hex."""
    path = tmp_path / "long.json"
    path.write_text(LONG.to_json())
    status, out, _ = run(capsys, "map", str(path))
    assert status == 0
    fields = [line for line in out.splitlines() if line.startswith("      [3:0]")]
    assert len(fields) == 12
    assert all(line == ("      [3:0]   LowNoiseAmplifierBoostHighFrequency rw"
                        + " " * 21 + "reset 0x00  OFF=0x00 ON=0x0A;") for line in fields)


def test_a_field_of_256_described_values_keeps_its_tools_bounded() -> None:
    """256 enumerated values with 4096-character descriptions, on 8 registers: every tool
    description stays within its lists' bounds (6000 characters each, and the tool's own
    words)."""
    field = Field("V", 0, 7, encode={f"VALUE_{n}": n for n in range(256)},
                  enum_descriptions={f"VALUE_{n}": "d" * 4096 for n in range(256)},
                  description="e" * 4096)
    big = RegisterMap([Register(f"R{n}", n, description="r" * 4096, fields=(field,))
                       for n in range(8)])
    for tool in map_tools(big).values():
        assert len(tool.description) < 2 * 6000 + 1000, (tool.name, len(tool.description))
