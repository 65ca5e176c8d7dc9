"""One end of the serial line, sans-IO: :class:`Connection` feeds bytes to the readers and
frames to the writers, and moves through :data:`~._state.TRANSITIONS`."""

from __future__ import annotations

import enum
from typing import Final, Literal

from ...core._errors import LocalProtocolError, RemoteProtocolError
from ._events import (
    _ANSWER,
    _REQUESTS,
    MAX_FRAME,
    DumpRequest,
    ErrorReply,
    Frame,
    MaskedWriteRequest,
    ReadBlockReply,
    ReadBlockRequest,
    ReadRequest,
    Request,
    ResetRequest,
    WriteBlockReply,
    WriteBlockRequest,
    WriteRequest,
)
from ._readers import _HEX2, _syntax, decode
from ._state import DEVICE, TRANSITIONS, Action, Role, State
from ._writers import encode


def _block_size(frame: Frame) -> int | None:
    """How many registers a block frame moves (None for other frames), so that a block
    reply must carry as many values as its request asked for."""
    if isinstance(frame, ReadBlockRequest):
        return frame.count
    if isinstance(frame, (ReadBlockReply, WriteBlockRequest, WriteBlockReply)):
        return len(frame.values)
    return None


#: The request types, for a look-up by a decoded frame's type.
_REQUEST_TYPES: Final = frozenset(_REQUESTS)
#: The replies of a block, whose values must be as many as the request's.
_BLOCK_REPLIES: Final = frozenset({ReadBlockReply, WriteBlockReply})
#: The length on the wire (``$`` through LF) of the reply to each request of a fixed one.
_REPLY_SIZE: Final[dict[type[Frame], int]] = {
    ReadRequest: 15, WriteRequest: 15, MaskedWriteRequest: 15, ResetRequest: 9}


def _reply_size(request: Request) -> int:
    """How many bytes the reply to ``request`` has on the wire, ``$`` through LF, when it is
    an answer (an error reply's may differ); 0 when its request cannot say (an identify's
    text is of any length)."""
    size = _REPLY_SIZE.get(type(request))
    if size is not None:
        return size
    if isinstance(request, DumpRequest):  # $SS d [AA ]<16 values>*CC LF
        return 42 + 3 * bool(request.addr)
    count = _block_size(request)  # $SS g AA <values>*CC LF
    return 13 + 2 * count if count is not None else 0


class _Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"


#: Returned by :meth:`Connection.next_event` when no whole frame is buffered yet.
NEED_DATA: Final = _Sentinel.NEED_DATA


class Connection:
    """One end of the serial line: feed it bytes, read frames; give it frames, send bytes.

    Args:
        role: :data:`HOST` (sends requests) or :data:`DEVICE` (answers them).
        max_buffer_size: most bytes held unread, at least :data:`MAX_FRAME` (default 1024).
        first_seq: the sequence number :meth:`new_seq` gives first, 1..255 (default 1). A host
            process should start at a random one, so that it does not reuse the numbers of the
            process before it on the same line (the caller draws it: this module has no I/O
            and no randomness, and stays deterministic in tests).

    Raises:
        LocalProtocolError: ``max_buffer_size`` is below :data:`MAX_FRAME`, or ``first_seq``
            is not an int in 1..255.

    Attributes:
        discarded: bytes dropped so far: outside any frame, in bad frames, in replies a
            device heard (its own echo), or abandoned.
        stale: replies dropped because the host was not awaiting them (an old sequence number).
    """

    def __init__(self, role: Role, *, max_buffer_size: int = 1024, first_seq: int = 1) -> None:
        if type(max_buffer_size) is not int or max_buffer_size < MAX_FRAME:
            raise LocalProtocolError(f"max_buffer_size must be an int >= {MAX_FRAME}")
        if type(first_seq) is not int or not 1 <= first_seq <= 0xFF:
            raise LocalProtocolError(f"first_seq must be an int 1..255, got {first_seq!r}")
        self.role = role
        self.max_buffer_size = max_buffer_size
        self._state = State.IDLE
        self._buffer = bytearray()
        self._pending: Request | None = None  # awaited (host) or owed (device)
        self._last_seq = first_seq - 1  # new_seq() counts up from here, skipping 0
        self.discarded = 0
        self.stale = 0

    @property
    def state(self) -> State:
        """The current :class:`State`."""
        return self._state

    @property
    def buffered(self) -> int:
        """How many received bytes wait to be read as frames (by :meth:`next_event`)."""
        return len(self._buffer)

    @property
    def pending(self) -> Request | None:
        """The request whose reply is awaited (host) or owed (device), if any."""
        return self._pending

    def _move(self, action: Action, local: bool) -> None:
        # (Role, State and Action hash by identity, in C: their members are singletons that
        # compare by identity anyway, and Enum's own __hash__, of the name, is Python code.)
        new = TRANSITIONS.get((self.role, self._state, action))
        if new is None:
            text = (f"cannot {action.value} as the {self.role.value} in state "
                    f"{self._state.value}")
            raise LocalProtocolError(text) if local else RemoteProtocolError(text)
        self._state = new

    def awaited_size(self) -> int:
        """Host: how many more bytes the awaited reply takes, so that a caller may read them
        in one call: the reply's length on the wire (``$`` through LF) less the bytes
        buffered, at least 1.

        Returns:
            That count; 0 when no reply is awaited or its length cannot be told (an
            identify's). An error reply may be shorter: a reader asking for this many bytes
            should take fewer when its wait ends.
        """
        pending = self._pending
        if pending is None or self.role is DEVICE:
            return 0
        size = _REPLY_SIZE.get(type(pending)) or _reply_size(pending)
        return max(size - len(self._buffer), 1) if size else 0

    def new_seq(self) -> int:
        """The next sequence number for a host's request: ``first_seq`` first, then counting
        up to 255 and on from 1 again (0 is never used)."""
        self._last_seq = self._last_seq % 255 + 1
        return self._last_seq

    def send(self, frame: Frame) -> bytes:
        """Turn a frame this end may send now into the bytes to write.

        Args:
            frame: a request (host) or a reply (device). A device's reply must carry the
                owed request's ``seq``; an :class:`ErrorReply` may also answer a frame that
                raised :class:`RemoteProtocolError` (its ``seq``, or 0).

        Returns:
            The bytes of the frame (see :func:`encode`).

        Raises:
            LocalProtocolError: this end may not send this frame now, or a field is out of
                range. The state does not change.
        """
        request = frame if isinstance(frame, _REQUESTS) else None
        if request is not None:
            action = Action.SEND_REQUEST
            if request.seq == 0:
                raise LocalProtocolError("sequence number 0 is reserved; requests use 1..255")
        elif isinstance(frame, ErrorReply):
            action = Action.SEND_ERROR
        else:
            action = Action.SEND_REPLY
        owed = self._pending if self.role is DEVICE else None
        if owed is not None and frame.seq != owed.seq:
            raise LocalProtocolError(
                f"the reply owed is to sequence number {owed.seq}, not {frame.seq}")
        if owed is not None and action is Action.SEND_REPLY and not isinstance(
                frame, _ANSWER[type(owed)]):
            raise LocalProtocolError(
                f"{type(frame).__name__} does not answer {type(owed).__name__}")
        data = encode(frame)
        self._move(action, local=True)
        self._pending = request
        return data

    def abandon(self) -> None:
        """Host: give up the awaited reply (after a timeout) and drop the buffered bytes.

        A late reply to the abandoned request is then stale: :meth:`next_event` drops it.

        Raises:
            LocalProtocolError: no reply is awaited.
        """
        self._move(Action.ABANDON, local=True)
        self._pending = None
        self.discard_buffer()

    def discard_buffer(self) -> None:
        """Drop the bytes received and not yet read as frames (counted in ``discarded``).

        For a host resynchronising its line: it flushes its port's input and calls this, so
        the next frame is read from bytes that arrived after. The state does not change.
        """
        self.discarded += len(self._buffer)
        self._buffer.clear()

    def receive_data(self, data: bytes) -> None:
        """Add bytes read from the line to the receive buffer.

        Raises:
            RemoteProtocolError: the buffer would hold more than ``max_buffer_size`` bytes
                (an overrun, as in a UART): the buffered bytes and ``data`` are dropped.
        """
        if len(self._buffer) + len(data) > self.max_buffer_size:
            self.discarded += len(self._buffer) + len(data)
            self._buffer.clear()
            raise RemoteProtocolError(
                f"receive buffer overrun: more than {self.max_buffer_size} bytes unread; "
                "the buffered bytes were dropped")
        self._buffer += data

    def next_event(self) -> Frame | Literal[_Sentinel.NEED_DATA]:
        """The next frame for this end, or :data:`NEED_DATA`.

        Bytes before a ``$`` are dropped. A host drops replies it is not awaiting (stale); a
        device drops every reply frame (on an echoing line it hears its own replies, and
        answering them would never end).

        Returns:
            A request (device) or the awaited reply (host), or :data:`NEED_DATA`.

        Raises:
            RemoteProtocolError: the next frame is bad (checksum, syntax, over-long, cut short
                by a new ``$``, a request reaching a host, or a reply that does not answer the
                request). It has been dropped; call again to go on.
            LocalProtocolError: a device calls this before sending the reply it owes.
        """
        if self._state is State.MUST_REPLY:
            raise LocalProtocolError("send the reply owed before reading the next request")
        buffer = self._buffer
        while buffer:
            if buffer[0] != 0x24:  # "$"
                start = buffer.find(b"$")
                if start < 0:
                    self.discarded += len(buffer)
                    buffer.clear()
                    break
                self.discarded += start
                del buffer[:start]
            end = buffer.find(b"\n", 1, MAX_FRAME)
            if end > 0:
                line = bytes(buffer[:end])
                try:
                    frame = decode(line)
                except RemoteProtocolError as error:
                    refused = error
                else:
                    # (No frame decode accepts holds a `$` after its first byte: a line cut
                    # short by a new `$` is looked for only when decode refused it.)
                    del buffer[:end + 1]
                    if self._accept(frame, line):
                        return frame
                    continue
                self._cut_short(end)  # a `$` in the line is the error, not decode's
                self._drop(end + 1)
                raise refused
            self._cut_short(MAX_FRAME)
            if len(buffer) < MAX_FRAME:
                return NEED_DATA
            line = bytes(buffer[:MAX_FRAME])
            self._drop(MAX_FRAME)
            raise _syntax(line, f"no LF within {MAX_FRAME} bytes", _HEX2.get(line[1:3]))
        return NEED_DATA

    def _cut_short(self, end: int) -> None:
        """Raise (RemoteProtocolError) when a new ``$`` comes before ``end`` in the buffer,
        which starts at a ``$``: the frame was cut short (a byte was lost), and is dropped
        up to that ``$``."""
        buffer = self._buffer
        cut = buffer.find(b"$", 1, end)
        if cut >= 0:
            line = bytes(buffer[:cut])
            self._drop(cut)
            raise _syntax(line, "cut short by a new `$` (a byte was lost)",
                          _HEX2.get(line[1:3]))

    def _drop(self, count: int) -> None:
        self.discarded += count
        del self._buffer[:count]

    def _accept(self, frame: Frame, line: bytes) -> bool:
        """Apply a received frame to the state; False when it is dropped (a stale reply at
        a host, any reply at a device)."""
        kind = type(frame)  # a decoded frame's type is one of _events' (never a subclass)
        is_request = kind in _REQUEST_TYPES
        if self.role is DEVICE:
            if not is_request:
                self.discarded += len(line) + 1  # its own echo, or another device's reply
                return False
            self._move(Action.RECEIVE_REQUEST, local=False)
            self._pending = frame  # type: ignore[assignment]  # a request (is_request)
            return True
        if is_request:
            raise _syntax(line, "a request reached the host (does the line echo?)", frame.seq)
        pending = self._pending
        if pending is None or frame.seq != pending.seq:
            self.stale += 1
            return False
        answers = kind is ErrorReply or (
            kind is _ANSWER[type(pending)]
            and getattr(frame, "addr", None) == getattr(pending, "addr", None)
            and (kind not in _BLOCK_REPLIES or _block_size(frame) == _block_size(pending)))
        if not answers:
            raise _syntax(line, f"does not answer the request {encode(pending)!r}", frame.seq)
        self._move(Action.RECEIVE_REPLY, local=False)
        self._pending = None
        return True

    def __repr__(self) -> str:
        return (f"Connection({self.role.value}, state={self._state.value}, "
                f"buffered={len(self._buffer)})")
