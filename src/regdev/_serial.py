"""The serial backend: the register device at the end of a serial line, through pyserial.

:class:`SerialDevice` speaks the wire protocol of ``docs/protocol.md`` (the codec is
:mod:`regdev._protocol`) over any port pyserial's ``serial_for_url`` opens: a device path
(``/dev/ttyUSB0``, ``COM3``), ``socket://HOST:PORT`` or ``rfc2217://HOST:PORT``.

Rules of this file:

* One request at a time per port (a lock), one reply awaited, matched by sequence number.
* A write is reported done only when the device acknowledged it with the value written.
* After a timeout the link is resynchronised before the next transaction: the input buffer
  is flushed and the codec's buffer dropped, and a late reply carries an old sequence number,
  so it is dropped as stale.
* pyserial and OS exceptions are mapped to regdev's in one place, :func:`map_exceptions`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TypeVar

import serial

from ._device import Device, check_access
from ._errors import (
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    RemoteProtocolError,
    TransportError,
)
from ._protocol import (
    HOST,
    NEED_DATA,
    Connection,
    DumpReply,
    DumpRequest,
    ErrorReply,
    IdentifyReply,
    IdentifyRequest,
    ReadReply,
    ReadRequest,
    Reply,
    Request,
    ResetReply,
    ResetRequest,
    State,
    WriteReply,
    WriteRequest,
)

__all__ = ["URL_FORMS", "SerialDevice", "map_exceptions"]

#: The port forms :class:`SerialDevice` accepts, repeated in every bad-URL error.
URL_FORMS = "a device path (/dev/ttyUSB0, COM3), socket://HOST:PORT or rfc2217://HOST:PORT"

#: What each error code in an ``e`` reply means, for the message of :class:`DeviceRefused`.
_REFUSALS = {
    "ADDR": "no such register address",
    "DATA": "the data value is not allowed",
    "CKSUM": "the request was damaged on the line (bad checksum); it was not executed",
    "SYNTAX": "the request was damaged on the line (bad syntax); it was not executed",
    "BUSY": "the device is busy; the request was not executed",
}
#: Refusals that say nothing about the request itself: a read may be sent again.
_TRANSIENT = frozenset({"CKSUM", "SYNTAX", "BUSY"})
#: Most bytes taken from the port per read call (the codec's buffer holds 1024).
_READ_CHUNK = 256

_R = TypeVar("_R", bound=Reply)


@contextlib.contextmanager
def map_exceptions(url: str, *, opening: bool = False) -> Iterator[None]:
    """Turn pyserial and OS exceptions raised inside the block into regdev's own.

    Args:
        url: the port, for the message.
        opening: True around opening the port, where pyserial raises ``ValueError`` for a bad
            URL or setting; the message then repeats the accepted forms (:data:`URL_FORMS`).

    Raises:
        DeviceTimeout: from ``serial.SerialTimeoutException`` (a write timed out).
        TransportError: from any other ``serial.SerialException`` or ``OSError`` (and from
            ``ValueError`` when ``opening``).
    """
    try:
        yield
    except serial.SerialTimeoutException as error:
        raise DeviceTimeout(f"writing to {url} timed out: {error}") from error
    except (serial.SerialException, OSError) as error:
        if opening:
            raise TransportError(f"cannot open port `{url}`: {error}; expected "
                                 f"{URL_FORMS}") from error
        raise TransportError(f"port {url} failed: {error}") from error
    except ValueError as error:
        if not opening:
            raise
        raise TransportError(f"cannot open port `{url}`: {error}; expected {URL_FORMS}") from error


class SerialDevice(Device):
    """A 16-register, 8-bit device at the end of a serial line (``docs/protocol.md``).

    The port is opened at construction, exclusively (``exclusive=True``: a POSIX lock on a
    device path; pyserial accepts and ignores it for ``socket://`` and ``rfc2217://``). After a
    transport failure the port is closed and reopened by the next transaction.

    Args:
        url: a device path (``/dev/ttyUSB0``, ``COM3``), ``socket://HOST:PORT`` or
            ``rfc2217://HOST:PORT``; anything ``serial.serial_for_url`` opens.
        baudrate: line speed in baud (ignored by ``socket://``).
        timeout: seconds allowed for one transaction (request written to reply read), > 0.
        retries: how many more times a read (read, dump, identify) is sent after a timeout or
            a transient refusal (``BUSY``, ``CKSUM``, ``SYNTAX``); writes and resets are never
            sent again. A read may so take up to ``(retries + 1) * timeout`` seconds.

    Raises:
        ValueError: ``baudrate``, ``timeout`` or ``retries`` is out of range.
        TransportError: the port cannot be opened; the message repeats the accepted forms.

    Attributes:
        timeouts: transactions that timed out so far.
        bad_frames: bad frames (checksum, syntax, overrun) received and dropped so far.
    """

    def __init__(
        self, url: str, *, baudrate: int = 115200, timeout: float = 0.5, retries: int = 1
    ) -> None:
        if type(baudrate) is not int or baudrate <= 0:
            raise ValueError(f"baudrate must be a positive int (baud), got {baudrate!r}")
        if (type(timeout) not in (int, float) or not math.isfinite(timeout)
                or timeout <= 0):
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        self.url = url
        self.baudrate = baudrate
        self.timeout = float(timeout)
        self.retries = retries
        self.timeouts = 0
        self.bad_frames = 0
        self._lock = threading.Lock()
        self._link = Connection(HOST)
        self._resync = False
        self._port: serial.Serial | None = self._open()

    def _open(self) -> serial.Serial:
        with map_exceptions(self.url, opening=True):
            return serial.serial_for_url(
                self.url, baudrate=self.baudrate, timeout=self.timeout,
                write_timeout=self.timeout, exclusive=True)

    # --- the Device interface -----------------------------------------------------------------

    def read(self, addr: int) -> int:
        """Return register ``addr`` (0..15) as the device reports it (0..255).

        Raises:
            RegisterRangeError: ``addr`` is not an int in 0..15 (nothing is sent).
            DeviceTimeout: no valid reply within ``timeout`` seconds, on every attempt.
            DeviceRefused: the device answered with an error code (``code`` attribute).
            TransportError: the port failed.
        """
        check_access(addr)
        reply = self._transact(lambda seq: ReadRequest(seq, addr), ReadReply, self.retries)
        return reply.data

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` (0..15); return the value acknowledged.

        Sent once, never repeated. Unless this returns, the write may or may not have
        happened: read the register back.

        Raises:
            RegisterRangeError: ``addr`` or ``data`` is out of range (nothing is sent).
            DeviceTimeout: no acknowledgement within ``timeout`` seconds.
            DeviceRefused: the device answered with an error code.
            DeviceError: the device acknowledged a value other than ``data``.
            TransportError: the port failed.
        """
        check_access(addr, data)
        reply = self._transact(lambda seq: WriteRequest(seq, addr, data), WriteReply, 0)
        if reply.data != data:
            raise DeviceError(f"the device acknowledged register {addr} = 0x{reply.data:02x}, "
                              f"not the 0x{data:02x} written")
        return reply.data

    def reset(self) -> None:
        """Set every register to its reset value (sent once, never repeated).

        Raises:
            DeviceTimeout, DeviceRefused, TransportError: as for :meth:`write`.
        """
        self._transact(ResetRequest, ResetReply, 0)

    def snapshot(self) -> list[int]:
        """Return all 16 registers, address 0 first, in one transaction (``D``).

        Raises:
            DeviceTimeout, DeviceRefused, TransportError: as for :meth:`read`.
        """
        return list(self._transact(DumpRequest, DumpReply, self.retries).values)

    def identify(self) -> str:
        """Return the device's identity line (1..48 ASCII characters).

        Raises:
            DeviceTimeout, DeviceRefused, TransportError: as for :meth:`read`.
        """
        return self._transact(IdentifyRequest, IdentifyReply, self.retries).text

    def close(self) -> None:
        """Close the port. Idempotent; a later transaction reopens it."""
        with self._lock:
            self._close_port()

    def __enter__(self) -> SerialDevice:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SerialDevice({self.url!r}, baudrate={self.baudrate}, timeout={self.timeout})"

    # --- transactions -------------------------------------------------------------------------

    def _transact(self, make: Callable[[int], Request], expect: type[_R], retries: int) -> _R:
        with self._lock:
            for attempt in range(retries + 1):
                try:
                    reply = self._exchange(make(self._link.new_seq()))
                    if isinstance(reply, ErrorReply):
                        meaning = _REFUSALS.get(reply.code, "an error code regdev does not know")
                        raise DeviceRefused(f"{meaning} ({reply.code})", reply.code)
                except (DeviceTimeout, DeviceRefused) as error:
                    transient = isinstance(error, DeviceTimeout) or error.code in _TRANSIENT
                    if attempt == retries or not transient:
                        raise
                    continue
                assert isinstance(reply, expect)  # the codec matched the reply to the request
                return reply
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(self, request: Request) -> Reply:
        link = self._link
        try:
            with map_exceptions(self.url):
                port = self._port if self._port is not None else self._reopen()
                if self._resync:
                    port.reset_input_buffer()
                    self._resync = False
                if port.timeout != self.timeout:
                    port.timeout = self.timeout
                port.write(link.send(request))
                return self._await_reply(port, request)
        except TransportError:
            self._close_port()
            raise
        finally:
            if link.state is State.AWAITING_REPLY:
                link.abandon()
                self._resync = True

    def _await_reply(self, port: serial.Serial, request: Request) -> Reply:
        link = self._link
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                event = link.next_event()
            except RemoteProtocolError:
                self.bad_frames += 1
                continue
            if event is not NEED_DATA:
                assert not isinstance(event, Request)  # a host's codec yields only replies
                return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timeouts += 1
                changes = isinstance(request, (WriteRequest, ResetRequest))
                raise DeviceTimeout(
                    f"no valid reply within {self.timeout:g} s"
                    + ("; the change may or may not have happened: read the register back"
                       if changes else f" ({type(request).__name__}, seq {request.seq})"))
            if remaining < (port.timeout or 0.0) - 0.001:
                port.timeout = remaining
            chunk = port.read(1)
            waiting = port.in_waiting if chunk else 0
            if waiting:
                chunk += port.read(min(waiting, _READ_CHUNK))
            try:
                link.receive_data(chunk)
            except RemoteProtocolError:
                self.bad_frames += 1

    def _reopen(self) -> serial.Serial:
        self._port = self._open()
        return self._port

    def _close_port(self) -> None:
        port, self._port = self._port, None
        if port is not None:
            # Closing a port that already failed: there is nothing more to release.
            with contextlib.suppress(serial.SerialException, OSError):
                port.close()
