"""A register map over Modbus: the map's registers as holding registers of regdev's Modbus
simulator (pymodbus's server), over Modbus TCP and RTU on a pty. The example calls give the
in-process observations; every access kind; the map's rules before anything is sent; writes
and clear-on-read reads sent once under faults; the RTU synchronisation never takes a late
reply; the command line end to end (demo, replay, serve, firmware-sim --map)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import regdev_firmware_sim as sim
from conftest import EXAMPLES, KINDS, run
from regdev import (
    DeviceRefused,
    DeviceTimeout,
    Field,
    Gate,
    Register,
    RegisterFile,
    RegisterMap,
    RegisterRangeError,
)
from regdev.cli._main import main
from regdev.devices._modbus import ModbusDevice, _sync_shapes
from regdev.devices._rdl import load_map
from regdev_modbus_sim import Background, ModbusModel
from support.modbus_servers import modbus_sim_process
from support.strategies import registers_with_fields

SENSOR = EXAMPLES / "sensor.rdl"
REGDEV = Path(sys.executable).parent / "regdev"
#: Timeout for calls that must succeed (a loaded machine is slow), and for calls meant to time
#: out, with a delay fault three times past it.
PATIENT = 5.0
TIMEOUT = 0.25
DELAY = 0.75
FRAMINGS = ["tcp", "pty"]



@pytest.fixture(scope="module")
def sensor() -> RegisterMap:
    """The example map, compiled from SystemRDL once."""
    return load_map(SENSOR)


@pytest.fixture(scope="module")
def sensor_json(sensor: RegisterMap, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example map in the compiled JSON form (what the simulator script reads)."""
    path = tmp_path_factory.mktemp("map") / "sensor.json"
    path.write_text(sensor.to_json())
    return path


def call(gate: Gate, tool: str, **arguments: Any) -> dict[str, Any]:
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


@contextmanager
def served(regmap: RegisterMap, framing: str, faults: sim.Faults | None = None,
           link: Path | None = None, *, timeout: float = PATIENT, retries: int = 1,
           base: int = 0) -> Iterator[tuple[ModbusDevice, Background]]:
    """The simulator serving ``regmap`` (from holding register ``base``) and a ModbusDevice
    with the map on it."""
    with Background(framing, faults, model=ModbusModel(base=base, regmap=regmap),
                    link=link) as server:
        url = (f"modbus+rtu://{link}" if link is not None else server.url
               if server.url.startswith("modbus+") else f"modbus+rtu://{server.url}")
        with ModbusDevice(f"{url}{'&' if '?' in url else '?'}base={base}", timeout=timeout,
                          retries=retries, regmap=regmap) as device:
            yield device, server


# --- the example calls: the in-process observations ------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", [("--modbus-tcp", "127.0.0.1:0"), ("--modbus-rtu", "--pty")])
def test_the_example_calls_over_modbus_match_in_process(
        capsys: pytest.CaptureFixture[str], sensor_json: Path, where: tuple[str, str]) -> None:
    """examples/sensor-calls.jsonl, `regdev replay --port modbus+... --map`, against the
    simulator script serving the map: every line's observation and the registers after are
    those of the in-process run, and every expectation is met."""
    calls = str(EXAMPLES / "sensor-calls.jsonl")
    status, out, _ = run(capsys, "replay", "--no-audit", "--json", "--map", str(SENSOR), calls)
    assert status == 0
    local = [json.loads(line) for line in out.splitlines()]
    with modbus_sim_process(*where, "--map", str(sensor_json)) as url:
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", url,
                               "--timeout", str(PATIENT), "--map", str(sensor_json), calls)
    assert (status, err) == (0, "")
    remote = [json.loads(line) for line in out.splitlines()]
    assert remote == local
    assert all(line["expect_met"] for line in remote[:-1])
    assert [row["data"] for row in remote[-1]["registers"]] == [0x5A, 0x03, 0x00, 0, 1, 2, 3,
                                                                4, 0, 0]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", [("--modbus-tcp", "127.0.0.1:0"), ("--modbus-rtu", "--pty")])
def test_the_map_demo_over_modbus_matches_in_process(
        capsys: pytest.CaptureFixture[str], sensor_json: Path, where: tuple[str, str]) -> None:
    """`regdev demo --port modbus+... --map examples/sensor.rdl` prints the in-process run."""
    local = run(capsys, "demo", "--no-audit", "--json", "--map", str(SENSOR))
    assert local[0] == 0
    with modbus_sim_process(*where, "--map", str(sensor_json)) as url:
        remote = run(capsys, "demo", "--no-audit", "--json", "--port", url, "--timeout",
                     str(PATIENT), "--map", str(SENSOR))
    assert remote == local
    assert json.loads(remote[1].splitlines()[-1])["registers"][1]["data"] == 0x35


# --- the access kinds, and the rules before the device -----------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", FRAMINGS)
def test_every_access_kind_over_modbus(framing: str) -> None:
    """Reset values, read-only, write-only, write-1-to-clear, clear-on-read, reserved bits,
    masked and block writes: the values of the in-process register file (tests/test_maps.py's
    Kinds), with Modbus's own differences (a snapshot clears clear-on-read bits; no reset)."""
    with served(KINDS, framing, base=100) as (device, server):
        hardware = server.model.registers
        assert hardware is not None
        assert device.snapshot() == [0x5A, 0xC4, 0x00, 0x00]
        # rw bits stored, read-only RDY kept, write-only W stored but read 0, ERR written 0
        # kept: the 06 is read back, so the value after is the device's
        assert device.write(1, 0x33) == 0xC7
        assert hardware.snapshot()[1] == 0xC7 and hardware.write_count == 1
        assert device.write(1, 0x43) == 0x87  # write 1 to clear: bit 6 cleared, bit 7 kept
        assert device.write_masked(1, 0x03, 0x01) == 0x85  # only its bits
        assert device.write_masked(1, 0x80, 0x80) == 0x05  # a written 1 clears bit 7 alone
        hardware.hardware_set(2, 0x05)
        assert device.read(2) == 0x05 and device.read(2) == 0x00  # clear on read
        assert device.write_block(3, [0x42]) == [0x42]
        assert device.read_block(0, 4) == [0x5A, 0x05, 0x00, 0x42]
        hardware.hardware_set(2, 0x07)
        assert device.snapshot() == [0x5A, 0x05, 0x07, 0x42]
        assert hardware.snapshot()[2] == 0  # Modbus has no read without side effects
        executed = dict(server.model.executed)
        assert executed == {(6, 101, (0x33,)): 1, (6, 101, (0x43,)): 1, (22, 101, (0x85,)): 1,
                            (22, 101, (0x05,)): 1, (16, 103, (0x42,)): 1}
        # the map's rules, before anything is sent
        for refused in (lambda: device.write(0, 1), lambda: device.write(1, 0x08),
                        lambda: device.write_masked(1, 0x08, 0x08),
                        lambda: device.write_block(2, [0, 7]), lambda: device.read(4),
                        lambda: device.read_block(2, 3)):
            with pytest.raises(RegisterRangeError):
                refused()
        with pytest.raises(DeviceRefused, match="cannot be reset by regdev"):
            device.reset()
        assert dict(server.model.executed) == executed
        assert hardware.snapshot() == [0x5A, 0x05, 0x00, 0x42]


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[Background]:
    """One simulator for the property test; each example gives it a fresh map."""
    with Background("tcp", model=ModbusModel(regmap=KINDS)) as server:
        yield server


steps = st.lists(st.tuples(st.sampled_from(["write", "masked", "read", "hardware",
                                            "read_block", "write_block"]),
                           st.integers(0, 255), st.integers(0, 255)), max_size=12)


@pytest.mark.timeout(300)
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(register=registers_with_fields(), operations=steps)
def test_any_register_behaves_over_modbus_as_in_process(
        tcp_server: Background, register: Register,
        operations: list[tuple[str, int, int]]) -> None:
    """A register of random fields of every kind (and a plain one after it): every write,
    masked write, read, block read, block write and hardware event over Modbus TCP gives the
    in-process register file's value or refusal, and leaves the device in the same state, but
    for the one documented difference: a write's read back clears clear-on-read bits."""
    regmap = RegisterMap([register, Register("P", 1)])
    local = RegisterFile(regmap=regmap)
    remote = RegisterFile(regmap=regmap)
    tcp_server.model.regmap, tcp_server.model.registers = regmap, remote
    with ModbusDevice(tcp_server.url, timeout=PATIENT, regmap=regmap) as device:
        for kind, first, second in operations:
            outcomes = []
            for target in (local, device):
                try:
                    if kind == "write":
                        outcomes.append(target.write(0, second))
                    elif kind == "masked":
                        outcomes.append(target.write_masked(0, first, second))
                    elif kind == "read":
                        outcomes.append(target.read(0))
                    elif kind == "read_block":
                        outcomes.append(target.read_block(0, 2))
                    elif kind == "write_block":
                        outcomes.append(target.write_block(0, [second, first]))
                    else:
                        (local if target is local else remote).hardware_set(0, first)
                        outcomes.append(None)
                except RegisterRangeError:
                    outcomes.append("refused")
            assert outcomes[0] == outcomes[1], (kind, first, second)
            if kind.startswith(("write", "masked")) and outcomes[0] != "refused" \
                    and register.rclr_mask:
                local.read(0)  # Modbus's read back (a 03) clears clear-on-read bits
            assert local.snapshot() == remote.snapshot()


@pytest.mark.timeout(60)
def test_the_simulator_refuses_what_the_map_refuses() -> None:
    """Defence in depth: requests regdev would never send get the map's exception codes from
    the simulator, nothing written."""
    with served(KINDS, "tcp") as (device, server):
        hardware = server.model.registers
        assert hardware is not None
        device._mapped = False  # skip the host's own checks: the requests reach the device
        device.count = 8
        device._regmap = RegisterMap.default()  # and its map: 16 plain registers
        for request, code in ((lambda: device.write(0, 1), "03"),        # read-only register
                              (lambda: device.write(1, 0x08), "03"),     # a reserved bit
                              (lambda: device.read(5), "02"),            # no register there
                              (lambda: device.write_block(2, [0, 7]), "03")):  # all or nothing
            with pytest.raises(DeviceRefused) as raised:
                request()
            assert raised.value.code == code
        assert hardware.snapshot() == [0x5A, 0xC4, 0x00, 0x00] and hardware.write_count == 0


# --- sent once, under faults -----------------------------------------------------------------


WRITES = {
    "write_register": ({"addr": 1, "data": 0x01}, (6, 1, (0x01,))),
    "write_registers": ({"addr": 3, "data": [0x42]}, (16, 3, (0x42,))),
    "write_field": ({"field": "MIX.A", "value": 2}, (22, 1, (0xC6,))),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tool", sorted(WRITES))
@pytest.mark.parametrize("kind", ["drop", "delay", "disconnect", "busy"])
@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_faulted_map_write_is_sent_once(framing: str, kind: str, tool: str,
                                          tmp_path: Path) -> None:
    """One fault on a map write's reply: a typed failure, never a false success; the write ran
    once (busy: not at all), counted by the simulator; the next read is true."""
    link = tmp_path / "modbus-pty" if framing == "pty" else None
    arguments, executed = WRITES[tool]
    # The replies before the faulted one: one read, and on RTU the synchronising read first.
    faults = sim.Faults({kind: 1.0}, after=1 + (framing == "pty"), count=1, delay=DELAY)
    with served(KINDS, framing, faults, link, retries=3) as (device, server):
        gate = Gate(device)
        assert call(gate, "read_register", addr=0)["ok"]
        device.timeout = TIMEOUT
        seen = call(gate, tool, **arguments)
        assert seen["ok"] is False
        if kind == "busy":
            assert (seen["code"], seen["retryable"]) == ("device-busy", True)
        else:
            assert seen["code"] == "device-timeout"
            assert "may or may not have happened" in seen["message"]
        device.timeout = PATIENT
        after = call(gate, "read_registers", addr=0, count=4)["result"]["data"]
        assert server.faults.injected[kind] == 1
        assert server.model.executed[executed] == (0 if kind == "busy" else 1)
        assert server.model.writes() == (0 if kind == "busy" else 1)
        assert after == server.model.registers.snapshot()  # type: ignore[union-attr]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_clear_on_read_read_is_sent_once(framing: str, block: bool, tmp_path: Path) -> None:
    """A retried read would find the bits cleared: a lost reply to a read of CNT (alone or in
    a block) is reported lost, never answered by a second read's 0."""
    link = tmp_path / "modbus-pty" if framing == "pty" else None
    faults = sim.Faults({"drop": 1.0}, after=1 + (framing == "pty"), count=1)
    with served(KINDS, framing, faults, link, retries=3) as (device, server):
        hardware = server.model.registers
        assert hardware is not None
        assert device.read(0) == 0x5A
        device.timeout = TIMEOUT
        hardware.hardware_set(2, 3)
        with pytest.raises(DeviceTimeout, match="clear-on-read bits, and its value is lost"):
            device.read_block(1, 3) if block else device.read(2)
        assert hardware.snapshot()[2] == 0  # it ran once, and cleared the count
        assert device.timeouts + device.bad_replies == 1  # one attempt
        device.timeout = PATIENT
        assert device.read_block(0, 2) == [0x5A, 0xC4]  # ordinary reads after it


def test_the_rtu_synchronising_read_is_of_another_size_than_any_unanswered_read() -> None:
    """The sync's reply must be its own: with a map, reads of any size are sent, so it takes
    a size no read waited for in vain has (2 first), and never a clear-on-read register."""
    sensor_like = RegisterMap([Register("A", 0), Register("B", 1), Register("E", 2, fields=(
        Field("N", 0, 7, "r", onread="rclr"),)), Register("C", 4), Register("D", 5),
        Register("F", 6)])
    assert _sync_shapes(sensor_like, 7) == [(0, 2), (4, 3), (0, 1)]
    assert _sync_shapes(None, 16)[:3] == [(0, 2), (0, 3), (0, 4)]
    assert _sync_shapes(None, 16)[-1] == (0, 1)
    only_events = RegisterMap([Register("E", 0, fields=(Field("N", 0, 7, "r",
                                                              onread="rclr"),))])
    assert _sync_shapes(only_events, 1) == []  # the input flush alone


@pytest.mark.timeout(60)
def test_after_a_lost_block_read_the_sync_is_not_its_size() -> None:
    """RTU: a read of 2 registers whose reply comes late is followed by a sync of 3, so the
    late reply is dropped, and the next read of 2 gets its own values (a sync of 2 would take
    the late reply for its own, and its own reply for the next read's)."""
    regmap = RegisterMap([Register(f"R{addr}", addr, reset=addr + 1) for addr in range(6)])
    faults = sim.Faults({"delay": 1.0}, after=2, count=1, delay=DELAY)  # sync, read, then the 2
    with served(regmap, "pty", faults, retries=0) as (device, server):
        assert device.read(5) == 6
        device.timeout = TIMEOUT
        with pytest.raises(DeviceTimeout):
            device.read_block(0, 2)
        assert device._unanswered == {2}
        device.timeout = PATIENT
        assert device.read_block(3, 2) == [4, 5]  # not the late [1, 2]
        assert device._unanswered == set()
        # the late reply's 9 bytes (unit, 03, byte count 4, two registers, CRC), skipped: no
        # frame the sync of 3 awaited
        assert device._codec.skipped == 9
        assert server.faults.injected["delay"] == 1


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_regdev_firmware_sim_serves_a_systemrdl_map_over_modbus(sensor: RegisterMap) -> None:
    """`regdev firmware-sim --modbus-tcp ... --map examples/sensor.rdl` serves the map's
    registers from --base."""
    process = subprocess.Popen([str(REGDEV), "firmware-sim", "--modbus-tcp", "127.0.0.1:0",
                                "--base", "40", "--map", str(SENSOR)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        with ModbusDevice(f"{url}?base=40", timeout=PATIENT, regmap=sensor) as device:
            assert device.snapshot() == [0x5A, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0]
            assert device.identify().endswith(
                "the register map sensor: 10 x 8-bit in holding registers 40..50")
        with ModbusDevice(url, timeout=PATIENT) as plain, pytest.raises(DeviceRefused) as info:
            plain.read(0)  # holding register 0 is not one of the map's
        assert info.value.code == "02"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def test_registers_and_a_map_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    """--registers N with --map, or a map past holding register 65535: exit 2, one line."""
    with pytest.raises(SystemExit) as info:
        main(["firmware-sim", "--modbus-tcp", "127.0.0.1:0", "--registers", "8", "--map",
              str(SENSOR)])
    assert info.value.code == 2
    assert "--registers and --map: give one" in capsys.readouterr().err
    status, _, err = run(capsys, "firmware-sim", "--modbus-tcp", "127.0.0.1:0", "--base",
                         "65530", "--map", str(SENSOR))
    assert (status, err) == (2, "regdev firmware-sim: error: the map's registers (addresses "
                                "0..10) from --base 65530 are not within 0..65535\n")


@pytest.mark.timeout(90)
def test_serve_runs_field_calls_on_a_modbus_device_with_a_map(tmp_path: Path) -> None:
    """`regdev serve --port modbus+rtu://PTY --map`: the map's tools reach the simulator as
    one 22, and the map's rules refuse before the device."""
    from test_mcp import sdk_client  # noqa: PLC0415 - its MCP client helper

    with Background("pty", model=ModbusModel(regmap=load_map(SENSOR))) as server, \
            sdk_client(tmp_path, "--port", f"modbus+rtu://{server.url}", "--map", str(SENSOR),
                       "--timeout", str(PATIENT), "--no-audit") as client:
        written = client.call("write_field", {"field": "CTRL.MODE", "value": "CONTINUOUS"})
        refused = client.call("write_register", {"addr": 1, "data": 0x08})
        executed = dict(server.model.executed)
    assert written.structured_content["result"]["fields"] == {
        "EN": 0, "MODE": "CONTINUOUS", "RATE": "HZ1"}
    assert refused.is_error is True and refused.structured_content["code"] == "reserved-bits"
    assert executed == {(22, 1, (0x04,)): 1}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("serving", [["--modbus-tcp", "127.0.0.1:0"],
                                     ["--modbus-rtu", "--tcp", "127.0.0.1:0"]])
def test_the_simulator_stops_on_a_signal_with_a_client_connected(
        serving: list[str], signum: int) -> None:
    """Ctrl-C (SIGINT) or SIGTERM ends the Modbus simulator at once, exit 0, quietly, even
    with a client connected and idle (its stop once hung in the event loop's shutdown)."""
    process = subprocess.Popen([sys.executable, str(sim.__file__), *serving], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # no terminal's signals but ours
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        url = url if url.startswith("modbus+") else f"modbus+rtu://{url}"
        with ModbusDevice(url, timeout=PATIENT) as device:
            assert device.read(3) == 0
            process.send_signal(signum)
            assert process.wait(timeout=10) == 0
        assert process.stderr is not None and process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
