"""The Modbus client codec: requests to bytes, bytes to matched replies. Sans-IO.

Modbus (the Modbus Application Protocol Specification V1.1b3, and the Modbus over Serial Line
Specification V1.02, both at modbus.org) carries a PDU (a function code and its data) in one
of two frames:

* TCP: the MBAP header (transaction id, protocol id 0, length, unit id) then the PDU;
* RTU: the unit id, the PDU, then a CRC-16 (polynomial 0xA001 reflected, initial 0xFFFF, low
  byte first).

:class:`ClientConnection` is the host's end, in the manner of h11 and of
:mod:`regdev.devices._protocol`: :meth:`~ClientConnection.send` turns a request into the bytes
to write, :meth:`~ClientConnection.receive_data` takes bytes read,
:meth:`~ClientConnection.next_event` returns the reply to the request sent, or :data:`NEED_DATA`.

Rules of this file:

* It imports no I/O module (no socket, serial, time or threading): bytes in, events out.
* One request outstanding at a time. A reply is the request's only if it matches it: on TCP
  its transaction id; on both framings its unit id and function code (or the function code
  with bit 7 set: an exception reply), and for the writes the echoed address and values. A
  well-formed frame that does not match is stale (the late reply to an abandoned request):
  it is dropped and counted (:attr:`ClientConnection.stale`), never returned.
* Every reply is checked to its last byte: its length is the one its function code gives,
  a read's byte count is twice the registers asked for, an RTU frame's CRC holds.
* A TCP stream whose framing is lost (a header with a protocol id other than 0, a length out
  of range, a reply to our transaction id whose PDU does not fit the request) cannot be read
  any further: :class:`~regdev.RemoteProtocolError`, and the caller drops the connection. An
  RTU line is resynchronised: bytes that do not start a valid frame are skipped (counted in
  :attr:`ClientConnection.skipped`).
* The buffer is capped (:data:`MAX_BUFFER` bytes); past it the oldest bytes are dropped (RTU)
  or the stream is given up (TCP).
* RTU: bytes received before a request is sent can never be its reply (a device that sent one
  reply twice, a reply that came late): :meth:`ClientConnection.send` drops them (counted in
  :attr:`ClientConnection.skipped`), and the caller flushes its port's input before writing
  the request. What RTU cannot tell apart is a copy that arrives only after the request was
  sent and is byte for byte its reply (RTU has no transaction id); TCP's transaction id does.

Requests (the function codes regdev uses): :class:`ReadHolding` (03), :class:`ReadInput`
(04), :class:`ReadCoils` (01), :class:`ReadDiscrete` (02), :class:`WriteSingle` (06),
:class:`WriteMultiple` (16), :class:`WriteCoil` (05), :class:`WriteCoils` (15),
:class:`MaskWrite` (22), and :class:`Echo` (08, sub-function 00, Return Query Data: the RTU
line's synchronisation, whose reply no other request can have). A read of coils or discrete
inputs answers a :class:`ReadReply` of 0s and 1s, as a read of registers answers their values.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ..core._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "MAX_BUFFER",
    "MAX_READ_BITS",
    "MAX_WRITE_BITS",
    "NEED_DATA",
    "RTU",
    "TCP",
    "ClientConnection",
    "Echo",
    "EchoReply",
    "ExceptionReply",
    "MaskWrite",
    "MaskWriteReply",
    "ReadCoils",
    "ReadDiscrete",
    "ReadHolding",
    "ReadInput",
    "ReadReply",
    "Reply",
    "Request",
    "WriteCoil",
    "WriteCoils",
    "WriteMultiple",
    "WriteMultipleReply",
    "WriteSingle",
    "WriteSingleReply",
    "crc16",
    "encode_reply",
]

TCP = "tcp"
RTU = "rtu"
#: Most bytes held while waiting for a reply (the longest Modbus frame is 260 bytes).
MAX_BUFFER = 1024
#: Most holding registers one read (03) returns and one write (16) sets (the specification's
#: 125 and 123).
MAX_READ = 125
MAX_WRITE = 123
#: Most coils or discrete inputs one read (01, 02) returns, and most coils one write (15)
#: sets (the specification's 2000 and 1968).
MAX_READ_BITS = 2000
MAX_WRITE_BITS = 1968


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


#: What :meth:`ClientConnection.next_event` returns when no complete reply is buffered.
NEED_DATA = _NeedData.NEED_DATA


# --- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadHolding:
    """03 Read Holding Registers: ``count`` (1..125) registers from ``address`` (0..65535)."""

    address: int
    count: int = 1
    function = 3


@dataclass(frozen=True, slots=True)
class ReadInput:
    """04 Read Input Registers: ``count`` (1..125) registers from ``address`` (0..65535)."""

    address: int
    count: int = 1
    function = 4


@dataclass(frozen=True, slots=True)
class ReadCoils:
    """01 Read Coils: ``count`` (1..2000) coils from ``address`` (0..65535)."""

    address: int
    count: int = 1
    function = 1


@dataclass(frozen=True, slots=True)
class ReadDiscrete:
    """02 Read Discrete Inputs: ``count`` (1..2000) inputs from ``address`` (0..65535)."""

    address: int
    count: int = 1
    function = 2


@dataclass(frozen=True, slots=True)
class WriteCoil:
    """05 Write Single Coil: ``value`` (0 or 1; 0xFF00 or 0x0000 on the wire) to
    ``address``."""

    address: int
    value: int
    function = 5


@dataclass(frozen=True, slots=True)
class WriteCoils:
    """15 Write Multiple Coils: ``values`` (1..1968 of 0 or 1) from ``address``."""

    address: int
    values: tuple[int, ...]
    function = 15


@dataclass(frozen=True, slots=True)
class WriteSingle:
    """06 Write Single Register: ``value`` (0..65535) to ``address`` (0..65535)."""

    address: int
    value: int
    function = 6


@dataclass(frozen=True, slots=True)
class WriteMultiple:
    """16 Write Multiple Registers: ``values`` (1..123 of 0..65535) from ``address``."""

    address: int
    values: tuple[int, ...]
    function = 16


@dataclass(frozen=True, slots=True)
class MaskWrite:
    """22 Mask Write Register: ``new = (old & and_mask) | (or_mask & ~and_mask)``, in one
    request, at ``address``; both masks 0..65535."""

    address: int
    and_mask: int
    or_mask: int
    function = 22


@dataclass(frozen=True, slots=True)
class Echo:
    """08 Diagnostics, sub-function 00 Return Query Data: the device echoes ``data``
    (0..65535)."""

    data: int
    function = 8


Request = (ReadHolding | ReadInput | ReadCoils | ReadDiscrete | WriteSingle | WriteMultiple
           | WriteCoil | WriteCoils | MaskWrite | Echo)
#: The reads, by function code, and the most each reads at once.
READS = (ReadHolding, ReadInput, ReadCoils, ReadDiscrete)
_READ_MAX = {3: MAX_READ, 4: MAX_READ, 1: MAX_READ_BITS, 2: MAX_READ_BITS}


@dataclass(frozen=True, slots=True)
class ReadReply:
    """The registers a read (03, 04) returned, address order; or the bits (0 or 1) a read of
    coils or discrete inputs (01, 02) returned."""

    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WriteSingleReply:
    """06's acknowledgement: the address and value echoed."""

    address: int
    value: int


@dataclass(frozen=True, slots=True)
class WriteMultipleReply:
    """16's acknowledgement: the address and the number of registers written."""

    address: int
    count: int


@dataclass(frozen=True, slots=True)
class MaskWriteReply:
    """22's acknowledgement: the address and both masks echoed."""

    address: int
    and_mask: int
    or_mask: int


@dataclass(frozen=True, slots=True)
class EchoReply:
    """08/00's answer: the data echoed."""

    data: int


@dataclass(frozen=True, slots=True)
class ExceptionReply:
    """The device refused ``function`` with exception ``code`` (1..255; the specification's
    are 01..0B)."""

    function: int
    code: int


Reply = ReadReply | WriteSingleReply | WriteMultipleReply | MaskWriteReply | EchoReply \
    | ExceptionReply


# --- the PDU ------------------------------------------------------------------------------------


def _u16(value: object, name: str) -> int:
    if type(value) is not int or not 0 <= value <= 0xFFFF:
        raise LocalProtocolError(f"{name} must be an int 0..65535, got {value!r}")
    return value


def _encode_request(request: Request) -> bytes:
    """The PDU of ``request``: function code, then its data.

    Raises:
        LocalProtocolError: a field is out of its range.
    """
    match request:
        case ReadHolding(address=address, count=count) | ReadInput(
                address=address, count=count) | ReadCoils(
                address=address, count=count) | ReadDiscrete(address=address, count=count):
            top = _READ_MAX[request.function]
            if type(count) is not int or not 1 <= count <= top:
                raise LocalProtocolError(f"count must be an int 1..{top}, got {count!r}")
            return struct.pack(">BHH", request.function, _u16(address, "address"), count)
        case WriteCoil(address=address, value=value):
            if value not in (0, 1) or type(value) is not int:
                raise LocalProtocolError(f"a coil's value must be 0 or 1, got {value!r}")
            return struct.pack(">BHH", 5, _u16(address, "address"), 0xFF00 if value else 0)
        case WriteCoils(address=address, values=values):
            if not 1 <= len(values) <= MAX_WRITE_BITS:
                raise LocalProtocolError(f"a write of coils takes 1..{MAX_WRITE_BITS} values, "
                                         f"got {len(values)}")
            if any(type(value) is not int or value not in (0, 1) for value in values):
                raise LocalProtocolError("a coil's value must be 0 or 1")
            packed = _pack_bits(values)
            return struct.pack(">BHHB", 15, _u16(address, "address"), len(values),
                               len(packed)) + packed
        case WriteSingle(address=address, value=value):
            return struct.pack(">BHH", 6, _u16(address, "address"), _u16(value, "value"))
        case WriteMultiple(address=address, values=values):
            if not 1 <= len(values) <= MAX_WRITE:
                raise LocalProtocolError(f"a block write takes 1..{MAX_WRITE} values, got "
                                         f"{len(values)}")
            data = [_u16(value, "value") for value in values]
            return struct.pack(f">BHHB{len(data)}H", 16, _u16(address, "address"), len(data),
                               2 * len(data), *data)
        case MaskWrite(address=address, and_mask=and_mask, or_mask=or_mask):
            return struct.pack(">BHHH", 22, _u16(address, "address"),
                               _u16(and_mask, "and_mask"), _u16(or_mask, "or_mask"))
        case Echo(data=data):
            return struct.pack(">BHH", 8, 0, _u16(data, "data"))
    raise LocalProtocolError(f"not a Modbus request: {request!r}")


def _pack_bits(values: tuple[int, ...] | list[int]) -> bytes:
    """Bits as Modbus packs them: the first in the low bit of the first byte."""
    out = bytearray((len(values) + 7) // 8)
    for index, value in enumerate(values):
        if value:
            out[index // 8] |= 1 << (index % 8)
    return bytes(out)


def _decode_reply(pdu: bytes, request: Request) -> Reply:
    """The reply in ``pdu`` (function code first), checked against ``request``'s shape.

    Raises:
        RemoteProtocolError: the PDU is not a well-formed reply to that request's function (its
            length, byte count or sub-function is wrong).
    """
    function = pdu[0]
    if function == request.function | 0x80:
        if len(pdu) != 2:
            raise RemoteProtocolError(f"an exception reply is 2 bytes, got {len(pdu)}")
        return ExceptionReply(request.function, pdu[1])
    if function != request.function:
        raise RemoteProtocolError(f"a reply with function code {function} to a request "
                                  f"with {request.function}")
    size = {6: 5, 16: 5, 22: 7, 8: 5, 5: 5, 15: 5}.get(function)
    if function in (3, 4):
        assert isinstance(request, (ReadHolding, ReadInput))
        if len(pdu) < 2 or pdu[1] != 2 * request.count or len(pdu) != 2 + pdu[1]:
            raise RemoteProtocolError(
                f"a read of {request.count} register{'s' * (request.count != 1)} answered "
                f"with {len(pdu) - 2} data bytes (byte count {pdu[1] if len(pdu) > 1 else '-'})")
        return ReadReply(struct.unpack(f">{request.count}H", pdu[2:]))
    if function in (1, 2):
        assert isinstance(request, (ReadCoils, ReadDiscrete))
        want = (request.count + 7) // 8
        if len(pdu) < 2 or pdu[1] != want or len(pdu) != 2 + want:
            raise RemoteProtocolError(
                f"a read of {request.count} bit{'s' * (request.count != 1)} answered with "
                f"{len(pdu) - 2} data bytes (byte count {pdu[1] if len(pdu) > 1 else '-'})")
        return ReadReply(tuple((pdu[2 + index // 8] >> (index % 8)) & 1
                               for index in range(request.count)))
    if len(pdu) != size:
        raise RemoteProtocolError(f"a reply to function {function} is {size} bytes, "
                                  f"got {len(pdu)}")
    first, second = struct.unpack(">HH", pdu[1:5])
    if function in (6, 5):
        return WriteSingleReply(first, second)
    if function in (16, 15):
        return WriteMultipleReply(first, second)
    if function == 22:
        return MaskWriteReply(first, second, struct.unpack(">H", pdu[5:7])[0])
    if first != 0:
        raise RemoteProtocolError(f"a diagnostics reply with sub-function {first}, not 0")
    return EchoReply(second)


def matches(request: Request, reply: Reply) -> bool:
    """True when ``reply`` acknowledges ``request``: an exception reply to its function, a read
    of its count, or the echo of its address and values."""
    match request, reply:
        case _, ExceptionReply(function=function):
            return function == request.function
        case ReadHolding(count=count) | ReadInput(count=count) | ReadCoils(
                count=count) | ReadDiscrete(count=count), ReadReply(values=values):
            return len(values) == count
        case WriteSingle(), WriteSingleReply():
            return (request.address, request.value) == (reply.address, reply.value)
        case WriteCoil(), WriteSingleReply():
            return ((request.address, 0xFF00 if request.value else 0)
                    == (reply.address, reply.value))
        case WriteMultiple() | WriteCoils(), WriteMultipleReply():
            return (request.address, len(request.values)) == (reply.address, reply.count)
        case MaskWrite(), MaskWriteReply():
            return ((request.address, request.and_mask, request.or_mask)
                    == (reply.address, reply.and_mask, reply.or_mask))
        case Echo(), EchoReply():
            return request.data == reply.data
    return False


def encode_reply(reply: Reply, function: int) -> bytes:
    """The PDU of ``reply`` to a request with ``function`` (for peers and tests: a device's
    side). An :class:`ExceptionReply` carries its own function."""
    match reply:
        case ExceptionReply(function=code_of, code=code):
            return bytes((code_of | 0x80, code))
        case ReadReply(values=values) if function in (1, 2):
            packed = _pack_bits(list(values))
            return struct.pack(">BB", function, len(packed)) + packed
        case ReadReply(values=values):
            return struct.pack(f">BB{len(values)}H", function, 2 * len(values), *values)
        case WriteSingleReply(address=a, value=v) | WriteMultipleReply(address=a, count=v):
            return struct.pack(">BHH", function, a, v)
        case MaskWriteReply(address=address, and_mask=and_mask, or_mask=or_mask):
            return struct.pack(">BHHH", function, address, and_mask, or_mask)
        case EchoReply(data=data):
            return struct.pack(">BHH", function, 0, data)
    raise LocalProtocolError(f"not a Modbus reply: {reply!r}")


# --- framing ------------------------------------------------------------------------------------


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(data: bytes) -> bytes:
    """The Modbus RTU CRC of ``data``, as the 2 bytes sent after it (low byte first)."""
    crc = 0xFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc.to_bytes(2, "little")


def frame(framing: str, unit: int, pdu: bytes, tid: int = 0) -> bytes:
    """``pdu`` framed for the line: the MBAP header before it (TCP), or the unit id before it
    and the CRC after (RTU)."""
    if framing == TCP:
        return struct.pack(">HHHB", tid, 0, len(pdu) + 1, unit) + pdu
    body = bytes((unit,)) + pdu
    return body + crc16(body)


#: An RTU reply's length (unit id to CRC) from its function code, for codes regdev sends;
#: 03's depends on its byte count (the third byte), shown as 0.
_RTU_SIZE = {3: 0, 4: 0, 1: 0, 2: 0, 6: 8, 16: 8, 5: 8, 15: 8, 22: 10, 8: 8}


class ClientConnection:
    """The host's end of a Modbus link: one request at a time, each reply matched to it.

    Args:
        framing: :data:`TCP` or :data:`RTU`.
        unit: the unit id (device address) requests go to, 1..247 (0 is broadcast, which no
            device answers; 248..255 are reserved on a serial line, and used by some TCP
            gateways: 1..255 is accepted on TCP).
        first_tid: the first TCP transaction id, 0..65535 (then +1 per request, wrapping).
        local_echo: RTU only: the line hands back every byte sent (an RS-485 adapter without
            echo suppression): the copy of each request is dropped before its reply is looked
            for. Without it, an echo is noticed (:attr:`echo_seen`) when a read's bytes
            come back, unchanged, before its reply (a read, since a write's acknowledgement is
            byte for byte its request); a caller then turns this on.

    Raises:
        ValueError: an unknown ``framing``, or ``unit`` or ``first_tid`` out of range.

    Attributes:
        stale: well-formed replies dropped because they did not match the request awaited.
        skipped: RTU bytes dropped while looking for the start of a valid frame.
        echo_seen: RTU: a read's own bytes came back before its reply while
            :attr:`local_echo` was off (the line echoes; see ``local_echo``).
    """

    def __init__(self, framing: str, unit: int, first_tid: int = 0, *,
                 local_echo: bool = False) -> None:
        if framing not in (TCP, RTU):
            raise ValueError(f"framing must be {TCP!r} or {RTU!r}, got {framing!r}")
        top = 255 if framing == TCP else 247
        if type(unit) is not int or not 1 <= unit <= top:
            raise ValueError(f"unit must be an int 1..{top}, got {unit!r}")
        if type(first_tid) is not int or not 0 <= first_tid <= 0xFFFF:
            raise ValueError(f"first_tid must be an int 0..65535, got {first_tid!r}")
        self.framing = framing
        self.unit = unit
        self._tid = first_tid
        self._buffer = bytearray()
        self._pending: Request | None = None
        self._pending_tid = 0
        self.stale = 0
        self.skipped = 0
        self.local_echo = local_echo
        self.echo_seen = False
        self._sent = b""  # the last request's bytes: its local echo, when the line has one
        self._echo_due = False
        # Noticing an echo (RTU, local_echo off): only on a read, whose reply cannot be its
        # request's bytes (a write's acknowledgement is byte for byte its request).
        self._echo_probe = False
        self._echo_first: bool | None = None  # the bytes after the request began with it
        self._dropped = 0  # bytes dropped since the request was sent

    @property
    def pending(self) -> Request | None:
        """The request awaiting its reply, or None."""
        return self._pending

    def send(self, request: Request) -> bytes:
        """The bytes of ``request``, framed; it is now the request awaited. On RTU the bytes
        received and not yet read are dropped: they came before the request, so none of them
        is its reply.

        Raises:
            LocalProtocolError: a request is already awaiting its reply, or a field of this
                one is out of range.
        """
        if self._pending is not None:
            raise LocalProtocolError("a request is already awaiting its reply")
        pdu = _encode_request(request)
        self._pending_tid = self._tid
        self._tid = (self._tid + 1) & 0xFFFF
        self._pending = request
        if self.framing == RTU and self._buffer:
            self.skipped += len(self._buffer)
            self._buffer.clear()
        self._sent = frame(self.framing, self.unit, pdu, self._pending_tid)
        self._echo_due = self.local_echo and self.framing == RTU
        self._echo_probe = (self.framing == RTU and not self.local_echo
                            and isinstance(request, ReadHolding))
        self._echo_first = None
        self._dropped = 0
        return self._sent

    def abandon(self) -> None:
        """Stop awaiting the reply (after a timeout): a reply to it that comes later is stale."""
        self._pending = None
        self._echo_due = False

    def discard_buffer(self) -> None:
        """Drop the bytes received and not yet read (after the port's input was flushed)."""
        self._buffer.clear()

    def receive_data(self, data: bytes) -> None:
        """Take bytes read from the line.

        Raises:
            RemoteProtocolError: TCP only: more than :data:`MAX_BUFFER` bytes are buffered
                (the buffer is dropped). On RTU the oldest bytes are dropped instead.
        """
        self._buffer += data
        if len(self._buffer) > MAX_BUFFER:
            if self.framing == TCP:
                self._buffer.clear()
                raise RemoteProtocolError(f"over {MAX_BUFFER} bytes without a reply")
            cut = len(self._buffer) - MAX_BUFFER
            self.skipped += cut
            del self._buffer[:cut]

    def next_event(self) -> Reply | _NeedData:
        """The reply to the request awaited, or :data:`NEED_DATA`. Stale frames are dropped.

        Raises:
            LocalProtocolError: no request is awaiting its reply.
            RemoteProtocolError: TCP only: the stream's framing is lost, or the reply with our
                transaction id is malformed or does not match the request (the caller should
                close the connection).
        """
        request = self._pending
        if request is None:
            raise LocalProtocolError("no request is awaiting a reply")
        if self._echo_due:  # the copy of the request comes first; drop it
            buffer, sent = self._buffer, self._sent
            if len(buffer) < len(sent) and sent.startswith(buffer):
                return NEED_DATA
            if buffer.startswith(sent):
                del buffer[:len(sent)]
            self._echo_due = False
        while True:
            found = self._next_tcp(request) if self.framing == TCP else self._next_rtu(request)
            if found is NEED_DATA:
                return NEED_DATA
            assert not isinstance(found, _NeedData)
            if matches(request, found):
                self._pending = None
                return found
            if self.framing == TCP:
                raise RemoteProtocolError(f"the reply to transaction {self._pending_tid} does "
                                          f"not match the request ({_show(found)})")
            self.stale += 1  # RTU: a well-formed reply to another request

    def _next_tcp(self, request: Request) -> Reply | _NeedData:
        buffer = self._buffer
        while len(buffer) >= 7:
            tid, protocol, length, unit = struct.unpack_from(">HHHB", buffer)
            if protocol != 0 or not 3 <= length <= 254:
                buffer.clear()
                raise RemoteProtocolError(f"not a Modbus TCP header (protocol id {protocol}, "
                                          f"length {length})")
            if len(buffer) < 6 + length:
                return NEED_DATA
            pdu = bytes(buffer[7:6 + length])
            del buffer[:6 + length]
            if tid != self._pending_tid:
                self.stale += 1
                continue
            if unit != self.unit:
                raise RemoteProtocolError(f"the reply to transaction {tid} came from unit "
                                          f"{unit}, not {self.unit}")
            return _decode_reply(pdu, request)
        return NEED_DATA

    def _next_rtu(self, request: Request) -> Reply | _NeedData:
        """The first valid frame from our unit with the request's function (or its exception)
        in the buffer; bytes before it are skipped. A frame still incomplete holds the bytes
        from its start, unless a complete valid frame starts after it."""
        buffer = self._buffer
        if self._echo_probe and self._echo_first is None:
            sent = self._sent
            if len(buffer) < len(sent) and sent.startswith(buffer):
                return NEED_DATA  # may be the start of an echo: keep it whole
            self._echo_first = buffer.startswith(sent)
        functions = (request.function, request.function | 0x80)
        waiting_from: int | None = None
        start = 0
        while start + 4 <= len(buffer):  # the shortest frame: unit, code, exception, CRC...
            if buffer[start] != self.unit or buffer[start + 1] not in functions:
                start += 1
                continue
            function = buffer[start + 1]
            size = 5 if function & 0x80 else _RTU_SIZE[function]
            if size == 0:  # 01..04: unit, code, byte count, data, CRC
                size = 5 + buffer[start + 2] if start + 2 < len(buffer) else 0
            end = start + size
            if size == 0 or end > len(buffer):
                if waiting_from is None:
                    waiting_from = start
                start += 1
                continue
            body = bytes(buffer[start:end - 2])
            if crc16(body) != buffer[end - 2:end]:
                start += 1
                continue
            try:
                reply = _decode_reply(body[1:], request)
            except RemoteProtocolError:
                start += 1
                continue
            if self._echo_first and self._dropped + start >= len(self._sent):
                self.echo_seen = True  # the request's own bytes, then its reply
            self.skipped += start
            del buffer[:end]
            return reply
        keep = waiting_from if waiting_from is not None else max(len(buffer) - 3, 0)
        if keep:
            self.skipped += keep
            self._dropped += keep
            del buffer[:keep]
        return NEED_DATA


def _show(reply: Reply) -> str:
    match reply:
        case ReadReply(values=values):
            return f"{len(values)} register{'s' * (len(values) != 1)} read"
        case WriteSingleReply(address=address, value=value):
            return f"register {address} = {value} acknowledged"
        case WriteMultipleReply(address=address, count=count):
            return f"{count} registers from {address} acknowledged"
        case MaskWriteReply(address=address):
            return f"a masked write of register {address} acknowledged"
        case EchoReply(data=data):
            return f"echo {data}"
        case ExceptionReply(function=function, code=code):
            return f"exception {code:02x} to function {function}"
    return repr(reply)  # pragma: no cover
