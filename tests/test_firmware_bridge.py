"""The C firmware as a bridge to an I2C chip: a map's bus, the generator's bridge settings and
simulated chip, and the Uno image in simavr forwarding to a simulated chip on its TWI
(host -> pty -> firmware -> TWI -> chip), its bus faults, and its size budget.

The simavr tests need avr-gcc and simavr (tests/firmware_c.py; ``REGDEV_REQUIRE_FIRMWARE=1``
makes a missing tool a failure, as in CI).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import serial

from conftest import EXAMPLES, run
from regdev import MapError
from regdev.devices import _protocol as wire
from regdev.devices._rdl import load_map
from regdev.devices._regmap import Bus, Register, RegisterMap
from support.firmware import sim_process
from support.firmware_c import C_DIR, SHARED_BUILD, make, need

BME280 = EXAMPLES / "bme280.rdl"


@pytest.fixture(scope="module")
def bme280_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/bme280.rdl in its compiled JSON form."""
    path = tmp_path_factory.mktemp("bme280") / "bme280.json"
    path.write_text(load_map(BME280).to_json(), encoding="utf-8")
    return path


# --- the map's bus ---------------------------------------------------------------------------


def test_the_example_map_puts_a_bme280_on_i2c_and_the_json_form_keeps_it(
        bme280_json: Path) -> None:
    """The SystemRDL properties give the bus; the compiled JSON form carries it unchanged."""
    regmap = load_map(BME280)
    assert regmap.bus == Bus("i2c", 0x76, clock=100_000, addr_width=8, auto_increment=True)
    assert regmap.at(0xD0).reset == 0x60  # type: ignore[union-attr]
    again = RegisterMap.from_json(bme280_json.read_text(encoding="utf-8"))
    assert again == regmap
    assert again.bus == regmap.bus
    assert json.loads(regmap.to_json())["bus"] == {
        "kind": "i2c", "address": 0x76, "clock": 100_000, "addr_width": 8,
        "auto_increment": True}
    assert "bus" not in json.loads(RegisterMap.default().to_json())


@pytest.mark.parametrize(("bus", "message"), [
    ({"kind": "spi", "address": 0x76}, "`bus`: `spi` is not a bus the bridge knows; expected "
                                       "one of i2c"),
    ({"kind": "i2c", "address": 0x78}, "`bus`: the I2C address must be a 7-bit address "
                                       "0x08..0x77, got 120"),
    ({"kind": "i2c", "address": 0x76, "clock": 1_000_000}, "`bus`: the clock must be "
                                                           "10000..400000 Hz, got 1000000"),
    ({"kind": "i2c", "address": 0x76, "addr_width": 12}, "`bus`: the register address width "
                                                         "must be 8 or 16 bits, got 12"),
    ({"kind": "i2c", "address": 0x76, "auto_increment": 1}, "`bus`: auto-increment must be "
                                                            "true or false"),
    ({"address": 0x76}, "`bus.kind`: required"),
])
def test_a_bus_out_of_range_is_refused_in_one_line(bus: dict[str, object], message: str) -> None:
    """Each bus property out of its range is refused naming the place and the range."""
    document = json.loads(RegisterMap([Register("A", 0)]).to_json())
    document["bus"] = bus
    with pytest.raises(MapError) as caught:
        RegisterMap.from_json(json.dumps(document), "chip.json")
    assert str(caught.value) == f"chip.json: {message}"


def test_generator_writes_the_bridge_settings_and_the_simulated_chip(
        bme280_json: Path, tmp_path: Path) -> None:
    """gen_regmap.py: REGDEV_BUS_* for a map with a bus (none without), and --chip's table."""
    gen = [sys.executable, str(C_DIR / "gen_regmap.py")]
    subprocess.run([*gen, "--map", str(bme280_json), "-o", str(tmp_path / "regmap.h")],
                   check=True)
    header = (tmp_path / "regmap.h").read_text(encoding="utf-8")
    for line in ("#define REGDEV_BUS_I2C 1", "#define REGDEV_BUS_ADDRESS 0x76u",
                 "#define REGDEV_BUS_CLOCK 100000UL", "#define REGDEV_BUS_ADDR_WIDTH 8u",
                 "#define REGDEV_BUS_AUTO_INCREMENT 1"):
        assert line in header
    subprocess.run([*gen, "--chip", "--map", str(bme280_json), "-o", str(tmp_path / "chip")],
                   check=True)
    lines = (tmp_path / "chip").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "i2c 76 8 1"
    assert "D0 60 00 FF 00 00" in lines  # ID: reset 0x60, read-only
    assert "E0 00 FF 00 00 00" in lines  # RESET: write-only
    assert "F3 00 00 09 00 00" in lines  # STATUS: two read-only bits, the rest reserved
    assert len(lines) == 1 + len(load_map(BME280))
    subprocess.run([*gen, "-o", str(tmp_path / "plain.h")], check=True)
    assert "REGDEV_BUS" not in (tmp_path / "plain.h").read_text(encoding="utf-8")
    done = subprocess.run([*gen, "--chip", "-o", str(tmp_path / "none")], capture_output=True,
                          text=True, check=False)
    assert (done.returncode, done.stderr) == (2, (
        'gen_regmap.py: error: the map puts no chip on a bus (docs/maps.md, "A chip behind a '
        'bridge"): there is no chip to simulate\n'))


@SHARED_BUILD
def test_bridge_image_fits_eight_kib_of_flash_and_one_of_ram(bme280_json: Path,
                                                            tmp_path: Path) -> None:
    """avr-size of the BME280 bridge image: flash <= 8 KiB, static RAM <= 1 KiB; make size
    checks the bridge's budget."""
    need("avr")
    make(tmp_path, "avr", regmap=bme280_json)
    done = subprocess.run(["avr-size", str(tmp_path / "avr" / "regdev-uno.elf")],
                          capture_output=True, text=True, check=True)
    text, data, bss = map(int, done.stdout.splitlines()[1].split()[:3])
    assert text + data <= 8192
    assert data + bss <= 1024
    out = make(tmp_path, "size", regmap=bme280_json)
    assert (f"flash {text + data} of the bridge's 8192 bytes, static RAM {data + bss} of 1024 "
            "bytes") in out


# --- in simavr: host -> pty -> firmware -> TWI -> simulated chip --------------------------------


def seeded_calls(seed: int, count: int = 60) -> list[str]:
    """A seeded stream of tool calls on the BME280 map, as replay lines: reads and writes of
    registers (absent, read-only and write-only ones included), field writes (masked
    writes), block reads (one burst) and block writes, values in and out of range."""
    rng = random.Random(seed)
    addresses = [r.addr for r in load_map(BME280)] + [0x00, 0xD1, 0xF6]
    fields = [("CTRL_MEAS.MODE", ["SLEEP", "FORCED", "NORMAL", 2]),
              ("CTRL_MEAS.OSRS_T", list(range(9))), ("CONFIG.FILTER", list(range(9))),
              ("CONFIG.SPI3W_EN", [0, 1]), ("CTRL_HUM.OSRS_H", list(range(9)))]
    calls: list[dict[str, object]] = []
    for _ in range(count):
        kind = rng.randrange(6)
        if kind == 0:
            calls.append({"tool": "read_register", "arguments": {"addr": rng.choice(addresses)}})
        elif kind == 1:
            calls.append({"tool": "write_register", "arguments": {
                "addr": rng.choice([*addresses, 0xF2, 0xF4, 0xF4, 0xF5, 0xE0]),
                "data": rng.choice([0, 1, 0x24, 0x27, 0xB6, 0xFF])}})
        elif kind == 2:
            field, values = rng.choice(fields)
            calls.append({"tool": "write_field",
                          "arguments": {"field": field, "value": rng.choice(values)}})
        elif kind == 3:
            calls.append({"tool": "read_fields", "arguments": {
                "register": rng.choice(["CTRL_MEAS", "CONFIG", "STATUS", "ID"])}})
        elif kind == 4:
            start, size = rng.choice([(0xF7, 8), (0x88, 6), (0xF2, 4), (0xF4, 3), (0xFD, 3)])
            calls.append({"tool": "read_registers", "arguments": {"addr": start, "count": size}})
        else:
            start = rng.choice([0xF4, 0xF2, 0xF3])
            calls.append({"tool": "write_registers", "arguments": {
                "addr": start, "data": [rng.choice([0, 0x24, 0x55, 0x100]) for _ in range(2)]}})
    return [json.dumps({"raw": json.dumps(call)}) for call in calls]


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_seeded_stream_through_the_bridge_gives_the_in_process_verdicts(
        capsys: pytest.CaptureFixture[str], bme280_json: Path, tmp_path: Path,
        seed: int) -> None:
    """The same seeded calls replayed through regdev, the pty, the Uno bridge image and its
    TWI to the simulated BME280 give what they give in process with the same map, call for
    call, and leave the same registers."""
    need("avr")
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(seeded_calls(seed)) + "\n", encoding="utf-8")
    status, out, err = run(capsys, "replay", "--no-audit", "--json", "--map", str(bme280_json),
                           str(calls))
    local = [json.loads(line) for line in out.splitlines()]
    with sim_process("--avr", "--map", str(bme280_json)) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(bme280_json), str(calls))
    assert (status, err) == (0, "")
    bridged = [json.loads(line) for line in out.splitlines()]
    assert bridged == local
    assert len(bridged) > 60
    assert {line["tool"] for line in bridged[:-1] if line["ok"]} == {
        "read_register", "write_register", "write_field", "read_fields", "read_registers",
        "write_registers"}  # each kind reached the chip at least once


#: Each bus fault of the simulated chip, and the error regdev reports for a read and a write.
BUS_FAULTS = {
    "nack-address": ("the chip at 0x76 did not acknowledge its address; nothing was done on "
                     "it (NOACK)",) * 2,
    "nack-data": (None, "the chip at 0x76 did not acknowledge a byte; a write may be partly "
                        "done (NACK)"),
    "arbitration": ("another I2C master took the bus from the bridge (arbitration lost) on the "
                    "way to the chip at 0x76; a write may be partly done (ARBLOST)",) * 2,
    "sda-low": ("the I2C bus to the chip at 0x76 is held low (SDA or SCL stuck: a chip "
                "holding it, or a missing pull-up) (BUSLOW)",) * 2,
    "stretch": ("the chip at 0x76 held the I2C clock low past the bridge's bound (25 ms); a "
                "write may be partly done (STRETCH)",) * 2,
}


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", list(BUS_FAULTS))
def test_each_bus_fault_is_its_documented_error_never_a_value(
        capsys: pytest.CaptureFixture[str], bme280_json: Path, tmp_path: Path,
        fault: str) -> None:
    """With the simulated chip misbehaving, a read and a write through the bridge are each
    reported as the fault's error in regdev's words (a read that the chip served is its
    value); nothing is reported done that the chip did not acknowledge."""
    need("avr")
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(json.dumps({"raw": json.dumps(call)}) for call in (
        {"tool": "read_register", "arguments": {"addr": 0xD0}},
        {"tool": "write_register", "arguments": {"addr": 0xF4, "data": 0x27}},
    )) + "\n", encoding="utf-8")
    with sim_process("--avr", "--map", str(bme280_json), "--bus-fault", fault) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(bme280_json), str(calls))
    read, write = (json.loads(line) for line in out.splitlines()[:2])
    expected_read, expected_write = BUS_FAULTS[fault]
    # the registers shown after the replay are read through the bridge too
    assert (status, err) == ((0, "") if expected_read is None else (
        2, f"regdev replay: error: the registers could not be read after the replay: the "
           f"device on {port} failed: {expected_read}\n"))
    if expected_read is None:
        assert (read["ok"], read["result"]["data"]) == (True, 0x60)
    else:
        assert (read["ok"], read["result"], read["message"]) == (
            False, None, f"the device failed: {expected_read}")
    assert (write["ok"], write["result"], write["message"]) == (
        False, None, f"the device failed: {expected_write}")


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_the_board_refuses_by_the_map_before_it_touches_the_bus(bme280_json: Path) -> None:
    """Frames sent straight to the bridge (past regdev's own checks) are refused by the map on
    the board, without a bus transfer: with a chip that acknowledges nothing, a write to the
    read-only ID is e DATA and an absent register e ADDR, while a read that goes to the bus
    is e NOACK."""
    need("avr")
    with sim_process("--avr", "--map", str(bme280_json), "--bus-fault", "nack-address") as (
            port, _), serial.Serial(port, 115200, timeout=5) as line:
        answers = []
        for request in (wire.WriteRequest(1, 0xD0, 0), wire.ReadRequest(2, 0),
                        wire.WriteBlockRequest(3, 0xF2, (1, 0)),
                        wire.MaskedWriteRequest(4, 0xF3, 0x08, 0x08),
                        wire.ReadRequest(5, 0xD0)):
            line.write(wire.encode(request))
            answers.append(wire.decode(line.read_until(b"\n")))
    assert [(a.seq, a.code) for a in answers] == [  # type: ignore[attr-defined]
        (1, "DATA"), (2, "ADDR"), (3, "DATA"), (4, "DATA"), (5, "NOACK")]


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_reads_writes_a_burst_and_a_masked_write_reach_the_simulated_chip(
        bme280_json: Path) -> None:
    """Frame by frame through the bridge: the chip's ID, a write read back, a masked write
    (read-modify-write of two bits), a block write and a burst read of it, the raw data's
    reset values in one burst, a write-only register reading 0, and a reset."""
    need("avr")
    requests = [
        (wire.ReadRequest(1, 0xD0), "r D0 60"),
        (wire.WriteRequest(2, 0xF4, 0x27), "w F4 27"),
        (wire.MaskedWriteRequest(3, 0xF4, 0x03, 0x01), "m F4 25"),
        (wire.WriteBlockRequest(4, 0xF4, (0x48, 0x1C)), "p F4 481C"),
        (wire.ReadBlockRequest(5, 0xF2, 4), "g F2 0000481C"),
        (wire.ReadBlockRequest(6, 0xF7, 8), "g F7 8000008000008000"),
        (wire.WriteRequest(7, 0xE0, 0xB6), "w E0 00"),
        (wire.ResetRequest(8), "z"),
        (wire.ReadRequest(9, 0xF4), "r F4 00"),
    ]
    with sim_process("--avr", "--map", str(bme280_json)) as (port, _), serial.Serial(
            port, 115200, timeout=5) as line:
        for request, expected in requests:
            line.write(wire.encode(request))
            answer = line.read_until(b"\n")
            assert answer.split(b"*")[0] == b"$%02X %s" % (request.seq, expected.encode())


def test_a_bus_fault_needs_a_map_with_a_bus(capsys: pytest.CaptureFixture[str]) -> None:
    """--bus-fault without --avr and a map whose chip is on a bus is a usage error."""
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "firmware-sim", "--avr", "--bus-fault", "sda-low")
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.splitlines()[-1].endswith(
        "error: --bus-fault goes with --avr and a map whose chip is on a bus (a bridge: "
        "docs/maps.md)")


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("regmap", "calls"), [
    ("sensor.rdl", "sensor-calls.jsonl"),  # write-1-to-clear, clear-on-read, write-only bits
    (None, "wild-calls.jsonl"),  # the default map: the shared wild cases
])
def test_shared_cases_through_the_bridge_give_the_in_process_verdicts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, regmap: str | None,
        calls: str) -> None:
    """A map put on a bus (the example sensor's, the default one) and its shared cases
    replayed through the bridge to the simulated chip give what they give in process."""
    need("avr")
    base = load_map(EXAMPLES / regmap) if regmap else RegisterMap.default()
    document = json.loads(base.to_json())
    document["bus"] = {"kind": "i2c", "address": 0x48}
    compiled = tmp_path / "chip.json"
    compiled.write_text(json.dumps(document), encoding="utf-8")
    local_status, out, _ = run(capsys, "replay", "--no-audit", "--json", "--map",
                               str(compiled), str(EXAMPLES / calls))
    local = [json.loads(line) for line in out.splitlines()]
    with sim_process("--avr", "--map", str(compiled)) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(compiled), str(EXAMPLES / calls))
    assert (status, err) == (local_status, "")
    assert [json.loads(line) for line in out.splitlines()] == local
    assert len(local) > 15
