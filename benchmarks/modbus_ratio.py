"""The gate over Modbus against the bare pymodbus client: per-request cost, interleaved.

Run::

    .venv/bin/python benchmarks/modbus_ratio.py [--batches 30] [--batch 100]

It needs pymodbus, the modbus extra (``.venv/bin/pip install -e '.[modbus]'``; scripts/test
installs it too).

On a shared machine the load moves between one benchmark and the next, so this script
alternates: a batch of reads through each client in turn, the same server, ``--batches``
times; it prints each client's median batch (microseconds per request) and its ratio to
pymodbus's fastest client of the same framing, for Modbus TCP and for RTU on a pty. The server
is regdev's Modbus simulator without faults (pymodbus's own server) in another process.

The clients, each reading holding register 3 once per request:

* ``gate``: ``Gate.handle`` of a ``read_register`` call (parse, validate, execute, observe)
  on a :class:`~regdev.devices._modbus.ModbusDevice`;
* ``device``: ``ModbusDevice.read`` alone;
* ``pymodbus sync``: ``ModbusTcpClient`` / ``ModbusSerialClient.read_holding_registers``,
  pymodbus's defaults;
* ``pymodbus async`` (RTU): ``AsyncModbusSerialClient``, each request run to completion on
  one event loop (pymodbus's sync serial client polls with sleeps, so this is its fastest).
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _script import MAX_ROUNDS, Parser, count, need
from regdev import Gate
from regdev.devices._modbus import ModbusDevice

SIM = Path(__file__).resolve().parent.parent / "firmware-sim" / "regdev_firmware_sim.py"
READ_CALL = '{"tool": "read_register", "arguments": {"addr": 3}}'


Opened = tuple[Callable[[], Any], Callable[[], Any]]


def openers(framing: str, port: str, loop: asyncio.AbstractEventLoop
            ) -> dict[str, Callable[[], Opened]]:
    """For each client, a function that opens it and returns (its read, its close). An RTU
    port is opened by one client at a time (exclusively), so each batch opens its client."""
    # pymodbus is optional (the modbus extra): imported here, after main() has checked it
    from pymodbus.client import (  # noqa: PLC0415
        AsyncModbusSerialClient,
        ModbusSerialClient,
        ModbusTcpClient,
    )
    from pymodbus.framer import FramerType  # noqa: PLC0415

    url = port if framing == "tcp" else f"modbus+rtu://{port}"

    def device() -> Opened:
        opened = ModbusDevice(url, timeout=2.0)
        return (lambda: opened.read(3)), opened.close

    def gate() -> Opened:
        opened = ModbusDevice(url, timeout=2.0)
        through = Gate(opened)
        return (lambda: through.handle(READ_CALL)), opened.close

    def sync() -> Opened:
        client: Any
        if framing == "tcp":
            host, number = port.removeprefix("modbus+tcp://").rsplit(":", 1)
            client = ModbusTcpClient(host, port=int(number))
        else:
            client = ModbusSerialClient(port, framer=FramerType.RTU, baudrate=19200)
        assert client.connect()
        return (lambda: client.read_holding_registers(3, count=1, device_id=1)), client.close

    def asynchronous() -> Opened:
        async def connected() -> AsyncModbusSerialClient:
            client = AsyncModbusSerialClient(port, framer=FramerType.RTU, baudrate=19200)
            assert await client.connect()
            return client

        client = loop.run_until_complete(connected())
        return (lambda: loop.run_until_complete(
            client.read_holding_registers(3, count=1, device_id=1))), client.close

    found: dict[str, Callable[[], Opened]] = {"gate": gate, "device": device,
                                              "pymodbus sync": sync}
    if framing == "rtu":
        found["pymodbus async"] = asynchronous
    return found


def measure(framing: str, batches: int, batch: int) -> dict[str, float]:
    """Median seconds per request of each client, batches interleaved."""
    where = ["--modbus-tcp", "127.0.0.1:0"] if framing == "tcp" else ["--modbus-rtu", "--pty"]
    process = subprocess.Popen([sys.executable, str(SIM), *where], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    loop = asyncio.new_event_loop()
    try:
        clients = openers(framing, process.stdout.readline().strip(), loop)
        samples: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(batches):
            for name, open_client in clients.items():
                read, close = open_client()
                try:
                    for _ in range(10):  # warm up
                        read()
                    started = time.perf_counter()
                    for _ in range(batch):
                        read()
                    samples[name].append((time.perf_counter() - started) / batch)
                finally:
                    close()
        return {name: statistics.median(values) for name, values in samples.items()}
    finally:
        loop.close()
        process.terminate()
        process.wait(timeout=5)
        process.stdout.close()


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=count(1, MAX_ROUNDS), default=30, metavar="N",
                        help=f"interleaved batches per client, the median shown: 1..{MAX_ROUNDS} "
                             "(default 30)")
    parser.add_argument("--batch", type=count(1, 100_000), default=100, metavar="N",
                        help="reads per batch: 1..100000 (default 100)")
    args = parser.parse_args()
    need("modbus", "pymodbus")
    for framing in ("tcp", "rtu"):
        medians = measure(framing, args.batches, args.batch)
        floor = min(v for name, v in medians.items() if name.startswith("pymodbus"))
        print(f"Modbus {framing.upper()} ({args.batches} interleaved batches of {args.batch} "
              "reads; ratio to pymodbus's fastest client):")
        for name, median in medians.items():
            print(f"  {name:<16} {median * 1e6:8.1f} us/request  {median / floor:5.2f}x")


if __name__ == "__main__":
    main()
