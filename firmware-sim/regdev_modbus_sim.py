"""regdev's Modbus device simulator: pymodbus's server, with the serial simulator's faults.

``regdev firmware-sim --modbus-tcp HOST:PORT`` (Modbus TCP) and ``regdev firmware-sim
--modbus-rtu --pty`` (Modbus RTU on a pseudo-terminal; ``--modbus-rtu --tcp HOST:PORT`` for RTU
framing over TCP) serve the register model as holding registers: ``--registers N`` (16) from
``--base`` (0), each a byte (a write of a value over 255 is refused with exception 03, as the
register file refuses it), reset value 0, answering every unit id. The server, its framers and
its datastore are pymodbus's (``SimDevice``/``SimData``); this module adds only:

* with ``--map FILE``, the map's registers in every table, each at ``--base`` + its address
  of its table (holding registers, input registers, coils, discrete inputs), with the map's
  behaviour: the requests (03, 06, 16, 22 on holding registers; 04 on input registers; 01,
  05, 15 on coils; 02 on discrete inputs) are answered from a :class:`RegisterFile` per table
  (``Register.written`` and ``Register.read_effect``, the one definition the in-process device
  and the serial simulator apply): reset values, read-only bits kept, write-1-to-clear,
  reserved and write-only bits read as 0, clear-on-read, values as wide as each register. An
  address that is no register of the table is exception 02; a write the map refuses (a
  read-only register, a reserved bit set, a value wider than its register), a read past the
  protocol's limits (125 registers, 2000 bits) or a 22 that would set bits above an 8-bit
  register is exception 03, nothing written; any other function 01. A 22 is one masked write
  (the bits of its masks; write-1-to-clear bits outside them are not touched); 05, 06, 15, 16
  and 22 are answered with their echo, as the specification says;

* fault injection on replies, drawn from the serial simulator's :class:`Faults` (the same
  ``--fault KIND=RATE``, ``--seed``, ``--delay``, ``--fault-after``, ``--fault-count``):
  ``drop``, ``corrupt`` and ``garbage`` damage the reply's bytes, ``delay`` sends it late,
  ``disconnect`` closes the connection instead of replying (on a pty: a new pty replaces the
  old one, at ``--link``), ``busy`` answers exception 06 without executing the request. A
  request runs before its reply is faulted (except ``busy``);
* requests answered one at a time, in order, per connection (as a device does: pymodbus's
  handler would otherwise start the next request while a delayed reply waits);
* counters of the requests executed (:attr:`ModbusModel.executed`), for tests;
* on a pty, a pump between the pty and the server's RTU listener on a private TCP port.

It needs pymodbus (``pip install 'regdev[modbus]'``); the serial simulator does not.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pymodbus.constants import ExcCodes
from pymodbus.exceptions import ModbusIOException
from pymodbus.framer import FramerType
from pymodbus.pdu import ExceptionResponse, ModbusPDU
from pymodbus.pdu.bit_message import (
    ReadCoilsResponse,
    ReadDiscreteInputsResponse,
    WriteMultipleCoilsResponse,
    WriteSingleCoilResponse,
)
from pymodbus.pdu.register_message import (
    MaskWriteRegisterRequest,
    MaskWriteRegisterResponse,
    ReadHoldingRegistersResponse,
    ReadInputRegistersResponse,
    WriteMultipleRegistersResponse,
    WriteSingleRegisterResponse,
)
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.server.requesthandler import ServerRequestHandler
from pymodbus.simulator import DataType, SimData, SimDevice
from pymodbus.transaction import TransactionManager

from regdev_firmware_sim import CannotServe, Faults, _Link, _Pty

if TYPE_CHECKING:
    from regdev.core._errors import RegisterRangeError
    from regdev.devices._device import RegisterFile
    from regdev.devices._regmap import RegisterMap
else:  # regdev's, or the copies the simulator runs standalone (the same classes it raises)
    from regdev_firmware_sim import RegisterFile, RegisterMap, RegisterRangeError

__all__ = ["Background", "ModbusModel", "run_modbus", "serve_modbus", "serve_modbus_pty"]

#: Function codes that write, for :attr:`ModbusModel.executed`.
WRITES = frozenset({5, 6, 15, 16, 22, 23})
#: The table each function code reads or writes.
_TABLE_OF = {1: "coil", 2: "discrete", 3: "holding", 4: "input", 5: "coil", 6: "holding",
             15: "coil", 16: "holding", 22: "holding"}


class ModbusModel:
    """The register model served: ``count`` holding registers from ``base``, each a byte; or
    the registers of a register map.

    Args:
        count: registers, 1..65536 - base (with a map: the map's span, ``regmap.last + 1``).
        base: the holding register of register 0.
        regmap: a register map to serve instead of ``count`` plain registers (the default
            map is the plain 16).

    Attributes:
        device: pymodbus's ``SimDevice`` (unit id 0: it answers every unit).
        registers: with a map, the :class:`RegisterFile` that holds and applies its holding
            registers (its ``hardware_set`` sets bits as the hardware would); else None.
        tables: with a map, a :class:`RegisterFile` per table of the map (``"holding"``,
            ``"input"``, ``"coil"``, ``"discrete"``), each holding that table's registers.
        executed: requests executed, as ``(function code, address, values written)``: a
            Counter, so a write executed twice counts 2 (22: the value after, as a read
            shows it).
    """

    def __init__(self, count: int = 16, base: int = 0,
                 regmap: RegisterMap | None = None) -> None:
        if regmap is not None and regmap.is_default:
            regmap = None
        if regmap is not None:
            count = max(register.addr for register in regmap.registers) + 1
            wide = next((r for r in regmap.registers if r.width > 16), None)
            if wide is not None:
                raise ValueError(f"register {wide.label} is {wide.width} bits wide; a Modbus "
                                 "register is 16")
        if not 1 <= count <= 0x10000 - base or not 0 <= base <= 0xFFFF:
            what = (f"the map's registers (addresses 0..{count - 1})" if regmap is not None
                    else f"--registers {count}")
            verb = "are" if regmap is not None else "is"
            raise ValueError(f"{what} from --base {base} {verb} not within 0..65535")
        self.count = count
        self.base = base
        self.regmap = regmap
        self.tables: dict[str, RegisterFile] = {}
        if regmap is not None:
            for table in regmap.tables:  # each table a register file of its own
                own = [dataclasses.replace(register, table="holding",  # a bit: its low bit
                                           width=max(register.width, 8))
                       for register in regmap.in_table(table)]
                self.tables[table] = RegisterFile(regmap=type(regmap)(own, name=regmap.name))
        self.registers = self.tables.get("holding") if regmap is not None else None
        self.executed: collections.Counter[tuple[int, int, tuple[int, ...]]] = \
            collections.Counter()
        self.device = SimDevice(0, simdata=[SimData(base, count=count, values=0,
                                                    datatype=DataType.REGISTERS)],
                                action=self._action)

    async def _action(self, function: int, start: int, address: int, count: int,  # noqa: PLR0917 - pymodbus's hook
                      registers: list[int], values: list[int] | list[bool] | None
                      ) -> ExcCodes | None:
        """pymodbus's hook before each access: refuse a value that is not a byte; count
        writes (22 reads, then writes: counted once, at its write)."""
        if values is None or self.regmap is not None:
            return None
        if any(int(value) > 0xFF for value in values):
            return ExcCodes.ILLEGAL_VALUE
        self.executed[(function, address, tuple(int(value) for value in values))] += 1
        return None

    def writes(self) -> int:
        """Write requests executed so far."""
        return sum(n for (function, _, _), n in self.executed.items() if function in WRITES)

    def answer(self, request: ModbusPDU) -> ModbusPDU:
        """With a map: the reply to ``request`` from :attr:`registers` (see the module's
        docstring for the exception codes)."""
        regmap = self.regmap
        assert regmap is not None
        function = request.function_code

        def refuse(code: ExcCodes) -> ModbusPDU:
            return ExceptionResponse(function, code)

        table = _TABLE_OF.get(function)
        if table is None:
            return refuse(ExcCodes.ILLEGAL_FUNCTION)
        registers = self.registers if table == "holding" else self.tables.get(table)
        start = request.address - self.base
        count = (request.count if function in (1, 2, 3, 4) else
                 len(request.registers) if function == 16 else
                 len(request.bits) if function == 15 else 1)
        if registers is None or any(registers.regmap.at(addr) is None
                                    for addr in range(start, start + count)):
            return refuse(ExcCodes.ILLEGAL_ADDRESS)
        try:
            if function in (1, 2, 3, 4):
                if not 1 <= count <= (2000 if function in (1, 2) else 125):
                    return refuse(ExcCodes.ILLEGAL_VALUE)
                values = registers.read_table("holding", start, count)  # one hold
                if function in (1, 2):
                    read_bits = (ReadCoilsResponse if function == 1
                                 else ReadDiscreteInputsResponse)
                    return read_bits(bits=[bool(value) for value in values])
                words = (ReadHoldingRegistersResponse if function == 3
                         else ReadInputRegistersResponse)
                return words(registers=values)
            if function == 5:
                bit = int(bool(request.bits[0]))
                registers.write(start, bit)
                self.executed[(5, request.address, (bit,))] += 1
                return WriteSingleCoilResponse(address=request.address, bits=[bool(bit)])
            if function == 15:
                bits = [int(bool(bit)) for bit in request.bits]
                registers.write_table("holding", start, bits)
                self.executed[(15, request.address, tuple(bits))] += 1
                return WriteMultipleCoilsResponse(address=request.address, count=count)
            if function == 6:
                value = request.registers[0]
                registers.write(start, value)
                self.executed[(6, request.address, (value,))] += 1
                return WriteSingleRegisterResponse(address=request.address, registers=[value])
            if function == 16:
                values = [int(value) for value in request.registers]
                registers.write_table("holding", start, values)
                self.executed[(16, request.address, tuple(values))] += 1
                return WriteMultipleRegistersResponse(address=request.address, count=count)
            masked = cast(MaskWriteRegisterRequest, request)
            keep, put = masked.and_mask, masked.or_mask
            top = registers.regmap.at(start).top  # type: ignore[union-attr]
            if put & ~keep & 0xFFFF & ~top:  # it would set bits above an 8-bit register
                return refuse(ExcCodes.ILLEGAL_VALUE)
            mask = ~keep & top
            after = registers.write_masked(start, mask, put & mask)
            self.executed[(22, request.address, (after,))] += 1
            return MaskWriteRegisterResponse(address=request.address, and_mask=keep,
                                             or_mask=put)
        except RegisterRangeError:
            return refuse(ExcCodes.ILLEGAL_VALUE)


class _Handler(ServerRequestHandler):
    """pymodbus's per-connection handler, answering in order with faults injected."""

    faults: Faults
    log: Callable[[str], None] | None
    model: ModbusModel

    def __init__(self, owner: Any, *args: Any) -> None:
        super().__init__(owner, *args)  # type: ignore[no-untyped-call]
        self._queue: asyncio.Queue[ModbusPDU] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    def callback_data(self, data: bytes, addr: tuple[Any, ...] | None = None) -> int:
        try:
            used: int = TransactionManager.callback_data(self, data, addr)
        except ModbusIOException:
            return len(data)  # a frame pymodbus cannot decode: dropped unanswered
        if self.last_pdu is not None:
            self._queue.put_nowait(self.last_pdu)
            if self._worker is None:
                self._worker = asyncio.ensure_future(self._work())
        return used

    def callback_disconnected(self, exc: Exception | None) -> None:
        super().callback_disconnected(exc)
        if self._worker is not None:
            self._worker.cancel()

    async def _work(self) -> None:
        while True:
            request = await self._queue.get()
            await self._answer(request)

    async def _answer(self, request: ModbusPDU) -> None:
        fault = self.faults.pick()
        if fault == "busy":
            response: ModbusPDU = ExceptionResponse(request.function_code,
                                                    ExcCodes.DEVICE_BUSY)
        else:
            try:
                if self.model.registers is not None:
                    response = self.model.answer(request)
                else:
                    response = await request.datastore_update(self.server.context,
                                                              request.dev_id)
            except Exception:  # as pymodbus's own handler answers a datastore failure
                response = ExceptionResponse(request.function_code, ExcCodes.DEVICE_FAILURE)
        response.transaction_id = request.transaction_id
        response.dev_id = request.dev_id
        data: bytes = self.framer.buildFrame(response)
        if self.log:
            self.log(f"<- {request}\n-> {data.hex(' ')}" + (f"  (fault: {fault})" if fault
                                                             else ""))
        if fault == "disconnect":
            self.close()
            return
        if fault == "delay":
            await asyncio.sleep(self.faults.delay)
        elif fault is not None:
            data = self.faults.damage(fault, data)
        self.send(data)


def _server_class(base: type[Any], faults: Faults, log: Callable[[str], None] | None,
                  model: ModbusModel) -> type[Any]:
    handler = type("_FaultyHandler", (_Handler,), {"faults": faults, "log": log,
                                                   "model": model})

    def callback_new_connection(self: Any) -> Any:
        return handler(self, self.trace_packet, self.trace_pdu, self.trace_connect)

    return type(f"Faulty{base.__name__}", (base,),
                {"callback_new_connection": callback_new_connection})


def _check_listen(host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go, so that an address in use (or not this
    machine's) is one line in the OS's words before pymodbus tries it (pymodbus logs its own
    message and gives up without saying why).

    Raises:
        CannotServe: the address cannot be listened on.
    """
    where = f"[{host}]" if ":" in host else host
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio does
            probe.bind((host, port))
    except OSError as error:  # socket.gaierror too
        reason = error.strerror or str(error)
        raise CannotServe(f"cannot listen on {where}:{port}: {reason}") from None


async def serve_modbus(model: ModbusModel, faults: Faults, *, framing: str, host: str,
                       port: int, announce: Callable[[str], None],
                       log: Callable[[str], None] | None = None,
                       stop: asyncio.Event | None = None) -> None:
    """Serve ``model`` over TCP on ``host:port`` with ``framing`` ``"tcp"`` (Modbus TCP) or
    ``"rtu"`` (RTU framing over TCP), until ``stop`` is set (or forever); announce
    ``modbus+tcp://HOST:PORT`` or ``socket://HOST:PORT`` first.

    Raises:
        CannotServe: the address cannot be listened on.
    """
    _check_listen(host, port)  # pymodbus would log its own words and return
    if framing == "tcp":
        server = _server_class(ModbusTcpServer, faults, log, model)(
            model.device, address=(host, port))
    else:
        server = _server_class(ModbusSerialServer, faults, log, model)(
            model.device, framer=FramerType.RTU, port=f"socket://{host}:{port}")
    with contextlib.suppress(Exception):  # pymodbus logs a failed listen and returns False
        await server.serve_forever(background=True)
    if not server.transport:
        where = f"[{host}]" if ":" in host else host
        raise CannotServe(f"cannot listen on {where}:{port}")
    try:
        bound_host, bound_port = server.transport.sockets[0].getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        scheme = "modbus+tcp" if framing == "tcp" else "socket"
        announce(f"{scheme}://{shown}:{bound_port}")
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await server.shutdown()


async def serve_modbus_pty(model: ModbusModel, faults: Faults, *, link: Path | None,
                           announce: Callable[[str], None],
                           log: Callable[[str], None] | None = None,
                           stop: asyncio.Event | None = None) -> None:
    """Serve ``model`` with RTU framing on a new pty until ``stop`` is set; announce its path
    (or ``link``) first. The pty is pumped to the server's RTU listener on a private port; a
    ``disconnect`` fault (the server closing that connection) replaces the pty.

    ``link`` is made only where nothing is, and moved or removed only while it is still the
    link made here (the serial simulator's ``_Link``): nothing this did not create is deleted.

    Raises:
        CannotServe: no pty, or the link cannot be made: something is already at ``link``.
    """
    loop = asyncio.get_running_loop()
    listening: asyncio.Future[str] = loop.create_future()
    done = stop or asyncio.Event()
    server = asyncio.ensure_future(serve_modbus(
        model, faults, framing="rtu", host="127.0.0.1", port=0,
        announce=listening.set_result, log=log, stop=done))
    waiting: list[asyncio.Future[Any]] = [listening, server]
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if server.done():
        server.result()  # raises why it could not listen
    _, _, address = listening.result().partition("://")
    host, _, port = address.rpartition(":")
    own_link = _Link(link) if link is not None else None
    pty = _Pty(own_link)
    try:
        announce(str(link) if link is not None else pty.path)
        while not done.is_set():
            cut = await _pump(pty.master, host, int(port), done)
            if cut:  # the server closed the connection: a disconnect fault
                old, pty = pty, _Pty(own_link)
                old.close()
    finally:
        pty.close()
        if own_link is not None:
            own_link.remove()
        done.set()
        await server


async def _pump(master: int, host: str, port: int, stop: asyncio.Event) -> bool:
    """Copy bytes both ways between the pty ``master`` and the server until ``stop`` is set
    (False) or the server closes the connection (True)."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(host, port)
    writer.transport.get_extra_info("socket").setsockopt(
        socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    os.set_blocking(master, False)

    def from_host() -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            data = os.read(master, 4096)
            if data:
                writer.write(data)

    loop.add_reader(master, from_host)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            reading = asyncio.ensure_future(reader.read(4096))
            await asyncio.wait([reading, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                reading.cancel()
                return False
            data = reading.result()
            if not data:
                return True
            while data:
                try:
                    data = data[os.write(master, data):]
                except BlockingIOError:
                    await asyncio.sleep(0.001)
    finally:
        stopping.cancel()
        loop.remove_reader(master)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def run_modbus(args: Any, faults: Faults, announce: Callable[[str], None],
               log: Callable[[str], None] | None, regmap: RegisterMap | None = None) -> None:
    """Serve as the command line asks (``--modbus-tcp`` or ``--modbus-rtu``) until
    interrupted; the registers of ``regmap`` (``--map``) when given.

    Raises:
        CannotServe: the port cannot be set up; ValueError: ``--registers``/``--base``.
    """
    model = ModbusModel(args.registers, args.base, regmap=regmap)

    async def until_signalled() -> None:
        # SIGINT and SIGTERM end the serving by the loop's own handlers: a KeyboardInterrupt
        # raised by a Python signal handler can land inside the event loop's or pymodbus's
        # machinery and leave the shutdown hanging (seen: over 5 s after SIGTERM).
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if args.modbus_tcp is not None:
            host, port = args.modbus_tcp
            await serve_modbus(model, faults, framing="tcp", host=host, port=port,
                               announce=announce, log=log, stop=stop)
        elif args.pty:
            await serve_modbus_pty(model, faults, link=args.link, announce=announce, log=log,
                                   stop=stop)
        else:
            host, port = args.tcp
            await serve_modbus(model, faults, framing="rtu", host=host, port=port,
                               announce=announce, log=log, stop=stop)

    asyncio.run(until_signalled())


class Background:
    """A simulator on its own thread and event loop, for tests and benchmarks.

    Args:
        framing: ``"tcp"``, ``"rtu"`` (RTU over TCP: the URL is ``socket://``) or ``"pty"``.
        faults: the fault injection (none by default).
        model: the register model (16 registers from 0 by default).
        link: with ``"pty"``: the symlink to keep to the pty (needed for ``disconnect``).

    Attributes:
        url: what to open: ``modbus+tcp://127.0.0.1:P``, ``socket://127.0.0.1:P``, or the pty.
    """

    def __init__(self, framing: str, faults: Faults | None = None,
                 model: ModbusModel | None = None, link: Path | None = None) -> None:
        self.model = model or ModbusModel()
        self.faults = faults or Faults()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        ready = threading.Event()
        failure: list[BaseException] = []
        urls: list[str] = []

        def announce(url: str) -> None:
            urls.append(url)
            ready.set()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            if framing == "pty":
                await serve_modbus_pty(self.model, self.faults, link=link, announce=announce,
                                       stop=self._stop)
            else:
                await serve_modbus(self.model, self.faults, framing=framing,
                                   host="127.0.0.1", port=0, announce=announce,
                                   stop=self._stop)

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as error:
                failure.append(error)
                ready.set()

        self._thread = threading.Thread(target=run, daemon=True, name="modbus-sim")
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        if not urls:
            raise CannotServe("the Modbus simulator did not start within 30 s")
        self.url = urls[0]

    def close(self) -> None:
        """Stop serving and wait for the thread (at most 10 s)."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

