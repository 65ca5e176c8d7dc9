"""The Modbus backend: the register device as holding registers of a Modbus TCP or RTU device.

:class:`ModbusDevice` reaches any Modbus device by URL (``docs/modbus.md``)::

    modbus+tcp://HOST[:PORT][?unit=1&base=0]                  TCP, port 502 by default
    modbus+rtu:///dev/ttyUSB0[?baud=19200&parity=E&unit=1]    RTU on a serial port (8N1 unless
                                                              the URL says otherwise)
    modbus+rtu://socket://HOST:PORT[?unit=1]                  RTU framing over any pyserial URL

Register ``addr`` (0..count-1, or an address of the register map) is holding register
``base + addr``; its 8-bit value is the register's low byte, the high byte zero. The frames are
regdev's own sans-IO codec (:mod:`regdev.devices._modbus_codec`), the I/O a socket or
pyserial's ``serial_for_url``.

With a register map (``regmap=``), the map's rules are checked before anything is sent (an
address that is no register, a write to a read-only register or one that sets a reserved bit
is :class:`RegisterRangeError`, nothing sent); the device itself keeps read-only,
write-1-to-clear and clear-on-read bits (a Modbus device is the hardware the map describes).
A block is one 03 or one 16, a field write one 22; a write whose value after may not be the
value written (read-only, write-only, write-1-to-clear or clear-on-read bits) is read back with
a 03. Modbus has no read without side effects and no reset request: with a map, a dump clears
the clear-on-read bits it shows, and :meth:`ModbusDevice.reset` is refused.

Rules of this file (those of the serial backend, ``_serial.py``, for Modbus; the transactions
are the engine's, :mod:`regdev.devices._transaction`, over a :class:`_TcpLink` or the serial
backend's :class:`~regdev.devices._serial.PortLink`, with what Modbus replies mean in
:class:`_ModbusWire`):

* One request at a time per device (a lock), one reply awaited, matched to the request: on
  TCP by transaction id, on both by unit, function code and, for writes, the address and
  values echoed. A reply that does not match is never taken for an acknowledgement.
* A write (06, 16, 22) and a reset are sent once, never again. After a timeout their outcome
  is unknown (:class:`DeviceTimeout`, "may or may not have happened"). Reads (03) are sent
  again up to ``retries`` times.
* Bytes that arrived before a request was sent are never its reply. RTU: the port's input is
  flushed, and the codec's buffer dropped, before every request is written (a device that sends
  one reply twice leaves a copy that matches the next request of the same shape byte for byte).
  TCP: a reply is its request's only by transaction id.
* A late reply is never taken for a later request's. TCP: after a timeout or a malformed reply
  the connection is closed and the next call opens a new one, so nothing still on its way
  reaches it (a TCP stream whose framing is in doubt cannot be trusted anyway). RTU (no
  transaction id): the line is synchronised before it is trusted, at open and after every
  timeout: the input is flushed and a read exchanged whose reply none of the requests still
  unanswered can have (a read of another number of registers than any of them: 2 when it
  can; never of a clear-on-read register); the device answers in order, so every late reply
  has arrived, and was dropped, by then.
* A read of a register with clear-on-read bits (by the map) is sent once, never again: a
  second read would find them cleared.
* RS-485 local echo (the adapter hands back what was sent): the first synchronisation notices
  a request's bytes before its reply and drops the copy of every request from then on
  (``echo=1`` in the URL says so from the start).
* Exception codes are mapped in one place, :data:`_EXCEPTIONS`; transport errors in
  :func:`~regdev.devices._serial.map_exceptions` (socket and pyserial errors become
  :class:`TransportError`).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import serial

from ..core._errors import (
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    MapError,
    RegisterRangeError,
    TransportError,
)
from ..core._limits import seconds_problem
from ..core._wording import serial_problem
from ._device import DATA_MAX, MAX_BLOCK, REGISTER_COUNT, Device, check_access, check_block
from ._modbus_codec import (
    MAX_READ,
    MAX_READ_BITS,
    MAX_WRITE,
    MAX_WRITE_BITS,
    NEED_DATA,
    RTU,
    TCP,
    ClientConnection,
    ExceptionReply,
    MaskWrite,
    ReadCoils,
    ReadDiscrete,
    ReadHolding,
    ReadInput,
    ReadReply,
    Reply,
    Request,
    WriteCoil,
    WriteCoils,
    WriteMultiple,
    WriteSingle,
)
from ._regmap import Register, RegisterMap
from ._serial import MAX_BAUDRATE, MODBUS_URL_FORMS, PortLink, map_exceptions, port_state_id
from ._transaction import SharedLine, Transactions

__all__ = ["DEFAULT_BAUDRATE", "MODBUS_SCHEMES", "URL_FORMS", "ModbusDevice", "ModbusTarget",
           "is_modbus_url", "parse_modbus_url"]

#: An RTU line's speed in baud when neither the URL nor the caller gives one: the Modbus over
#: Serial Line specification's (V1.02, section 2.5.1).
DEFAULT_BAUDRATE = 19200
#: The URL schemes of :class:`ModbusDevice`.
MODBUS_SCHEMES = ("modbus+tcp", "modbus+rtu")
#: The forms of a Modbus URL, repeated in errors about one.
URL_FORMS = MODBUS_URL_FORMS
#: The parities pyserial takes, by the letter used in a URL.
_PARITIES = {"N": serial.PARITY_NONE, "E": serial.PARITY_EVEN, "O": serial.PARITY_ODD}
#: The URL's own query keys; any other is passed on to the pyserial URL under modbus+rtu.
_KEYS = frozenset({"unit", "base", "baud", "parity", "stopbits", "echo"})
#: Most bytes taken from the port per read call.
_READ_CHUNK = 512
#: A serial port's read timeout, in seconds (how often a wait wakes to check its deadline).
_POLL = 0.01

#: The read request of each table.
_READS: dict[str, type[ReadHolding | ReadInput | ReadCoils | ReadDiscrete]] = {
    "holding": ReadHolding, "input": ReadInput, "coil": ReadCoils, "discrete": ReadDiscrete}
#: How messages name each table's registers.
_TABLE_NAMES = {"holding": "holding registers", "input": "input registers",
                "coil": "coils", "discrete": "discrete inputs"}

#: Each Modbus exception code: the error class, and what it means for the request.
_EXCEPTIONS: dict[int, tuple[type[DeviceError], str]] = {
    0x01: (DeviceRefused, "the device does not support this function (illegal function); "
                          "not executed"),
    0x02: (DeviceRefused, "no such register address on the device (illegal data address); "
                          "not executed"),
    0x03: (DeviceRefused, "the device does not accept this value (illegal data value); "
                          "not executed"),
    0x04: (DeviceError, "the device failed while executing it (server device failure); it may "
                        "have run in part: read the register back"),
    0x05: (DeviceTimeout, "the device accepted it and will finish it later (acknowledge); its "
                          "outcome is not known yet: read the register back"),
    0x06: (DeviceBusy, "the device is busy (server device busy); not executed, retry later"),
    0x07: (DeviceRefused, "the device cannot perform it (negative acknowledge); not executed"),
    0x08: (DeviceError, "the device found a memory parity error (memory parity error); read "
                        "the register back"),
    0x0A: (DeviceBusy, "the gateway has no path to the unit now (gateway path unavailable); "
                       "not executed, retry later"),
    0x0B: (DeviceTimeout, "the unit behind the gateway did not answer it (gateway target "
                          "failed to respond); it may or may not have happened: read the "
                          "register back"),
}
def is_modbus_url(url: str) -> bool:
    """True when ``url`` names a Modbus device (``modbus+tcp://`` or ``modbus+rtu://``)."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in MODBUS_SCHEMES


@dataclass(frozen=True)
class ModbusTarget:
    """A Modbus URL, parsed: where the device is and how to talk to it.

    Attributes:
        framing: ``"tcp"`` or ``"rtu"``.
        port: TCP: ``"HOST:PORT"``; RTU: the pyserial port (a device path or a URL).
        host, tcp_port: TCP only: the host and port (1..65535, 502 by default).
        unit: the unit id, 1..247 (1..255 on TCP); 1 by default.
        base: the holding register of register 0, 0..65535; 0 by default.
        baudrate: RTU: line speed in baud (19200 by default, the specification's);
            None when the URL gives none.
        parity: RTU: ``"N"``, ``"E"`` or ``"O"``; ``"N"`` by default (as pymodbus's; the
            specification's default is ``"E"``: say ``parity=E`` for such a device; a Linux
            pty takes no parity).
        stopbits: RTU: 1 or 2 (1 by default).
        echo: RTU: the line echoes what is sent (``echo=1``); False by default.
    """

    framing: str
    port: str
    host: str = ""
    tcp_port: int = 0
    unit: int = 1
    base: int = 0
    baudrate: int | None = None
    parity: str = "N"
    stopbits: int = 1
    echo: bool = False


def _bad(url: str, why: str) -> TransportError:
    return TransportError(f"cannot open port {url}: {why}; expected {URL_FORMS}")


def _int_param(url: str, params: dict[str, str], key: str, *, low: int, high: int,
               default: int | None) -> int | None:
    text = params.get(key)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise _bad(url, f"{key} must be an integer {low}..{high}, got `{text}`")
    return int(text)


def parse_modbus_url(url: str) -> ModbusTarget:
    """Parse a ``modbus+tcp://`` or ``modbus+rtu://`` URL.

    The query keys: ``unit`` (1..247; 1..255 on TCP), ``base`` (0..65535), and for RTU
    ``baud`` (1..20000000), ``parity`` (N, E, O), ``stopbits`` (1, 2), ``echo`` (0, 1). Other
    keys of a ``modbus+rtu://`` URL are passed on to the pyserial URL beneath it
    (``modbus+rtu://socket://h:p?logging=debug&unit=2``).

    Raises:
        TransportError: the URL is not of these forms or a key's value is out of range; the
            message repeats the forms (:data:`URL_FORMS`).
    """
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in MODBUS_SCHEMES:
        raise _bad(url, "not a Modbus URL")
    rest, _, query = rest.partition("?") if scheme == "modbus+tcp" else _split_query(rest)
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    params = {key: value for key, value in pairs if key in _KEYS}
    others = [(key, value) for key, value in pairs if key not in _KEYS]
    if len(params) != len([key for key, _ in pairs if key in _KEYS]):
        raise _bad(url, "a query key is given twice")
    framing = TCP if scheme == "modbus+tcp" else RTU
    unit = _int_param(url, params, "unit", low=1, high=255 if framing == TCP else 247, default=1)
    base = _int_param(url, params, "base", low=0, high=0xFFFF, default=0)
    assert unit is not None and base is not None
    if framing == TCP:
        extra = sorted(set(params) - {"unit", "base"}) + [key for key, _ in others]
        if extra:
            raise _bad(url, f"`{extra[0]}` is not a modbus+tcp key (unit, base)")
        parts = urllib.parse.urlsplit("//" + rest)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or port in (-1, 0) or parts.path not in ("", "/"):
            raise _bad(url, "expected modbus+tcp://HOST:PORT with a port 1..65535")
        port = port or 502
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        return ModbusTarget(TCP, f"{shown}:{port}", host=host, tcp_port=port, unit=unit,
                            base=base)
    if not rest:
        raise _bad(url, "no serial port named")
    if others:
        rest += "?" + urllib.parse.urlencode(others)
    baudrate = _int_param(url, params, "baud", low=1, high=MAX_BAUDRATE, default=None)
    parity = params.get("parity", "N").upper()
    if parity not in _PARITIES:
        raise _bad(url, f"parity must be N, E or O, got `{params['parity']}`")
    stopbits = _int_param(url, params, "stopbits", low=1, high=2, default=1)
    echo = _int_param(url, params, "echo", low=0, high=1, default=0)
    assert stopbits is not None
    return ModbusTarget(RTU, rest, unit=unit, base=base, baudrate=baudrate, parity=parity,
                        stopbits=stopbits, echo=bool(echo))


def _split_query(rest: str) -> tuple[str, str, str]:
    """A ``modbus+rtu`` URL's port and query: the query is after the last ``?``, when it holds
    one of our keys (a pyserial URL may have its own query, kept with ours)."""
    port, sep, query = rest.rpartition("?")
    if not sep:
        return rest, "", ""
    return port, sep, query


class _TcpLink:
    """A TCP connection to a Modbus server, as the transaction engine's link."""

    flush_before_request = False  # a reply is its request's by transaction id

    def __init__(self, target: ModbusTarget, url: str, timeout: float) -> None:
        self.url = url
        try:
            self.sock = socket.create_connection((target.host, target.tcp_port),
                                                 timeout=timeout)
        except OSError as error:
            raise TransportError(f"cannot connect to {target.port} ({url}): "
                                 f"{_reason(error)}") from error
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, data: bytes) -> None:
        with map_exceptions(self.url):
            self.sock.sendall(data)

    def read(self, deadline: float) -> bytes:
        """The next bytes, or b"" when none came by ``deadline`` (time.monotonic seconds).

        Raises:
            TransportError: the connection failed, or the peer closed it.
        """
        with map_exceptions(self.url):
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(_READ_CHUNK)
            except TimeoutError:
                return b""
            if not data:
                raise TransportError(f"port {self.url} failed: the device closed the "
                                     "connection")
            return data

    def flush_input(self) -> None:
        pass  # a stale reply carries another transaction id

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _ModbusWire:
    """Modbus replies and the RTU line's synchronisation, for the transaction engine."""

    need_data = NEED_DATA
    sync_name = "read that synchronises the line"
    bad_frame_ends_wait = True  # TCP: the stream's framing is in doubt

    def __init__(self, device: ModbusDevice) -> None:
        self._device = device

    def sync_request(self, what: str) -> object | None:
        return self._device._sync_request()

    def synced(self, reply: object | None) -> None:
        device = self._device
        device._unanswered.clear()  # every late reply came before the sync's, and was dropped
        codec = device._codec
        if codec.echo_seen and not codec.local_echo:
            codec.local_echo = device.echo = True  # the line echoes: drop the copies

    def refusal(self, request: object, reply: object) -> DeviceError | None:
        if isinstance(reply, ExceptionReply):
            return _exception_error(reply.code)
        return None

    def abandoned(self, request: object) -> None:
        if isinstance(request, ReadHolding):  # its reply may still come
            self._device._unanswered.add(request.count)

    def lost_sync(self) -> str:
        """TCP drops the connection; RTU synchronises before the next request."""
        return "reopen" if self._device.target.framing == TCP else "sync"


def _reason(error: OSError) -> str:
    """Why a connection or port failed, in regdev's words (or the OS's)."""
    return serial_problem(error)


class ModbusDevice(Device):
    """A register device behind Modbus TCP or RTU: register ``addr`` is holding register
    ``base + addr``, its value the low byte (0..255).

    With a register map (``regmap``), the registers are the map's, each at holding register
    ``base + addr``: addresses, read-only registers and reserved bits are checked against it
    before anything is sent; a block read is one 03, a block write one 16, a field write one
    22 (atomic on the device); a write whose value after may differ from the value written
    (read-only, write-only, write-1-to-clear or clear-on-read bits) is read back with a 03;
    a read of a clear-on-read register is sent once. :meth:`reset` is refused (Modbus has no
    reset request, and writes cannot set a map's read-only or write-1-to-clear bits back).

    The link is opened at construction: a TCP connection, or the serial port opened
    exclusively (a POSIX lock; ``socket://`` and ``rfc2217://`` have none). An RTU line is
    synchronised before the first request and after every timeout (see the module's rules). A
    link that failed, and a TCP connection after a timeout, is closed and opened again by the
    next transaction.

    Args:
        url: ``modbus+tcp://HOST[:PORT]?unit=1&base=0`` or
            ``modbus+rtu://PORT?baud=19200&parity=N&stopbits=1&unit=1&base=0&echo=0``
            (:func:`parse_modbus_url`).
        timeout: seconds to wait for each reply, 0.001..86400 (and for a TCP connection to
            open).
        retries: how many more times a read (03) is sent after a timeout, a failed link after
            sending, or a busy answer (exception 06, 0A); writes and resets never are.
        baudrate: RTU line speed in baud when the URL gives none (19200 when neither does);
            None leaves it to the URL. A URL's ``baud`` and a different ``baudrate`` conflict.
        count: the number of registers, 1..123 (addresses 0..count-1); 16 by default. Not
            with ``regmap``, which says it.
        first_tid: TCP: the first transaction id, 0..65535; random by default.
        regmap: the device's register map (``docs/maps.md``); None (or the default map) for
            ``count`` plain read-write registers (:attr:`regmap` is then the default map for
            16, else a map of ``count`` unnamed read-write registers at 0..count-1).
        line: RTU: the serial line (RS-485 bus) this unit shares with other units of other
            devices: one port, one transaction at a time on the bus (the port is opened at the
            first transaction). None: the device opens its port itself, at construction.

    Raises:
        ValueError: ``timeout``, ``retries``, ``baudrate``, ``count`` or ``first_tid`` is out
            of range, or ``count`` is given with a map.
        TransportError: the URL is malformed, or the link cannot be opened (the request was
            never sent).

    Attributes:
        timeouts: replies waited for in vain so far.
        bad_replies: TCP replies so malformed that the connection was dropped, so far.
        stale_replies: replies dropped so far because they answered another request.
        echo: RTU: the copy of each request is dropped (the line echoes).
    """

    def __init__(self, url: str, *, timeout: float = 0.5, retries: int = 1,
                 baudrate: int | None = None, count: int = REGISTER_COUNT,
                 first_tid: int | None = None, regmap: RegisterMap | None = None,
                 line: SharedLine | None = None) -> None:
        problem = seconds_problem(timeout)
        if problem is not None:
            raise ValueError(f"timeout {problem}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if baudrate is not None and (type(baudrate) is not int
                                     or not 1 <= baudrate <= MAX_BAUDRATE):
            raise ValueError(f"baudrate must be an int 1..{MAX_BAUDRATE} (baud), "
                             f"got {baudrate!r}")
        if type(count) is not int or not 1 <= count <= 123:
            raise ValueError(f"count must be an int 1..123, got {count!r}")
        mapped = regmap is not None and not regmap.is_default
        if mapped:
            assert regmap is not None
            if count != REGISTER_COUNT:
                raise ValueError("count and regmap: give one (the map says how many registers "
                                 "there are)")
            problem = modbus_problem(regmap)
            if problem is not None:
                raise MapError(f"the map cannot be driven over Modbus: {problem}")
            count = max(register.addr for register in regmap.registers) + 1
        if first_tid is None:
            first_tid = secrets.randbelow(0x10000)
        elif type(first_tid) is not int or not 0 <= first_tid <= 0xFFFF:
            raise ValueError(f"first_tid must be an int 0..65535, got {first_tid!r}")
        target = parse_modbus_url(url)
        if line is not None and target.framing == TCP:
            raise ValueError("line is for units on one serial line (modbus+rtu://); each "
                             "modbus+tcp:// device has a connection of its own")
        if target.base + count > 0x10000:
            where = ("holding register 65535" if regmap is None or regmap.tables == ("holding",)
                     else "register 65535 of a table")
            raise TransportError(f"cannot open port {url}: base {target.base} + {count} "
                                 f"registers is past {where}")
        if regmap is None:  # count plain read-write registers; the default map for 16
            regmap = (RegisterMap.default() if count == REGISTER_COUNT else
                      RegisterMap([Register(None, each) for each in range(count)]))
        super().__init__(regmap)
        self._mapped = mapped
        #: The shapes of the RTU synchronising read, most wanted first: (address, count).
        self._sync_shapes = _sync_shapes(regmap if mapped else None, count)
        #: Numbers of registers of the reads sent and not answered since the last sync.
        self._unanswered: set[int] = set()
        if (baudrate is not None and target.baudrate is not None
                and baudrate != target.baudrate):
            raise ValueError(f"the URL says baud={target.baudrate} and baudrate is "
                             f"{baudrate}: give the line speed once")
        self.url = url
        self.target = target
        self.timeout = float(timeout)
        self.retries = retries
        self.baudrate = target.baudrate or baudrate or DEFAULT_BAUDRATE
        self.count = count
        self.echo = target.echo
        self._codec = ClientConnection(target.framing, target.unit, first_tid,
                                       local_echo=target.echo)
        self._state_id = _state_id(target)
        self._tx: Transactions[Reply] = Transactions(
            url, lambda: self.timeout, self._open, self._codec, _ModbusWire(self),
            synced=target.framing == TCP, line=line)  # RTU: a sync exchange is due

    @property
    def timeouts(self) -> int:
        """Replies waited for in vain so far."""
        return self._tx.timeouts

    @property
    def bad_replies(self) -> int:
        """Replies so malformed that the link was dropped, so far."""
        return self._tx.bad_frames

    @property
    def stale_replies(self) -> int:
        """Replies dropped so far because they did not answer the request awaited."""
        return self._codec.stale

    def _open(self) -> _TcpLink | PortLink:
        target = self.target
        if target.framing == TCP:
            return _TcpLink(target, self.url, self.timeout)
        # RTU: bytes that came before a request are never its reply (no transaction id)
        return PortLink(target.port, self.timeout, flush_before_request=True, name=self.url,
                        baudrate=self.baudrate, parity=_PARITIES[target.parity],
                        stopbits=target.stopbits, bytesize=8)

    # --- the Device interface -----------------------------------------------------------------

    def _check(self, addr: object, data: object = 0, length: int = 1) -> Register | None:
        """Refuse what the device cannot have before anything is sent; the register at
        ``addr`` when there is a map (None without one)."""
        if self._mapped:
            check_block(addr, length, self._regmap)
            check_access(addr, data, self._regmap)
            assert isinstance(addr, int)
            return self._regmap.at(addr)
        check_access(addr, data, self._regmap)  # count plain registers (16: the default map)
        assert isinstance(addr, int)
        if addr + length > self.count:
            raise RegisterRangeError(f"address {addr!r} is outside 0..{self.count - 1}")
        return None

    def _clears(self, addr: int, count: int, table: str = "holding") -> bool:
        """True when a read of ``count`` registers from ``addr`` clears bits (clear-on-read)."""
        return self._mapped and any(
            (spec := self._regmap.at(each, table)) is not None and spec.rclr_mask
            for each in range(addr, addr + count))

    def _read(self, addr: int, count: int, table: str = "holding") -> list[int]:
        """One read (03, 04, 01 or 02, by ``table``) of ``count`` registers from ``addr``:
        sent once when it clears bits, else retried as reads are."""
        clears = self._clears(addr, count, table)
        reply = self._transact(_READS[table](self.target.base + addr, count),
                               "clear-on-read read" if clears else "read",
                               0 if clears else self.retries)
        return self._bytes(reply, addr, table)

    def _refuse(self, spec: Register | None, data: int, mask: int | None = None) -> None:
        """The map's rules for a write, before anything is sent."""
        if spec is not None:
            refused = spec.refuse_write(data, mask)
            if refused is not None:
                raise RegisterRangeError(f"{refused}; nothing was sent")

    def _read_back(self, addr: int, count: int, what: str) -> list[int]:
        """After an acknowledged write: the registers' values, read with a 03."""
        try:
            return self._read(addr, count)
        except (DeviceError, TransportError) as error:
            where = (f"register {self._regmap.label(addr)}" if count == 1
                     else f"registers {addr}..{addr + count - 1}")
            raise DeviceError(f"the {what} of {where} was acknowledged (it happened), but "
                              f"reading it back failed: {error}") from error

    def _plain(self, addr: int, count: int = 1) -> bool:
        """True when writing these registers leaves exactly the value written (every field
        bit read-write, no side effects), so a write needs no read back."""
        return not self._mapped or all(
            (spec := self._regmap.at(each)) is not None
            and spec.store_mask == spec.readable_mask == spec.field_mask
            and not spec.rclr_mask for each in range(addr, addr + count))

    def read(self, addr: int) -> int:
        """Return register ``addr`` (0..count-1, or a register of the map): the low byte of
        its holding register. A register with clear-on-read bits is read once, never again.

        Raises:
            RegisterRangeError: ``addr`` is out of range or no register (nothing is sent).
            DeviceTimeout: an attempt was sent and no matching reply came within ``timeout``
                seconds, and no later attempt got one (:class:`ReplyLost`: the link failed
                after sending).
            DeviceBusy: the device answered busy (exception 06 or 0A) to every attempt.
            DeviceRefused: the device refused it (exception 01, 02, 03, 07).
            DeviceError: the register holds a value over 255, or exception 04 or 08.
            TransportError: the request was not sent (the link failed first, or the RTU line
                could not be synchronised).
        """
        self._check(addr)
        return self._read(addr, 1)[0]

    def read_block(self, addr: int, count: int) -> list[int]:
        """Read ``count`` (1..16) registers from ``addr`` up with one 03; sent once when one
        of them has clear-on-read bits, else retried as :meth:`read` is.

        Raises:
            RegisterRangeError: an address of the block is no register (nothing is sent).
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`read`.
        """
        if type(count) is not int or not 1 <= count <= MAX_BLOCK:
            raise RegisterRangeError(f"a block has 1..{MAX_BLOCK} registers, got {count!r}")
        self._check(addr, 0, count)
        return self._read(addr, count)

    def snapshot(self) -> list[int]:
        """Return all registers, in address order: one 03 (with a map, one per run of
        consecutive addresses, at most 125 registers each).

        Modbus has no read without side effects: with a map, the 03 of a run that holds a
        clear-on-read register clears its bits on the device (their values are in the
        result), and it is sent once.

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`read`.
        """
        if not self._mapped:
            return self._read(0, self.count)
        values: list[int] = []
        for table in self._regmap.tables:
            longest = MAX_READ_BITS if table in ("coil", "discrete") else MAX_READ
            addresses = [register.addr for register in self._regmap.in_table(table)]
            for start, count in _runs(addresses, longest, whole_spans(self._regmap, table)):
                values += self._read(start, count, table)
        return values

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` with one 06 request, sent once; return
        the value the device echoed, or with a map, for a register whose value after may
        differ from the value written, the value read back (a 03, retried as reads are,
        sent once for a clear-on-read register).

        Raises:
            RegisterRangeError: ``addr`` or ``data`` is out of range, or the map refuses the
                write (a read-only register, a reserved bit set); nothing is sent.
            DeviceTimeout: the write was sent and no matching reply came within ``timeout``
                seconds: it may or may not have happened (:class:`ReplyLost`: the link
                failed after sending; the same). Also exception 05 and 0B.
            DeviceBusy: exception 06 or 0A: not executed; may succeed later.
            DeviceRefused: exception 01, 02, 03 or 07: not executed.
            DeviceError: exception 04 or 08: it may have run; read back. Also: the write
                was acknowledged but reading it back failed (the message says it happened).
            TransportError: the write was not sent; it did not happen.
        """
        spec = self._check(addr, data)
        self._refuse(spec, data)
        self._transact(WriteSingle(self.target.base + addr, data), "write", 0)
        if self._plain(addr):
            return data
        return self._read_back(addr, 1, "write")[0]

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` (1..count values of 0..255; 1..16 with a map) to registers ``addr``
        onwards with one 16 request, sent once; every value is checked (with a map, by the
        map's rules) before anything is sent. Return the values written (16's acknowledgement
        echoes the address and count, not the values), or with a map whose registers may
        hold other values than those written, the block read back with one 03.

        Raises:
            RegisterRangeError: a value is out of range, ``data`` is empty, the block runs
                past the last register or reaches an address that is no register, or the map
                refuses a value (read-only register, reserved bits); nothing is sent.
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`write`.
        """
        values = list(data)
        if not values:
            raise RegisterRangeError("a block write needs at least one value")
        for index, value in enumerate(values):
            if self._mapped and type(addr) is int and self._regmap.at(addr + index) is not None:
                check_access(addr + index, value, self._regmap)
            else:
                check_access(0, value)
        if self._mapped and len(values) > MAX_BLOCK:
            raise RegisterRangeError(f"a block has 1..{MAX_BLOCK} registers, got {len(values)}")
        self._check(addr, 0, len(values))
        for index, value in enumerate(values):
            self._refuse(self._regmap.at(addr + index) if self._mapped else None, value)
        self._transact(WriteMultiple(self.target.base + addr, tuple(values)), "block write", 0)
        if self._plain(addr, len(values)):
            return values
        return self._read_back(addr, len(values), "block write")

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        """Set the bits of register ``addr`` that ``mask`` (0..255) selects to those of
        ``data`` (0..255), atomically on the device: one 22 request (``new = (old & ~mask) |
        (data & mask)``; the high byte is set to 0), sent once. Then read the register back
        (a read, retried as reads are, sent once for a clear-on-read register) and return its
        value. With a map, the device does what the map says of the bits in ``mask``
        (write-1-to-clear bits clear where ``data`` has a 1; the others keep their value).

        Raises:
            RegisterRangeError: ``addr``, ``mask`` or ``data`` is out of range, or the map
                refuses it (a read-only register, a reserved bit in ``mask`` set); nothing is
                sent.
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`write`; and :class:`DeviceError` when the write was acknowledged but
                reading it back failed (the message says so: it happened).
        """
        spec = self._check(addr, data)
        if self._mapped:
            check_access(addr, mask, self._regmap)
        else:
            check_access(0, mask)
        self._refuse(spec, data, mask)
        top = spec.top if spec is not None else DATA_MAX  # the bits above it stay 0
        self._transact(MaskWrite(self.target.base + addr, ~mask & top, data & mask),
                       "masked write", 0)
        return self._read_back(addr, 1, "masked write")[0]

    def read_table(self, table: str, addr: int, count: int) -> list[int]:
        """Read ``count`` consecutive registers of ``table`` from ``addr`` up in one request:
        03 (holding, 1..125), 04 (input, 1..125), 01 (coils, 1..2000) or 02 (discrete
        inputs, 1..2000); sent once when one has clear-on-read bits, else retried as
        :meth:`read` is. Each value is 0..2**width-1 of its register (a bit 0 or 1).

        Raises:
            RegisterRangeError: an address is no register of ``table`` in the map (without a
                map: past the plain registers; only holding then), or ``count`` is past the
                protocol's limit; nothing is sent.
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`read`.
        """
        longest = MAX_READ_BITS if table in ("coil", "discrete") else MAX_READ
        self._check_table(table, addr, count, longest, "read")
        return self._read(addr, count, table)

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` to consecutive registers of ``table`` from ``addr`` up in one
        request, sent once, every value checked by the map before anything is sent: holding
        registers with 06 (one) or 16 (1..123), coils with 05 (one) or 15 (1..1968). Return
        the values after (read back as :meth:`write_block` does, when the map says they may
        differ from those written).

        Raises:
            RegisterRangeError: an address is no register of ``table``, a value does not fit
                its register, the map refuses it, or there are more than the protocol's limit;
                nothing is sent.
            DeviceRefused: ``table`` is read-only (input registers, discrete inputs): nothing
                is sent.
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`write`.
        """
        if table in ("input", "discrete"):
            raise DeviceRefused(f"the {table} table is read-only: Modbus has no request that "
                                f"writes it; nothing was sent", "TABLE")
        values = list(data)
        longest = MAX_WRITE_BITS if table == "coil" else MAX_WRITE
        self._check_table(table, addr, len(values), longest, "write")
        for index, value in enumerate(values):
            spec = self._regmap.at(addr + index, table) if self._mapped else None
            top = spec.top if spec is not None else DATA_MAX
            if type(value) is not int or not 0 <= value <= top:
                raise RegisterRangeError(f"data {value!r} is outside 0..{top}; nothing was "
                                         "sent")
            self._refuse(spec, value)
        base = self.target.base + addr
        if table == "coil":
            request: Request = (WriteCoil(base, values[0]) if len(values) == 1
                                else WriteCoils(base, tuple(values)))
        else:
            request = (WriteSingle(base, values[0]) if len(values) == 1
                       else WriteMultiple(base, tuple(values)))
        self._transact(request, "write" if len(values) == 1 else "block write", 0)
        if table == "coil" or self._plain(addr, len(values)):
            return values
        return self._read_back(addr, len(values), "block write")

    def _check_table(self, table: str, addr: object, count: object, longest: int,
                     what: str) -> None:
        """Refuse a read or write of ``count`` registers of ``table`` from ``addr`` that is
        past the protocol's ``longest`` or reaches an address that is no register."""
        if type(count) is not int or not 1 <= count <= longest:
            raise RegisterRangeError(f"a {what} of the {table} table takes 1..{longest} "
                                     f"registers in one request, got {count!r}")
        if type(addr) is not int:
            raise RegisterRangeError(f"address {addr!r} is not an integer")
        if not self._mapped:
            if table != "holding":
                raise RegisterRangeError(f"this device has holding registers only (no map): "
                                         f"no {table} table")
            self._check(addr, 0, count)
            return
        missing = [each for each in range(addr, addr + count)
                   if self._regmap.at(each, table) is None]
        if missing:
            raise RegisterRangeError(f"address {missing[0]} is not a register of the {table} "
                                     "table of this device; nothing was sent")

    def reset(self) -> None:
        """Set every register to 0, its reset value, with one 16 request, sent once (Modbus
        has no reset request; a device's own reset is not this).

        Raises:
            DeviceRefused: the device has a register map: nothing is sent (writes cannot set
                read-only or write-1-to-clear bits back to their reset values; reset the
                device itself).
            DeviceTimeout, DeviceBusy, DeviceRefused, DeviceError, TransportError: as for
                :meth:`write`.
        """
        if self._mapped:
            raise DeviceRefused("a Modbus device with a register map cannot be reset by regdev "
                                "(Modbus has no reset request, and writes cannot set read-only "
                                "or write-1-to-clear bits back); nothing was sent: reset the "
                                "device itself", "RESET")
        self._transact(WriteMultiple(self.target.base, (0,) * self.count), "reset", 0)

    def identify(self) -> str:
        """A description of the device from its URL (Modbus has no identify request every
        device answers); no request is sent."""
        target = self.target
        where = (f"Modbus TCP {target.port}" if target.framing == TCP
                 else f"Modbus RTU {target.port} at {self.baudrate} baud")
        if self._mapped:
            name = f" {self._regmap.name}" if self._regmap.name else ""
            regmap = self._regmap
            if regmap.tables == ("holding",) and regmap.widest == 8:
                return (f"{where}, unit {target.unit}, the register map{name}: "
                        f"{len(regmap)} x 8-bit in holding registers "
                        f"{target.base}..{target.base + self.count - 1}")
            parts = []
            for table in regmap.tables:
                registers = regmap.in_table(table)
                widths = sorted({r.width for r in registers if r.width > 1})
                bits = f" ({'/'.join(map(str, widths))}-bit)" if widths else ""
                kind = _TABLE_NAMES[table]
                kind = kind[:-1] if len(registers) == 1 else kind
                parts.append(f"{len(registers)} {kind}{bits} "
                             f"{target.base + registers[0].addr}.."
                             f"{target.base + registers[-1].addr}")
            return f"{where}, unit {target.unit}, the register map{name}: {', '.join(parts)}"
        return (f"{where}, unit {target.unit}, {self.count} x 8-bit in holding registers "
                f"{target.base}..{target.base + self.count - 1}")

    def state_id(self) -> str:
        """Who the device is: ``"modbus:"`` + framing, port and unit (:func:`_state_id`), the
        same after a restart of regdev. Its :meth:`identity` has no reset epoch (the
        default): a Modbus device cannot say it was reset or power-cycled, so no idempotency
        key is replayed to it (``docs/modbus.md``)."""
        return self._state_id

    def close(self) -> None:
        """Close the link. Idempotent; a later transaction opens it again."""
        self._tx.close()

    def __repr__(self) -> str:
        return f"ModbusDevice({self.url!r}, timeout={self.timeout})"

    # --- transactions -------------------------------------------------------------------------

    def _bytes(self, reply: Reply, addr: int, table: str = "holding") -> list[int]:
        """A read's values, each checked against its register's width (an 8-bit register's
        high byte must be 0)."""
        assert isinstance(reply, ReadReply)
        for offset, value in enumerate(reply.values):
            spec = self._regmap.at(addr + offset, table) if self._mapped else None
            if spec is not None and spec.width != 8:
                continue  # 16 bits (or a bit): every value the reply can carry fits
            if value > DATA_MAX:
                raise DeviceError(f"{_TABLE_NAMES[table][:-1]} {self.target.base + addr + offset} "
                                  f"(register {self._regmap.label(addr + offset, table)}) holds "
                                  f"0x{value:04x}, not a byte (0..255): the high byte of a "
                                  "register must be 0")
        return list(reply.values)

    def _transact(self, request: Request, what: str, retries: int) -> Reply:
        """One transaction of ``request`` (:meth:`Transactions.transact`)."""
        return self._tx.transact(request, what, retries)

    def _sync_request(self) -> ReadHolding | None:
        """The synchronising read: of a number of registers no unanswered read has (so no
        late reply can be taken for its reply), of no clear-on-read register; None when
        there is none (then the input flush alone synchronises)."""
        for start, count in self._sync_shapes:
            if count not in self._unanswered:
                return ReadHolding(self.target.base + start, count)
        return None


def _runs(addresses: Sequence[int], longest: int = MAX_READ,
          whole: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """``(start, count)`` of each run of consecutive ``addresses`` (ascending), each at most
    ``longest`` long, never splitting a span of ``whole`` (``(start, count)``: registers the
    map reads as one value); a run breaks before such a span rather than inside it."""
    starts = {start: count for start, count in whole}
    inside: set[int] = set()
    for start, count in whole:
        inside.update(range(start + 1, start + count))
    runs: list[tuple[int, int]] = []
    span = 1
    for addr in addresses:
        if addr in inside:  # the rest of a span, taken with its first register
            if runs and runs[-1][0] + runs[-1][1] == addr:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((addr, 1))
            continue
        span = starts.get(addr, 1)
        if runs and runs[-1][0] + runs[-1][1] == addr and runs[-1][1] + span <= longest:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((addr, 1))
    return runs


def whole_spans(regmap: RegisterMap, table: str) -> list[tuple[int, int]]:
    """``(start, count)`` of each range of ``table``'s registers the map marks as one value
    (``RegisterMap.values``: each with ``table``, ``addr`` and ``count``), which a read never
    splits across two requests; empty for a map without values."""
    spans = []
    for value in getattr(regmap, "values", ()):
        count = getattr(value, "count", 1) or 1
        if getattr(value, "table", "holding") == table and count > 1:
            spans.append((int(value.addr), int(count)))
    return spans


def modbus_problem(regmap: RegisterMap) -> str | None:
    """Why Modbus cannot carry ``regmap``, or None: its registers are 16 bits (8-bit ones are
    their low byte), its coils and discrete inputs one bit, its addresses 0..65535."""
    for register in regmap.registers:
        if register.width > 16:
            return (f"register {register.label} is {register.width} bits wide; a Modbus "
                    "register is 16 (declare the quantity as a value over "
                    f"{register.width // 16} registers)")
        if register.addr > 0xFFFF:
            return (f"register {register.label} is at address {register.addr}; a Modbus table "
                    "ends at 65535")
    return None


def _sync_shapes(regmap: RegisterMap | None, count: int) -> list[tuple[int, int]]:
    """The RTU synchronising reads available, ``(address, count)``, most wanted first: 2
    registers, then 3, 4 ... then 1; only of registers whose read clears nothing."""
    if regmap is None:
        quiet = list(range(count))
    else:
        quiet = [r.addr for r in regmap.registers if not r.rclr_mask]
    longest: dict[int, int] = {}  # count -> the first start with a run that long
    for start, length in _runs(quiet):
        for size in range(1, length + 1):
            longest.setdefault(size, start)
    order = sorted(longest, key=lambda size: (size == 1, size))
    return [(longest[size], size) for size in order]


def _exception_error(code: int) -> DeviceError:
    """The error for Modbus exception ``code`` (:data:`_EXCEPTIONS`), its message ending with
    the code; DeviceBusy and DeviceRefused carry it as ``code`` (two hex digits)."""
    kind, meaning = _EXCEPTIONS.get(
        code, (DeviceError, "an exception code regdev does not know: it may or may not have "
                            "happened; read the register back"))
    message = f"{meaning} (Modbus exception {code:02X})"
    if kind is DeviceBusy:
        return DeviceBusy(message, f"{code:02X}")
    if kind is DeviceRefused:
        return DeviceRefused(message, f"{code:02X}")
    return kind(message)


def _state_id(target: ModbusTarget) -> str:
    """The device's name: ``modbus:tcp://HOST:PORT?unit=U`` or ``modbus:rtu://PORT?unit=U``:
    the unit on its bus or behind its server. The port is named as the serial backend names it
    (:func:`~regdev.devices._serial.port_state_id`: a device path resolved, a URL's scheme and
    host in lower case, its options dropped); the host in lower case. ``base`` is left out: it
    picks registers of the device, not another device."""
    if target.framing == TCP:
        where = target.port.lower()
    else:
        where = port_state_id(target.port).removeprefix("serial:")
    return f"modbus:{target.framing}://{where}?unit={target.unit}"
