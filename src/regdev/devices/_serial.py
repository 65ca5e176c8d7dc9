"""The serial backend: the register device at the end of a serial line, through pyserial.

:class:`SerialDevice` speaks the wire protocol of ``docs/protocol.md`` (the codec is
:mod:`regdev.devices._protocol`) over any port pyserial's ``serial_for_url`` opens: a device path
(``/dev/ttyUSB0``, ``COM3``), ``socket://HOST:PORT`` or ``rfc2217://HOST:PORT``.

Rules of this file:

* One request at a time per port (a lock), one reply awaited, matched by sequence number.
* A write is reported done only when the device acknowledged it with the value written.
  Writes and resets are sent once, never again.
* The line is synchronised before it is trusted. After the port is opened (or reopened) the
  input is flushed and an identify request is exchanged before any other: the device answers
  in order, so every reply still on its way from before (the late reply to another process's
  request, say) has arrived and been dropped by then. Sequence numbers start at a random value,
  so a new process does not reuse the numbers of the one before it either.
* After a timeout the input is flushed and the codec's buffer dropped before the next request;
  a late reply that still arrives carries an old sequence number and is dropped as stale.
* A failure says what happened to the request: :class:`TransportError`, it was not sent
  (the port failed, or the line could not be synchronised first: nothing ran);
  :class:`DeviceTimeout`, it was sent and no valid reply came, so a write may or may not have
  run (:class:`ReplyLost` when the port failed after sending it); :class:`DeviceBusy`, the
  device answered ``BUSY``, ``CKSUM`` or ``SYNTAX`` (not executed, may succeed later);
  :class:`DeviceRefused`, it answered another error code (not executed). Once an attempt of a
  transaction was sent, its failure is the unknown outcome, whatever a retry then meets.
* The port's read timeout is set once, at open, to a short poll interval, and each wait runs to
  its own deadline: pyserial reconfigures the port on every assignment to ``timeout``
  (``tcsetattr`` on POSIX, a renegotiation with sleeps over RFC 2217).
* A port that failed is set aside and closed when the next transaction reopens it, outside
  any reply's deadline (pyserial's close of a network port sleeps 0.3 s).
* pyserial and OS exceptions are mapped to regdev's in one place, :func:`map_exceptions`.
* The usual exchange fast, everything else general (issue 13). A read or a write is sent as
  ``(addr, data)`` (:meth:`Connection.send_usual`: no frame object). On a POSIX port its
  reply is read with ``select`` and ``os.read`` up to its line feed (the bytes there are,
  never a fixed count: a short error reply must not wait out the poll), and taken at once as
  the register's value when it is exactly the awaited reply (:meth:`Connection.take_value`).
  Any other bytes go to the codec, with the bytes already read, as on every other port;
  ``socket://`` and ``rfc2217://`` ports read through pyserial.
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
import select
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

import serial

from ..core._errors import (
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    RemoteProtocolError,
    ReplyLost,
    TransportError,
)
from ..core._text import escape_text
from ..core._wording import serial_problem
from ._device import Device, DeviceIdentity, check_access, check_block, check_timeout
from ._protocol import (
    HOST,
    MAP_PAGE,
    MAX_FRAME,
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
    Reply,
    Request,
    ResetReply,
    ResetRequest,
    State,
    WriteBlockReply,
    WriteBlockRequest,
    WriteReply,
    split_map_text,
)
from ._regmap import RegisterMap

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
#: Codes that say nothing about the request itself (:class:`DeviceBusy`): sending it again
#: may succeed. Any other code is a refusal for good (:class:`DeviceRefused`).
_BUSY = frozenset({"CKSUM", "SYNTAX", "BUSY"})
#: What a write or reset whose outcome is unknown asks the caller to do.
_UNKNOWN = {
    "write": "the write may or may not have happened: read the register back",
    "block write": "the block write may or may not have happened: read the registers back",
    "masked write": "the masked write may or may not have happened: read the register back",
    "reset": "the reset may or may not have happened: dump the registers",
    "clear-on-read read": "the read may have cleared its clear-on-read bits, and its value "
                          "is lost",
}
#: Most bytes taken from the port per read call (the codec's buffer holds 1024).
_READ_CHUNK = 256
#: The port's read timeout, in seconds: how often a wait wakes to check its deadline when
#: nothing arrives (bytes that arrive end the wait at once), so how far it may overshoot.
_POLL = 0.01
#: Schemes whose URL must name a host and a port; checked before pyserial sees them.
_NETWORK_SCHEMES = ("socket", "rfc2217")

_R = TypeVar("_R", bound=Reply | int)
#: A usual request, a read or a write, as :meth:`Connection.send_usual` takes it: the
#: register's address and the value written (None for a read). Its answer is the register's
#: value: an int, without frame objects on the way (issue 13).
_Usual: TypeAlias = tuple[int, int | None]

try:  # POSIX: pyserial lets termios.error (not an OSError) out of a port's settings
    from termios import error as _TermiosError
    _PORT_ERRORS: tuple[type[Exception], ...] = (serial.SerialException, OSError,
                                                 _TermiosError)
except ImportError:  # pragma: no cover - Windows
    _PORT_ERRORS = (serial.SerialException, OSError)


class _Failed(Exception):
    """Inside a transaction: one attempt failed. ``error`` is what the caller is told;
    ``again`` is True when sending the request again may help (reads only)."""

    def __init__(self, error: DeviceError | TransportError, *, again: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.again = again


class _PortFailed(Exception):
    """Inside a transaction: the port failed, before the request was written or after."""

    def __init__(self, error: TransportError, *, sent: bool) -> None:
        super().__init__(str(error))
        self.sent = sent


class _NoReply(Exception):
    """Inside a transaction: no valid reply within the timeout (``bad`` frames dropped)."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.dropped = f" ({bad} bad frame{'s' * (bad != 1)} dropped)" if bad else ""


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
    :data:`_PORT_ERRORS`): what :func:`map_exceptions` raises, for the transaction's own
    ``try`` (a generator's context manager costs as much as the codec's work)."""
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


def _posix_port_type() -> type[serial.Serial] | None:
    """pyserial's class of a port opened by its device path on POSIX, else None."""
    try:
        from serial.serialposix import Serial  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover - not POSIX: every port reads through pyserial
        return None
    return Serial


#: The ports whose replies are read with ``select`` and ``os.read`` (:func:`_read_line`).
_POSIX_PORT = _posix_port_type()
#: What ``os.read`` on a port may fail with that is no failure: try again (as pyserial does).
_AGAIN = frozenset({errno.EAGAIN, errno.EALREADY, errno.EWOULDBLOCK, errno.EINPROGRESS,
                    errno.EINTR})


def _read_line(fd: int, deadline: float) -> bytes:
    """Bytes from a POSIX port's file descriptor (non-blocking, as pyserial opens it) up to a
    line feed, or what came by ``deadline`` (``time.monotonic()`` seconds; b"" only when
    nothing came by then): ``select`` waits for bytes, ``os.read`` takes what is there (up to
    a frame's worth at a time), so a reply of any length ends the wait as soon as its LF
    arrives.

    Raises:
        serial.SerialException: the port says bytes are ready and gives none (a device
            unplugged), as pyserial's own read raises it; OSError: the port failed.
    """
    received = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select((fd,), (), (), left)[0]:
            return received
        try:
            chunk = os.read(fd, MAX_FRAME)
        except OSError as error:
            if error.errno in _AGAIN:
                continue
            raise
        if not chunk:
            raise serial.SerialException(
                "device reports readiness to read but returned no data (device disconnected "
                "or multiple access on port?)")
        received += chunk
        if b"\n" in chunk or len(received) >= MAX_FRAME:
            return received


def _read_port(port: serial.Serial, deadline: float) -> bytes:
    """The bytes waiting on a port that :func:`_read_line` cannot read (``socket://``,
    ``rfc2217://``), through pyserial, as soon as there are some; b"" when none came by
    ``deadline`` (``time.monotonic()`` seconds). Overshoots the deadline by at most the port's
    poll (:data:`_POLL`).

    Raises:
        serial.SerialException, OSError: the port failed.
    """
    while time.monotonic() < deadline:
        chunk = port.read(1)  # returns at the first byte, or after _POLL seconds
        if chunk:
            waiting = port.in_waiting
            return chunk + port.read(min(waiting, _READ_CHUNK)) if waiting else chunk
    return b""


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
                 regmap: RegisterMap | None = None) -> None:
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
        self._regmap = regmap if regmap is not None else RegisterMap.default()
        # Each register's address, and whether a read of it clears bits (then it is sent once,
        # never again): read() and write() check an address with one look-up.
        self._clears = {addr: bool(self._regmap.at(addr).rclr_mask)  # type: ignore[union-attr]
                        for addr in self._regmap.addresses}
        self.url = url
        self._state_id = port_state_id(url)  # once: a link later pointed elsewhere is not it
        self.baudrate = baudrate
        self.timeout = float(timeout)
        self.retries = retries
        self.timeouts = 0
        self.bad_frames = 0
        self._lock = threading.Lock()
        self._link = Connection(HOST, first_seq=first_seq)
        self._known: DeviceIdentity | None = None  # from the last identify reply
        self._stale = True  # nothing known, or a reset was sent since: identity() asks
        self._synced = False  # a reply to our identify came since the port was opened
        self._flush = False  # a reply was abandoned: flush the input before the next request
        self._failed: serial.Serial | None = None  # a port that failed, closed at the reopen
        self._port: serial.Serial | None = self._open()

    @property
    def stale_replies(self) -> int:
        """Replies dropped so far because no request awaited them (late, after a timeout)."""
        return self._link.stale

    def _open(self) -> serial.Serial:
        options: dict[str, Any] = {"baudrate": self.baudrate, "exclusive": True,
                                   "timeout": min(_POLL, self.timeout)}
        if not self.url.lower().startswith("rfc2217://"):
            options["write_timeout"] = self.timeout  # pyserial's RFC 2217 port refuses one
        with map_exceptions(self.url, opening=True):
            return serial.serial_for_url(self.url, **options)

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
            return self._transact((addr, None), int, "clear-on-read read", 0)
        return self._transact((addr, None), int, "read", self.retries)

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
        value = self._transact((addr, data), int, "write", 0)
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

    def snapshot(self) -> list[int]:
        """Return every register of the map, in address order, without the side effects of a
        read: one dump (``D``) per 16 addresses (one transaction for the default map).

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
        return [values[a] for a in regmap.addresses]

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
            if known is not None and not self._stale:
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

    def _learn(self, reply: Reply) -> None:
        """Keep what an identify reply says of the device (the transaction lock held)."""
        if isinstance(reply, IdentifyReply):
            self._known = self._identity_of(reply)
            self._stale = False

    def close(self) -> None:
        """Close the port. Idempotent; a later transaction reopens it (and synchronises)."""
        with self._lock:
            self._set_port_aside()
            self._close_failed()

    def __enter__(self) -> SerialDevice:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SerialDevice({self.url!r}, baudrate={self.baudrate}, timeout={self.timeout})"

    # --- transactions -------------------------------------------------------------------------

    def _transact(self, make: Callable[[int], Request] | _Usual, expect: type[_R], what: str,
                  retries: int) -> _R:
        """One transaction: up to ``retries + 1`` attempts, each synchronising when due.

        ``make`` builds the request from its sequence number; a read or a write is given as
        ``(addr, data)`` instead (:data:`_Usual`), sent without a frame object, and answered
        with the register's value (``expect`` is int).

        An attempt is sent again only when that may help (no valid reply, a port that failed
        after sending, a busy device, a synchronising identify without a reply). Once any
        attempt was sent without a definite outcome, the transaction's failure is that unknown
        outcome (:class:`DeviceTimeout`, :class:`ReplyLost`), whatever the later attempts met:
        never "not sent".
        """
        with self._lock:
            started = time.monotonic()
            attempts = 0
            unknown: DeviceTimeout | None = None  # the last attempt sent without an outcome
            while True:
                attempts += 1
                try:
                    reply = self._attempt(make, what)
                except _Failed as failed:
                    error, cause = failed.error, failed.__cause__
                    if isinstance(error, DeviceTimeout):
                        unknown = error
                    if failed.again and attempts <= retries:
                        continue
                else:
                    assert isinstance(reply, expect)  # the codec matched it to the request
                    return reply
                if unknown is not None and isinstance(error, (TransportError, DeviceBusy)):
                    error = type(unknown)(f"{unknown}; the retry failed: {error}")
                if attempts > 1:
                    spent = time.monotonic() - started
                    error.args = (f"{error} ({attempts} attempts, {spent:.2f} s in all)",)
                raise error from cause

    def _attempt(self, make: Callable[[int], Request] | _Usual, what: str) -> Reply | int:
        """Synchronise when due, then send the request and return its reply (the register's
        value for a usual request).

        Messages put the request's fate first (the gate shows a model the first 120 characters).

        Raises:
            _Failed: the attempt failed; its ``error`` says what became of the request.
        """
        port = self._port
        if port is None or self._flush or not self._synced:
            port = self._prepare(what)
        request = make if isinstance(make, tuple) else make(self._link.new_seq())
        try:
            reply = self._exchange(port, request)
        except _PortFailed as failure:
            if not failure.sent:
                raise _Failed(TransportError(f"the {what} was not sent: {failure}"),
                              again=False) from failure.__cause__
            cause = str(failure).partition(" failed: ")[2]
            lost = (ReplyLost(f"{_UNKNOWN[what]}; port {self.url} failed after it was sent: "
                              f"{cause}") if what in _UNKNOWN
                    else ReplyLost(f"port {self.url} failed after the {what} was sent: {cause}"))
            raise _Failed(lost, again=True) from failure.__cause__
        except _NoReply as failure:
            unknown = f"; {_UNKNOWN[what]}" if what in _UNKNOWN else ""
            raise _Failed(DeviceTimeout(f"no valid reply within {self.timeout:g} s"
                                        f"{failure.dropped}{unknown}"), again=True) from None
        self._synced = True  # any answer to a request of ours is a synchronisation
        if type(reply) is int:  # the usual exchange's answer
            return reply
        if isinstance(reply, IdentifyReply):
            if not getattr(request, "page", 0):  # (the map page says nothing of who it is)
                self._learn(reply)
        elif isinstance(reply, ErrorReply):
            meaning = _REFUSALS.get(reply.code, "an error code regdev does not know")
            if reply.code in _BUSY:
                raise _Failed(DeviceBusy(f"{meaning} ({reply.code})", reply.code), again=True)
            raise _Failed(DeviceRefused(f"{meaning} ({reply.code})", reply.code), again=False)
        elif isinstance(make, tuple):  # a usual request answered the general way
            assert isinstance(reply, (ReadReply, WriteReply))
            return reply.data
        return reply

    def _prepare(self, what: str) -> serial.Serial:
        """Before an attempt, when due: open the port again, flush its input (after a reply
        abandoned or a reopen), and synchronise the line (an identify exchanged).

        Raises:
            _Failed: the line is not ready; nothing of the ``what`` was sent.
        """
        try:
            port = self._port if self._port is not None else self._reopen()
            if self._flush or not self._synced:
                with map_exceptions(self.url):
                    port.reset_input_buffer()
                self._link.discard_buffer()
                self._flush = False
        except TransportError as error:
            self._set_port_aside()
            raise _Failed(TransportError(f"the {what} was not sent: {error}"),
                          again=False) from error
        # An identify is its own synchronisation: a stale identify reply taken for its answer
        # says the same, and arrives after every older reply all the same.
        if not self._synced and what != "identify":
            try:
                reply = self._exchange(port, IdentifyRequest(self._link.new_seq()))
                assert not isinstance(reply, int)  # an identify is no usual request
                self._learn(reply)
            except _PortFailed as failure:
                raise _Failed(TransportError(f"the {what} was not sent: {failure} (while "
                                             "synchronising the line)"),
                              again=False) from failure.__cause__
            except _NoReply as failure:
                raise _Failed(TransportError(
                    f"the {what} was not sent: no valid reply within {self.timeout:g} s to the "
                    f"identify that synchronises the line{failure.dropped}"), again=True) from None
            self._synced = True
        return port

    def _exchange(self, port: serial.Serial, request: Request | _Usual) -> Reply | int:
        """Write one request and await its reply.

        On a POSIX port (the usual case, issue 13): one ``os.write``, the bytes up to the
        first LF (:func:`_read_line`), and when they are exactly the awaited reply, that reply
        (:meth:`Connection.take_value` for a read or a write given as ``(addr, data)``: the
        register's value, no frame object built; :meth:`Connection.take_reply` for the
        others). Any other bytes go to the codec and the wait goes on there
        (:meth:`_await_reply`), as on every other port.

        Raises:
            _PortFailed: the port failed; ``sent`` is False when the write itself failed (a
                frame cut short is never executed).
            _NoReply: no valid reply within ``timeout`` seconds.
        """
        link = self._link
        take: Callable[[bytes], Reply | int | None]  # the awaited reply, exactly, else None
        if isinstance(request, tuple):  # a read or a write: its data, no frame object
            data, take = link.send_usual(*request), link.take_value
        else:
            data, take = link.send(request), link.take_reply
        sent = False
        try:
            if type(port) is not _POSIX_PORT:
                port.write(data)
                sent = True
                return self._await_reply(port, None, time.monotonic() + self.timeout, b"")
            fd: int = port.fd  # type: ignore[assignment]  # (an open port has one)
            try:  # noqa: SIM105 - contextlib.suppress costs more than this write
                data = data[os.write(fd, data):]  # a frame fits the output buffer at once
            except BlockingIOError:
                pass  # the output buffer is full: pyserial waits, within write_timeout
            if data:
                port.write(data)
            sent = True
            deadline = time.monotonic() + self.timeout
            if link.buffered:  # bytes received before (a reply that came late): first
                return self._await_reply(port, fd, deadline, b"")
            line = _read_line(fd, deadline)
            reply = take(line)
            if reply is not None:
                return reply
            return self._await_reply(port, fd, deadline, line)
        except _PORT_ERRORS as error:  # as map_exceptions maps them
            self._abandon()
            self._set_port_aside()
            raise _PortFailed(_port_failure(self.url, error), sent=sent) from error
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """After an exchange that failed: give up its reply, if it is still awaited, and flush
        the port's input before the next request."""
        if self._link.state is State.AWAITING_REPLY:
            self._link.abandon()
            self._flush = True

    def _await_reply(self, port: serial.Serial, fd: int | None, deadline: float,
                     received: bytes) -> Reply:
        """The reply to the request just written, from the bytes ``received`` so far and those
        read until ``deadline`` (``time.monotonic()`` seconds), through the codec: any frames
        before it dropped (stale, bad), a reply in pieces joined.

        Raises:
            _NoReply: no valid reply in time.
            serial.SerialException, OSError: the port failed (the caller maps them).
        """
        link = self._link
        bad = 0
        chunk = received
        while True:
            if chunk:
                try:
                    link.receive_data(chunk)
                except RemoteProtocolError:
                    self.bad_frames += 1
                    bad += 1
            while link.buffered:
                try:
                    event = link.next_event()
                except RemoteProtocolError:
                    self.bad_frames += 1
                    bad += 1
                    continue
                if event is NEED_DATA:
                    break
                assert not isinstance(event, Request)  # a host's codec yields only replies
                return event
            if fd is not None:
                chunk = _read_line(fd, deadline)
                reply = link.take_reply(chunk)  # exactly the awaited reply, else None
                if reply is not None:
                    return reply
            else:
                chunk = _read_port(port, deadline)
            if not chunk:  # each reader gives b"" only once the deadline passed
                self.timeouts += 1
                raise _NoReply(bad)

    # --- the port -----------------------------------------------------------------------------

    def _reopen(self) -> serial.Serial:
        self._close_failed()
        self._synced = False
        self._port = self._open()
        return self._port

    def _set_port_aside(self) -> None:
        """After a failure (or on close): the next transaction opens the port again, and the
        next :meth:`identity` asks the device (it may have been restarted meanwhile)."""
        port, self._port = self._port, None
        self._synced = False
        self._stale = True
        if port is not None:
            self._close_failed()
            self._failed = port

    def _close_failed(self) -> None:
        port, self._failed = self._failed, None
        if port is not None:
            # Closing a port that already failed: there is nothing more to release.
            with contextlib.suppress(serial.SerialException, OSError):
                port.close()
