"""The host's map against the device's: the digest a device says (``I 01``), the identity
registers of a device that cannot say (Modbus), and every command with --port refusing a
device of another map in one line, exit 2."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

import regdev_firmware_sim as sim
from conftest import EXAMPLES, run
from regdev import (
    Field,
    MapError,
    ModbusDevice,
    Register,
    RegisterMap,
    RemoteProtocolError,
    SerialDevice,
)
from regdev.devices import _protocol as wire
from regdev.devices._rdl import load_map
from support.firmware import sim_thread
from support.modbus_servers import Plain

SENSOR = EXAMPLES / "sensor.rdl"
#: Every command that runs on a device given by --port (agent needs a model: left out).
COMMANDS = (["shell"], ["demo"], ["replay", str(EXAMPLES / "wild-calls.jsonl")], ["serve"])


@pytest.fixture
def no_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell and serve read standard input: an empty one."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))


def test_the_digest_is_of_what_the_registers_are() -> None:
    """16 upper-case hex digits; the same for the same registers whatever the descriptions or
    protection say; another for another name, reset value, access or field."""
    sensor = load_map(SENSOR)
    digest = sensor.digest()
    assert len(digest) == 16 and set(digest) <= set("0123456789ABCDEF")
    again = RegisterMap([dataclasses.replace(r, description="other words", protected=False)
                         for r in sensor.registers], name=sensor.name, description="new")
    assert again.digest() == digest
    calib = sensor.named("CALIB")
    assert calib is not None
    others = [
        RegisterMap(sensor.registers, name="sensor2"),
        RegisterMap([r if r is not calib else dataclasses.replace(
            calib, fields=(Field("OFFSET", 0, 7, reset=1),), reset=None)
            for r in sensor.registers], name=sensor.name),
        RegisterMap([r if r is not calib else dataclasses.replace(
            calib, fields=(Field("OFFSET", 0, 6),), reset=None)
            for r in sensor.registers], name=sensor.name),
    ]
    assert len({digest, *(each.digest() for each in others)}) == 4
    assert RegisterMap.default().digest() != digest


def test_the_map_page_is_a_frame_of_its_own() -> None:
    """`I 01` encodes and decodes; `I 00` (spelt `I`) and `I 02` are bad frames; the text
    `map=DIGEST NAME` is read back, and a text of another form says no map."""
    assert wire.encode(wire.IdentifyRequest(3, wire.MAP_PAGE)) == b"$03 I 01*D8\n"
    assert wire.decode(b"$03 I 01*D8") == wire.IdentifyRequest(3, 1)
    for page in (b"00", b"02", b"1"):
        payload = b"03 I " + page
        with pytest.raises(RemoteProtocolError):
            wire.decode(b"$" + payload + b"*%02X" % wire.crc8(payload))
    text = wire.map_text("0123456789ABCDEF", "TS8 temperature/sensor")
    assert text == "map=0123456789ABCDEF TS8-temperature-sensor"
    assert wire.split_map_text(text) == ("0123456789ABCDEF", "TS8-temperature-sensor")
    assert len(wire.map_text("0123456789ABCDEF", "x" * 64)) == wire.MAX_TEXT
    for other in ("regdev sim id=1 epoch=2", "map=0123", "map=0123456789abcdef x"):
        assert wire.split_map_text(other) is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_refuses_a_device_serving_another_map(
        capsys: pytest.CaptureFixture[str], no_stdin: None, command: list[str]) -> None:
    """`--map examples/sensor.rdl` against a simulator serving the default map (and no --map
    against one serving the sensor's): one line naming both maps and their digests, exit 2,
    and nothing written to the device."""
    firmware = sim.Firmware()
    sensor = load_map(SENSOR)
    with sim_thread(firmware) as port:
        status, out, err = run(capsys, *command, "--port", port, "--map", str(SENSOR))
    assert (status, out) == (2, "")
    assert err == (f"regdev {command[0]}: error: the device on {port} is not the one --map "
                   f"{SENSOR} describes: the device serves an unnamed register map (digest "
                   f"{RegisterMap.default().digest()}), not the map `sensor` (digest "
                   f"{sensor.digest()}); give --map the device's own map\n")
    assert firmware.registers.snapshot() == [0] * 16
    with sim_thread(sim.Firmware(regmap=sensor)) as port:
        status, out, err = run(capsys, *command, "--port", port)
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev {command[0]}: error: the device on {port} is not the one "
                          "the default map (no --map) describes: the device serves the "
                          "register map `sensor`")
    assert err.count("\n") == 1


@pytest.mark.timeout(60)
def test_a_device_serving_the_map_is_driven(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The same map on both sides: the shell runs, and reads the ID register's 0x5A."""
    monkeypatch.setattr("sys.stdin", io.StringIO("read ID\n"))
    with sim_thread(sim.Firmware(regmap=load_map(SENSOR))) as port:
        status, out, err = run(capsys, "shell", "--port", port, "--map", str(SENSOR))
    assert (status, err) == (0, "")
    assert "0x5a" in out.lower()


@pytest.mark.timeout(60)
def test_a_device_that_cannot_say_its_map_is_checked_by_its_identity_register() -> None:
    """A serial device that answers `I 01` with e SYNTAX says no map; then the map's identity
    register is read: the sensor's ID must hold 0x5A (the default map has none to read)."""
    sensor = load_map(SENSOR)
    plain = sim.Firmware(plain=True, regmap=sensor)
    with sim_thread(plain) as port, SerialDevice(port, regmap=sensor, timeout=5) as device:
        assert device.map_said() is None
        assert device.map_mismatch() is None
        assert plain.registers.hardware_set(0, 0x01) == 0x5B  # another chip's ID
        assert device.map_mismatch() == ("its identity register ID (0x00) holds 0x5B, where "
                                         "the map `sensor` says 0x5A (another chip)")
    with sim_thread(sim.Firmware(plain=True)) as port, \
            SerialDevice(port, timeout=5) as device:
        assert device.map_said() is None and device.map_mismatch() is None


@pytest.mark.timeout(60)
def test_a_modbus_device_of_another_chip_is_refused(capsys: pytest.CaptureFixture[str],
                                                    no_stdin: None) -> None:
    """Modbus cannot say its map: the sensor map's identity register ID (holding register 0)
    is read on connect; a server holding 0 there is another chip, refused in one line, exit 2,
    nothing written; one holding 0x5A is driven."""
    with Plain("tcp", values=0) as plain:
        status, out, err = run(capsys, "shell", "--port", plain.url, "--map", str(SENSOR))
        assert (status, out) == (2, "")
        assert err == (f"regdev shell: error: the device on {plain.url} is not the one --map "
                       f"{SENSOR} describes: its identity register ID (0x00) holds 0x00, "
                       "where the map `sensor` says 0x5A (another chip); give --map the "
                       "device's own map\n")
        assert not plain.executed
    with Plain("tcp", values=0x5A) as plain, \
            ModbusDevice(plain.url, regmap=load_map(SENSOR), timeout=5) as device:
        assert device.map_mismatch() is None


def test_an_identity_register_is_read_only_and_kept_in_the_json_form(tmp_path: Path) -> None:
    """`regdev_identity` in SystemRDL, `identity` in the JSON form; a writable or
    clear-on-read identity register is refused, naming it."""
    sensor = load_map(SENSOR)
    assert [r.name for r in sensor.identity()] == ["ID"]
    assert RegisterMap.from_json(sensor.to_json()) == sensor
    with pytest.raises(MapError, match="register CTRL: an identity register must be "
                                       "read-only"):
        Register("CTRL", 1, identity=True)
    with pytest.raises(MapError, match="an identity register must be"):
        Register("EV", 2, fields=(Field("N", 0, 7, access="r", onread="rclr"),), identity=True)
    rdl = tmp_path / "bad.rdl"
    rdl.write_text("addrmap m { reg { regdev_identity = true; field { sw = r; } X[7:0] = 1; } "
                   "ID @ 0; };\n")
    with pytest.raises(MapError, match="declare it first: property regdev_identity"):
        load_map(rdl)
