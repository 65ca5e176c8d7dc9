"""Modbus per-request cost through the gate against the bare pymodbus client, same run, same
server.

Run (pytest-benchmark; not part of the test suite)::

    scripts/test benchmarks/bench_modbus.py

The server is regdev's Modbus simulator without faults, in another process: pymodbus's own
server (``ModbusTcpServer``; for RTU ``ModbusSerialServer`` behind a pty pump). Every
benchmark is one read of holding register 3, one request and its reply:

* TCP: ``Gate.handle`` of a ``read_register`` call on a :class:`ModbusDevice`, and
  ``ModbusDevice.read`` alone, against pymodbus's ``ModbusTcpClient.read_holding_registers``;
* RTU on a pty: the same, against ``ModbusSerialClient`` (sync) and
  ``AsyncModbusSerialClient`` (driven by ``run_until_complete`` on one loop, as a synchronous
  caller would).

The summary gives each one's median per request and its ratio to the fastest pymodbus client
of the same framing (the goal: the gate at most 1.2x).
"""

from __future__ import annotations

import sys

from _script import suite

if __name__ == "__main__":  # run as a script: say how to run the suite (before importing pytest)
    sys.exit(suite(__file__, __doc__))

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymodbus.client import AsyncModbusSerialClient, ModbusSerialClient, ModbusTcpClient
from pymodbus.framer import FramerType

from regdev import Gate
from regdev.devices._modbus import ModbusDevice

SIM = Path(__file__).resolve().parent.parent / "firmware-sim" / "regdev_firmware_sim.py"
READ_CALL = '{"tool": "read_register", "arguments": {"addr": 3}}'
MEDIANS: dict[tuple[str, str], float] = {}


class _Summary:
    """Prints the per-request table after pytest-benchmark's own."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        for framing in ("tcp", "rtu"):
            rows = {name: median for (f, name), median in MEDIANS.items() if f == framing}
            peers = [median for name, median in rows.items() if name.startswith("pymodbus")]
            if not peers:
                continue
            floor = min(peers)
            write("")
            write(f"Modbus {framing.upper()}: one read per request (medians; the ratio is to "
                  "the fastest pymodbus client):")
            for name, median in rows.items():
                write(f"  {name:<40} {median * 1e6:>8.1f} us/request  {median / floor:5.2f}x")


@pytest.fixture(scope="module", params=["tcp", "rtu"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(framing, the port the simulator printed), the simulator in another process."""
    if not request.config.pluginmanager.has_plugin("regdev-modbus-summary"):
        request.config.pluginmanager.register(_Summary(), "regdev-modbus-summary")
    where = ["--modbus-tcp", "127.0.0.1:0"] if request.param == "tcp" else ["--modbus-rtu",
                                                                              "--pty"]
    process = subprocess.Popen([sys.executable, str(SIM), *where], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    yield request.param, port
    process.terminate()
    process.wait(timeout=5)
    process.stdout.close()


def url(framing: str, port: str) -> str:
    return port if framing == "tcp" else f"modbus+rtu://{port}"


def record(framing: str, name: str, benchmark: Any) -> None:
    if benchmark.stats is not None:  # None under --benchmark-disable
        MEDIANS[(framing, name)] = benchmark.stats.stats.median


def test_pymodbus_sync_client(benchmark: Any, server: tuple[str, str]) -> None:
    """Peer: pymodbus's synchronous client, defaults (retries 3)."""
    framing, port = server
    if framing == "tcp":
        host, number = port.removeprefix("modbus+tcp://").rsplit(":", 1)
        client: Any = ModbusTcpClient(host, port=int(number))
    else:
        client = ModbusSerialClient(port, framer=FramerType.RTU, baudrate=19200)
    assert client.connect()
    try:
        reply = benchmark(client.read_holding_registers, 3, count=1, device_id=1)
        assert reply.registers == [0]
    finally:
        client.close()
    record(framing, f"pymodbus {type(client).__name__}", benchmark)


def test_pymodbus_async_serial_client(benchmark: Any, server: tuple[str, str]) -> None:
    """Peer (RTU): pymodbus's asyncio client, each request run to completion on one loop."""
    framing, port = server
    if framing != "rtu":
        pytest.skip("TCP's peer is the synchronous client")
    loop = asyncio.new_event_loop()

    async def connected() -> AsyncModbusSerialClient:
        client = AsyncModbusSerialClient(port, framer=FramerType.RTU, baudrate=19200)
        assert await client.connect()
        return client

    client = loop.run_until_complete(connected())
    try:
        def read() -> Any:
            return loop.run_until_complete(client.read_holding_registers(3, count=1,
                                                                          device_id=1))

        assert benchmark(read).registers == [0]
    finally:
        client.close()
        loop.close()
    record(framing, "pymodbus AsyncModbusSerialClient", benchmark)


def test_modbus_device_read(benchmark: Any, server: tuple[str, str]) -> None:
    """ModbusDevice.read: frame, lock, write, read, match, checks."""
    framing, port = server
    with ModbusDevice(url(framing, port), timeout=2.0) as device:
        assert benchmark(device.read, 3) == 0
        assert device.timeouts == 0
    record(framing, "ModbusDevice.read", benchmark)


def test_gate_read_over_modbus(benchmark: Any, server: tuple[str, str]) -> None:
    """A model's read_register call through the whole gate to the Modbus device."""
    framing, port = server
    with ModbusDevice(url(framing, port), timeout=2.0) as device:
        gate = Gate(device)
        assert benchmark(gate.handle, READ_CALL).ok
    record(framing, "Gate.handle (read_register)", benchmark)
