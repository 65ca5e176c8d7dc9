"""The transaction engine of every wire device: one request at a time, its reply awaited, and
a failure that says what became of the request.

A wire backend (the serial protocol, ``_serial.py``; Modbus, ``_modbus.py``) gives a
:class:`Link` (the byte stream: write, read until a deadline, flush the input, close), a
:class:`Codec` (sans-IO: requests to bytes, bytes to replies) and a :class:`Wire` (what its
replies mean and how its line is synchronised); :class:`Transactions` does the rest. A new
backend writes its codec, its link and its :class:`Wire`, nothing else.

Rules of this file:

* One transaction at a time per device (a lock); within it up to ``retries + 1`` attempts.
  An attempt is sent again only when that may help (no valid reply, a link that failed after
  sending, a busy device, a synchronisation without a reply); writes and resets are given
  ``retries=0`` by their backend, so they are sent once, never again.
* Every failure is one of four outcomes, in the words of ``core/_errors.py``:
  :class:`TransportError`, the request was not sent (the link failed first, or the line
  could not be synchronised: nothing ran); :class:`DeviceTimeout`, it was sent and no valid
  reply came, so it may or may not have run (:class:`ReplyLost` when the link failed after
  sending it); :class:`DeviceBusy`, the device said it did not run it and it may succeed
  later; :class:`DeviceRefused` (or another :class:`DeviceError`), the device answered it
  with an error (:meth:`Wire.refusal`). Once an attempt was sent without a definite outcome,
  the transaction's failure is that unknown outcome, whatever the later attempts met: never
  "not sent".
* The line is synchronised before it is trusted: after the link is opened (and whenever
  :meth:`Wire.lost_sync` says so) the input is flushed, the codec's buffer dropped, and the
  backend's synchronising request (:meth:`Wire.sync_request`) exchanged before any other.
* A link that failed is set aside, and closed when the next attempt opens it again, outside
  any reply's deadline (pyserial's close of a network port sleeps 0.3 s). After a reply that did
  not come, the input is flushed before the next request (a late reply still on its way is
  stale, and the codec drops it); a link whose :attr:`Link.flush_before_request` is True
  flushes its input before every request.
* A reply is taken only through the codec (:meth:`Codec.next_event`): one exchange path.
* Devices on one serial line (units of an RS-485 bus) share a :class:`SharedLine`: its lock is
  each one's transaction lock (one transaction at a time on the bus), its port their one
  open port, opened at the first transaction that needs it; its guard (a lease of the line,
  when several processes may drive it) is asked before every transaction, and may close the
  port, and set every device's link aside, when the line is not this process's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ..core._errors import (
    DeviceBusy,
    DeviceError,
    DeviceTimeout,
    RemoteProtocolError,
    ReplyLost,
    TransportError,
)

__all__ = ["ITSELF", "UNKNOWN", "Codec", "Link", "SharedLine", "Transactions", "Wire"]

#: What a request whose outcome is unknown asks the caller to do, by what it was.
UNKNOWN = {
    "write": "the write may or may not have happened: read the register back",
    "block write": "the block write may or may not have happened: read the registers back",
    "masked write": "the masked write may or may not have happened: read the register back",
    "reset": "the reset may or may not have happened: read the registers back",
    "clear-on-read read": "the read may have cleared its clear-on-read bits, and its value "
                          "is lost (it is not sent again)",
}

#: :meth:`Wire.sync_request`'s answer when the request itself synchronises the line: no other
#: request first; its reply is the synchronisation.
ITSELF: Any = object()


class Link(Protocol):
    """The byte stream to one device (a serial port, a TCP socket). Every method but
    :meth:`close` raises :class:`TransportError` (one line, naming the port) when it fails."""

    #: The input is flushed before every request (a line without transaction ids).
    flush_before_request: bool

    def write(self, data: bytes) -> None:
        """Write all of ``data``; a failure may have sent none of it, never a part that runs."""

    def read(self, deadline: float) -> bytes:
        """The bytes that came, as soon as some did; b"" only once ``deadline``
        (``time.monotonic()`` seconds) passed."""

    def flush_input(self) -> None:
        """Drop the bytes received and not read."""

    def close(self) -> None:
        """Close the link; never raises."""


class Codec(Protocol):
    """A sans-IO codec of one host: requests to bytes, bytes to the awaited reply."""

    @property
    def pending(self) -> object | None:
        """The request whose reply is awaited, if any."""

    def send(self, request: Any) -> bytes:
        """The bytes of ``request``; its reply is awaited from then on."""

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the link (:class:`RemoteProtocolError`: an overrun, dropped)."""

    def next_event(self) -> Any:
        """The awaited reply, or the codec's need-data sentinel (:attr:`Wire.need_data`);
        :class:`RemoteProtocolError` for a bad frame, dropped."""

    def abandon(self) -> None:
        """Give up the awaited reply."""

    def discard_buffer(self) -> None:
        """Drop the bytes received and not read as frames."""


_Reply = TypeVar("_Reply")


class Wire(Protocol):
    """What a backend says of its protocol, for :class:`Transactions`."""

    @property
    def need_data(self) -> object:
        """What :meth:`Codec.next_event` returns when no whole frame is buffered."""

    @property
    def sync_name(self) -> str:
        """The synchronising request, as messages name it after "the" ("identify that
        synchronises the line")."""

    @property
    def bad_frame_ends_wait(self) -> bool:
        """True when a bad frame ends the wait (the stream's framing is in doubt: the link
        is closed and the outcome unknown); False when it is dropped and the wait goes on."""

    def sync_request(self, what: str) -> object | None:
        """The request that synchronises the line before a ``what``: a request, None when
        the flush alone does, :data:`ITSELF` when the ``what`` does."""

    def synced(self, reply: object | None) -> None:
        """The line was synchronised (``reply`` the synchronising request's, if any)."""

    def refusal(self, request: object, reply: object) -> DeviceError | None:
        """The error a reply says (not executed, busy, failed), or None for an answer."""

    def abandoned(self, request: object) -> None:
        """``request`` got no reply (its reply may still come)."""

    def lost_sync(self) -> str:
        """After a reply that did not come: ``"flush"`` (flush the input before the next
        request), ``"sync"`` (synchronise again) or ``"reopen"`` (close the link)."""


class SharedLine:
    """One serial line (an RS-485 bus, or a port) and its one port, shared by the devices on
    it (each a :class:`Transactions` given ``line=``).

    Args:
        name: the line's name in messages and leases (its port, without a device's options).
        open_port: opens the port (:class:`TransportError` when it cannot); None: the
            opener of the first device that joins the line.

    Attributes:
        lock: the transaction lock of every device on the line.
        guard: None, or a function of the line called, the lock held, before every
            transaction; it raises (a :class:`TransportError`: nothing is sent) when the line
            may not be driven now, and may :meth:`drop` the line first.
    """

    def __init__(self, name: str, open_port: Callable[[], Link] | None = None) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.guard: Callable[[SharedLine], None] | None = None
        self._open_port = open_port
        self.port: Link | None = None
        self._users: list[Transactions[Any]] = []

    def link(self) -> Link:
        """A device's link on the line: the port, opened when first used."""
        return _LineLink(self)

    def open(self) -> None:
        """Open the port now, if it is not open (to fail at start rather than at a call).

        Raises:
            TransportError: the port cannot be opened.
        """
        with self.lock:
            self.opened()

    def opened(self) -> Link:
        """The port, opened when it is not (the lock held).

        Raises:
            TransportError: the port cannot be opened.
        """
        if self.port is None:
            assert self._open_port is not None, "no device joined the line"
            self.port = self._open_port()
        return self.port

    def check(self) -> None:
        """Ask the guard (the lock held); raises what it raises."""
        if self.guard is not None:
            self.guard(self)

    def drop(self) -> None:
        """Close the port and set every device's link aside (the lock held): each device
        synchronises again, and asks who the device is, at its next transaction (another
        process may have driven the line meanwhile)."""
        for user in self._users:
            user._set_link_aside()
            user._close_failed()
        self.close_port()

    def close_port(self) -> None:
        """Close the port, if open; the next transaction opens it again."""
        port, self.port = self.port, None
        if port is not None:
            port.close()


class _LineLink:
    """One device's view of a :class:`SharedLine`: the line's port, opened when used."""

    def __init__(self, line: SharedLine) -> None:
        self._line = line
        self._used: Link | None = None

    @property
    def flush_before_request(self) -> bool:
        """The port's (opened to tell: :class:`TransportError` when it cannot be)."""
        return self._port().flush_before_request

    @flush_before_request.setter
    def flush_before_request(self, value: bool) -> None:
        raise AttributeError("a line's port says whether it flushes before every request")

    def _port(self) -> Link:
        self._used = self._line.opened()
        return self._used

    def write(self, data: bytes) -> None:
        self._port().write(data)

    def read(self, deadline: float) -> bytes:
        return self._port().read(deadline)

    def flush_input(self) -> None:
        self._port().flush_input()

    def close(self) -> None:
        """Close the line's port if it is still the one this device used (a port another
        device opened since is left alone)."""
        if self._used is not None and self._used is self._line.port:
            self._line.close_port()
        self._used = None


class _Failed(Exception):
    """Inside a transaction: one attempt failed. ``error`` is what the caller is told;
    ``again`` is True when sending the request again may help."""

    def __init__(self, error: DeviceError | TransportError, *, again: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.again = again


class _LinkFailed(Exception):
    """Inside an exchange: the link failed, before the request was written or after."""

    def __init__(self, error: TransportError, *, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


class _NoReply(Exception):
    """Inside an exchange: no valid reply in time (``why``: what came instead; ``dropped``:
    the bad frames dropped meanwhile, as words)."""

    def __init__(self, why: str, dropped: str = "") -> None:
        super().__init__(why + dropped)
        self.why = why
        self.dropped = dropped


class Transactions(Generic[_Reply]):
    """The transactions of one device over one link.

    Args:
        url: the device's URL, for messages.
        timeout: the seconds to wait for each reply, asked at each request (a device's
            ``timeout`` may be changed between calls).
        open_link: opens the link (:class:`TransportError` when it cannot).
        codec: the host's codec.
        wire: the backend's protocol.
        synced: True when a newly opened link needs no synchronisation (TCP with
            transaction ids).
        line: the serial line the device shares with others (its lock, port and guard), in
            place of ``open_link``'s own port; None: the device's link is its own.

    Attributes:
        timeouts: replies waited for in vain so far.
        bad_frames: bad frames received and dropped so far.
    """

    def __init__(self, url: str, timeout: Callable[[], float], open_link: Callable[[], Link],
                 codec: Codec, wire: Wire, *, synced: bool = False,
                 line: SharedLine | None = None) -> None:
        self.url = url
        self._timeout = timeout
        self.codec = codec
        self.line = line
        self.lock = threading.Lock() if line is None else line.lock
        if line is not None:
            line._users.append(self)
            if line._open_port is None:
                line._open_port = open_link
            open_link = line.link
        self.timeouts = 0
        self.bad_frames = 0
        self._open_link = open_link
        self._wire = wire
        self._synced_at_open = synced
        self._synced = synced
        self._flush = False  # a reply was abandoned: flush the input before the next request
        self._failed: Link | None = None  # a link that failed, closed at the reopen
        #: How many times the link was set aside (failed or closed) so far: a device may
        #: have restarted since an answer of another generation.
        self.generation = 0
        self.link: Link | None = open_link()

    def transact(self, request: Callable[[], object] | object, what: str,
                 retries: int) -> _Reply:
        """One transaction: up to ``retries + 1`` attempts of ``request`` (a request, or a
        function that builds one per attempt, such as one that numbers it).

        Args:
            request: the request, or a function of no arguments that makes it.
            what: what it is, for messages and :data:`UNKNOWN` ("read", "write", ...).
            retries: how many more times it may be sent; 0 for a request that runs
                something (a write, a reset, a clear-on-read read).

        Returns:
            The reply, matched to the request by the codec, that :meth:`Wire.refusal`
            accepts.

        Raises:
            TransportError, DeviceTimeout, ReplyLost, DeviceBusy, DeviceRefused,
                DeviceError: as the module's rules say; the message puts the request's fate
                first, and ends with the attempts and seconds spent when there were several.
            LineElsewhere (a TransportError): the line's guard refused (another process
                drives the line); nothing was sent.
        """
        with self.lock:
            if self.line is not None:
                self.line.check()  # not this process's line: nothing is sent
            started = time.monotonic()
            attempts = 0
            unknown: DeviceTimeout | None = None  # the last attempt sent without an outcome
            while True:
                attempts += 1
                try:
                    return self._attempt(request, what)  # type: ignore[return-value]
                except _Failed as failed:
                    error, cause = failed.error, failed.__cause__
                    if isinstance(error, DeviceTimeout):
                        unknown = error
                    if failed.again and attempts <= retries:
                        continue
                if unknown is not None and isinstance(error, (TransportError, DeviceBusy)):
                    error = type(unknown)(f"{unknown}; the retry failed: {error}")
                if attempts > 1:
                    spent = time.monotonic() - started
                    error.args = (f"{error} ({attempts} attempts, {spent:.2f} s in all)",)
                raise error from cause

    def _attempt(self, make: Callable[[], object] | object, what: str) -> object:
        """Synchronise when due, send the request (``make`` it first when it is a function:
        after the synchronising request, so that numbers run in the order sent), return its
        reply.

        Raises:
            _Failed: the attempt failed; its ``error`` says what became of the request.
        """
        link = self.link
        if link is None or self._flush or not self._synced:  # (the usual attempt is ready)
            link = self._prepare(what)
        request = make() if callable(make) else make
        try:
            reply = self._exchange(link, request)
        except _LinkFailed as failure:
            if not failure.sent:
                raise _Failed(TransportError(f"the {what} was not sent: {failure}"),
                              again=False) from failure.__cause__
            cause = str(failure).partition(" failed: ")[2] or str(failure)
            lost = (ReplyLost(f"{UNKNOWN[what]}; port {self.url} failed after it was sent: "
                              f"{cause}") if what in UNKNOWN
                    else ReplyLost(f"port {self.url} failed after the {what} was sent: {cause}"))
            raise _Failed(lost, again=True) from failure.__cause__
        except _NoReply as failure:
            unknown = f"; {UNKNOWN[what]}" if what in UNKNOWN else ""
            raise _Failed(DeviceTimeout(f"{failure}{unknown}"), again=True) from None
        self._synced = True  # any answer to a request of ours is a synchronisation
        refusal = self._wire.refusal(request, reply)
        if refusal is not None:
            raise _Failed(refusal, again=isinstance(refusal, DeviceBusy))
        return reply

    def _prepare(self, what: str) -> Link:
        """Before an attempt, when due: open the link again, flush its input (after a reply
        abandoned, a reopen, or before every request when the link says so), and
        synchronise the line.

        Raises:
            _Failed: the line is not ready; nothing of the ``what`` was sent.
        """
        try:
            link = self.link if self.link is not None else self._reopen()
            if self._flush or not self._synced:
                link.flush_input()
                self.codec.discard_buffer()
                self._flush = False
        except TransportError as error:
            self._set_link_aside()
            raise _Failed(TransportError(f"the {what} was not sent: {error}"),
                          again=False) from error
        if self._synced:
            return link
        sync = self._wire.sync_request(what)
        if sync is ITSELF:
            return link
        reply = None
        if sync is not None:
            try:
                reply = self._exchange(link, sync)
            except _LinkFailed as failure:
                raise _Failed(TransportError(f"the {what} was not sent: {failure} (while "
                                             "synchronising the line)"),
                              again=False) from failure.__cause__
            except _NoReply as failure:
                raise _Failed(TransportError(f"the {what} was not sent: {failure.why} to the "
                                             f"{self._wire.sync_name}{failure.dropped}"),
                              again=True) from None
        self._synced = True
        self._wire.synced(reply)
        return link

    def _exchange(self, link: Link, request: object) -> object:
        """Write one request and await its reply, through the codec: any frames before it
        dropped (stale, bad), a reply in pieces joined.

        Raises:
            _LinkFailed: the link failed; ``sent`` is False when the write itself failed.
            _NoReply: no valid reply within the timeout.
        """
        codec, wire = self.codec, self._wire
        need_data = wire.need_data
        data = codec.send(request)
        sent = False
        bad = 0
        try:
            if link.flush_before_request:  # bytes that came before it are never its reply
                link.flush_input()
            link.write(data)
            sent = True
            timeout = self._timeout()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    event = codec.next_event()
                except RemoteProtocolError as error:
                    bad = self._bad_frame(link, error, bad)
                    continue
                if event is not need_data:
                    return event
                chunk = link.read(deadline)
                if not chunk:  # a link gives b"" only once the deadline passed
                    self.timeouts += 1
                    self._lost_sync()
                    dropped = (f" ({bad} bad frame{'s' * (bad != 1)} dropped)" if bad else "")
                    raise _NoReply(f"no valid reply within {timeout:g} s", dropped)
                try:
                    codec.receive_data(chunk)
                except RemoteProtocolError as error:
                    bad = self._bad_frame(link, error, bad)
        except TransportError as error:
            self._set_link_aside()
            raise _LinkFailed(error, sent=sent) from error.__cause__
        finally:
            if codec.pending is not None:
                codec.abandon()
                self._flush = True
                wire.abandoned(request)

    def _bad_frame(self, link: Link, error: RemoteProtocolError, bad: int) -> int:
        """A bad frame was dropped: count it; end the wait when the backend says so."""
        self.bad_frames += 1
        if self._wire.bad_frame_ends_wait:
            self._set_link_aside()
            raise _NoReply(f"a malformed reply ({error})")
        return bad + 1

    def _lost_sync(self) -> None:
        how = self._wire.lost_sync()
        if how == "sync":
            self._synced = False
        elif how == "reopen":
            self._set_link_aside()

    def _reopen(self) -> Link:
        self._close_failed()
        self._synced = self._synced_at_open
        self.codec.discard_buffer()
        self.link = self._open_link()
        return self.link

    def _set_link_aside(self) -> None:
        """After a failure (or on close): the next attempt opens the link again."""
        link, self.link = self.link, None
        self._synced = self._synced_at_open
        self.generation += 1
        if link is not None:
            self._close_failed()
            self._failed = link

    def _close_failed(self) -> None:
        link, self._failed = self._failed, None
        if link is not None:
            link.close()

    def close(self) -> None:
        """Close the link. Idempotent; a later transaction opens it again (and synchronises)."""
        with self.lock:
            self._set_link_aside()
            self._close_failed()
