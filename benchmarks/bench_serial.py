"""Serial backend throughput over a real pty, against a minimal hand-written pyserial exchange.

Run (pytest-benchmark; not part of the test suite)::

    scripts/test benchmarks/bench_serial.py

The firmware simulator runs in another process on a pseudo-terminal. Each benchmark is one
transaction: a request frame written, its reply frame read. The peers, measured in the same
run on the same pty and simulator:

* ``minimal``: ``port.write(frame); port.read(len(reply))`` with the frames prepared in
  advance: the floor for these frames over pyserial (no parsing, no checks, no resync).
* ``readline``: ``port.write(frame); port.readline()``, what a first script usually does.

The summary at the end gives transactions per second and each one's overhead over
``minimal``, in microseconds per transaction, from the medians (a shared machine's outliers
skew the means).
"""

from __future__ import annotations

import sys

from _script import suite

if __name__ == "__main__":  # run as a script: say how to run the suite (before importing pytest)
    sys.exit(suite(__file__, __doc__))

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial

from regdev import AuditLog, Gate, SerialDevice
from regdev.devices import _protocol as wire

SIM = Path(__file__).resolve().parent.parent / "firmware-sim" / "regdev_firmware_sim.py"
READ_CALL = '{"tool": "read_register", "arguments": {"addr": 3}}'
KEYED_WRITE = ('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}, '
               '"idempotency_key": "bench-1"}')
MEDIANS: dict[str, float] = {}


class _Summary:
    """Prints the transactions-per-second table after pytest-benchmark's own."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if "minimal" not in MEDIANS:
            return
        floor = MEDIANS["minimal"]
        write = terminalreporter.write_line
        write("")
        write("serial transactions over a pty, one request and its reply (medians; the "
              "overhead is over `minimal`):")
        for name, median in MEDIANS.items():
            write(f"  {name:<24} {1 / median:>8.0f} tx/s  {median * 1e6:>7.1f} us/tx  "
                  f"overhead {(median - floor) * 1e6:>+7.1f} us/tx  ({median / floor:.2f}x)")


@pytest.fixture(scope="module")
def port(request: pytest.FixtureRequest) -> Iterator[str]:
    """The pty of a firmware simulator running in another process."""
    if not request.config.pluginmanager.has_plugin("regdev-serial-summary"):
        request.config.pluginmanager.register(_Summary(), "regdev-serial-summary")
    process = subprocess.Popen([sys.executable, str(SIM), "--pty"], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    path = process.stdout.readline().strip()
    yield path
    process.terminate()
    process.wait(timeout=5)
    process.stdout.close()


def record(name: str, benchmark: Any) -> None:
    if benchmark.stats is not None:  # None under --benchmark-disable
        MEDIANS[name] = benchmark.stats.stats.median


def test_minimal_pyserial_exchange(benchmark: Any, port: str) -> None:
    """Peer floor: prepared frame written, reply read by its known length."""
    request = wire.encode(wire.ReadRequest(1, 3))
    size = len(wire.encode(wire.ReadReply(1, 3, 0)))
    with serial.serial_for_url(port, timeout=1.0) as line:
        def transaction() -> bytes:
            line.write(request)
            return line.read(size)

        assert benchmark(transaction) == wire.encode(wire.ReadReply(1, 3, 0))
    record("minimal", benchmark)


def test_readline_pyserial_exchange(benchmark: Any, port: str) -> None:
    """Peer: prepared frame written, reply read with readline()."""
    request = wire.encode(wire.ReadRequest(1, 3))
    with serial.serial_for_url(port, timeout=1.0) as line:
        def transaction() -> bytes:
            line.write(request)
            return line.readline()

        assert benchmark(transaction) == wire.encode(wire.ReadReply(1, 3, 0))
    record("readline", benchmark)


def test_serial_device_read(benchmark: Any, port: str) -> None:
    """SerialDevice.read: encode, seq, lock, write, read, decode, match, checks."""
    with SerialDevice(port, timeout=1.0) as device:
        assert benchmark(device.read, 3) == 0
        assert device.timeouts == 0
    record("SerialDevice.read", benchmark)


def test_serial_device_write(benchmark: Any, port: str) -> None:
    """SerialDevice.write: as read, plus the acknowledged value checked."""
    with SerialDevice(port, timeout=1.0) as device:
        assert benchmark(device.write, 4, 0x5A) == 0x5A
    record("SerialDevice.write", benchmark)


def test_gate_read_over_serial(benchmark: Any, port: str) -> None:
    """A model's read_register call through the whole gate to the serial device."""
    with SerialDevice(port, timeout=1.0) as device:
        gate = Gate(device)
        assert benchmark(gate.handle, READ_CALL).ok
    record("Gate.handle over serial", benchmark)


def test_serial_device_identity_refresh(benchmark: Any, port: str) -> None:
    """SerialDevice.identity(refresh=True): the identify round trip a replay costs."""
    with SerialDevice(port, timeout=1.0) as device:
        assert benchmark(device.identity, refresh=True).epoch is not None
    record("identity(refresh=True)", benchmark)


def test_gate_keyed_write_replayed_over_serial(benchmark: Any, port: str,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """A keyed write sent again through an audited gate: the identify that confirms the
    device's epoch, then the stored observation (nothing written)."""
    path = tmp_path_factory.mktemp("audit") / "audit.db"
    with SerialDevice(port, timeout=1.0) as device, Gate(device, audit=AuditLog(path)) as gate:
        assert gate.handle(KEYED_WRITE).ok
        assert benchmark(gate.handle, KEYED_WRITE).replay
    record("Gate replay over serial", benchmark)


def test_gate_keyed_write_over_serial(benchmark: Any, port: str,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """A new keyed write each time through an audited gate: no identify (the epoch the line's
    synchronising identify said), the write, its durable record and key."""
    path = tmp_path_factory.mktemp("audit") / "audit.db"
    keys = iter(range(10**9))
    with SerialDevice(port, timeout=1.0) as device, Gate(device, audit=AuditLog(path)) as gate:
        def write() -> bool:
            return gate.handle(KEYED_WRITE.replace("bench-1", f"k{next(keys)}")).replay

        assert benchmark(write) is False
    record("Gate keyed write over serial", benchmark)
