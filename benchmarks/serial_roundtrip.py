"""The serial backend against plain pyserial: one request and its reply over a pty.

The hot-path table's last two rows: ``SerialDevice.read`` and ``.write`` (goal: at most 1.2x the
anchor) and ``Gate.handle`` of a read and a write call over the same backend (goal: at most
1.3x), each against the anchor: plain pyserial writing the same request frame and reading
its reply by its known length, written out below (no parsing, no checks, no sequence
numbers). Run::

    .venv/bin/python benchmarks/serial_roundtrip.py [--rounds N] [--batch-ms MS] [--cpu] [--json]

Two firmware simulators run in other processes, each on its own pseudo-terminal (a port is
opened exclusively): one answers regdev, the other the anchor; the batches of both sides
interleave, timed with the wall clock (the time a caller waits). A pty's latency depends on
the scheduler: on a shared machine the spread is wide, so read the ratios, and the noise
line. ``--cpu`` times this process's own work per call instead (the thread's CPU clock:
encoding, checks, system calls; not the simulator's time, nor the wait), steadier on a
shared machine.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import serial

from _compare import Goal, case, compare, options
from regdev import Gate, SerialDevice
from regdev.bench._bench import Contender
from regdev.devices import _protocol as wire

SIM = Path(__file__).resolve().parent.parent / "firmware-sim" / "regdev_firmware_sim.py"
READ_CALL = '{"tool": "read_register", "arguments": {"addr": 3}}'
WRITE_CALL = '{"tool": "write_register", "arguments": {"addr": 4, "data": 90}}'


@contextmanager
def simulator() -> Iterator[str]:
    """A firmware simulator on a pty in another process; yield the pty's path."""
    process = subprocess.Popen([sys.executable, str(SIM), "--pty"], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=5)
        process.stdout.close()


def anchor_exchanges(line: serial.Serial) -> dict[str, Callable[[], bytes]]:
    """The anchor: a prepared request frame written, its reply read by its known length."""
    read = wire.encode(wire.ReadRequest(1, 3))
    write = wire.encode(wire.WriteRequest(1, 4, 90))
    size = len(wire.encode(wire.ReadReply(1, 3, 0)))

    def read_register() -> bytes:
        line.write(read)
        return line.read(size)

    def write_register() -> bytes:
        line.write(write)
        return line.read(size)

    return {"read": read_register, "write": write_register, "gate read": read_register,
            "gate write": write_register}


CASES = (case("read", "read", True, "SerialDevice.read(3)"),
         case("write", "write", True, "SerialDevice.write(4, 90)"),
         case("gate read", "gate read", True, f"Gate.handle({READ_CALL})"),
         case("gate write", "gate write", True, f"Gate.handle({WRITE_CALL})"))
GOALS = {"read": Goal(at_most=1.2), "write": Goal(at_most=1.2),
         "gate read": Goal(at_most=1.3), "gate write": Goal(at_most=1.3)}
EXPECTED = {"read": wire.encode(wire.ReadReply(1, 3, 0)),
            "write": wire.encode(wire.WriteReply(1, 4, 90))}


def main() -> None:
    args = options(__doc__.splitlines()[0], rounds=25, batch_ms=20, cpu=False)
    with simulator() as ours, simulator() as theirs, \
            SerialDevice(ours, timeout=1.0) as device, \
            serial.serial_for_url(theirs, timeout=1.0) as line:
        gate = Gate(device)
        regdev: dict[str, Callable[[], object]] = {
            "read": lambda: device.read(3), "write": lambda: device.write(4, 90),
            "gate read": lambda: gate.handle(READ_CALL).ok,
            "gate write": lambda: gate.handle(WRITE_CALL).ok}
        anchor = anchor_exchanges(line)
        right = {"read": 0, "write": 90, "gate read": True, "gate write": True}
        compare("SerialDevice and the gate over a pty against plain pyserial",
                Contender("regdev", f"SerialDevice({ours!r}) and Gate(device)", raw=True,
                          on_refusal="bool", run=lambda op: regdev[op](),
                          valid=lambda op: regdev[op]() == right[op]),
                Contender("anchor", "pyserial: write the frame, read(len(reply)), written out "
                          "in this script", raw=True, on_refusal="bool",
                          run=lambda op: anchor[op](),
                          valid=lambda op: anchor[op]() == EXPECTED[op.removeprefix("gate ")]),
                CASES, goals=GOALS, args=args, unit="us", scale=1000)


if __name__ == "__main__":
    main()
