"""The C firmware as a bridge to an I2C or SPI chip: a map's bus, the generator's bridge
settings and simulated chip, and the Uno image in simavr forwarding to a simulated chip on its
TWI or SPI (host -> pty -> firmware -> bus -> chip), its bus faults, and its size budget.

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
from regdev.devices._regmap import Bus, Field, Register, RegisterMap
from support.firmware import sim_process
from support.firmware_c import C_DIR, SHARED_BUILD, make, need

BME280 = EXAMPLES / "bme280.rdl"
SX1276 = EXAMPLES / "sx1276.rdl"
#: A BME280 in SPI mode (its datasheet, section 6.3): mode 0 (or 3), bit 7 of the address
#: byte 1 for a read and 0 for a write, the address's own bit 7 dropped.
BME280_SPI = {"kind": "spi", "clock": 2_000_000, "mode": 0, "cs": "D10", "read_mask": 0x80,
              "write_mask": 0x00}


@pytest.fixture(scope="module")
def bme280_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/bme280.rdl in its compiled JSON form."""
    path = tmp_path_factory.mktemp("bme280") / "bme280.json"
    path.write_text(load_map(BME280).to_json(), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bme280_spi_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/bme280.rdl put on SPI (:data:`BME280_SPI`), in its compiled JSON form."""
    document = json.loads(load_map(BME280).to_json())
    document["bus"] = BME280_SPI
    path = tmp_path_factory.mktemp("bme280-spi") / "bme280-spi.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sx1276_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/sx1276.rdl in its compiled JSON form."""
    path = tmp_path_factory.mktemp("sx1276") / "sx1276.json"
    path.write_text(load_map(SX1276).to_json(), encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=["i2c", "spi"])
def bridged_bme280(request: pytest.FixtureRequest, bme280_json: Path,
                   bme280_spi_json: Path) -> Path:
    """The BME280's map on each bus the bridge knows (a fixture: the image of each is built
    once for the module)."""
    return bme280_json if request.param == "i2c" else bme280_spi_json


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


def test_the_example_map_puts_an_sx1276_on_spi_and_the_json_form_keeps_it(
        sx1276_json: Path) -> None:
    """The SPI properties give the bus, the SX1276's framing (bit 7 set to write) included."""
    regmap = load_map(SX1276)
    assert regmap.bus == Bus("spi", clock=1_000_000, mode=0, cs="D10", read_mask=0x00,
                             write_mask=0x80, verify=True)
    assert regmap.bus.chip == "the SPI chip on D10"  # type: ignore[union-attr]
    assert RegisterMap.from_json(sx1276_json.read_text(encoding="utf-8")) == regmap
    assert json.loads(regmap.to_json())["bus"] == {
        "kind": "spi", "clock": 1_000_000, "addr_width": 8, "auto_increment": True,
        "mode": 0, "cs": "D10", "read_mask": 0, "write_mask": 0x80, "verify": True}
    assert Bus("spi") == Bus("spi", clock=1_000_000, mode=0, cs="D10", read_mask=0x80,
                             write_mask=0, verify=False)  # the defaults


@pytest.mark.parametrize(("bus", "message"), [
    ({"kind": "usb"}, "`bus`: `usb` is not a bus the bridge knows; expected one of i2c, spi"),
    ({"kind": "i2c"}, "`bus`: an I2C chip needs its 7-bit address (regdev_i2c_address; in "
                      "JSON, `address`)"),
    ({"kind": "spi", "address": 0x76}, "`bus`: address is for I2C; this chip is on SPI"),
    ({"kind": "i2c", "address": 0x76, "mode": 1, "cs": "D9"},
     "`bus`: mode, cs are for SPI; this chip is on I2C"),
    ({"kind": "spi", "mode": 4}, "`bus`: the SPI mode must be 0, 1, 2 or 3, got 4"),
    ({"kind": "spi", "mode": True}, "`bus`: the SPI mode must be 0, 1, 2 or 3, got True"),
    ({"kind": "spi", "clock": 5_000_000}, "`bus`: the ATmega328P makes its SPI clock from 16 "
                                          "MHz divided by 2..128: 8000000, 4000000, 2000000, "
                                          "1000000, 500000, 250000, 125000 Hz; got 5000000"),
    ({"kind": "spi", "clock": 16_000_000}, "`bus`: the ATmega328P makes its SPI clock from 16 "
                                           "MHz divided by 2..128: 8000000, 4000000, 2000000, "
                                           "1000000, 500000, 250000, 125000 Hz; got 16000000"),
    *[({"kind": "spi", "cs": pin}, "`bus`: the chip-select pin must be one of the Uno's "
                                   "D2..D10 or A0..A5 (D0 and D1 carry the serial line, "
                                   f"D11..D13 are MOSI, MISO and SCK), got {shown}")
      for pin, shown in (("D12", "`D12`"), ("D1", "`D1`"), ("PB2", "`PB2`"), ("A6", "`A6`"),
                         (10, "10"))],
    ({"kind": "spi", "read_mask": 0x100}, "`bus`: the SPI read mask must be a byte 0..255, got "
                                          "256"),
    ({"kind": "spi", "read_mask": 0x80, "write_mask": 0x80},
     "`bus`: the SPI read mask and write mask are both 0x80: the chip could not tell a read "
     "from a write"),
    ({"kind": "spi", "verify": 1}, "`bus`: verify must be true or false"),
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


def test_two_registers_one_spi_address_byte_are_refused() -> None:
    """On SPI the read and write bits replace bits of the address byte: registers whose
    addresses differ only there are refused (with 16-bit addresses they are not)."""
    registers = [Register("LOW", 0x74), Register("HIGH", 0xF4)]
    with pytest.raises(MapError) as caught:
        RegisterMap(registers, bus=Bus("spi"))
    assert str(caught.value) == ("register HIGH (0xF4): on SPI its address byte is 0x74 (the "
                                 "bits 0x80 say read or write), the same as LOW (0x74)'s")
    assert len(RegisterMap(registers, bus=Bus("spi", addr_width=16))) == 2
    assert len(RegisterMap(registers, bus=Bus("i2c", 0x76))) == 2


def test_systemrdl_spi_properties_out_of_range_are_refused_naming_the_file(
        tmp_path: Path) -> None:
    """A SystemRDL map's SPI property out of its range is refused naming the file."""
    text = SX1276.read_text(encoding="utf-8").replace("regdev_spi_mode = 0;",
                                                     "regdev_spi_mode = 5;")
    path = tmp_path / "radio.rdl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MapError) as caught:
        load_map(path)
    assert str(caught.value).startswith(f"{path}:")
    assert str(caught.value).endswith("the bus: the SPI mode must be 0, 1, 2 or 3, got 5")


def test_generator_writes_the_bridge_settings_and_the_simulated_chip(
        bme280_json: Path, sx1276_json: Path, tmp_path: Path) -> None:
    """gen_regmap.py: REGDEV_BUS_* (and REGDEV_SPI_* for SPI) for a map with a bus (none
    without), and --chip's table."""
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
    subprocess.run([*gen, "--map", str(sx1276_json), "-o", str(tmp_path / "spi.h")],
                   check=True)
    header = (tmp_path / "spi.h").read_text(encoding="utf-8")
    for line in ("#define REGDEV_BUS 1", "#define REGDEV_BUS_SPI 1",
                 "#define REGDEV_BUS_CLOCK 1000000UL", "#define REGDEV_SPI_MODE 0u",
                 "#define REGDEV_SPI_CS_PORT PORTB", "#define REGDEV_SPI_CS_BIT 2u",
                 "#define REGDEV_SPI_READ 0x00u", "#define REGDEV_SPI_WRITE 0x80u",
                 "#define REGDEV_SPI_VERIFY 1", "#define REGDEV_SPI_IDENTITY 0x42u"):
        assert line in header
    assert "REGDEV_BUS_I2C" not in header
    subprocess.run([*gen, "--chip", "--map", str(sx1276_json), "-o", str(tmp_path / "spi")],
                   check=True)
    lines = (tmp_path / "spi").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "spi 8 1 0 B 2 00 80"
    assert "12 00 FF FF FF 00" in lines  # IRQ_FLAGS: every bit write-1-to-clear
    assert "42 12 00 FF 00 00" in lines  # VERSION: read-only, the identity
    subprocess.run([*gen, "-o", str(tmp_path / "plain.h")], check=True)
    assert "REGDEV_BUS" not in (tmp_path / "plain.h").read_text(encoding="utf-8")
    done = subprocess.run([*gen, "--chip", "-o", str(tmp_path / "none")], capture_output=True,
                          text=True, check=False)
    assert (done.returncode, done.stderr) == (2, (
        'gen_regmap.py: error: the map puts no chip on a bus (docs/maps.md, "A chip behind a '
        'bridge"): there is no chip to simulate\n'))


@SHARED_BUILD
@pytest.mark.parametrize("example", ["bme280", "sx1276"])
def test_bridge_image_fits_eight_kib_of_flash_and_one_of_ram(
        bme280_json: Path, sx1276_json: Path, tmp_path: Path, example: str) -> None:
    """avr-size of each bridge image (the BME280 on I2C, the SX1276 on SPI): flash <= 8 KiB,
    static RAM <= 1 KiB; make size checks the bridge's budget."""
    need("avr")
    compiled = bme280_json if example == "bme280" else sx1276_json
    make(tmp_path, "avr", regmap=compiled)
    done = subprocess.run(["avr-size", str(tmp_path / "avr" / "regdev-uno.elf")],
                          capture_output=True, text=True, check=True)
    text, data, bss = map(int, done.stdout.splitlines()[1].split()[:3])
    assert text + data <= 8192
    assert data + bss <= 1024
    out = make(tmp_path, "size", regmap=compiled)
    assert (f"flash {text + data} of the bridge's 8192 bytes, static RAM {data + bss} of 1024 "
            "bytes") in out


# --- in simavr: host -> pty -> firmware -> TWI or SPI -> simulated chip -------------------------


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
        capsys: pytest.CaptureFixture[str], bridged_bme280: Path, tmp_path: Path,
        seed: int) -> None:
    """The same seeded calls replayed through regdev, the pty, the Uno bridge image and its
    TWI or SPI to the simulated BME280 give what they give in process with the same map, call
    for call, and leave the same registers."""
    need("avr")
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(seeded_calls(seed)) + "\n", encoding="utf-8")
    status, out, err = run(capsys, "replay", "--no-audit", "--json", "--map",
                           str(bridged_bme280), str(calls))
    local = [json.loads(line) for line in out.splitlines()]
    with sim_process("--avr", "--map", str(bridged_bme280)) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(bridged_bme280), str(calls))
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


#: Each fault of the simulated SPI chip, and the error regdev reports for a read of the
#: SX1276's VERSION and a write of its OP_MODE (the map asks the bridge to verify writes).
SPI_FAULTS = {
    "miso-high": ("the SPI chip on D10 answered 0xFF to every byte, its identity register too: "
                  "nothing drives MISO (the chip absent, unpowered or not selected); a write "
                  "may or may not be done (MISOHI)",) * 2,
    "miso-low": ("the SPI chip on D10 answered 0x00 to every byte, its identity register too: "
                 "MISO is held low (a short, or the chip in reset); a write may or may not be "
                 "done (MISOLO)",) * 2,
    "ignore-writes": (None, "the SPI chip on D10 did not keep a write: read back, the bits the "
                            "map says it stores differ (MOSI or chip select open, or the chip "
                            "write-protected) (VERIFY)"),
}


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", list(SPI_FAULTS))
def test_each_detectable_spi_fault_is_its_documented_error_never_a_value(
        capsys: pytest.CaptureFixture[str], sx1276_json: Path, tmp_path: Path,
        fault: str) -> None:
    """SPI has no acknowledgement; what the bridge can tell, it tells: MISO stuck high or low
    (every byte and the identity register alike) on a read and on a write's read back, and a
    write the chip did not keep (the map's regdev_spi_verify); a read the chip served is its
    value."""
    need("avr")
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(json.dumps({"raw": json.dumps(call)}) for call in (
        {"tool": "read_register", "arguments": {"addr": 0x42}},
        {"tool": "write_register", "arguments": {"addr": 0x01, "data": 0x81}},
    )) + "\n", encoding="utf-8")
    with sim_process("--avr", "--map", str(sx1276_json), "--bus-fault", fault) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(sx1276_json), str(calls))
    read, write = (json.loads(line) for line in out.splitlines()[:2])
    expected_read, expected_write = SPI_FAULTS[fault]
    assert (status, err) == ((0, "") if expected_read is None else (
        2, f"regdev replay: error: the registers could not be read after the replay: the "
           f"device on {port} failed: {expected_read}\n"))
    if expected_read is None:
        assert (read["ok"], read["result"]["data"]) == (True, 0x12)
    else:
        assert (read["ok"], read["result"], read["message"]) == (
            False, None, f"the device failed: {expected_read}")
    assert (write["ok"], write["result"], write["message"]) == (
        False, None, f"the device failed: {expected_write}")


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_a_write_the_spi_chip_did_not_keep_is_never_reported_done_without_verify(
        capsys: pytest.CaptureFixture[str], bme280_spi_json: Path, tmp_path: Path) -> None:
    """With a map that does not ask the board to verify, a write, a field write and a block
    write the chip did not take are still errors: regdev compares what the bridge read back
    with what it asked for."""
    need("avr")
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(json.dumps({"raw": json.dumps(call)}) for call in (
        {"tool": "write_register", "arguments": {"addr": 0xF4, "data": 0x27}},
        {"tool": "write_field", "arguments": {"field": "CTRL_MEAS.MODE", "value": "NORMAL"}},
        {"tool": "write_registers", "arguments": {"addr": 0xF2, "data": [1]}},
        {"tool": "read_register", "arguments": {"addr": 0xD0}},
    )) + "\n", encoding="utf-8")
    with sim_process("--avr", "--map", str(bme280_spi_json), "--bus-fault",
                     "ignore-writes") as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(bme280_spi_json), str(calls))
    assert (status, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()[:4]]
    assert [(line["ok"], line["message"]) for line in lines[:3]] == [
        (False, "the device failed: register CTRL_MEAS (0xF4) holds 0x00 after writing 0x27 "
                "(bits 0x27 differ)"),
        (False, "the device failed: register CTRL_MEAS (0xF4) holds 0x00 after writing 0x03 "
                "(bits 0x03 differ)"),
        (False, "the device failed: register CTRL_HUM (0xF2) holds 0x00 after writing 0x01 "
                "(bits 0x01 differ)")]
    assert (lines[3]["ok"], lines[3]["result"]["data"]) == (True, 0x60)


#: An SPI chip whose writes the board does not verify: an identity register, and a register
#: whose clear-on-read bits keep the board from reading a write back (a read would clear them).
UNREAD_SPI = RegisterMap([
    Register("ID", 0x10, identity=True, fields=(Field("PART", 0, 7, access="r", reset=0x5A),)),
    Register("EVT", 0x11, fields=(Field("EN", 0, 0),
                                  Field("COUNT", 4, 7, access="r", onread="rclr")))],
    name="unread", bus=Bus("spi"))


@pytest.fixture(scope="module")
def unread_spi_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`UNREAD_SPI` in its compiled JSON form."""
    path = tmp_path_factory.mktemp("unread") / "unread.json"
    path.write_text(UNREAD_SPI.to_json(), encoding="utf-8")
    return path


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fault", "code"), [
    (None, None), ("miso-high", "MISOHI"), ("miso-low", "MISOLO")])
def test_a_write_the_spi_board_reads_nothing_back_of_is_checked_against_a_stuck_miso(
        unread_spi_json: Path, fault: str | None, code: str | None) -> None:
    """Without regdev_spi_verify nothing of a reset (`Z`: each register written) is read
    back, nor is a write to a register with clear-on-read bits (`W`, `P`); SPI has no
    acknowledgement, so the board reads the identity register after each: with MISO stuck
    (the chip absent, or held in reset) each is the bus's error, never done; with the chip
    there each is done."""
    need("avr")
    requests = [wire.ResetRequest(1), wire.WriteRequest(2, 0x11, 0x01),
                wire.WriteBlockRequest(3, 0x11, (0x00,))]
    done = ["z", "w 11 01", "p 11 00"]
    faults = ("--bus-fault", fault) if fault else ()
    with sim_process("--avr", "--map", str(unread_spi_json), *faults) as (
            port, _), serial.Serial(port, 115200, timeout=5) as line:
        answers = []
        for request in requests:
            line.write(wire.encode(request))
            answers.append(line.read_until(b"\n").split(b"*")[0].decode())
    assert answers == [f"${r.seq:02X} " + (f"e {code}" if code else d)
                       for r, d in zip(requests, done, strict=True)]


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_spi_reads_writes_a_burst_and_a_masked_write_reach_the_simulated_chip(
        sx1276_json: Path) -> None:
    """Frame by frame through the SPI bridge to the simulated SX1276 (bit 7 set to write):
    its VERSION, a write read back, a masked write, a block write and a burst read of the
    carrier frequency, write-1-to-clear flags, a dump, and a reset (verified)."""
    need("avr")
    requests = [
        (wire.ReadRequest(1, 0x42), "r 42 12"),
        (wire.WriteRequest(2, 0x01, 0x81), "w 01 81"),
        (wire.MaskedWriteRequest(3, 0x01, 0x07, 0x05), "m 01 85"),
        (wire.ReadBlockRequest(4, 0x06, 4), "g 06 6C80004F"),
        (wire.WriteBlockRequest(5, 0x06, (0xE4, 0xC0, 0x00)), "p 06 E4C000"),
        (wire.ReadBlockRequest(6, 0x06, 3), "g 06 E4C000"),
        (wire.WriteRequest(7, 0x12, 0xFF), "w 12 00"),
        (wire.DumpRequest(8, 0x30), "d 30 00000000000000000012000000000000"),
        (wire.ResetRequest(9), "z"),
        (wire.ReadBlockRequest(10, 0x06, 3), "g 06 6C8000"),
        (wire.ReadRequest(11, 0x01), "r 01 09"),
    ]
    with sim_process("--avr", "--map", str(sx1276_json)) as (port, _), serial.Serial(
            port, 115200, timeout=5) as line:
        for request, expected in requests:
            line.write(wire.encode(request))
            answer = line.read_until(b"\n")
            assert answer.split(b"*")[0] == b"$%02X %s" % (request.seq, expected.encode())


#: For each bus, a fault that makes every transfer an error, and that error's code.
FAILING_BUS = {"i2c": ("nack-address", "NOACK"), "spi": ("miso-high", "MISOHI")}


@SHARED_BUILD
@pytest.mark.timeout(300)
def test_the_board_refuses_by_the_map_before_it_touches_the_bus(
        request: pytest.FixtureRequest, bridged_bme280: Path) -> None:
    """Frames sent straight to the bridge (past regdev's own checks) are refused by the map on
    the board, without a bus transfer: with a chip that answers nothing (on I2C, no
    acknowledgement; on SPI, MISO high), a write to the read-only ID is e DATA and an absent
    register e ADDR, while a read that goes to the bus is the bus's error."""
    need("avr")
    fault, code = FAILING_BUS[request.node.callspec.params["bridged_bme280"]]
    with sim_process("--avr", "--map", str(bridged_bme280), "--bus-fault", fault) as (
            port, _), serial.Serial(port, 115200, timeout=5) as line:
        answers = []
        for frame in (wire.WriteRequest(1, 0xD0, 0), wire.ReadRequest(2, 0),
                      wire.WriteBlockRequest(3, 0xF2, (1, 0)),
                      wire.MaskedWriteRequest(4, 0xF3, 0x08, 0x08),
                      wire.ReadRequest(5, 0xD0)):
            line.write(wire.encode(frame))
            answers.append(wire.decode(line.read_until(b"\n")))
    assert [(a.seq, a.code) for a in answers] == [  # type: ignore[attr-defined]
        (1, "DATA"), (2, "ADDR"), (3, "DATA"), (4, "DATA"), (5, code)]


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


def test_a_bus_fault_must_be_one_of_the_maps_bus(capsys: pytest.CaptureFixture[str],
                                                bme280_json: Path) -> None:
    """--bus-fault with a fault of the other bus is a usage error naming the right ones."""
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "firmware-sim", "--avr", "--map", str(bme280_json), "--bus-fault",
            "miso-high")
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.splitlines()[-1].endswith(
        "error: --bus-fault miso-high is not a fault of a chip on I2C, as this map's is; "
        "expected one of nack-address, nack-data, arbitration, sda-low, stretch")


def test_a_bridge_map_the_c_firmware_cannot_carry_is_refused_without_pointing_at_modbus(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A 16-bit register on an I2C chip: --avr names the map and says the C firmware cannot
    serve it, in one line, and does not suggest Modbus, which the firmware does not speak."""
    wide = RegisterMap([Register("ID", 0, identity=True, access="r", reset=0x42),
                        Register("WORD", 2, width=16)],
                       name="wide", bus=Bus("i2c", 0x50))
    path = tmp_path / "wide.json"
    path.write_text(wide.to_json(), encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "firmware-sim", "--avr", "--map", str(path))
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err == (f"regdev firmware-sim: error: {path}: the C firmware cannot serve this map: "
                   "register WORD (0x02) is 16 bits wide; regdev's serial protocol carries "
                   "8-bit registers (one byte each on the wire)\n")


def test_a_bus_fault_needs_a_map_with_a_bus(capsys: pytest.CaptureFixture[str]) -> None:
    """--bus-fault without --avr and a map whose chip is on a bus is a usage error."""
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "firmware-sim", "--avr", "--bus-fault", "sda-low")
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.splitlines()[-1].endswith(
        "error: --bus-fault goes with --avr and a map whose chip is on a bus (a bridge: "
        "docs/maps.md)")


#: The buses the shared cases are replayed over: I2C; SPI in mode 3 with an SX1276's framing
#: (bit 7 set to write), another chip-select pin, and every write verified on the board; SPI
#: in mode 2 at the slowest clock with 16-bit register addresses, no auto-increment (a block
#: is one transfer a register) and the chip selected by a pin of port C.
SHARED_BUSES = {"i2c": {"kind": "i2c", "address": 0x48},
                "spi": {"kind": "spi", "mode": 3, "clock": 4_000_000, "cs": "D9",
                        "read_mask": 0x00, "write_mask": 0x80, "verify": True},
                "spi16": {"kind": "spi", "mode": 2, "clock": 125_000, "cs": "A0",
                          "addr_width": 16, "auto_increment": False, "read_mask": 0x03,
                          "write_mask": 0x02}}


@SHARED_BUILD
@pytest.mark.timeout(300)
@pytest.mark.parametrize("bus", list(SHARED_BUSES))
@pytest.mark.parametrize(("regmap", "calls"), [
    ("sensor.rdl", "sensor-calls.jsonl"),  # write-1-to-clear, clear-on-read, write-only bits
    (None, "wild-calls.jsonl"),  # the default map: the shared wild cases
])
def test_shared_cases_through_the_bridge_give_the_in_process_verdicts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, regmap: str | None,
        calls: str, bus: str) -> None:
    """A map put on a bus (the example sensor's, the default one) and its shared cases
    replayed through the bridge to the simulated chip give what they give in process."""
    need("avr")
    base = load_map(EXAMPLES / regmap) if regmap else RegisterMap.default()
    document = json.loads(base.to_json())
    document["bus"] = SHARED_BUSES[bus]
    compiled = tmp_path / "chip.json"
    compiled.write_text(json.dumps(document), encoding="utf-8")
    local_status, out, _ = run(capsys, "replay", "--no-audit", "--json", "--map",
                               str(compiled), str(EXAMPLES / calls))
    local = [json.loads(line) for line in out.splitlines()]
    with sim_process("--avr", "--map", str(compiled)) as (port, _):
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(compiled), str(EXAMPLES / calls))
    assert (status, err) == (local_status, "")
    # the registers after: a clear-on-read register not read through the bridge (null)
    clears = {register.addr for register in base.registers if register.rclr_mask}
    local[-1]["registers"] = [{**row, "data": None} if row["addr"] in clears else row
                              for row in local[-1]["registers"]]
    assert [json.loads(line) for line in out.splitlines()] == local
    assert len(local) > 15
