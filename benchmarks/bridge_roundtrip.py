"""A register read through the bridge (regdev -> pty -> the Uno image in simavr -> its TWI ->
the simulated chip), against the wire time of its bytes plus the I2C bus time, in one run.

Run: ``.venv/bin/python benchmarks/bridge_roundtrip.py [--calls N] [--json]``

Needs make, a C compiler, avr-gcc and simavr (docs/firmware.md); the images are built (if out
of date) into ``regdev firmware-sim --avr``'s cache. Two simulators run at once: the bridge
image of ``examples/bme280.rdl`` with its simulated BME280 on the TWI, and the plain image
(the default map: registers held on the board, no bus). Calls alternate between them, one
at a time, so that the machine's load falls on both alike: ``SerialDevice.read`` of one
register, ``read_block`` of eight (one burst on the bus), and a ``read_register`` call
through a ``Gate``; the medians are printed beside two floors:

* the real floor (the budget: within 1.3x of it): the request's and the reply's bytes
  at 10 bits a byte (8N1) and 115200 baud, plus the I2C transaction at the map's bus clock
  (100 kHz): START, the chip's address and write bit, the register address, a repeated START,
  the address and read bit, the data bytes, STOP; 9 clock periods a byte (8 bits and the
  acknowledgement) and one each for START, repeated START and STOP (their setup and hold
  times at standard mode, 4.0 to 4.7 us, are about half a period each: the I2C-bus
  specification, NXP UM10204 rev. 7, table 10).
* the simulation's own floor, measured: the same call on the plain image (the same frame
  sizes: ``R D0`` and ``R 03`` are as long), plus the bus time simavr 1.6 imposes: its TWI
  takes 9 us a byte (it counts one "TWI cycle" a microsecond, whatever TWBR and the clock
  say: avr_twi.c) and nothing for START and STOP.

Neither simavr's TWI nor its UART keeps real time: at 100 kHz a byte takes 90 us on a real
bus, 9 us in simavr, and a round trip through simavr's UART can end sooner than its bytes
would take at 115200 baud. So the first ratio is not what a board would show (it can be
below 1); the second says what the bridge's own work costs over the simulation's.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _script import Parser, count, serve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "firmware-sim"))

import regdev_firmware_sim as sim  # noqa: E402 - from firmware-sim/, put on the path above
from regdev import Gate, RegisterMap  # noqa: E402
from regdev.devices import _protocol as wire  # noqa: E402
from regdev.devices._open import open_device  # noqa: E402
from regdev.devices._rdl import load_map  # noqa: E402

BME280 = ROOT / "examples" / "bme280.rdl"
BAUD = 115200
BITS_PER_BYTE = 10  # 8N1: start, 8 data, stop
#: What simavr 1.6 takes for one byte on its TWI (9 "TWI cycles" of 1 us), whatever the clock.
SIMAVR_TWI_BYTE_SECONDS = 9e-6
#: The register read (the chip's ID) and the burst (the raw pressure, temperature and
#: humidity, 0xF7..0xFE), and the plain image's registers of the same frame sizes.
READ, BURST, BURST_COUNT = 0xD0, 0xF7, 8
PLAIN_READ, PLAIN_BURST = 0x03, 0x00
STATS = re.compile(r"(\d+) cycles \(([\d.]+) s at (\d+) Hz\) in ([\d.]+) s wall clock")
READ_CALL = '{{"tool": "read_register", "arguments": {{"addr": {addr}}}}}'


def wire_seconds(request: wire.Frame, reply: wire.Frame) -> tuple[int, float]:
    """Bytes of a request and its reply, and their time on a 115200 baud 8N1 wire."""
    size = len(wire.encode(request)) + len(wire.encode(reply))
    return size, size * BITS_PER_BYTE / BAUD


def i2c_read_bytes(regmap: RegisterMap, count: int) -> int:
    """Bytes on the bus for a read of ``count`` registers: address+W, the register address
    (1 or 2 bytes), address+R, the data."""
    assert regmap.bus is not None
    return 1 + regmap.bus.addr_width // 8 + 1 + count


def i2c_seconds(regmap: RegisterMap, count: int) -> float:
    """The I2C transaction of a read of ``count`` registers at the map's bus clock: 9 clock
    periods a byte, one each for START, repeated START and STOP."""
    assert regmap.bus is not None
    return (9 * i2c_read_bytes(regmap, count) + 3) / regmap.bus.clock



def stop(process: subprocess.Popen[str]) -> float | None:
    """Stop a harness; its simulated seconds per wall-clock second (``--stats``), or None."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    stats = STATS.search(process.communicate(timeout=30)[1])
    return None if stats is None else float(stats.group(2)) / float(stats.group(4))


def alternate(pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]],
              calls: int) -> dict[str, tuple[list[float], list[float]]]:
    """Seconds each call took, the bridge's and the plain image's in turn, ``calls`` each."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pairs}
    for _ in range(calls):
        for name, functions in pairs.items():
            for side, function in enumerate(functions):
                start = time.perf_counter()
                function()
                times[name][side].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=count(2, 100_000), default=300, metavar="N",
                        help="calls per operation and image: 2..100000 (default 300)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    regmap = load_map(BME280)
    try:
        harness, plain_image = sim.avr_build()
        _, bridge_image = sim.avr_build(regmap=regmap, source=str(BME280))
    except sim.CannotServe as error:
        print(f"bridge_roundtrip.py: {error}", file=sys.stderr)
        return 2
    chip = bridge_image.parents[1] / "chip.txt"
    bridge, bridge_port = serve([str(harness), "--stats", "--i2c-chip", str(chip),
                                 str(bridge_image)])
    try:
        plain, plain_port = serve([str(harness), "--stats", str(plain_image)])
    except BaseException:
        stop(bridge)
        raise
    try:
        with open_device(bridge_port, regmap=regmap, timeout=2) as there, \
                open_device(plain_port, timeout=2) as here:
            there.identify()  # opens and synchronises each line, outside the timing
            here.identify()
            gate_there, gate_here = Gate(there), Gate(here)
            bridge_call = READ_CALL.format(addr=READ)
            plain_call = READ_CALL.format(addr=PLAIN_READ)
            if there.read(READ) != 0x60 or not gate_there.handle(bridge_call).ok:
                print("bridge_roundtrip.py: the bridge did not read the chip's ID 0x60",
                      file=sys.stderr)
                return 2
            times = alternate({
                "read": (lambda: there.read(READ), lambda: here.read(PLAIN_READ)),
                f"read_block x{BURST_COUNT}": (lambda: there.read_block(BURST, BURST_COUNT),
                                               lambda: here.read_block(PLAIN_BURST,
                                                                       BURST_COUNT)),
                "gate read_register": (lambda: gate_there.handle(bridge_call),
                                       lambda: gate_here.handle(plain_call)),
            }, args.calls)
    finally:
        speeds = stop(bridge), stop(plain)

    frames = {
        "read": (wire.ReadRequest(1, READ), wire.ReadReply(1, READ, 0x60), 1),
        f"read_block x{BURST_COUNT}": (wire.ReadBlockRequest(1, BURST, BURST_COUNT),
                                       wire.ReadBlockReply(1, BURST, (0,) * BURST_COUNT),
                                       BURST_COUNT),
    }
    frames["gate read_register"] = frames["read"]
    rows = {}
    for name, (request, reply, registers) in frames.items():
        size, on_wire = wire_seconds(request, reply)
        bus = i2c_seconds(regmap, registers)
        sim_bus = i2c_read_bytes(regmap, registers) * SIMAVR_TWI_BYTE_SECONDS
        bridged = statistics.median(times[name][0])
        plain_median = statistics.median(times[name][1])
        rows[name] = {
            "frame_bytes": size, "bus_bytes": i2c_read_bytes(regmap, registers),
            "wire_ms": on_wire * 1e3, "i2c_100khz_ms": bus * 1e3,
            "floor_ms": (on_wire + bus) * 1e3,
            "bridge_median_ms": bridged * 1e3,
            "bridge_p90_ms": statistics.quantiles(times[name][0], n=10)[-1] * 1e3,
            "plain_median_ms": plain_median * 1e3,
            "sim_floor_ms": (plain_median + sim_bus) * 1e3,
            "vs_floor": bridged / (on_wire + bus),
            "vs_sim_floor": bridged / (plain_median + sim_bus),
        }
    summary = {"calls": args.calls, "map": "examples/bme280.rdl", "bus_clock_hz":
               regmap.bus.clock if regmap.bus else None, "operations": rows,
               "simavr_twi_byte_us": SIMAVR_TWI_BYTE_SECONDS * 1e6,
               "real_time_factor": {"bridge": speeds[0], "plain": speeds[1]}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"Reads through the bridge to a simulated BME280, {args.calls} calls each, alternating "
          "with the plain image (milliseconds):")
    print(f"  {'operation':<20} {'bytes':>5} {'wire':>6} {'I2C':>6} {'floor':>6} "
          f"{'bridge':>7} {'p90':>6} {'vs floor':>8} {'plain':>6} {'sim floor':>9} "
          f"{'vs sim':>7}")
    for name, row in rows.items():
        print(f"  {name:<20} {row['frame_bytes']:>5} {row['wire_ms']:>6.2f} "
              f"{row['i2c_100khz_ms']:>6.2f} {row['floor_ms']:>6.2f} "
              f"{row['bridge_median_ms']:>7.2f} {row['bridge_p90_ms']:>6.2f} "
              f"{row['vs_floor']:>7.2f}x {row['plain_median_ms']:>6.2f} "
              f"{row['sim_floor_ms']:>9.2f} {row['vs_sim_floor']:>6.2f}x")
    print(f"  floor: the frames' bytes x {BITS_PER_BYTE} bits / {BAUD} baud, plus the I2C "
          "transaction at 100 kHz (9 clocks a byte, 1 each for START, repeated START, STOP); "
          "the budget is 1.3x of it on a board; simavr's UART and TWI are faster than a "
          "real wire and bus, so here this ratio is no measure of it")
    print(f"  sim floor: the same call on the plain image (no bus), measured alongside, plus "
          f"simavr's TWI time ({SIMAVR_TWI_BYTE_SECONDS * 1e6:g} us a byte whatever the clock: "
          "not real bus timing; a real 100 kHz bus takes 90 us a byte)")
    shown = ", ".join(f"{name} {speed:.3f}x" if speed is not None else f"{name} unknown"
                      for name, speed in zip(("bridge", "plain"), speeds, strict=True))
    print(f"  simavr ran at {shown} real time (simulated seconds per wall-clock second, "
          "over the run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
