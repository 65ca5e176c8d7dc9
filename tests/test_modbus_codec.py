"""The Modbus client codec in memory: its frames are pymodbus's to the byte (a peer nobody here
wrote), replies are matched to the request, and stale or damaged bytes are never a reply."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymodbus.framer import FramerRTU, FramerSocket
from pymodbus.pdu import DecodePDU, ExceptionResponse, ModbusPDU
from pymodbus.pdu.register_message import (
    MaskWriteRegisterRequest,
    MaskWriteRegisterResponse,
    ReadHoldingRegistersRequest,
    ReadHoldingRegistersResponse,
    WriteMultipleRegistersRequest,
    WriteMultipleRegistersResponse,
    WriteSingleRegisterRequest,
    WriteSingleRegisterResponse,
)

from regdev import LocalProtocolError, RemoteProtocolError
from regdev.devices._modbus_codec import (
    MAX_BUFFER,
    NEED_DATA,
    RTU,
    TCP,
    ClientConnection,
    Echo,
    EchoReply,
    ExceptionReply,
    MaskWrite,
    MaskWriteReply,
    ReadHolding,
    ReadReply,
    Request,
    WriteMultiple,
    WriteMultipleReply,
    WriteSingle,
    WriteSingleReply,
    crc16,
    encode_reply,
    frame,
)

u16 = st.integers(0, 0xFFFF)
units = st.integers(1, 247)


def theirs(request: Request, unit: int, tid: int) -> ModbusPDU:
    """pymodbus's PDU for the same request."""
    match request:
        case ReadHolding(address=a, count=c):
            return ReadHoldingRegistersRequest(address=a, count=c, dev_id=unit,
                                               transaction_id=tid)
        case WriteSingle(address=a, value=v):
            return WriteSingleRegisterRequest(address=a, registers=[v], dev_id=unit,
                                              transaction_id=tid)
        case WriteMultiple(address=a, values=vs):
            return WriteMultipleRegistersRequest(address=a, registers=list(vs), dev_id=unit,
                                                 transaction_id=tid)
        case MaskWrite(address=a, and_mask=m, or_mask=o):
            return MaskWriteRegisterRequest(address=a, and_mask=m, or_mask=o, dev_id=unit,
                                            transaction_id=tid)
    raise AssertionError(request)


requests = st.one_of(
    st.builds(ReadHolding, u16, st.integers(1, 125)),
    st.builds(WriteSingle, u16, u16),
    st.builds(WriteMultiple, u16, st.lists(u16, min_size=1, max_size=123).map(tuple)),
    st.builds(MaskWrite, u16, u16, u16),
)


@given(requests, units, u16)
def test_request_frames_are_pymodbus_frames(request: Request, unit: int, tid: int) -> None:
    """Every request, TCP and RTU, is byte for byte what pymodbus's framers build."""
    for framing, framer in ((TCP, FramerSocket), (RTU, FramerRTU)):
        ours = ClientConnection(framing, unit, tid).send(request)
        assert ours == framer(DecodePDU(False)).buildFrame(theirs(request, unit, tid))


@given(st.binary(max_size=64))
def test_crc_is_pymodbus_crc(data: bytes) -> None:
    """crc16 is the CRC pymodbus computes, sent low byte first."""
    assert crc16(data) == FramerRTU.compute_CRC(data).to_bytes(2, "big")


def their_reply(request: Request, values: list[int]) -> ModbusPDU:
    """pymodbus's server-side reply to ``request`` (read: ``values``)."""
    match request:
        case ReadHolding():
            return ReadHoldingRegistersResponse(registers=values)
        case WriteSingle(address=a, value=v):
            return WriteSingleRegisterResponse(address=a, registers=[v])
        case WriteMultiple(address=a, values=vs):
            return WriteMultipleRegistersResponse(address=a, count=len(vs))
        case MaskWrite(address=a, and_mask=m, or_mask=o):
            return MaskWriteRegisterResponse(address=a, and_mask=m, or_mask=o)
    raise AssertionError(request)


@given(requests, units, u16, st.lists(u16, min_size=125, max_size=125), st.data())
def test_pymodbus_replies_decode_and_match(request: Request, unit: int, tid: int,
                                           pool: list[int], data: st.DataObject) -> None:
    """pymodbus's replies (its server framers), fed in random pieces, give the reply that
    acknowledges the request: the registers read, or the echo of the write."""
    values = pool[:request.count] if isinstance(request, ReadHolding) else []
    for framing, framer in ((TCP, FramerSocket), (RTU, FramerRTU)):
        link = ClientConnection(framing, unit, tid)
        link.send(request)
        reply = their_reply(request, values)
        reply.dev_id, reply.transaction_id = unit, tid
        wire = framer(DecodePDU(True)).buildFrame(reply)
        cuts = sorted(set(data.draw(st.lists(st.integers(1, len(wire) - 1), max_size=4))))
        event: object = NEED_DATA
        for start, end in zip([0, *cuts], [*cuts, len(wire)], strict=True):
            assert event is NEED_DATA
            link.receive_data(wire[start:end])
            event = link.next_event()
        expected = {
            ReadHolding: lambda: ReadReply(tuple(values)),
            WriteSingle: lambda: WriteSingleReply(request.address, request.value),  # type: ignore[union-attr]
            WriteMultiple: lambda: WriteMultipleReply(request.address, len(request.values)),  # type: ignore[union-attr]
            MaskWrite: lambda: MaskWriteReply(request.address, request.and_mask,  # type: ignore[union-attr]
                                              request.or_mask),  # type: ignore[union-attr]
        }[type(request)]()
        assert event == expected
        assert link.pending is None and link.stale == 0


@pytest.mark.parametrize("framing", [TCP, RTU])
def test_exception_replies_decode(framing: str) -> None:
    """pymodbus's exception reply (function | 0x80, code) is an ExceptionReply."""
    link = ClientConnection(framing, 1, 7)
    link.send(WriteSingle(3, 5))
    reply = ExceptionResponse(6, 0x06, device_id=1, transaction=7)
    framer = FramerSocket if framing == TCP else FramerRTU
    link.receive_data(framer(DecodePDU(True)).buildFrame(reply))
    assert link.next_event() == ExceptionReply(6, 6)


# --- TCP ------------------------------------------------------------------------------------------


def tcp_reply(tid: int, pdu: bytes, unit: int = 1) -> bytes:
    return frame(TCP, unit, pdu, tid)


def test_tcp_reply_to_an_older_transaction_is_stale() -> None:
    """A well-formed reply with another transaction id is dropped and counted, then ours is
    taken: a late reply is never a later request's."""
    link = ClientConnection(TCP, 1, 10)
    link.send(ReadHolding(3))
    link.abandon()  # a timeout
    link.send(ReadHolding(3))
    link.receive_data(tcp_reply(10, encode_reply(ReadReply((9,)), 3)))
    assert link.next_event() is NEED_DATA
    link.receive_data(tcp_reply(11, encode_reply(ReadReply((4,)), 3)))
    assert link.next_event() == ReadReply((4,))
    assert link.stale == 1


@pytest.mark.parametrize(("reply", "words"), [
    (tcp_reply(5, encode_reply(WriteSingleReply(3, 6), 6)), "does not match the request"),
    (tcp_reply(5, encode_reply(WriteSingleReply(4, 5), 6)), "does not match the request"),
    (tcp_reply(5, encode_reply(WriteSingleReply(3, 5), 6), unit=2), "came from unit 2"),
    (tcp_reply(5, encode_reply(ReadReply((1,)), 3)), "function code 3 to a request with 6"),
    (tcp_reply(5, b"\x06\x00\x03\x00"), "is 5 bytes, got 4"),
    (b"\x00\x05\x00\x01\x00\x06\x01\x06\x00\x03\x00\x05", "protocol id 1"),
    (b"\x00\x05\x00\x00\x01\x06\x01\x06\x00\x03\x00\x05", "length 262"),
])
def test_tcp_reply_that_breaks_the_request_raises(reply: bytes, words: str) -> None:
    """Our transaction id with the wrong echo, unit, function or length, or a header that is
    not Modbus: RemoteProtocolError (the caller drops the connection), never a reply."""
    link = ClientConnection(TCP, 1, 5)
    link.send(WriteSingle(3, 5))
    link.receive_data(reply)
    with pytest.raises(RemoteProtocolError, match=words):
        link.next_event()


def test_tcp_read_with_the_wrong_byte_count_raises() -> None:
    """A read of 2 registers answered with 1: malformed."""
    link = ClientConnection(TCP, 1, 5)
    link.send(ReadHolding(0, 2))
    link.receive_data(tcp_reply(5, encode_reply(ReadReply((1,)), 3)))
    with pytest.raises(RemoteProtocolError, match="a read of 2 registers answered with 2"):
        link.next_event()


def test_tcp_buffer_is_capped() -> None:
    """Past MAX_BUFFER bytes buffered the stream is given up (stale replies read on the way
    do not count: they are dropped as they are read)."""
    link = ClientConnection(TCP, 1, 5)
    link.send(ReadHolding(0))
    for _ in range(MAX_BUFFER):
        link.receive_data(tcp_reply(9, encode_reply(ReadReply((1,)), 3)))
        assert link.next_event() is NEED_DATA
    assert link.stale == MAX_BUFFER
    with pytest.raises(RemoteProtocolError, match=f"over {MAX_BUFFER} bytes"):
        link.receive_data(b"\x00" * (MAX_BUFFER + 1))


# --- RTU ------------------------------------------------------------------------------------------


def rtu_reply(reply: ExceptionReply | ReadReply | WriteSingleReply | EchoReply, function: int,
              unit: int = 1) -> bytes:
    return frame(RTU, unit, encode_reply(reply, function))


def test_rtu_skips_garbage_damage_and_stale_frames_before_the_reply() -> None:
    """Noise, a frame whose CRC fails, a reply of another unit, a stale reply to another
    function and a stale write echo: all dropped; the matching reply is found after them."""
    link = ClientConnection(RTU, 1)
    link.send(WriteSingle(3, 5))
    damaged = bytearray(rtu_reply(WriteSingleReply(3, 5), 6))
    damaged[3] ^= 0xFF
    noise = (b"\x00\xff$*01" + bytes(damaged) + rtu_reply(WriteSingleReply(3, 5), 6, unit=2)
             + rtu_reply(ReadReply((7,)), 3) + rtu_reply(WriteSingleReply(4, 5), 6))
    link.receive_data(noise)
    assert link.next_event() is NEED_DATA
    link.receive_data(rtu_reply(WriteSingleReply(3, 5), 6))
    assert link.next_event() == WriteSingleReply(3, 5)
    assert link.stale == 1  # the echo of another write; the rest was skipped byte by byte
    assert link.skipped > 0


@pytest.mark.parametrize(("first", "reply", "second"), [
    (ReadHolding(0), ReadReply((0,)), ReadHolding(3)),
    (WriteSingle(2, 7), WriteSingleReply(2, 7), WriteSingle(2, 7))])
def test_rtu_bytes_received_before_a_request_are_never_its_reply(
        first: Request, reply: ReadReply | WriteSingleReply, second: Request) -> None:
    """A reply sent twice: the copy, received before the next request was sent, is dropped
    at the send (counted as skipped), never taken for that request's reply."""
    link = ClientConnection(RTU, 1)
    link.send(first)
    copy = rtu_reply(reply, first.function)
    link.receive_data(copy + copy)
    assert link.next_event() == reply
    link.send(second)
    assert link.next_event() is NEED_DATA
    assert link.skipped == len(copy)


def test_rtu_an_incomplete_false_start_does_not_hide_the_reply() -> None:
    """Noise that looks like the start of a long read reply (unit, 03, byte count 250) does
    not hold up the real reply behind it."""
    link = ClientConnection(RTU, 1)
    link.send(ReadHolding(0))
    link.receive_data(b"\x01\x03\xfa" + rtu_reply(ReadReply((42,)), 3))
    assert link.next_event() == ReadReply((42,))


def test_rtu_local_echo_is_noticed_then_dropped() -> None:
    """An echoing line: the read's own bytes before its reply are noticed (echo_seen); with
    local_echo the copy of a write, which looks like its acknowledgement, is dropped."""
    link = ClientConnection(RTU, 1)
    request = link.send(ReadHolding(0, 2))
    link.receive_data(request + rtu_reply(ReadReply((1, 2)), 3))
    assert link.next_event() == ReadReply((1, 2))
    assert link.echo_seen
    link.local_echo = True
    write = link.send(WriteSingle(3, 5))
    link.receive_data(write[:3])
    assert link.next_event() is NEED_DATA  # part of the echo: wait for the rest
    link.receive_data(write[3:])
    assert link.next_event() is NEED_DATA  # the echo alone is not the acknowledgement
    link.receive_data(rtu_reply(WriteSingleReply(3, 5), 6))
    assert link.next_event() == WriteSingleReply(3, 5)


@pytest.mark.parametrize("cut", [1, 3, 5, 8, 10])
def test_rtu_local_echo_in_pieces_is_noticed(cut: int) -> None:
    """The echo and the reply split anywhere across reads: still noticed, the reply found."""
    link = ClientConnection(RTU, 1)
    stream = link.send(ReadHolding(0, 2)) + rtu_reply(ReadReply((1, 2)), 3)
    link.receive_data(stream[:cut])
    assert link.next_event() is NEED_DATA
    link.receive_data(stream[cut:])
    assert link.next_event() == ReadReply((1, 2))
    assert link.echo_seen


def test_a_write_acknowledgement_is_not_taken_for_an_echo() -> None:
    """A 06 reply is byte for byte its request: it is the acknowledgement, never an echo."""
    link = ClientConnection(RTU, 1)
    link.receive_data(link.send(WriteSingle(3, 5)))
    assert link.next_event() == WriteSingleReply(3, 5)
    assert not link.echo_seen


def test_rtu_buffer_keeps_the_newest_bytes() -> None:
    """Past MAX_BUFFER bytes of noise, the oldest are dropped and the reply still found."""
    link = ClientConnection(RTU, 1)
    link.send(ReadHolding(0))
    link.receive_data(b"\x00" * (MAX_BUFFER + 100))
    link.receive_data(rtu_reply(ReadReply((3,)), 3))
    assert link.next_event() == ReadReply((3,))
    assert link.skipped >= MAX_BUFFER


def test_echo_request_round_trips() -> None:
    """08/00 (the request no other reply can answer) and its echo."""
    link = ClientConnection(RTU, 1)
    link.send(Echo(0xBEEF))
    link.receive_data(rtu_reply(EchoReply(0xBEEF), 8))
    assert link.next_event() == EchoReply(0xBEEF)


# --- misuse ---------------------------------------------------------------------------------------


def test_misuse_is_a_local_protocol_error() -> None:
    """Two requests at once, no request, a field out of range: LocalProtocolError."""
    link = ClientConnection(TCP, 1)
    with pytest.raises(LocalProtocolError, match="no request is awaiting"):
        link.next_event()
    link.send(ReadHolding(0))
    with pytest.raises(LocalProtocolError, match="already awaiting"):
        link.send(ReadHolding(0))
    link.abandon()
    with pytest.raises(LocalProtocolError, match=r"count must be an int 1\.\.125"):
        link.send(ReadHolding(0, 126))
    with pytest.raises(LocalProtocolError, match=r"value must be an int 0\.\.65535"):
        link.send(WriteSingle(0, 0x10000))
    with pytest.raises(LocalProtocolError, match=r"1\.\.123 values"):
        link.send(WriteMultiple(0, ()))


@pytest.mark.parametrize(("framing", "unit"), [(RTU, 0), (RTU, 248), (TCP, 256), (TCP, True)])
def test_unit_out_of_range_is_refused(framing: str, unit: int) -> None:
    """Unit 0 is broadcast (no reply); 248..255 are reserved on a serial line."""
    with pytest.raises(ValueError, match="unit must be an int"):
        ClientConnection(framing, unit)


def test_reply_decoding_is_exact() -> None:
    """struct layout of a mask write reply and of a read reply, by hand."""
    link = ClientConnection(TCP, 1, 1)
    link.send(MaskWrite(2, 0xF0F0, 0x0505))
    link.receive_data(frame(TCP, 1, struct.pack(">BHHH", 22, 2, 0xF0F0, 0x0505), 1))
    assert link.next_event() == MaskWriteReply(2, 0xF0F0, 0x0505)
