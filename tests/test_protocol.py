"""The wire protocol codec: frames, checksum, resynchronisation, state table, the doc's examples."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import ROOT
from regdev import LocalProtocolError, ProtocolError, RemoteProtocolError
from regdev.devices import _protocol as wire
from regdev.devices._protocol import (
    DEVICE,
    HOST,
    NEED_DATA,
    Connection,
    ErrorReply,
    ReadReply,
    ReadRequest,
    State,
    WriteReply,
    WriteRequest,
    _writers,
    decode,
    encode,
)
from support.strategies import (
    wire_frames,
    wire_noise,
    wire_replies,
    wire_requests,
)

PROTOCOL_DOC = ROOT / "docs" / "protocol.md"
PACKAGE = ROOT / "src" / "regdev" / "devices" / "_protocol"
SOURCE = PACKAGE / "__init__.py"
#: The codec's modules but its front door, each with the standard-library and regdev modules it
#: may import.
CODEC_FILES = {
    "_events.py": {"__future__", "dataclasses", "typing", "...core._errors"},
    "_checksum.py": {"__future__"},
    "_writers.py": {"__future__", "typing", "...core._errors", "._checksum", "._events"},
    "_readers.py": {"__future__", "typing", "...core._errors", "._checksum", "._events"},
    "_state.py": {"__future__", "enum", "typing"},
    "_connection.py": {"__future__", "enum", "typing", "...core._errors", "._events",
                       "._readers", "._state", "._writers"},
}


def events(link: Connection, data: bytes = b"") -> list[object]:
    """Feed ``data`` and collect every event and protocol error until NEED_DATA."""
    if data:
        link.receive_data(data)
    out: list[object] = []
    while True:
        try:
            event = link.next_event()
        except RemoteProtocolError as error:
            out.append(error)
            continue
        if event is NEED_DATA:
            return out
        out.append(event)
        if link.role is DEVICE:  # a device must answer before it reads on
            assert isinstance(event, wire.Request)
            link.send(ErrorReply(event.seq, "BUSY"))


# --- the module itself ----------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, relative ones with their dots."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    return imported


def test_codec_imports_no_io_modules() -> None:
    """Each file of the codec imports only what it is listed with (enum, dataclasses, typing,
    regdev's errors, its sibling files): no I/O, no time; the package holds no other file."""
    assert {path.name for path in PACKAGE.glob("*.py")} == set(CODEC_FILES) | {"__init__.py"}
    for name, allowed in CODEC_FILES.items():
        assert _imports(PACKAGE / name) == allowed, name
    assert _imports(SOURCE) == {"__future__", "...core._errors"} | {
        each.removesuffix(".py").replace("_", "._", 1) for each in CODEC_FILES}


def test_every_state_change_goes_through_the_table() -> None:
    """The state is assigned in __init__ and in _move (from TRANSITIONS), nowhere else."""
    tree = ast.parse((PACKAGE / "_connection.py").read_text(encoding="utf-8"))
    assigned = [ast.unparse(node.value) for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and any(
                    ast.unparse(target) == "self._state" for target in node.targets)]
    assert set(assigned) == {"State.IDLE", "new"}


def test_crc8_check_value() -> None:
    """CRC-8/SMBUS of b'123456789' is 0xF4 (the catalogue's check value); empty input is 0."""
    assert wire.crc8(b"123456789") == 0xF4
    assert wire.crc8(b"") == 0


# --- the documented examples ----------------------------------------------------------------------

DOC_ROW = re.compile(r"^\| `(\$[^`]*)\\n` \| `(\w+\(.*\))` \|$", re.MULTILINE)


def doc_examples() -> list[tuple[str, str]]:
    return DOC_ROW.findall(PROTOCOL_DOC.read_text(encoding="utf-8"))


def test_protocol_doc_shows_every_frame_kind() -> None:
    """docs/protocol.md has an example of each of the eleven frame types and each error code."""
    shown = " ".join(decoded for _, decoded in doc_examples())
    kinds = {"IdentifyRequest", "ReadRequest", "WriteRequest", "ResetRequest", "DumpRequest",
             "IdentifyReply", "ReadReply", "WriteReply", "ResetReply", "DumpReply", "ErrorReply"}
    assert {name for name in kinds if f"{name}(" in shown} == kinds
    assert {code for code in wire.ERROR_CODES if f"code='{code}'" in shown} == set(
        wire.ERROR_CODES)


@pytest.mark.parametrize(("frame", "decoded"), doc_examples())
def test_protocol_doc_example_decodes_as_documented(frame: str, decoded: str) -> None:
    """Each documented frame decodes to what the doc says, and encodes back to the same bytes."""
    data = frame.encode("ascii") + b"\n"
    assert repr(decode(data)) == decoded
    assert encode(decode(data)) == data


SHOWN_FRAME = re.compile(rb"\$[0-9A-F]{2} [^*`|\n]*\*[0-9A-F]{2}")


@pytest.mark.parametrize("path", [PROTOCOL_DOC, SOURCE],
                         ids=["protocol.md", "_protocol/__init__.py"])
def test_every_frame_shown_in_the_docs_is_valid(path: Path) -> None:
    """Every frame written out in the protocol doc and the codec's source decodes."""
    shown = SHOWN_FRAME.findall(path.read_bytes())
    assert len(shown) >= 2
    for frame in shown:
        assert encode(decode(frame)) == frame + b"\n", frame


def test_codec_docstring_examples_decode_as_described() -> None:
    """The two frames in the codec package's docstring are the write and its reply."""
    shown = SHOWN_FRAME.findall((wire.__doc__ or "").encode("ascii"))
    assert [decode(frame) for frame in shown] == [WriteRequest(5, 3, 255), WriteReply(5, 3, 255)]


def test_protocol_doc_byte_dump_and_session() -> None:
    """The byte-for-byte dump and the terminal session in the doc are valid frames."""
    text = PROTOCOL_DOC.read_text(encoding="utf-8")
    dump = re.search(r"^((?:[0-9a-f]{2} )+[0-9a-f]{2})$", text, re.MULTILINE)
    assert dump is not None
    assert bytes.fromhex(dump.group(1)) == encode(WriteRequest(3, 3, 255))
    session = re.findall(r"^([<>]) (\$.*)$", text, re.MULTILINE)
    assert len(session) == 8
    for direction, line in session:
        frame = decode(line.encode("ascii"))
        assert isinstance(frame, wire.Request) == (direction == ">")


# --- frames ---------------------------------------------------------------------------------------


@given(wire_frames)
def test_every_frame_round_trips(frame: wire.Frame) -> None:
    """decode(encode(frame)) == frame, within MAX_FRAME bytes, for every frame type."""
    data = encode(frame)
    assert len(data) <= wire.MAX_FRAME
    assert data.startswith(b"$") and data.endswith(b"\n") and data.count(b"$") == 1
    assert decode(data) == frame


@given(wire_frames)
def test_crlf_is_accepted(frame: wire.Frame) -> None:
    """A CR before the LF (as terminal programs send) is ignored."""
    assert decode(encode(frame)[:-1] + b"\r\n") == frame


@pytest.mark.parametrize(
    ("line", "code", "seq"),
    [
        (b"$03 W 03 FF*15\n", "CKSUM", 3),  # checksum off by one
        (b"$03 W 03 fF*14\n", "CKSUM", 3),  # lower-case hex changes the checked bytes
        (b"$03 W 03 FF*1\n", "SYNTAX", 3),  # one checksum digit
        (b"$03 W 03 FF\n", "SYNTAX", 3),  # no checksum
        (b"$0G R 03*4C\n", "SYNTAX", None),  # unreadable sequence number (checksum right)
        (b"$03 W 03 FF*14 \n", "SYNTAX", 3),
        # Rule 4 checks the ends, then the checksum, then the fields: short frames too.
        (b"$01I*75\n", "CKSUM", 1),  # 7 bytes, the space lost
        (b"$01 I*76\n", "CKSUM", 1),  # the shortest frame, checksum off by one
        (b"$*05\n", "CKSUM", None),
        (b"$*00\n", "SYNTAX", None),  # nothing checked, and the checksum of nothing is 00
        (b"$0*90\n", "SYNTAX", None),  # checksum right, no sequence number
        (b"$*0\n", "SYNTAX", None),
        (b"$01 I*7\n", "SYNTAX", 1),
    ],
)
def test_bad_frames_name_their_code_and_seq(line: bytes, code: str, seq: int | None) -> None:
    """A bad frame raises RemoteProtocolError with the code a device answers and its seq."""
    with pytest.raises(RemoteProtocolError) as info:
        decode(line)
    assert (info.value.code, info.value.seq) == (code, seq)


def checked(payload: bytes) -> bytes:
    """A frame with a correct checksum around ``payload``."""
    return b"$%s*%02X\n" % (payload, wire.crc8(payload))


@pytest.mark.parametrize(
    "payload",
    [b"03 X", b"03 R 3", b"03 R 0a", b"03 W 03", b"03 W 03  FF", b"03 I 00", b"03 i ",
     b"03 e adr", b"03 e TOOLONGCODE", b"03 d 00", b"03RR 01", b"03 r 03 FF 00", b"03 i a$b",
     b"03 z 00", b"03 R"],
)
def test_well_checksummed_but_malformed_frames_are_syntax_errors(payload: bytes) -> None:
    """A frame whose checksum matches but whose fields are wrong is SYNTAX, with its seq."""
    with pytest.raises(RemoteProtocolError) as info:
        decode(checked(payload))
    assert (info.value.code, info.value.seq) == ("SYNTAX", 3)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (ReadRequest(1, 256), "`addr` must be an int 0..255"),
        (WriteRequest(1, 3, -1), "`data` must be an int 0..255"),
        (ReadRequest(300, 1), "`seq` must be an int 0..255"),
        (wire.IdentifyReply(1, "a*b"), "identify text must be 1..48"),
        (wire.IdentifyReply(1, "é"), "identify text must be 1..48"),
        (wire.IdentifyReply(1, "x" * 49), "identify text must be 1..48"),
        (ErrorReply(1, "busy"), "an error code is 1..8 letters"),
        (wire.DumpReply(1, (0,) * 15), "a dump has 16 values"),
    ],
)
def test_encoding_refuses_what_the_wire_cannot_carry(frame: wire.Frame, message: str) -> None:
    """Out-of-range fields are this side's mistake: LocalProtocolError, nothing encoded."""
    with pytest.raises(LocalProtocolError, match=message):
        encode(frame)


# --- resynchronisation ----------------------------------------------------------------------------


def test_garbage_between_frames_is_dropped_silently() -> None:
    """Bytes outside frames are dropped and counted; the frames around them decode."""
    device = Connection(DEVICE)
    got = events(device, b"noise\n\x00\xff" + encode(ReadRequest(1, 3)) + b"more\r\n"
                 + encode(ReadRequest(2, 4)))
    assert got == [ReadRequest(1, 3), ReadRequest(2, 4)]
    assert device.discarded == len(b"noise\n\x00\xff") + len(b"more\r\n")


def test_lost_lf_breaks_the_frame_at_the_next_start() -> None:
    """A frame that lost its LF is dropped when the next $ arrives; the next frame decodes."""
    device = Connection(DEVICE)
    got = events(device, encode(ReadRequest(1, 3))[:-1] + encode(ReadRequest(2, 4)))
    assert isinstance(got[0], RemoteProtocolError)
    assert (got[0].code, got[0].seq) == ("SYNTAX", 1)
    assert "a byte was lost" in str(got[0])
    assert got[1:] == [ReadRequest(2, 4)]


def test_lost_start_drops_the_frame_without_an_error() -> None:
    """A frame that lost its $ is garbage: dropped silently, the next frame decodes."""
    device = Connection(DEVICE)
    assert events(device, encode(ReadRequest(1, 3))[1:] + encode(ReadRequest(2, 4))) == [
        ReadRequest(2, 4)]


def test_over_long_line_is_dropped_then_the_next_frame_decodes() -> None:
    """No LF within 64 bytes: the 64 bytes go (SYNTAX), the rest of the line is hunted away."""
    device = Connection(DEVICE)
    assert events(device, b"$01 R " + b"0" * 50) == []  # still within 64 bytes: waiting
    got = events(device, b"0" * 100 + b"\n" + encode(ReadRequest(2, 4)))
    assert isinstance(got[0], RemoteProtocolError) and got[0].seq == 1
    assert "no LF within 64 bytes" in str(got[0])
    assert got[1:] == [ReadRequest(2, 4)]


def test_frames_split_across_reads_decode() -> None:
    """A frame arriving one byte at a time is decoded when its LF arrives."""
    device = Connection(DEVICE)
    data = encode(WriteRequest(7, 1, 2))
    for byte in data[:-1]:
        assert events(device, bytes([byte])) == []
    assert events(device, data[-1:]) == [WriteRequest(7, 1, 2)]


def test_receive_buffer_is_bounded() -> None:
    """More than max_buffer_size unread bytes is an overrun: dropped, then the link recovers."""
    device = Connection(DEVICE, max_buffer_size=100)
    device.receive_data(b"x" * 60)
    with pytest.raises(RemoteProtocolError, match="overrun"):
        device.receive_data(b"y" * 60)
    assert device.discarded == 120
    assert events(device, encode(ReadRequest(1, 1))) == [ReadRequest(1, 1)]
    with pytest.raises(LocalProtocolError):
        Connection(DEVICE, max_buffer_size=10)


@given(st.lists(st.binary(max_size=80), max_size=8), st.sampled_from([HOST, DEVICE]))
def test_any_bytes_raise_only_the_remote_protocol_error(chunks: list[bytes],
                                                        role: wire.Role) -> None:
    """Whatever bytes arrive, the codec raises nothing but RemoteProtocolError."""
    link = Connection(role)
    if role is HOST:
        link.send(ReadRequest(link.new_seq(), 3))
    for chunk in chunks:
        try:
            got = events(link, chunk)
        except RemoteProtocolError:
            continue
        assert all(isinstance(item, (RemoteProtocolError, wire.Request, wire.Reply))
                   for item in got)


@given(wire_noise, wire_requests)
def test_a_request_after_garbage_is_still_decoded(noise: bytes, request: wire.Request) -> None:
    """A device decodes a valid request sent after any line noise."""
    device = Connection(DEVICE)
    got = events(device, noise + encode(request))
    assert got[-1] == request


@given(wire_noise, wire_replies)
def test_the_awaited_reply_after_garbage_is_still_decoded(noise: bytes,
                                                          reply: wire.Reply) -> None:
    """A host decodes the reply it awaits after any line noise (noise frames are dropped)."""
    request = {
        wire.IdentifyReply: wire.IdentifyRequest(reply.seq or 1),
        wire.ReadReply: ReadRequest(reply.seq, getattr(reply, "addr", 0)),
        wire.WriteReply: WriteRequest(reply.seq, getattr(reply, "addr", 0), 0),
        wire.ResetReply: wire.ResetRequest(reply.seq or 1),
        wire.DumpReply: wire.DumpRequest(reply.seq or 1, getattr(reply, "addr", 0)),
        wire.ReadBlockReply: wire.ReadBlockRequest(reply.seq, getattr(reply, "addr", 0),
                                                   len(getattr(reply, "values", ()))),
        wire.WriteBlockReply: wire.WriteBlockRequest(reply.seq, getattr(reply, "addr", 0),
                                                     getattr(reply, "values", ())),
        wire.MaskedWriteReply: wire.MaskedWriteRequest(reply.seq, getattr(reply, "addr", 0),
                                                       0, 0),
        ErrorReply: ReadRequest(reply.seq or 1, 0),
    }[type(reply)]
    reply = ErrorReply(request.seq, reply.code) if isinstance(reply, ErrorReply) else reply
    probe = Connection(HOST)
    probe.send(request)
    events(probe, noise)
    assume(probe.state is State.AWAITING_REPLY)  # the noise holds no valid answer of its own
    host = Connection(HOST)
    host.send(request)
    got = events(host, noise + encode(reply))
    assert got[-1] == reply
    assert host.state is State.IDLE


# --- the two ends joined in memory ----------------------------------------------------------------


def exchange(host: Connection, device: Connection, request: wire.Request,
             answer: wire.Reply) -> list[object]:
    device.receive_data(host.send(request))
    assert events_once(device) == request
    assert device.state is State.MUST_REPLY and host.state is State.AWAITING_REPLY
    host.receive_data(device.send(answer))
    return events(host)


def events_once(link: Connection) -> object:
    return link.next_event()


@pytest.mark.parametrize(
    ("request_", "reply"),
    [
        (wire.IdentifyRequest(1), wire.IdentifyReply(1, "a device")),
        (ReadRequest(1, 3), ReadReply(1, 3, 200)),
        (WriteRequest(1, 3, 255), WriteReply(1, 3, 255)),
        (wire.ResetRequest(1), wire.ResetReply(1)),
        (wire.DumpRequest(1), wire.DumpReply(1, tuple(range(16)))),
        (ReadRequest(1, 16), ErrorReply(1, "ADDR")),
    ],
)
def test_host_and_device_exchange_every_request(request_: wire.Request,
                                                reply: wire.Reply) -> None:
    """Each request goes host -> device and its reply back; both ends end idle."""
    host, device = Connection(HOST), Connection(DEVICE)
    assert exchange(host, device, request_, reply) == [reply]
    assert host.state is State.IDLE and device.state is State.IDLE


def test_sequence_numbers_run_1_to_255_then_wrap() -> None:
    """new_seq never gives 0; it wraps from 255 to 1."""
    host = Connection(HOST)
    seqs = [host.new_seq() for _ in range(256)]
    assert seqs[:2] == [1, 2] and seqs[254:] == [255, 1]
    with pytest.raises(LocalProtocolError, match="reserved"):
        host.send(ReadRequest(0, 1))


def test_first_seq_sets_where_the_numbers_start() -> None:
    """first_seq is the first number new_seq gives; counting wraps past 255 to 1, never 0."""
    assert [Connection(HOST, first_seq=200).new_seq() for _ in range(2)] == [200, 200]
    host = Connection(HOST, first_seq=254)
    assert [host.new_seq() for _ in range(4)] == [254, 255, 1, 2]
    for bad in (0, 256, -1, True, 1.0):
        with pytest.raises(LocalProtocolError, match=r"first_seq must be an int 1\.\.255"):
            Connection(HOST, first_seq=bad)  # type: ignore[arg-type]


def test_discard_buffer_drops_a_partial_frame() -> None:
    """discard_buffer() drops buffered bytes (counted); the next frame is read from scratch."""
    host = Connection(HOST)
    host.send(ReadRequest(1, 3))
    host.receive_data(encode(ReadReply(1, 3, 9))[:6])
    host.discard_buffer()
    assert host.discarded == 6 and host.state is State.AWAITING_REPLY
    assert events(host, encode(ReadReply(1, 3, 7))) == [ReadReply(1, 3, 7)]


def test_late_reply_after_abandon_is_stale() -> None:
    """After a timeout (abandon), the late reply is dropped; the next request's reply is taken."""
    host, device = Connection(HOST), Connection(DEVICE)
    device.receive_data(host.send(ReadRequest(1, 3)))
    device.next_event()
    late = device.send(ReadReply(1, 3, 9))
    host.abandon()
    assert host.state is State.IDLE
    device.receive_data(host.send(ReadRequest(2, 3)))
    device.next_event()
    assert events(host, late + device.send(ReadReply(2, 3, 10))) == [ReadReply(2, 3, 10)]
    assert host.stale == 1


def test_unattributed_error_reply_is_stale_for_the_host() -> None:
    """An error reply with seq 0 (a frame the device could not read) is not the host's answer."""
    host = Connection(HOST)
    host.send(ReadRequest(host.new_seq(), 1))
    assert events(host, encode(ErrorReply(0, "SYNTAX"))) == []
    assert host.state is State.AWAITING_REPLY and host.stale == 1


def test_host_refuses_a_reply_that_does_not_answer_its_request() -> None:
    """A reply with the right seq but another type or address is a remote error; still waiting."""
    host = Connection(HOST)
    host.send(ReadRequest(5, 3))
    got = events(host, encode(WriteReply(5, 3, 1)) + encode(ReadReply(5, 4, 1)))
    assert [type(item) for item in got] == [RemoteProtocolError, RemoteProtocolError]
    assert host.state is State.AWAITING_REPLY
    assert events(host, encode(ReadReply(5, 3, 1))) == [ReadReply(5, 3, 1)]


def test_echoed_request_reaching_the_host_is_a_remote_error() -> None:
    """A host hearing a request (its own echo) raises RemoteProtocolError naming the echo."""
    host = Connection(HOST)
    data = host.send(ReadRequest(1, 3))
    with pytest.raises(RemoteProtocolError, match="echo"):
        host.receive_data(data)
        host.next_event()


def test_reply_reaching_the_device_is_dropped_silently() -> None:
    """A device hearing a reply (its own echo) drops it without an error; it stays idle."""
    device = Connection(DEVICE)
    echo = encode(ReadReply(1, 3, 0)) + encode(ErrorReply(0, "SYNTAX"))
    assert events(device, echo) == []
    assert device.state is State.IDLE and device.discarded == len(echo)
    assert events(device, echo + encode(ReadRequest(2, 3))) == [ReadRequest(2, 3)]


def test_an_echoing_line_does_not_make_the_device_talk_forever() -> None:
    """A device on a line that echoes everything answers each request once, and stops."""
    host, device = Connection(HOST), Connection(DEVICE)
    to_device = host.send(ReadRequest(host.new_seq(), 3))
    answers = 0
    while to_device:
        device.receive_data(to_device)
        to_device = b""
        while (event := device.next_event()) is not NEED_DATA:
            assert isinstance(event, wire.Request)
            reply = device.send(ReadReply(event.seq, 3, 0))
            answers += 1
            to_device += reply  # the line echoes the device's reply back to it
    assert answers == 1 and device.state is State.IDLE


@pytest.mark.parametrize(
    ("role", "setup", "frame", "message"),
    [
        (HOST, [ReadRequest(1, 1)], ReadRequest(2, 1), "cannot send a request as the host in "
                                                      "state awaiting-reply"),
        (HOST, [], ReadReply(1, 1, 1), "cannot send a reply as the host"),
        (DEVICE, [], ReadRequest(1, 1), "cannot send a request as the device"),
        (DEVICE, [], ReadReply(1, 1, 1), "cannot send a reply as the device in state idle"),
    ],
)
def test_misuse_is_a_local_protocol_error(role: wire.Role, setup: list[wire.Frame],
                                          frame: wire.Frame, message: str) -> None:
    """Sending what this end may not send now raises LocalProtocolError; state unchanged."""
    link = Connection(role)
    for item in setup:
        link.send(item)
    before = link.state
    with pytest.raises(LocalProtocolError, match=message):
        link.send(frame)
    assert link.state is before


def test_device_must_answer_the_owed_request_first() -> None:
    """A device reads on only after replying, with the owed seq and a matching reply type."""
    device = Connection(DEVICE)
    device.receive_data(encode(ReadRequest(4, 1)) + encode(ReadRequest(5, 1)))
    assert device.next_event() == ReadRequest(4, 1)
    with pytest.raises(LocalProtocolError, match="send the reply owed"):
        device.next_event()
    with pytest.raises(LocalProtocolError, match="owed is to sequence number 4, not 5"):
        device.send(ReadReply(5, 1, 0))
    with pytest.raises(LocalProtocolError, match="WriteReply does not answer ReadRequest"):
        device.send(WriteReply(4, 1, 0))
    device.send(ReadReply(4, 1, 0))
    assert device.next_event() == ReadRequest(5, 1)


def test_device_answers_an_unreadable_frame_while_idle() -> None:
    """An error reply to a bad frame is allowed while idle (the table's last row)."""
    device = Connection(DEVICE)
    with pytest.raises(RemoteProtocolError) as info:
        device.receive_data(b"$09 R 03*00\n")
        device.next_event()
    assert device.send(ErrorReply(info.value.seq or 0, info.value.code)) == encode(
        ErrorReply(9, "CKSUM"))
    assert device.state is State.IDLE


def test_abandon_without_a_request_is_misuse() -> None:
    """abandon() with no reply awaited raises LocalProtocolError."""
    with pytest.raises(LocalProtocolError):
        Connection(HOST).abandon()


def test_protocol_errors_are_regdev_errors() -> None:
    """Both protocol errors sit under ProtocolError, so one except catches the codec's errors."""
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert issubclass(LocalProtocolError, ProtocolError)


# --- the frames of one-byte fields, from tables -------------------------------------------------

_SHORT_FRAMES = (ReadRequest, WriteRequest, wire.ReadReply, wire.WriteReply,
                 wire.MaskedWriteReply)
_ODD_FIELDS = st.one_of(st.integers(-2, 0x102), st.booleans(), st.just("3"), st.just(3.0))


def _general_encoding(frame: wire.Frame) -> bytes:
    """The bytes of ``frame`` written out here: its text, then the CRC loop (the frames of
    one-byte fields, which the codec builds from tables, as the protocol spells them)."""
    if type(frame) in _SHORT_FRAMES:
        fields = [frame.seq, frame.addr]  # type: ignore[union-attr]
        if type(frame) is not ReadRequest:
            fields.append(frame.data)  # type: ignore[union-attr]
        for name, value in zip(("seq", "addr", "data"), fields, strict=False):
            if type(value) is not int or not 0 <= value <= 0xFF:
                raise LocalProtocolError(f"`{name}` must be an int 0..255, got {value!r}")
        letter = {ReadRequest: "R", WriteRequest: "W", wire.ReadReply: "r",
                  wire.WriteReply: "w", wire.MaskedWriteReply: "m"}[type(frame)]
        text = " ".join([f"{fields[0]:02X}", letter] + [f"{each:02X}" for each in fields[1:]])
        payload = text.encode("ascii")
    else:
        payload = _writers._payload(frame).encode("ascii")
    return b"$%s*%02X\n" % (payload, wire.crc8(payload))


@given(wire_frames)
def test_every_frame_encodes_as_the_general_way(frame: wire.Frame) -> None:
    """encode gives the bytes of the general encoder for every frame, the usual ones (read,
    write and their replies, built from tables) included."""
    assert encode(frame) == _general_encoding(frame)


@given(st.sampled_from(_SHORT_FRAMES), st.lists(_ODD_FIELDS, min_size=3, max_size=3))
def test_the_usual_frames_refuse_a_bad_field_as_the_general_way(
        kind: type[wire.Frame], fields: list[object]) -> None:
    """A field out of range (or not an int) in a usual frame raises the general encoder's
    LocalProtocolError, naming the same field first; a frame it takes gives its bytes."""
    frame = kind(*fields[:2 if kind is ReadRequest else 3])  # type: ignore[arg-type]
    try:
        expected = _general_encoding(frame)
    except LocalProtocolError as general:
        with pytest.raises(LocalProtocolError) as fast:
            encode(frame)
        assert str(fast.value) == str(general)
    else:
        assert encode(frame) == expected


@given(wire_requests, st.sampled_from([State.IDLE, State.AWAITING_REPLY]))
def test_a_hosts_read_and_write_are_sent_as_any_request(request: wire.Request,
                                                        state: State) -> None:
    """A host's read and write (sent straight) give the general encoder's bytes, await the
    same reply and move the state the same way; sent in
    the wrong state, or with sequence number 0, they raise and change nothing."""
    host = Connection(HOST)
    if state is State.AWAITING_REPLY:
        host.send(wire.IdentifyRequest(7))
    before = (host.state, host.pending)
    if state is State.IDLE and request.seq != 0:
        assert host.send(request) == _general_encoding(request)
        assert host.state is State.AWAITING_REPLY and host.pending == request
    else:
        with pytest.raises(LocalProtocolError):
            host.send(request)
        assert (host.state, host.pending) == before


def test_the_checksum_parts_add_up_to_crc8() -> None:
    """The usual frames' checksum, the XOR of its parts' (CRC-8 is linear), is crc8 of the
    payload for every value of each field and every letter, in both payload sizes."""
    for letter in b"RWrwm":
        for value in range(256):
            for seq, addr in ((value, 0xA5), (0x3C, value)):
                payload = b"%02X %c %02X" % (seq, letter, addr)
                if letter == ord("R"):
                    assert _writers._head_crc(seq, letter, addr) == wire.crc8(payload)
                else:
                    assert _writers._head_crc(seq, letter, addr) ^ _writers._DATA_CRC[0x5A] == (
                        wire.crc8(payload + b" 5A"))
            if letter != ord("R"):
                assert _writers._head_crc(0x3C, letter, 0xA5) ^ _writers._DATA_CRC[value] == (
                    wire.crc8(b"3C %c A5 %02X" % (letter, value)))


def test_a_usual_frame_changed_in_any_one_byte_is_refused() -> None:
    """A read, write or masked write request or reply with any one byte changed to any value
    (an `H` among its hex digits too) is refused with RemoteProtocolError, never decoded."""
    for frame in (wire.ReadRequest(0x3C, 0xA5), wire.WriteRequest(0x3C, 0xA5, 0x5A),
                  wire.ReadReply(0x3C, 0xA5, 0x5A), wire.WriteReply(0x3C, 0xA5, 0x5A),
                  wire.MaskedWriteReply(0x3C, 0xA5, 0x5A)):
        line = wire.encode(frame)[:-1]
        assert wire.decode(line) == frame
        for at in range(len(line)):
            for value in range(256):
                if value == line[at]:
                    continue
                with pytest.raises(RemoteProtocolError):
                    wire.decode(line[:at] + bytes([value]) + line[at + 1:])


def test_awaited_size_is_the_length_of_the_answer_on_the_wire() -> None:
    """A host's awaited_size is the encoded length of the answer to each request of a fixed
    one, less the bytes buffered (at least 1); 0 for an identify and when nothing is awaited."""
    answers = ((wire.ReadRequest(7, 3), wire.ReadReply(7, 3, 0xFF)),
               (wire.WriteRequest(7, 3, 1), wire.WriteReply(7, 3, 1)),
               (wire.MaskedWriteRequest(7, 3, 1, 1), wire.MaskedWriteReply(7, 3, 1)),
               (wire.ResetRequest(7), wire.ResetReply(7)),
               (wire.DumpRequest(7), wire.DumpReply(7, tuple(range(16)))),
               (wire.DumpRequest(7, 0x10), wire.DumpReply(7, tuple(range(16)), 0x10)),
               (wire.ReadBlockRequest(7, 3, 5), wire.ReadBlockReply(7, 3, (1,) * 5)),
               (wire.WriteBlockRequest(7, 3, (1, 2)), wire.WriteBlockReply(7, 3, (1, 2))))
    for request, reply in answers:
        host = Connection(HOST)
        assert host.awaited_size() == 0
        host.send(request)
        data = wire.encode(reply)
        assert host.awaited_size() == len(data)
        host.receive_data(data[:4])
        assert host.awaited_size() == len(data) - 4
        host.receive_data(data[4:])
        assert host.awaited_size() == 1
        assert host.next_event() == reply
        assert host.awaited_size() == 0
    host = Connection(HOST)
    host.send(wire.IdentifyRequest(7))
    assert host.awaited_size() == 0
