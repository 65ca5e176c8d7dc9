"""The serial backend: the register device at the end of a serial line, through pyserial.

:class:`SerialDevice` speaks the wire protocol of ``docs/protocol.md`` (the codec is
:mod:`regdev.devices._protocol`) over any port pyserial's ``serial_for_url`` opens: a device path
(``/dev/ttyUSB0``, ``COM3``), ``socket://HOST:PORT`` or ``rfc2217://HOST:PORT``.

Rules of this file:

* The transactions are the engine's (:mod:`regdev.devices._transaction`: the lock, the
  attempts, what a failure says became of the request, synchronising, reopening); this file
  gives it the port (:class:`PortLink`, pyserial's own reads and writes, for every port kind)
  and what the protocol's replies mean (:class:`_SerialWire`).
* The line is synchronised before it is trusted: after the port is opened (or reopened) the
  input is flushed and an identify request exchanged before any other. The device answers in
  order, so every reply still on its way from before has arrived and been dropped by then.
  Sequence numbers start at a random value, so a new process does not reuse the numbers of
  the one before it either.
* After a timeout the input is flushed and the codec's buffer dropped before the next request;
  a late reply that still arrives carries an old sequence number and is dropped as stale.
* A device's ``e`` reply: :class:`DeviceBusy` for ``BUSY``, ``CKSUM`` or ``SYNTAX`` (not
  executed, may succeed later), :class:`DeviceRefused` for another code (not executed).
* pyserial and OS exceptions are mapped to regdev's in one place, :func:`_port_failure`
  (through :func:`map_exceptions` around opening and settings).
* Who the device is comes from its identify reply (``docs/protocol.md``, the ``id=`` and
  ``epoch=`` ending), learnt from every identify reply, the synchronising one included, and
  asked again after every reset sent: :meth:`SerialDevice.identity`. A device that does not
  say them is named by its port (:func:`port_state_id`) and has no epoch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import serial

from ..core._errors import DeviceBusy, DeviceError, DeviceRefused, MapError, TransportError
from ..core._text import escape_text
from ..core._wording import serial_problem
from ._device import Device, DeviceIdentity, check_access, check_block, check_timeout
from ._protocol import (
    HOST,
    MAP_PAGE,
    NEED_DATA,
    Connection,
    DumpReply,
    DumpRequest,
    ErrorReply,
    IdentifyReply,
    IdentifyRequest,
    MaskedWriteReply,
    MaskedWriteRequest,
    ReadBlockReply,
    ReadBlockRequest,
    ReadReply,
    ReadRequest,
    Reply,
    Request,
    ResetReply,
    ResetRequest,
    WriteBlockReply,
    WriteBlockRequest,
    WriteReply,
    WriteRequest,
    split_map_text,
)
from ._regmap import RegisterMap
from ._transaction import ITSELF, SharedLine, Transactions

__all__ = ["MAX_BAUDRATE", "MODBUS_URL_FORMS", "URL_FORMS", "SerialDevice", "map_exceptions",
           "port_state_id"]

#: The port forms :class:`SerialDevice` accepts, repeated in errors about a port's name.
URL_FORMS = "a device path (/dev/ttyUSB0, COM3), socket://HOST:PORT or rfc2217://HOST:PORT"
#: The forms of a Modbus URL (``docs/modbus.md``), repeated in errors about one, and after the
#: serial forms for a port whose scheme no one knows (``modbus://`` for ``modbus+tcp://``).
MODBUS_URL_FORMS = ("modbus+tcp://HOST[:PORT]?unit=1 or modbus+rtu://PORT?baud=19200&unit=1 "
                    "(PORT a device path such as /dev/ttyUSB0, or a pyserial URL such as "
                    "socket://HOST:PORT)")
#: Highest line speed accepted, in baud: above the fastest USB serial adapters (12 Mbaud), and
#: far below where pyserial overflows (it passes the rate to the OS as a C int).
MAX_BAUDRATE = 20_000_000

#: What each error code in an ``e`` reply means, for the message of :class:`DeviceBusy` or
#: :class:`DeviceRefused`.
_REFUSALS = {
    "ADDR": "no such register address",
    "DATA": "the data value is not allowed",
    "CKSUM": "the request was damaged on the line (bad checksum); it was not executed",
    "SYNTAX": "the request was damaged on the line (bad syntax); it was not executed",
    "BUSY": "the device is busy; the request was not executed",
}
#: A bridge's bus errors (``docs/firmware.md``, "Bus errors"): what happened on the bus
#: between the board and its chip, with ``{chip}`` the chip (``the chip at 0x76``, from the
#: map's bus). The request may have been run in part: a :class:`DeviceError`, never a value.
_BUS_ERRORS = {
    "NOACK": "{chip} did not acknowledge its address; nothing was done on it",
    "NACK": "{chip} did not acknowledge a byte; a write may be partly done",
    "ARBLOST": "another I2C master took the bus from the bridge (arbitration lost) on the way "
               "to {chip}; a write may be partly done",
    "BUSLOW": "the I2C bus to {chip} is held low (SDA or SCL stuck: a chip holding it, or a "
              "missing pull-up)",
    "STRETCH": "{chip} held the I2C clock low past the bridge's bound (25 ms); a write may be "
               "partly done",
    # SPI has no acknowledgement: what an SPI bridge can tell (docs/firmware.md, "SPI errors")
    "MISOHI": "{chip} answered 0xFF to every byte, its identity register too: nothing drives "
              "MISO (the chip absent, unpowered or not selected); a write may or may not be "
              "done",
    "MISOLO": "{chip} answered 0x00 to every byte, its identity register too: MISO is held low "
              "(a short, or the chip in reset); a write may or may not be done",
    "VERIFY": "{chip} did not keep a write: read back, the bits the map says it stores differ "
              "(MOSI or chip select open, or the chip write-protected)",
}
#: Codes that say nothing about the request itself (:class:`DeviceBusy`): sending it again
#: may succeed. Any other code is a refusal for good (:class:`DeviceRefused`).
_BUSY = frozenset({"CKSUM", "SYNTAX", "BUSY"})
#: Most bytes taken from the port per read call (the codec's buffer holds 1024).
_READ_CHUNK = 256
#: The port's read timeout, in seconds: how often a wait wakes to check its deadline when
#: nothing arrives (bytes that arrive end the wait at once), so how far it may overshoot.
_POLL = 0.01
_R = TypeVar("_R", bound=Reply)
#: Schemes whose URL must name a host and a port; checked before pyserial sees them.
_NETWORK_SCHEMES = ("socket", "rfc2217")

try:  # POSIX: pyserial lets termios.error (not an OSError) out of a port's settings
    from termios import error as _TermiosError
    _PORT_ERRORS: tuple[type[Exception], ...] = (serial.SerialException, OSError,
                                                 _TermiosError)
except ImportError:  # pragma: no cover - Windows
    _PORT_ERRORS = (serial.SerialException, OSError)


def _open_message(url: str, error: BaseException) -> str:
    """One line for a port that cannot be opened; the accepted forms when the name is at
    fault (no such device path: the serial forms; an unknown scheme: the Modbus forms too), not
    when the port is busy or refuses."""
    text = f"cannot open port {url}: {serial_problem(error)}"
    if str(error).startswith("invalid URL"):
        return f"{text}; expected {URL_FORMS}, or a Modbus device: {MODBUS_URL_FORMS}"
    if getattr(error, "errno", None) == errno.ENOENT:
        return f"{text}; expected {URL_FORMS}"
    return text


@contextlib.contextmanager
def map_exceptions(url: str, *, opening: bool = False) -> Iterator[None]:
    """Turn pyserial and OS exceptions raised inside the block into :class:`TransportError`.

    Args:
        url: the port, for the message.
        opening: True around opening the port, where pyserial also raises ``ValueError`` (a
            bad URL or setting), ``OverflowError`` (a setting too large for the OS) and
            ``NotImplementedError`` (a setting the port type does not support); the message
            then repeats the accepted forms (:data:`URL_FORMS`) when the port's name is at
            fault.

    Raises:
        TransportError: from any ``serial.SerialException`` (a write timeout included),
            ``OSError`` or ``termios.error`` (a setting the port refuses), and from the three
            above when ``opening``. The message is one line and names the port.
    """
    try:
        yield
    except _PORT_ERRORS as error:
        if not opening:
            raise _port_failure(url, error) from error
        raise TransportError(_open_message(url, error)) from error
    except (ValueError, OverflowError, NotImplementedError) as error:
        if not opening:
            raise
        raise TransportError(_open_message(url, error)) from error


def _port_failure(url: str, error: BaseException) -> TransportError:
    """The :class:`TransportError` of port ``url`` failing with ``error`` (one of
    :data:`_PORT_ERRORS`): what :func:`map_exceptions` raises, and :class:`PortLink` on
    the way of every request (a generator's context manager costs as much as the codec)."""
    return TransportError(f"port {url} failed: {serial_problem(error)}")


def _check_url(url: str) -> None:
    """Refuse a ``socket://`` or ``rfc2217://`` URL without a host and a port 1..65535, in
    words clearer than pyserial's."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in _NETWORK_SCHEMES:
        return
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or port == 0 or parts.path not in ("", "/"):
        raise TransportError(
            f"cannot open port {url}: expected {scheme}://HOST:PORT with a port 1..65535, "
            f"e.g. {scheme}://127.0.0.1:7000")


def port_state_id(url: str) -> str:
    """The name of the device at the end of port ``url``, for a device that does not say its
    own id: ``"serial:" + port``. A device path is resolved (``os.path.realpath``: symbolic
    links followed, relative to the working directory), so ``/dev/serial/by-id/usb-...`` and
    the ``/dev/ttyUSB0`` it points to name the same device. A ``socket://`` or ``rfc2217://``
    URL is written ``scheme://host:port``: scheme and host in lower case, the port as a
    number (no leading zeros), without a trailing ``/`` or the ``?options`` (they set up the
    connection, not the device). Other URLs are kept as typed but for the scheme's case; on
    Windows a port name (``COM3``) is kept as typed. (A host's other names, ``localhost`` for
    ``127.0.0.1``, are not looked up: a device that says its id is named by it instead.)"""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "serial:" + (url if sys.platform == "win32" else os.path.realpath(url))
    scheme = scheme.lower()
    if scheme in _NETWORK_SCHEMES:
        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        host = parts.hostname
        if host is not None and port is not None:
            shown = f"[{host}]" if ":" in host else host
            return f"serial:{scheme}://{shown}:{port}"
    return f"serial:{scheme}://{rest}"


@contextlib.contextmanager
def _extension(letter: str) -> Iterator[None]:
    """Around a frame of the protocol extension (``G``, ``P``, ``M``): a device that does not
    implement it answers ``e SYNTAX`` every time, so that answer is a refusal for good
    (:class:`DeviceRefused`, not executed) rather than a busy line worth retrying."""
    try:
        yield
    except DeviceBusy as error:
        if error.code != "SYNTAX":
            raise
        raise DeviceRefused(f"the device does not take the {letter} frame (block and masked "
                            "writes are a protocol extension it may not implement), or the "
                            f"frame was damaged on the line; it was not executed ({error})",
                            "SYNTAX") from None


class PortLink:
    """A pyserial port as the :class:`~regdev.devices._transaction.Link` of a transaction:
    any port ``serial.serial_for_url`` opens, read through pyserial.

    The port's read timeout is set once, at open, to a short poll (:data:`_POLL`), and each
    read runs to its own deadline: pyserial reconfigures the port on every assignment to
    ``timeout``.

    Args:
        port: the pyserial URL or device path.
        timeout: seconds a write may take (where the port type supports a write timeout).
        flush_before_request: flush the input before every request.
        name: the port's name in messages (``port`` by default).
        reply_size: how many bytes the awaited reply still takes (the codec's
            :meth:`Connection.awaited_size`), 0 when that cannot be told; None (the
            default) when it never can.
        settings: more of ``serial_for_url``'s settings (``baudrate``, ``parity``...).

    Raises:
        TransportError: the port cannot be opened (:func:`map_exceptions`).
    """

    def __init__(self, port: str, timeout: float, *, flush_before_request: bool = False,
                 name: str | None = None, reply_size: Callable[[], int] | None = None,
                 **settings: Any) -> None:
        self.url = port if name is None else name
        self.flush_before_request = flush_before_request
        self._reply_size = reply_size
        options: dict[str, Any] = {"exclusive": True, "timeout": min(_POLL, timeout),
                                   **settings}
        if not port.lower().startswith("rfc2217://"):
            options["write_timeout"] = timeout  # pyserial's RFC 2217 port refuses one
        with map_exceptions(port, opening=True):
            self.port: serial.Serial = serial.serial_for_url(port, **options)

    def write(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except _PORT_ERRORS as error:
            raise _port_failure(self.url, error) from error

    def read(self, deadline: float) -> bytes:
        """The bytes that came: the rest of the awaited reply as soon as it is all there
        (``reply_size``), or those that came within a poll (:data:`_POLL`), or, when the
        reply's size cannot be told, the bytes waiting as soon as there are some; b"" when
        none came by ``deadline`` (``time.monotonic()`` seconds). Overshoots it by at most
        the poll.

        One pyserial ``read`` of the reply's size takes a usual reply (as a caller of
        pyserial who knows the size would); a shorter one (an error reply) comes at the
        end of the poll.
        """
        port = self.port
        size = self._reply_size() if self._reply_size is not None else 0
        try:
            while time.monotonic() < deadline:
                chunk: bytes = port.read(size or 1)  # at `size or 1` bytes, or after _POLL s
                if chunk and size:
                    return chunk
                if chunk:
                    waiting = port.in_waiting
                    return chunk + port.read(min(waiting, _READ_CHUNK)) if waiting else chunk
        except _PORT_ERRORS as error:
            raise _port_failure(self.url, error) from error
        return b""

    def flush_input(self) -> None:
        with map_exceptions(self.url):
            self.port.reset_input_buffer()

    def close(self) -> None:
        # Closing a port that may have failed: there is nothing more to release.
        with contextlib.suppress(serial.SerialException, OSError):
            self.port.close()


class _SerialWire:
    """The serial protocol's replies and synchronisation, for the transaction engine."""

    need_data = NEED_DATA
    sync_name = "identify that synchronises the line"
    bad_frame_ends_wait = False

    def __init__(self, device: SerialDevice) -> None:
        self._device = device

    def sync_request(self, what: str) -> object:
        # An identify is its own synchronisation: a stale identify reply taken for its answer
        # says the same, and arrives after every older reply all the same.
        if what == "identify":
            return ITSELF
        return IdentifyRequest(self._device._link.new_seq())

    def synced(self, reply: object | None) -> None:
        self._device._learn(reply)

    def refusal(self, request: object, reply: object) -> DeviceError | None:
        if isinstance(reply, ErrorReply):
            if reply.code in _BUS_ERRORS:
                bus = self._device._regmap.bus
                chip = bus.chip if bus is not None else "the chip behind the bridge"
                return DeviceError(f"{_BUS_ERRORS[reply.code].format(chip=chip)} "
                                   f"({reply.code})")
            meaning = _REFUSALS.get(reply.code, "an error code regdev does not know")
            kind = DeviceBusy if reply.code in _BUSY else DeviceRefused
            return kind(f"{meaning} ({reply.code})", reply.code)
        if type(reply) is IdentifyReply and not getattr(request, "page", 0):
            self._device._learn(reply)  # (the map page says nothing of who it is)
        return None

    def abandoned(self, request: object) -> None:
        pass

    def lost_sync(self) -> str:
        return "flush"  # a late reply carries an old sequence number: the codec drops it


class SerialDevice(Device):
    """A device of 8-bit registers at the end of a serial line (``docs/protocol.md``).

    The port is opened at construction, exclusively on a device path (a POSIX lock;
    ``exclusive`` does nothing for ``socket://`` and ``rfc2217://``, where the device side
    decides: the firmware simulator serves one connection at a time and closes others).
    Before the first request, and after every reopen, the line is synchronised: the input is
    flushed and an identify request exchanged. After a transport failure the port is closed
    and reopened by the next transaction.

    Args:
        url: a device path (``/dev/ttyUSB0``, ``COM3``), ``socket://HOST:PORT`` or
            ``rfc2217://HOST:PORT``; anything ``serial.serial_for_url`` opens.
        baudrate: line speed in baud, 1..:data:`MAX_BAUDRATE` (ignored by ``socket://``).
        timeout: seconds to wait for each reply, 0.001..86400 (and for a write to be taken by
            the port, where the port type supports a write timeout).
        retries: how many more times a read (read, dump, identify) is sent after a timeout, a
            port failure after sending, a ``BUSY``, ``CKSUM`` or ``SYNTAX`` answer, or a
            synchronising identify without a reply; writes and resets are never sent again.
            Each attempt waits for one reply, and one more for the synchronising identify
            when one is due.
        first_seq: sequence number of the first request, 1..255; by default a random one,
            so that a new process does not reuse the numbers of the one before it.
        regmap: the device's register map (the default map: 16 read-write registers at
            0..15). Addresses are checked against it before anything is sent, and a read
            of a register with clear-on-read bits is sent once, never again (a second read
            would find them cleared).
        line: the serial line the device is on, shared with a lease of it
            (:class:`~regdev.devices._transaction.SharedLine`): the port is the line's,
            opened at the first transaction. None: the device's own, opened at construction.

    Raises:
        ValueError: ``baudrate``, ``timeout``, ``retries`` or ``first_seq`` is out of range.
        TransportError: the port cannot be opened; the message repeats the accepted forms when
            the port's name is at fault.

    Attributes:
        timeouts: replies waited for in vain so far.
        bad_frames: bad frames (checksum, syntax, overrun, an echoed request) received and
            dropped so far.
    """

    def __init__(self, url: str, *, baudrate: int = 115200, timeout: float = 0.5,
                 retries: int = 1, first_seq: int | None = None,
                 regmap: RegisterMap | None = None, line: SharedLine | None = None) -> None:
        if type(baudrate) is not int or not 1 <= baudrate <= MAX_BAUDRATE:
            raise ValueError(f"baudrate must be an int 1..{MAX_BAUDRATE} (baud), "
                             f"got {baudrate!r}")
        check_timeout(timeout)
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if first_seq is None:
            first_seq = secrets.randbelow(255) + 1
        elif type(first_seq) is not int or not 1 <= first_seq <= 255:
            raise ValueError(f"first_seq must be an int 1..255, got {first_seq!r}")
        _check_url(url)
        problem = regmap.serial_problem() if regmap is not None else None
        if problem is not None:
            raise MapError(f"the map cannot be driven over regdev's serial protocol: {problem}")
        super().__init__(regmap)
        # Each register's address, and whether a read of it clears bits (then it is sent once,
        # never again): read() and write() check an address with one look-up.
        self._clears = {addr: bool(self._regmap.at(addr).rclr_mask)  # type: ignore[union-attr]
                        for addr in self._regmap.addresses}
        self.url = url
        self._state_id = port_state_id(url)  # once: a link later pointed elsewhere is not it
        self.baudrate = baudrate
        self.timeout = float(timeout)
        self.retries = retries
        self._link = Connection(HOST, first_seq=first_seq)
        self._known: DeviceIdentity | None = None  # from the last identify reply
        self._known_at = -1  # the engine's link generation of that reply
        self._stale = True  # nothing known, or a reset was sent since: identity() asks
        self._tx: Transactions[Reply] = Transactions(
            url, lambda: self.timeout,
            lambda: PortLink(url, self.timeout, baudrate=baudrate,
                             reply_size=self._link.awaited_size),
            self._link, _SerialWire(self), line=line)

    @property
    def _port(self) -> serial.Serial | None:
        """The open port, if any (None after a failure, until the next transaction)."""
        link = self._tx.link
        return link.port if isinstance(link, PortLink) else None

    @property
    def timeouts(self) -> int:
        """Replies waited for in vain so far."""
        return self._tx.timeouts

    @property
    def bad_frames(self) -> int:
        """Bad frames received and dropped so far."""
        return self._tx.bad_frames

    @property
    def stale_replies(self) -> int:
        """Replies dropped so far because no request awaited them (late, after a timeout)."""
        return self._link.stale

    def _transact(self, make: Callable[[int], Request], expect: type[_R], what: str,
                  retries: int) -> _R:
        """One transaction (:meth:`Transactions.transact`) of the request ``make`` builds
        from its sequence number; its reply, of type ``expect``."""
        link = self._link
        reply = self._tx.transact(lambda: make(link.new_seq()), what, retries)
        assert isinstance(reply, expect)  # the codec matched it to the request
        return reply

    # --- the Device interface -----------------------------------------------------------------

    def read(self, addr: int) -> int:
        """Return register ``addr`` (0..15) as the device reports it (0..255).

        Raises:
            RegisterRangeError: ``addr`` is not an int in 0..15 (nothing is sent).
            DeviceTimeout: an attempt was sent and no valid reply came within ``timeout``
                seconds, and no later attempt got one (:class:`ReplyLost` when the port
                failed after the request was sent).
            DeviceBusy: the device answered ``BUSY``, ``CKSUM`` or ``SYNTAX`` to every
                attempt (``code`` attribute): not executed.
            DeviceRefused: the device answered another error code (``code`` attribute).
            TransportError: the request was not sent: the port failed first, or the line
                could not be synchronised.
        """
        clears = self._clears.get(addr) if type(addr) is int else None
        if clears is None:  # no register there: check_access refuses it, in its words
            check_access(addr, 0, self._regmap)
        if clears:
            return self._transact(lambda seq: ReadRequest(seq, addr), ReadReply,
                                  "clear-on-read read", 0).data
        return self._transact(lambda seq: ReadRequest(seq, addr), ReadReply, "read",
                              self.retries).data

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` (0..15); return the value acknowledged.

        Sent once, never repeated.

        Raises:
            RegisterRangeError: ``addr`` or ``data`` is out of range (nothing is sent).
            DeviceTimeout: the write was sent and not acknowledged within ``timeout`` seconds:
                it may or may not have happened; read the register back. Its subclass
                :class:`ReplyLost`: the port failed after the write was sent (the same).
            DeviceBusy: the device answered ``BUSY``, ``CKSUM`` or ``SYNTAX``: the write did
                not happen, and may succeed if sent again.
            DeviceRefused: the device answered another error code; the write did not happen.
            DeviceError: the device acknowledged a value other than ``data`` (it executed the
                write). Only with the default map: with another map the register may keep
                read-only bits or clear write-1-to-clear ones, and the value acknowledged is
                returned for the caller (the map's ``write_register`` tool) to check.
            TransportError: the write was not sent (the port failed first, or the line could
                not be synchronised); it did not happen.
        """
        if (type(addr) is not int or addr not in self._clears or type(data) is not int
                or not 0 <= data <= 0xFF):  # check_access refuses them, in its words
            check_access(addr, data, self._regmap)
        value = self._transact(lambda seq: WriteRequest(seq, addr, data), WriteReply, "write",
                               0).data
        if value != data and self._regmap.is_default:
            raise DeviceError(f"the device acknowledged register {addr} = 0x{value:02x}, "
                              f"not the 0x{data:02x} written")
        return value

    def read_block(self, addr: int, count: int) -> list[int]:
        """Read ``count`` (1..16) registers from ``addr`` up in one frame (``G``).

        Sent once when a register of the block has clear-on-read bits, else retried as
        :meth:`read` is.

        Raises:
            RegisterRangeError: an address of the block is no register (nothing is sent).
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        regmap = self._regmap
        check_block(addr, count, regmap)
        clears = any(regmap.at(a).rclr_mask for a in range(addr, addr + count))  # type: ignore[union-attr]
        with _extension("G"):
            reply = self._transact(lambda seq: ReadBlockRequest(seq, addr, count),
                                   ReadBlockReply, "clear-on-read read" if clears else "read",
                                   0 if clears else self.retries)
        return list(reply.values)

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` (1..16 values 0..255) to the registers from ``addr`` up, in one frame
        (``P``): the device checks every value before it writes any (all or nothing). Sent
        once, never repeated. Returns the values the device reports after the write.

        Raises:
            RegisterRangeError: an address is no register or a value is out of range
                (nothing is sent).
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`write`
                (``e DATA``: a register refused its value, and nothing was written).
        """
        values = tuple(data)
        check_block(addr, len(values), self._regmap)
        for index, value in enumerate(values):
            check_access(addr + index, value, self._regmap)
        with _extension("P"):
            reply = self._transact(lambda seq: WriteBlockRequest(seq, addr, values),
                                   WriteBlockReply, "block write", 0)
        return list(reply.values)

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        """One atomic read-modify-write on the device, in one frame (``M``): the bits
        ``mask`` of register ``addr`` take those of ``data``; no other host's request can
        come between. Sent once. Returns the value the device reports after.

        Raises:
            RegisterRangeError: ``addr`` is no register, or ``mask`` or ``data`` is out of
                range (nothing is sent).
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`write`.
        """
        check_access(addr, data, self._regmap)
        check_access(addr, mask, self._regmap)
        with _extension("M"):
            reply = self._transact(lambda seq: MaskedWriteRequest(seq, addr, mask, data),
                                   MaskedWriteReply, "masked write", 0)
        return reply.data

    def reset(self) -> None:
        """Set every register to its reset value (sent once, never repeated), then ask the
        device its new reset epoch (an identify; should that fail, the next
        :meth:`identity` asks again).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: the reset failed, as
                for :meth:`write` (never for the identify after it).
        """
        self._stale = True
        try:
            self._transact(ResetRequest, ResetReply, "reset", 0)
        finally:
            self._stale = True  # also when an identify learnt the epoch while this waited
        with contextlib.suppress(DeviceError, TransportError):  # the reset itself is done
            self._transact(IdentifyRequest, IdentifyReply, "identify", self.retries)

    def snapshot(self) -> list[int | None]:
        """Return every register of the map, in address order, without the side effects of a
        read: one dump (``D``) per 16 addresses (one transaction for the default map).

        A bridge (:meth:`is_bridge`) cannot peek at its chip: a read of a register with
        clear-on-read bits would clear them, so its dump shows 00 there; such a register is
        None here (not read), never that 00.

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        regmap = self._regmap
        if regmap.is_default:
            return list(self._transact(DumpRequest, DumpReply, "dump", self.retries).values)
        values: dict[int, int] = {}
        for start in range(0, regmap.last + 1, 16):
            if not any(regmap.at(a) for a in range(start, start + 16)):
                continue
            reply = self._transact(lambda seq, at=start: DumpRequest(seq, at),  # type: ignore[misc]
                                   DumpReply, "dump", self.retries)
            values.update(zip(range(start, start + 16), reply.values, strict=True))
        clear_on_read = {r.addr for r in regmap.registers if r.rclr_mask}
        unread = clear_on_read if clear_on_read and self.is_bridge() else set()
        return [None if a in unread else values[a] for a in regmap.addresses]

    def is_bridge(self) -> bool:
        """Whether the device is the C firmware's bridge to a chip (``docs/firmware.md``,
        "A bridge to an I2C chip", "A bridge to an SPI chip"): its map names a bus, and it
        says no reset epoch (a bridge never does; the Python simulator and the firmware
        holding its own registers always do). A bridge dumps without peeking
        (:meth:`snapshot`) and resets only the writable registers (:meth:`reset_leaves`).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: the identify this may
                need failed, as for :meth:`read`.
        """
        return self._regmap.bus is not None and self.identity().epoch is None

    def reset_leaves(self) -> str | None:
        """For a bridge (:meth:`is_bridge`): its reset (``Z``) writes each register with
        writable bits its reset value and cannot reset the chip, so the chip's read-only
        registers, its write-1-to-clear flags and its other bits software cannot write keep
        what the chip holds. None for any other device: every register took its reset value.

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for
                :meth:`is_bridge`.
        """
        if not self.is_bridge():
            return None
        return ("the bridge wrote each writable register its reset value; the chip's "
                "read-only bits and write-1-to-clear flags were not reset (they keep what the "
                "chip holds: only the chip's own reset restores them)")

    def state_id(self) -> str:
        """The port's name, ``"serial:" + port`` (:func:`port_state_id`, as the port was named
        at construction), without asking the device: the ``device`` of :meth:`identity` for
        a device that does not say its own id."""
        return self._state_id

    def identify(self) -> str:
        """Return the device's identity line (1..48 ASCII characters), its id and epoch
        included when it says them (and learn them, as :meth:`identity` does).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        return self._transact(IdentifyRequest, IdentifyReply, "identify", self.retries).text

    def map_said(self) -> tuple[str, str] | None:
        """Which register map the device says it serves: ``(digest, name)`` from its answer
        to ``I 01`` (``docs/protocol.md``, "Which map the device serves"; the digest is
        :meth:`RegisterMap.digest`'s 16 hex digits, the name as the device gives it, maybe
        empty); None for a device that cannot say (it answers ``e SYNTAX``, or another text).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        try:
            reply = self._transact(lambda seq: IdentifyRequest(seq, MAP_PAGE), IdentifyReply,
                                   "map identify", self.retries)
        except DeviceBusy as error:
            if error.code == "SYNTAX":  # a device of the protocol without the map page
                return None
            raise
        return split_map_text(reply.text)

    def map_mismatch(self) -> str | None:
        """Why the device is not one of :attr:`regmap`'s, or None: the digest it says
        (:meth:`map_said`) against the map's own; a device that cannot say has its map's
        identity registers read instead (:meth:`Device.map_mismatch`).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        said = self.map_said()
        if said is None:
            return super().map_mismatch()
        digest, name = said
        mine = self._regmap.digest()
        if digest == mine:
            return None
        ours = (f"the map `{escape_text(self._regmap.name)}`" if self._regmap.name
                else "an unnamed map")
        theirs = f"the register map `{name}`" if name else "an unnamed register map"
        return f"the device serves {theirs} (digest {digest}), not {ours} (digest {mine})"

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        """Who the device is and its reset epoch, from its identify reply (``id=ID
        epoch=EPOCH`` at its end, ``docs/protocol.md``): ``DeviceIdentity(ID, EPOCH)``; for a
        device that does not say them, ``DeviceIdentity(state_id(), None)``.

        Args:
            refresh: send an identify now (one round trip). False answers from the last
                identify reply (the one that synchronised the line after the port was opened,
                say) unless none came yet, or a reset was sent since, or the port was closed
                or failed since (a device may be restarted meanwhile).

        Raises:
            DeviceTimeout, DeviceBusy, DeviceRefused, TransportError: as for :meth:`read`.
        """
        if not refresh:
            known = self._known
            if known is not None and not self._stale and self._known_at == self._tx.generation:
                return known
        reply = self._transact(IdentifyRequest, IdentifyReply, "identify", self.retries)
        return self._identity_of(reply)

    def known_identity(self) -> DeviceIdentity | None:
        """What the last identify reply said (as :meth:`identity`), without asking; None
        before the first one."""
        return self._known

    def _identity_of(self, reply: IdentifyReply) -> DeviceIdentity:
        device_id, epoch = reply.device_id, reply.epoch
        return (DeviceIdentity(device_id, epoch) if device_id is not None
                else DeviceIdentity(self._state_id, None))

    def _learn(self, reply: object) -> None:
        """Keep what an identify reply says of the device (the transaction lock held)."""
        if isinstance(reply, IdentifyReply):
            self._known = self._identity_of(reply)
            self._known_at = self._tx.generation
            self._stale = False

    def close(self) -> None:
        """Close the port. Idempotent; a later transaction reopens it (and synchronises)."""
        self._tx.close()

    def __repr__(self) -> str:
        return f"SerialDevice({self.url!r}, baudrate={self.baudrate}, timeout={self.timeout})"
