"""Modbus devices for the tests: a plain pymodbus server (pymodbus's server and datastore, no
regdev code on the device side) over TCP or over RTU on a pty, and regdev's simulator in a
thread or in another process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import select
import subprocess
import sys
import threading
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pymodbus.constants import ExcCodes
from pymodbus.framer import FramerType
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from conftest import ROOT

SIM = ROOT / "firmware-sim" / "regdev_firmware_sim.py"


class Plain:
    """A pymodbus server in a thread: ``registers`` holding registers from 0 (pymodbus's
    ``SimData``), unit 1. Its ``action`` hook (pymodbus's own) counts the writes executed and
    can refuse a value with an exception code (``refuse``: value -> code).

    ``echo`` (RTU): the null-modem cable also hands every byte the host sends back to it, as
    an RS-485 adapter without echo suppression does.

    Attributes:
        url: the regdev URL: ``modbus+tcp://127.0.0.1:P?unit=1`` or ``modbus+rtu://PTY?unit=1``.
        executed: Counter of ``(function code, address, values)`` written.
        registers: the live register list (for reading what the server holds).
    """

    def __init__(self, framing: str, *, registers: int = 16, values: int = 0,
                 refuse: dict[int, int] | None = None, echo: bool = False) -> None:
        self.executed: collections.Counter[tuple[int, int, tuple[int, ...]]] = \
            collections.Counter()
        self.refuse = refuse or {}
        self.echo = echo
        self.registers: list[int] = []
        device = SimDevice(1, simdata=[SimData(0, count=registers, values=values,
                                               datatype=DataType.REGISTERS)],
                           action=self._action)
        self._ptys: list[tuple[int, int]] = []
        ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        urls: list[str] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            server: Any
            if framing == "tcp":
                server = ModbusTcpServer(device, address=("127.0.0.1", 0))
            else:
                host, line = self._null_modem()
                server = ModbusSerialServer(device, framer=FramerType.RTU, port=line,
                                            baudrate=19200)
            await server.serve_forever(background=True)
            if framing == "tcp":
                port = server.transport.sockets[0].getsockname()[1]
                urls.append(f"modbus+tcp://127.0.0.1:{port}?unit=1")
            else:
                urls.append(f"modbus+rtu://{host}?unit=1")
            ready.set()
            await self._stop.wait()
            await server.shutdown()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self._thread.start()
        assert ready.wait(30), "the pymodbus server did not start"
        self.url = urls[0]

    def _null_modem(self) -> tuple[str, str]:
        """Two ptys joined by a thread copying bytes between their masters (a null-modem
        cable): regdev opens the first, pymodbus's serial server the second."""
        for _ in range(2):
            master, slave = os.openpty()
            tty.setraw(slave)
            self._ptys.append((master, slave))
        (a, _), (b, _) = self._ptys
        self._quit_r, self._quit_w = os.pipe()

        def pump() -> None:
            while True:
                ready, _, _ = select.select([a, b, self._quit_r], [], [])
                if self._quit_r in ready:
                    return
                for source, sink in ((a, b), (b, a)):
                    if source in ready:
                        with contextlib.suppress(OSError):
                            data = os.read(source, 4096)
                            copies = [sink, a] if self.echo and source == a else [sink]
                            for target in copies:
                                left = data
                                while left:
                                    left = left[os.write(target, left):]

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        return os.ttyname(self._ptys[0][1]), os.ttyname(self._ptys[1][1])

    async def _action(self, function: int, start: int, address: int, count: int,  # noqa: PLR0917 - pymodbus's hook
                      registers: list[int], values: list[int] | list[bool] | None
                      ) -> ExcCodes | None:
        self.registers = registers
        if values is None:
            return None
        for value in values:
            if int(value) in self.refuse:
                return ExcCodes(self.refuse[int(value)])
        self.executed[(function, address, tuple(int(v) for v in values))] += 1
        return None

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        if self._ptys:
            os.write(self._quit_w, b"x")
            self._pump.join(10)
            for master, slave in self._ptys:
                os.close(master)
                os.close(slave)
            os.close(self._quit_r)
            os.close(self._quit_w)

    def __enter__(self) -> Plain:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextmanager
def modbus_sim_process(*args: str) -> Iterator[str]:
    """regdev's Modbus simulator in another process; yield the regdev URL to open it by."""
    process = subprocess.Popen([sys.executable, str(SIM), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    try:
        port = process.stdout.readline().strip()
        if not port:
            process.wait(timeout=5)
            raise AssertionError(f"the simulator printed no port: {process.stderr.read()}")
        yield port if port.startswith("modbus+") else f"modbus+rtu://{port}"
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=5)
        process.stdout.close()
        process.stderr.close()
