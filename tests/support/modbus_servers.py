"""Modbus devices for the tests: a plain pymodbus server (pymodbus's server and datastore, no
regdev code on the device side) over TCP or over RTU on a pty, and regdev's simulator in a
thread or in another process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import select
import socket
import struct
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
from regdev.devices._modbus_codec import crc16
from support.firmware import stop

SIM = ROOT / "firmware-sim" / "regdev_firmware_sim.py"


class Plain:
    """A pymodbus server in a thread: ``registers`` holding registers from 0 (pymodbus's
    ``SimData``), unit 1. Its ``action`` hook (pymodbus's own) counts the writes executed and
    can refuse a value with an exception code (``refuse``: value -> code). ``simdata``
    (pymodbus's ``SimData`` blocks) serves other registers instead (a SunSpec image).

    ``echo`` (RTU): the null-modem cable also hands every byte the host sends back to it, as
    an RS-485 adapter without echo suppression does. ``units``: the unit ids served, each a
    device of its own registers (several units on one RS-485 line, under RTU).

    Attributes:
        url: the regdev URL: ``modbus+tcp://127.0.0.1:P?unit=1`` or ``modbus+rtu://PTY?unit=1``.
        executed: Counter of ``(function code, address, values)`` written.
        registers: the live register list (for reading what the server holds).
        unit_registers: each unit's live register list, once it was accessed.
    """

    def __init__(self, framing: str, *, registers: int = 16, values: int = 0,
                 refuse: dict[int, int] | None = None, echo: bool = False,
                 simdata: list[SimData] | None = None, units: tuple[int, ...] = (1,)) -> None:
        self.executed: collections.Counter[tuple[int, int, tuple[int, ...]]] = \
            collections.Counter()
        self.refuse = refuse or {}
        self.echo = echo
        self.registers: list[int] = []
        self.unit_registers: dict[int, list[int]] = {}

        def action_of(unit: int) -> Any:
            async def action(*args: Any) -> ExcCodes | None:
                self.unit_registers[unit] = args[4]
                return await self._action(*args)
            return action

        device: Any = [
            SimDevice(unit, simdata=simdata or [SimData(0, count=registers, values=values,
                                                        datatype=DataType.REGISTERS)],
                      action=action_of(unit)) for unit in units]
        device = device[0] if len(device) == 1 else device
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
        stop(process)
        process.stdout.close()
        process.stderr.close()


class Duplicating:
    """A hand-made Modbus device on 127.0.0.1 (regdev's codec builds its frames), RTU framing
    over TCP (``modbus+rtu://socket://...``) or Modbus TCP, that can misbehave as a faulty
    device does: send its next reply twice (``duplicate_next``) and ignore requests
    (``deaf``: read, not executed, not answered).

    Attributes:
        url: the regdev URL, unit 1.
        registers: the holding registers (16, from 0), live.
        executed: the requests executed, as ``(function code, address)``, in order.
        sent: replies sent so far (a duplicate counts once more).
    """

    def __init__(self, framing: str, registers: list[int]) -> None:
        self.framing = framing
        self.registers = registers
        self.executed: list[tuple[int, int]] = []
        self.sent = 0
        self.duplicate_next = False
        self.deaf = False
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        port = self._server.getsockname()[1]
        self.url = (f"modbus+tcp://127.0.0.1:{port}?unit=1" if framing == "tcp"
                    else f"modbus+rtu://socket://127.0.0.1:{port}?unit=1")
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self._server.accept()
            with client:
                buffer = b""
                while True:
                    data = client.recv(4096)
                    if not data:
                        return
                    buffer += data
                    while True:
                        taken = self._take(buffer)
                        if taken is None:
                            break
                        size, reply = taken
                        buffer = buffer[size:]
                        if reply is not None:
                            client.sendall(reply)

    def _take(self, buffer: bytes) -> tuple[int, bytes | None] | None:
        """The size of the request at the start of ``buffer`` and the reply to send (None:
        none), or None when the request is not all there yet."""
        if self.framing == "tcp":
            if len(buffer) < 7:
                return None
            tid, _, length, unit = struct.unpack_from(">HHHB", buffer)
            size = 6 + length
            if len(buffer) < size:
                return None
            pdu = buffer[7:size]
        else:
            if len(buffer) < 8:
                return None
            function = buffer[1]
            size = 9 + buffer[6] + 2 if function == 16 else (10 if function == 22 else 8)
            if len(buffer) < size:
                return None
            pdu = buffer[1:size - 2]
            unit, tid = buffer[0], 0
        with self._lock:
            if self.deaf:
                return size, None
            answer = self._answer(pdu)
            if self.framing == "tcp":
                reply = struct.pack(">HHHB", tid, 0, len(answer) + 1, unit) + answer
            else:
                body = bytes((unit,)) + answer
                reply = body + crc16(body)
            if self.duplicate_next:
                self.duplicate_next = False
                reply += reply
                self.sent += 1
            self.sent += 1
        return size, reply

    def _answer(self, pdu: bytes) -> bytes:
        function, address, second = struct.unpack_from(">BHH", pdu)
        self.executed.append((function, address))
        if function == 3:
            values = self.registers[address:address + second]
            return struct.pack(f">BB{len(values)}H", 3, 2 * len(values), *values)
        if function == 6:
            self.registers[address] = second
            return pdu[:5]
        if function == 16:
            values = struct.unpack_from(f">{second}H", pdu, 6)
            self.registers[address:address + second] = values
            return pdu[:5]
        if function == 22:
            and_mask, or_mask = struct.unpack_from(">HH", pdu, 3)
            old = self.registers[address]
            self.registers[address] = (old & and_mask) | (or_mask & ~and_mask & 0xFFFF)
            return pdu[:7]
        return bytes((function | 0x80, 1))

    def close(self) -> None:
        """Stop serving."""
        self._server.close()

    def __enter__(self) -> Duplicating:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PlainTables:
    """A plain pymodbus server with its four tables apart (pymodbus's ``SimDevice`` with four
    lists of ``SimData``: coils, discrete inputs, holding registers, input registers), unit 1,
    over TCP; no regdev code on the device side.

    Attributes:
        url: ``modbus+tcp://127.0.0.1:P?unit=1``.
        executed: Counter of ``(function code, address, values)`` written (pymodbus's hook).
    """

    def __init__(self, *, coils: int = 8, discrete: int = 8, holding: int = 8, inputs: int = 8,
                 holding_value: int = 0, input_value: int = 0, discrete_value: bool = True
                 ) -> None:
        self.executed: collections.Counter[tuple[int, int, tuple[int, ...]]] = \
            collections.Counter()
        device = SimDevice(1, simdata=(
            [SimData(0, count=coils, values=False, datatype=DataType.BITS)],
            [SimData(0, count=discrete, values=discrete_value, datatype=DataType.BITS)],
            [SimData(0, count=holding, values=holding_value, datatype=DataType.REGISTERS)],
            [SimData(0, count=inputs, values=input_value, datatype=DataType.REGISTERS)]),
            action=self._action)
        ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        ports: list[int] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            server = ModbusTcpServer(device, address=("127.0.0.1", 0))
            await server.serve_forever(background=True)
            ports.append(server.transport.sockets[0].getsockname()[1])
            ready.set()
            await self._stop.wait()
            await server.shutdown()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self._thread.start()
        assert ready.wait(30), "the pymodbus server did not start"
        self.url = f"modbus+tcp://127.0.0.1:{ports[0]}?unit=1"

    async def _action(self, function: int, start: int, address: int, count: int,  # noqa: PLR0917 - pymodbus's hook
                      registers: list[int], values: list[int] | list[bool] | None
                      ) -> ExcCodes | None:
        if values is not None:
            self.executed[(function, address, tuple(int(v) for v in values))] += 1
        return None

    def writes(self) -> int:
        """Write requests the server executed."""
        return sum(self.executed.values())

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> PlainTables:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
