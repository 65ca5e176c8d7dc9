"""Round trips through regdev to the C firmware, against the wire-time floor at 115200 baud.

Run: ``.venv/bin/python benchmarks/firmware_roundtrip.py [--calls N] [--json]``

Needs make, a C compiler, avr-gcc and simavr (docs/firmware.md); it builds what is out of date
in ``firmware-sim/c/build``. For each operation (``SerialDevice.read``, ``.write``, and a
``read_register`` call through a ``Gate``) it times N calls, one at a time, on:

* the C firmware's host build on a pty (the core with no wire time: regdev, the pty and the
  core alone);
* the ATmega328P image in simavr, through the harness's pty (simulated UART at 115200 baud,
  which simavr 1.6 times as 11 bits a byte at the Uno's UBRR 16 with U2X: 93.5 us);

and prints the medians and 90th percentiles beside the floor: the request's and the reply's
bytes at 10 bits a byte (8N1) and 115200 baud, the least any real wire can take. Last, from the
harness: simulated cycles per wall-clock second (the image sleeps when idle, and simavr then
keeps to real time) and the share of one core the harness used (its pty thread included).
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
from regdev import Gate, SerialDevice  # noqa: E402
from regdev.devices import _protocol as wire  # noqa: E402

BAUD = 115200
BITS_PER_BYTE = 10  # 8N1: start, 8 data, stop
#: What simavr 1.6 takes for one byte of the Uno's USART0 (UBRR 16, U2X): 8 x 17 cycles a bit,
#: 11 bits (it counts a parity bit that 8N1 has not), at 16 MHz.
SIMAVR_BYTE_SECONDS = 8 * 17 * 11 / 16e6
READ_CALL = '{"tool": "read_register", "arguments": {"addr": 3}}'
STATS = re.compile(r"(\d+) cycles \(([\d.]+) s at (\d+) Hz\) in ([\d.]+) s wall clock, "
                   r"([\d.]+) s CPU")


def floor_seconds(request: wire.Frame, reply: wire.Frame) -> tuple[int, float]:
    """Bytes of a request and its reply, and their time on a 115200 baud 8N1 wire."""
    size = len(wire.encode(request)) + len(wire.encode(reply))
    return size, size * BITS_PER_BYTE / BAUD


def time_calls(call: Callable[[int], object], calls: int) -> list[float]:
    """Seconds each of ``calls`` calls took, one after the other."""
    times = []
    for number in range(calls):
        start = time.perf_counter()
        call(number)
        times.append(time.perf_counter() - start)
    return times


def measure(port: str, calls: int) -> dict[str, list[float]]:
    """Time read, write and a gate call on the device at ``port``."""
    with SerialDevice(port, timeout=2.0) as device:
        device.identify()  # opens and synchronises the line, outside the timing
        gate = Gate(device)
        return {
            "read": time_calls(lambda n: device.read(3), calls),
            "write": time_calls(lambda n: device.write(3, n & 0xFF), calls),
            "gate read_register": time_calls(lambda n: gate.handle(READ_CALL), calls),
        }



def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    return process.communicate(timeout=10)[1]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=count(2, 100_000), default=300, metavar="N",
                        help="calls per operation: 2..100000 (default 300)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        harness, image = sim.avr_build()
    except sim.CannotServe as error:
        print(f"firmware_roundtrip.py: {error}", file=sys.stderr)
        return 2
    build = image.parent.parent
    done = subprocess.run(["make", "-s", "-C", str(sim.FIRMWARE_C), f"BUILD={build}",
                           f"PYTHON={sys.executable}", "host"],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        print(f"firmware_roundtrip.py: make host failed: {done.stdout}{done.stderr}",
              file=sys.stderr)
        return 2

    host, host_port = serve([str(build / "host" / "regdev-firmware-host")])
    try:
        on_host = measure(host_port, args.calls)
    finally:
        stop(host)
    simavr, avr_port = serve([str(harness), "--stats", str(image)])
    try:
        on_avr = measure(avr_port, args.calls)
    finally:
        stats = STATS.search(stop(simavr))
    if stats is None:
        print("firmware_roundtrip.py: the harness printed no statistics", file=sys.stderr)
        return 2
    cycles, _, hertz, wall, cpu = (float(value) for value in stats.groups())

    floors = {"read": floor_seconds(wire.ReadRequest(1, 3), wire.ReadReply(1, 3, 0)),
              "write": floor_seconds(wire.WriteRequest(1, 3, 0), wire.WriteReply(1, 3, 0))}
    floors["gate read_register"] = floors["read"]
    rows = {}
    for name, (size, floor) in floors.items():
        rows[name] = {
            "bytes": size, "wire_floor_ms": floor * 1e3,
            "simavr_uart_floor_ms": size * SIMAVR_BYTE_SECONDS * 1e3,
            "host_median_ms": statistics.median(on_host[name]) * 1e3,
            "simavr_median_ms": statistics.median(on_avr[name]) * 1e3,
            "simavr_p90_ms": statistics.quantiles(on_avr[name], n=10)[-1] * 1e3,
        }
    summary = {"calls": args.calls, "operations": rows,
               "simavr_cycles_per_wall_second": cycles / wall,
               "harness_cpu_share": cpu / wall, "clock_hz": hertz}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"C firmware round trips through regdev, {args.calls} calls each (milliseconds):")
    print(f"  {'operation':<20} {'bytes':>5} {'wire floor':>10} {'sim UART':>8} "
          f"{'host build':>10} {'simavr median':>13} {'p90':>6} {'vs floor':>8}")
    for name, row in rows.items():
        print(f"  {name:<20} {row['bytes']:>5} {row['wire_floor_ms']:>10.2f} "
              f"{row['simavr_uart_floor_ms']:>8.2f} {row['host_median_ms']:>10.2f} "
              f"{row['simavr_median_ms']:>13.2f} {row['simavr_p90_ms']:>6.2f} "
              f"{row['simavr_median_ms'] / row['wire_floor_ms']:>7.2f}x")
    print(f"  wire floor: the frames' bytes x {BITS_PER_BYTE} bits / {BAUD} baud; sim UART: "
          f"the same bytes as simavr times the Uno's UART ({SIMAVR_BYTE_SECONDS * 1e6:.1f} us "
          "a byte); host build: the same core on a pty, no wire time")
    per_wall = cycles / wall
    print(f"simavr: {per_wall / 1e6:.2f} M simulated cycles per wall-clock second "
          f"({per_wall / hertz:.3f}x real time at {hertz / 1e6:g} MHz); the harness used "
          f"{100 * cpu / wall:.0f}% of one core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
