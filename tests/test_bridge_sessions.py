"""regdev's sessions through the bridge, against the in-process device with the same map:
``regdev demo``, a ``regdev shell`` session, typed values in units, and seeded streams of tool
calls compared byte for byte (observations, and the registers the chip holds at the end).

Each session runs host -> pty -> the Uno bridge image in simavr -> its bus -> the simulated
chip of the same map (``regdev firmware-sim --avr --map F``), the harness run with ``-v`` so
that its log shows each bus transfer and, at exit, the registers the chip holds
(firmware-sim/c/sim/harness.c). The maps are :data:`BRIDGES`: a chip on another bus is one
more line there. The simavr tests need avr-gcc and simavr (tests/support/firmware_c.py;
``REGDEV_REQUIRE_FIRMWARE=1`` makes a missing tool a failure, as in CI).
"""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import EXAMPLES, run
from regdev import Gate, RegisterFile, RegisterMap
from regdev.agents._shell import NOT_READ
from regdev.cli._main import main
from regdev.devices._open import open_device
from regdev.devices._rdl import load_map
from support.firmware import SIM, stop
from support.firmware_c import SHARED_BUILD, need


@dataclass(frozen=True)
class Bridge:
    """A map whose chip sits behind the bridge: an example map, and the bus to put it on
    (None: the map's own)."""

    name: str
    source: Path
    bus: dict[str, object] | None = None

    def regmap(self) -> RegisterMap:
        """The map, on its bus."""
        document = json.loads(load_map(self.source).to_json())
        if self.bus is not None:
            document["bus"] = self.bus
        return RegisterMap.from_json(json.dumps(document))


#: The chips behind the bridge that every session here runs on, by name: a real part's map
#: with its own bus, and the example sensor and thermostat (typed values) put on one.
BRIDGES = {bridge.name: bridge for bridge in (
    Bridge("i2c-bme280", EXAMPLES / "bme280.rdl"),
    Bridge("i2c-sensor", EXAMPLES / "sensor.rdl", {"kind": "i2c", "address": 0x48}),
    Bridge("i2c-thermostat", EXAMPLES / "thermostat.rdl", {"kind": "i2c", "address": 0x4A}),
    Bridge("spi-sx1276", EXAMPLES / "sx1276.rdl"),
    Bridge("spi-sensor", EXAMPLES / "sensor.rdl", {
        "kind": "spi", "mode": 3, "clock": 4_000_000, "cs": "D9", "read_mask": 0x00,
        "write_mask": 0x80, "verify": True}),
)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each of :data:`BRIDGES` in its compiled JSON form (what ``--map`` is given)."""
    folder = tmp_path_factory.mktemp("bridges")
    paths = {}
    for name, bridge in BRIDGES.items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(bridge.regmap().to_json(), encoding="utf-8")
    return paths


@dataclass
class Simulated:
    """A bridge running in simavr: its port, and its log once it has stopped."""

    port: str
    log_path: Path
    log: str = ""

    def transfers(self) -> list[str]:
        """The bus transfers the chip took part in, one a line (``i2c 0x76: w F4 27``)."""
        return [line for line in self.log.splitlines() if re.match(r"(i2c|spi)\b", line)]

    def chip(self) -> dict[int, int]:
        """The registers the chip held at exit, write-only bits included."""
        [line] = [line for line in self.log.splitlines() if line.startswith("chip:")]
        return {int(a, 16): int(v, 16) for a, v in (pair.split("=") for pair in line.split()[1:])}


@contextmanager
def bridge_running(regmap: Path, log: Path) -> Iterator[Simulated]:
    """``regdev firmware-sim --avr -v --map REGMAP`` (the built image is shared: the
    simulator keeps it in its cache), its log in the file ``log``; stopped on exit, and its
    log read."""
    need("avr")
    with log.open("w", encoding="utf-8") as err:
        process = subprocess.Popen([sys.executable, str(SIM), "--avr", "-v", "--map",
                                    str(regmap)], stdout=subprocess.PIPE, stderr=err, text=True)
    assert process.stdout is not None
    simulated = Simulated("", log)
    try:
        simulated.port = process.stdout.readline().strip()
        if not simulated.port:
            process.wait(timeout=30)
            raise AssertionError(f"the simulator printed no port: {log.read_text()}")
        yield simulated
    finally:
        stop(process)
        process.stdout.close()
        simulated.log = log.read_text(encoding="utf-8", errors="replace")


def as_bridged(values: list[int], regmap: RegisterMap) -> list[int | None]:
    """An in-process snapshot as a bridge's: a register with clear-on-read bits not read
    (None), as the bridge cannot look at it without clearing them."""
    return [None if register.rclr_mask else value
            for register, value in zip(regmap.registers, values, strict=True)]


def _as_bridged_lines(lines: list[str], regmap: RegisterMap) -> list[str]:
    """An in-process transcript as a bridge's: a clear-on-read register's line in the
    registers shown "not read: reading clears it"."""
    clears = {f"0x{register.addr:02X}" for register in regmap.registers if register.rclr_mask}
    shown = []
    for line in lines:
        row = re.match(r"(  (0x[0-9A-F]{2}) \S+ +)0x[0-9a-f]+\b.*$", line)
        shown.append(row[1] + NOT_READ if row and row[2] in clears else line)
    return shown


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status, out, err = run(capsys, *argv)
    return status, out.splitlines(), err


# --- regdev demo ----------------------------------------------------------------------------


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(BRIDGES))
def test_the_map_demo_through_the_bridge_is_the_in_process_demo(
        capsys: pytest.CaptureFixture[str], compiled: dict[str, Path], tmp_path: Path,
        name: str) -> None:
    """``regdev demo --map F --port PTY`` with the bridge: every step as scripted, the same
    transcript as in process (the calls, verdicts, messages, the stop and the registers
    after), only the lines naming the device differing."""
    regmap = str(compiled[name])
    local_status, local, _ = _cli(capsys, "demo", "--no-audit", "--map", regmap)
    with bridge_running(compiled[name], tmp_path / "sim.log") as sim:
        status, bridged, err = _cli(capsys, "demo", "--no-audit", "--map", regmap, "--port",
                                    sim.port, "--timeout", "2")
    assert (status, err, local_status) == (0, "", 0)
    assert bridged[0] == (f"regdev demo: a scripted agent drives the device on {sim.port} of "
                          f"the register map {regmap} through the gate.")
    assert bridged[1].startswith("device: regdev C/uno ")
    assert bridged[2:] == _as_bridged_lines(local[2:], BRIDGES[name].regmap())
    assert not any(line.startswith("not as scripted") for line in bridged)
    assert sum(line.startswith("step ") for line in bridged) >= 6
    assert "loop stopped: rejected (read-only-register: the refusal is final (not " \
           "retryable))" in bridged
    # the writes reached the chip: its registers at exit hold what the demo shows after
    shown = {int(line.split()[0], 16): int(line.split()[2], 16) for line in bridged
             if re.match(r"  0x[0-9A-F]{2} \S+ +0x", line)}
    chip, registers = sim.chip(), {r.addr: r for r in BRIDGES[name].regmap().registers}
    assert shown == {addr: chip[addr] & registers[addr].readable_mask for addr in shown}


# --- regdev shell ---------------------------------------------------------------------------


def _shell(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           lines: list[str], *argv: str) -> tuple[int, list[str]]:
    """``regdev shell ARGV`` fed ``lines`` on a pipe: its status and its lines."""
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    status = main(["shell", "--no-audit", *argv])
    out, err = capsys.readouterr()
    assert err == ""
    return status, out.splitlines()


#: A shell session on the example sensor: reads, writes, field writes (masked on the board),
#: a block, and refusals; and what the shell answers to each, in process.
SENSOR_SESSION = [
    ("read ID", "accepted  read_fields: register ID (0x00) = 0x5a PART=0x5a"),
    ("write CTRL.MODE ONESHOT", "accepted  write_field: CTRL.MODE = ONESHOT; register CTRL "
                                "(0x01) = 0x02 EN=0 MODE=ONESHOT RATE=HZ1"),
    ("write CTRL.RATE HZ16", "accepted  write_field: CTRL.RATE = HZ16; register CTRL (0x01) = "
                             "0x22 EN=0 MODE=ONESHOT RATE=HZ16"),
    ("write ID 1", "refused   authorize/read-only-register (final): register ID (0x00) is "
                   "read-only in this device's register map; no call can write it"),
    ("write CTRL 0x08", "refused   validate/reserved-bits (retryable): data 0x08 sets reserved "
                        "bit(s) 0x08 of register CTRL (0x01); send them as 0 (its fields: EN "
                        "(bit 0), MODE (bits 2:1), RATE (bits 5:4))"),
    ("write CTRL.MODE FAST", "refused   validate/field-value (retryable): CTRL.MODE takes one "
                             "of SLEEP=0, ONESHOT=1, CONTINUOUS=2 (by name or number), got "
                             "\"FAST\""),
    ("write STATUS.POR 1", "accepted  write_field: STATUS.POR = 1; register STATUS (0x02) = "
                           "0x00 READY=0 POR=0 OVF=0 CRC=0"),
    ("write DATA[1] 0x7f", "accepted  write_register: register DATA[1] (0x05) = 0x7f "
                           "VALUE=0x7f"),
    ("writeblock DATA[2] 1 2", "accepted  write_registers: registers 6..7 = 0x01 0x02"),
    ("readblock DATA[0] 4", "accepted  read_registers: registers 4..7 = 0x00 0x7f 0x01 0x02"),
    ("read EVENTS", "accepted  read_fields: register EVENTS (0x0A) = 0x00 COUNT=0"),
]


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["i2c-sensor", "spi-sensor"])
def test_a_shell_session_through_the_bridge_is_the_in_process_one(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        compiled: dict[str, Path], tmp_path: Path, name: str) -> None:
    """``regdev shell --port PTY --map F`` on the sensor behind the bridge, on I2C and on SPI
    (mode 3, the write bit in the address byte's MSB, writes verified): each command gets the
    in-process answer (reads, writes, a refused write, a masked field write, a block); on I2C,
    whose chip logs its transfers, a field write is one masked frame, a read-modify-write on
    the board, and a refused write never reaches the bus."""
    regmap = str(compiled[name])
    commands = [command for command, _ in SENSOR_SESSION]
    status, local = _shell(monkeypatch, capsys, commands, "--map", regmap)
    assert local[2:] == [answer for _, answer in SENSOR_SESSION]
    with bridge_running(compiled[name], tmp_path / "sim.log") as sim:
        bridged_status, bridged = _shell(monkeypatch, capsys, commands, "--map", regmap,
                                         "--port", sim.port, "--timeout", "2")
    assert (bridged_status, bridged[2:]) == (status, local[2:])
    assert bridged[:2] == [f"regdev shell on {sim.port}. Type help for the commands, quit to "
                           "leave.", "accepted  identify_device: regdev C/uno sensor"]
    assert sim.chip()[0x01] == 0x22  # what the chip holds at the end: CTRL.RATE = HZ16
    if name.startswith("i2c"):  # the I2C chip logs its transfers
        log = sim.log.splitlines()
        # CTRL.RATE = HZ16: one M frame (mask 0x30, data 0x20); the board reads CTRL from the
        # chip and writes it back with the two bits changed, then reads it back for the answer
        masked = next(index for index, line in enumerate(log)
                      if re.match(r"<- \$.. M 01 30 20", line))
        assert log[masked + 1:masked + 4] == ["i2c 0x48: w 01, r 02", "i2c 0x48: w 01 22",
                                              "i2c 0x48: w 01, r 22"]
        # write-1-to-clear: the 1 written to POR goes to the chip, which clears the bit
        assert "i2c 0x48: w 02 10" in sim.transfers()
        # the refused writes never reached the bus: ID (0x00), CTRL with 0x08 were not written
        assert not any(re.match(r"i2c 0x48: w (00|01 08)\b", line) and ", r" not in line
                       for line in sim.transfers())


# --- typed values ---------------------------------------------------------------------------


#: A session with the example thermostat's typed values behind the bridge, in units: reads,
#: writes (their raw bytes scaled), a resolution refusal and a range refusal.
VALUE_SESSION = [
    ("read SETPOINT", "accepted  read_value: SETPOINT = 20.0 degC (raw 0x00 0xc8)"),
    ("write SETPOINT 21.5", "accepted  write_value: SETPOINT = 21.5 degC (raw 0x00 0xd7)"),
    ("write SETPOINT -3", "refused   validate/range-value (retryable): SETPOINT takes 5..35 "
                          "degC, got -3 degC"),
    ("write SETPOINT 21.55", "refused   validate/resolution (retryable): SETPOINT takes whole "
                             "steps of 0.1 degC: 21.55 at a resolution of 0.1: 21.5 or 21.6"),
    ("write SETPOINT 35.000000000000000000001", "refused   validate/range-value (retryable): "
                                                "SETPOINT takes 5..35 degC, got "
                                                "35.000000000000000000001 degC"),
    ("read SETPOINT", "accepted  read_value: SETPOINT = 21.5 degC (raw 0x00 0xd7)"),
    ("read TEMP", "accepted  read_value: TEMP = 21.5 degC (raw 0x41 0xac 0x00 0x00)"),
    ("write TEMP 20", "error: TEMP is a read-only value (the device sets it): `read TEMP` "
                      "reads it"),
    ("write W 1234.5", "accepted  write_value: W = 1234.5 W (raw 0x30 0x39)"),
    ("write W 1234.55", "refused   execute/resolution (retryable): W takes whole steps of 0.1 "
                        "W: 1234.55 at a resolution of 0.1: 1234.5 or 1234.6 (at the scale "
                        "factor the device holds, W_SF = -1)"),
    ("write W 2000.1", "refused   validate/range-value (retryable): W takes 0..2000 W, got "
                       "2000.1 W"),
    ("read W", "accepted  read_value: W = 1234.5 W (raw 0x30 0x39)"),
    ("write MODE COOL", "accepted  write_value: MODE = \"COOL\" (raw 0x02)"),
    ("write ROOM hall", "accepted  write_value: ROOM = \"hall\" (raw 0x68 0x61 0x6c 0x6c)"),
    ("read ROOM", "accepted  read_value: ROOM = \"hall\" (raw 0x68 0x61 0x6c 0x6c)"),
]


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_typed_values_through_the_bridge_are_the_in_process_ones_each_one_burst(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        compiled: dict[str, Path], tmp_path: Path) -> None:
    """The thermostat's values on 8-bit registers of an I2C chip, read and written in units
    through the bridge: the in-process answers (scaled raw bytes, the resolution and range
    refusals before the device, the scale factor read first); each value moves in one bus
    transfer (one burst: no torn read or write), and a refused one never reaches the bus."""
    regmap = str(compiled["i2c-thermostat"])
    commands = [command for command, _ in VALUE_SESSION]
    status, local = _shell(monkeypatch, capsys, commands, "--map", regmap)
    assert local[2:] == [answer for _, answer in VALUE_SESSION]
    with bridge_running(compiled["i2c-thermostat"], tmp_path / "sim.log") as sim:
        bridged_status, bridged = _shell(monkeypatch, capsys, commands, "--map", regmap,
                                         "--port", sim.port, "--timeout", "2")
    assert (bridged_status, bridged[2:]) == (status, local[2:])
    transfers = [line.removeprefix("i2c 0x4A: ") for line in sim.transfers()]
    assert transfers == [
        "w 00, r 00 C8",  # read SETPOINT: both bytes in one burst
        "w 00 00 D7", "w 00, r 00 D7",  # write SETPOINT 21.5: one burst, read back in one
        "w 00, r 00 D7",  # read SETPOINT (the refused writes sent nothing)
        "w 02, r 41 AC 00 00",  # read TEMP: the float32's four bytes in one burst
        "w 09, r FF FF",  # write W: its scale factor W_SF first
        "w 07 30 39", "w 07, r 30 39",
        "w 09, r FF FF",  # write W 1234.55: the scale factor, then refused at execute
        "w 07, r 30 39 FF FF",  # read W: the value and its scale factor in one burst
        "w 06 02", "w 06, r 02",  # MODE: one register
        "w 0B 68 61 6C 6C", "w 0B, r 68 61 6C 6C",  # ROOM: four bytes in one burst each way
        "w 0B, r 68 61 6C 6C",
    ]
    chip = sim.chip()
    assert [chip[addr] for addr in range(16)] == [
        0x00, 0xD7, 0x41, 0xAC, 0, 0, 0x02, 0x30, 0x39, 0xFF, 0xFF, 0x68, 0x61, 0x6C, 0x6C, 1]


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_a_real_parts_calibration_words_read_through_the_bridge_in_one_burst_each(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        compiled: dict[str, Path], tmp_path: Path) -> None:
    """The BME280's temperature calibration words (least significant byte first) and raw
    humidity (most significant first) read as typed values through the bridge: the
    datasheet's worked example (27504, 26435, -1000), each value one burst on the bus."""
    commands = ["read DIG_T1", "read DIG_T2", "read DIG_T3", "read HUM_RAW"]
    answers = ["accepted  read_value: DIG_T1 = 27504 (raw 0x70 0x6b)",
               "accepted  read_value: DIG_T2 = 26435 (raw 0x43 0x67)",
               "accepted  read_value: DIG_T3 = -1000 (raw 0x18 0xfc)",
               "accepted  read_value: HUM_RAW = 32768 (raw 0x80 0x00)"]
    with bridge_running(compiled["i2c-bme280"], tmp_path / "sim.log") as sim:
        status, out = _shell(monkeypatch, capsys, commands, "--map", str(compiled["i2c-bme280"]),
                             "--port", sim.port, "--timeout", "2")
    assert (status, out[2:]) == (0, answers)
    assert sim.transfers() == ["i2c 0x76: w 88, r 70 6B", "i2c 0x76: w 8A, r 43 67",
                               "i2c 0x76: w 8C, r 18 FC", "i2c 0x76: w FD, r 80 00"]


# --- seeded streams, byte for byte ----------------------------------------------------------


def seeded_calls(regmap: RegisterMap, seed: int, count: int = 60) -> list[str]:
    """A seeded stream of raw tool calls made from ``regmap`` alone (so any map can be put
    through it): reads and writes of its registers (their reset values and writable bits
    among the data: write-1-to-clear flags cleared) and of addresses that are none, field
    writes (masked writes) by name and number in and out of range, field reads, block reads
    and writes (some over gaps), and its typed values read and written in and out of their
    range and resolution."""
    rng = random.Random(seed)
    registers = [r for r in regmap.registers if r.table == "holding"]
    addresses = [r.addr for r in registers]
    gaps = [a for a in range(min(max(addresses) + 2, 256)) if a not in set(addresses)]
    some_addresses = addresses + gaps[:3]
    fields = [(f"{r.name}.{f.name}", f) for r in registers if r.name for f in r.fields
              if f.writable]
    runs = [run for run in (registers[at:at + 2] for at in range(len(registers) - 1))
            if run[1].addr == run[0].addr + 1 and all(
                r.writable_mask and r.addr not in regmap.read_only() | regmap.protected()
                for r in run)]
    named = [r.name for r in registers if r.name and r.fields]
    readable = [v.name for v in regmap.values if v.access != "w"]
    writable = [v.name for v in regmap.values if v.access != "r"]
    numbers = [0, 1, 2, 7, 21.5, 21.55, -3, 35, 40, 1234.5, 2000, 2001, 255, 256]
    calls: list[dict[str, object]] = []
    while len(calls) < count:
        kind = rng.randrange(8)
        if kind == 0:
            calls.append({"tool": "read_register",
                          "arguments": {"addr": rng.choice(some_addresses)}})
        elif kind == 1:
            addr = rng.choice(some_addresses)
            register = regmap.at(addr)
            own = [] if register is None else [register.reset or 0, register.writable_mask]
            calls.append({"tool": "write_register", "arguments": {"addr": addr, "data": rng.choice(
                [*own, *own, 0, 1, 0x10, 0x24, 0x27, 0x5A, 0xB6, 0xFF, 0x100])}})
        elif kind == 2 and fields:
            path, field = rng.choice(fields)
            choices: list[object] = [*field.values, *range(field.msb - field.lsb + 2)]
            calls.append({"tool": "write_field",
                          "arguments": {"field": path, "value": rng.choice(choices)}})
        elif kind == 3 and named:
            calls.append({"tool": "read_fields", "arguments": {"register": rng.choice(named)}})
        elif kind == 4:
            calls.append({"tool": "read_registers", "arguments": {
                "addr": rng.choice(addresses), "count": rng.randint(1, 6)}})
        elif kind == 5 and rng.random() < 0.5:
            calls.append({"tool": "write_registers", "arguments": {
                "addr": rng.choice(addresses),
                "data": [rng.choice([0, 1, 0x24, 0x55, 0xFF, 0x100])
                         for _ in range(rng.randint(1, 4))]}})
        elif kind == 5 and runs:  # registers that take their reset values, most of them
            run = rng.choice(runs)
            calls.append({"tool": "write_registers", "arguments": {
                "addr": run[0].addr, "data": [(r.reset or 0) if rng.random() < 0.8 else
                                              rng.choice([0, 0x24, 0xFF]) for r in run]}})
        elif kind == 6 and readable:
            calls.append({"tool": "read_value", "arguments": {"name": rng.choice(readable)}})
        elif kind == 7 and writable:
            calls.append({"tool": "write_value", "arguments": {
                "name": rng.choice(writable),
                "value": rng.choice([*numbers, "HEAT", "COOL", "hall", True, False])}})
    return [json.dumps(call) for call in calls]


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(BRIDGES))
def test_seeded_streams_through_the_bridge_are_byte_for_byte_the_in_process_ones(
        compiled: dict[str, Path], tmp_path: Path, name: str) -> None:
    """Three seeded streams of calls made from the map, one after the other, through the
    gate to the in-process device and to the bridge: every observation the same bytes, the
    registers as read the same after each stream, and the registers the chip holds at the
    end (write-only bits too) those the in-process device holds."""
    regmap = BRIDGES[name].regmap()
    local = RegisterFile(regmap=regmap)
    kinds: set[str] = set()
    with Gate(local) as here, bridge_running(compiled[name], tmp_path / "sim.log") as sim, \
            open_device(sim.port, regmap=regmap, timeout=2) as device, Gate(device) as there:
        for seed in (1, 2, 3):
            for raw in seeded_calls(regmap, seed):
                expected = here.handle(raw)
                got = there.handle(raw)
                assert got.to_json() == expected.to_json(), raw
                if got.ok:
                    kinds.add(got.tool)
            assert device.snapshot() == as_bridged(local.snapshot(), regmap)
    held = local._registers  # (the in-process device's own bits, write-only ones included)
    assert sim.chip() == held
    assert kinds == set(here.tools), set(here.tools) - kinds  # each tool reached the chip


# --- what a dump and a reset through a bridge do not do ------------------------------------


#: A chip with a write-1-to-clear flag register and a clear-on-read event count, on I2C.
FLAGS_CHIP = """\
property regdev_bus { type = string; component = addrmap; };
property regdev_i2c_address { type = longint unsigned; component = addrmap; };
addrmap flags {
    regdev_bus = "i2c";
    regdev_i2c_address = 0x50;
    default regwidth = 8;
    default sw = rw;
    default hw = r;
    reg { field { } MODE[2:0] = 1; } CTRL @ 0x01;
    reg { field { onwrite = woclr; hw = w; } F[7:0] = 0xA5; } IRQ @ 0x12;
    reg { field { onread = rclr; sw = r; hw = w; } EV[3:0] = 0xF; } EVENTS @ 0x20;
};
"""


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_a_bridge_dump_and_reset_say_what_they_did_not_do(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """Through the bridge a dump cannot peek: the clear-on-read EVENTS is "not read", never
    the 00 the board's dump carries, and a read then finds the chip's 0x0f; a reset writes
    the writable registers only and says so, and the write-1-to-clear IRQ keeps what the chip
    holds (0x24), where in process every register takes its reset value (IRQ 0xa5)."""
    source = tmp_path / "flags.rdl"
    source.write_text(FLAGS_CHIP, encoding="utf-8")
    regmap = tmp_path / "flags.json"
    regmap.write_text(load_map(source).to_json(), encoding="utf-8")
    commands = ["dump", "read EVENTS", "write IRQ 0x81", "write CTRL 5", "reset", "read IRQ",
                "read CTRL"]
    _, local = _shell(monkeypatch, capsys, commands, "--map", str(regmap))
    with bridge_running(regmap, tmp_path / "sim.log") as sim:
        _, bridged = _shell(monkeypatch, capsys, commands, "--map", str(regmap), "--port",
                            sim.port, "--timeout", "2")
    assert "  0x20 EVENTS  0x0f  EV=0x0f" in local
    assert "  0x20 EVENTS  not read: reading clears it" in bridged
    assert not any(line.startswith("  0x20 EVENTS  0x") for line in bridged)
    read_events = "accepted  read_fields: register EVENTS (0x20) = 0x0f EV=0x0f"
    assert read_events in local and read_events in bridged
    assert local[-3:] == ["accepted  reset_device: every register holds its reset value",
                          "accepted  read_fields: register IRQ (0x12) = 0xa5 F=0xa5",
                          "accepted  read_fields: register CTRL (0x01) = 0x01 MODE=1"]
    assert bridged[-3:] == [
        "accepted  reset_device: the bridge wrote each writable register its reset value; the "
        "chip's read-only bits and write-1-to-clear flags were not reset (they keep what the "
        "chip holds: only the chip's own reset restores them)",
        "accepted  read_fields: register IRQ (0x12) = 0x24 F=0x24",
        "accepted  read_fields: register CTRL (0x01) = 0x01 MODE=1"]
