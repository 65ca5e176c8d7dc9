"""The serial wire protocol codec, sans-IO: bytes in, frames out, for both ends of the line.

The protocol is specified in ``docs/protocol.md``; in short, one frame is one ASCII line::

    $05 W 03 FF*05\\n        request: seq 0x05, write 0xFF to register 3
    $05 w 03 FF*A4\\n        reply:   register 3 holds 0xFF after the write

``$`` starts a frame, two hex digits give its sequence number, one letter its kind
(upper case: a request; lower case: a reply), then its fields, ``*`` and the CRC-8 of the
bytes between ``$`` and ``*`` as two hex digits, and LF ends it.

Rules of this file:

* No I/O. It imports no serial, socket, time or threading module (a test checks it): the
  caller moves bytes, this module only turns bytes into frames and frames into bytes.
* :class:`Connection` is used by both ends: ``Connection(HOST)`` in the serial backend,
  ``Connection(DEVICE)`` in the firmware simulator. Every state change is one of
  :data:`TRANSITIONS`, and nowhere else: :meth:`Connection._move` looks it up, and the usual
  exchange's two moves are read from it at import (a test checks both).
* Peer input never raises anything but :class:`RemoteProtocolError`, and the codec has
  dropped the bad bytes when it does: the next :meth:`Connection.next_event` goes on with the
  bytes after them (resynchronisation). This side's misuse raises :class:`LocalProtocolError`.
* A device drops reply frames silently (it may be hearing its own echo on a half-duplex or
  echoing line, and must not answer it); a host drops replies it is not awaiting (stale).
* The receive buffer is bounded (``max_buffer_size`` bytes); a frame is at most
  :data:`MAX_FRAME` bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from ..core._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "DEVICE",
    "ERROR_CODES",
    "HOST",
    "MAP_PAGE",
    "MAX_BLOCK",
    "MAX_EPOCH",
    "MAX_FRAME",
    "MAX_ID",
    "MAX_TEXT",
    "NEED_DATA",
    "TRANSITIONS",
    "Action",
    "Connection",
    "DumpReply",
    "DumpRequest",
    "ErrorReply",
    "Frame",
    "IdentifyReply",
    "IdentifyRequest",
    "MaskedWriteReply",
    "MaskedWriteRequest",
    "ReadBlockReply",
    "ReadBlockRequest",
    "ReadReply",
    "ReadRequest",
    "Reply",
    "Request",
    "ResetReply",
    "ResetRequest",
    "Role",
    "State",
    "WriteBlockReply",
    "WriteBlockRequest",
    "WriteReply",
    "WriteRequest",
    "crc8",
    "decode",
    "encode",
    "identify_text",
    "map_text",
    "split_identify_text",
    "split_map_text",
]

#: Largest frame on the wire, in bytes, from ``$`` to LF inclusive (a CR before LF counts).
MAX_FRAME: Final = 64
#: Longest identify text, in bytes (printable ASCII except ``$`` and ``*``).
MAX_TEXT: Final = 48
#: Longest device id and reset epoch in the identify text's extension, in characters (each
#: 1..16 of ``0-9`` and ``A-Z``; ``docs/protocol.md``, "Who the device is, and when it last
#: started over").
MAX_ID: Final = 16
MAX_EPOCH: Final = 16
#: Most registers a block read or block write moves in one frame.
MAX_BLOCK: Final = 16
#: The error codes a device sends in an ``e`` reply (``docs/protocol.md``, "Error codes").
#: A host treats any other upper-case word of 1..8 letters as a refusal too.
ERROR_CODES: Final = ("ADDR", "DATA", "CKSUM", "SYNTAX", "BUSY")

# --- checksum ---------------------------------------------------------------------------------


def _crc8_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return tuple(table)


_CRC8 = _crc8_table()


def crc8(data: bytes) -> int:
    """CRC-8 of ``data``: polynomial 0x07, initial value 0x00, no reflection, no final XOR.

    This is CRC-8/SMBUS in the Catalogue of parametrised CRC algorithms (reveng); its check
    value, the CRC of ``b"123456789"``, is 0xF4. It detects every single-byte error and every
    error burst up to 8 bits long.

    Args:
        data: the bytes between ``$`` and ``*`` of a frame.

    Returns:
        The checksum, 0..255.
    """
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc


# --- frames -----------------------------------------------------------------------------------
# Each frame knows its letter; requests are upper case, replies lower case. Fields are ints
# 0..255 on the wire (two upper-case hex digits); which addresses exist is the device's
# business (it answers ``e ADDR``), not the codec's.


@dataclass(frozen=True, slots=True)
class IdentifyRequest:
    """``I``: ask the device to identify itself; ``I 01`` (``page`` 1): ask which register map
    it serves (:data:`MAP_PAGE`, answered ``i map=DIGEST NAME``, :func:`map_text`). Answered
    by :class:`IdentifyReply`; a device without page 1 answers ``I 01`` with ``e SYNTAX``.
    ``I 00`` is spelt ``I``."""

    seq: int
    page: int = 0


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """``R AA``: read register ``addr``. Answered by :class:`ReadReply`."""

    seq: int
    addr: int


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """``W AA DD``: write ``data`` to register ``addr``. Answered by :class:`WriteReply`."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """``Z``: set every register to its reset value. Answered by :class:`ResetReply`."""

    seq: int


@dataclass(frozen=True, slots=True)
class DumpRequest:
    """``D``: the values of the 16 addresses 00..0F at once, without the side effects of a
    read; ``D AA``: of the 16 addresses from ``addr``. Answered by :class:`DumpReply`."""

    seq: int
    addr: int = 0


@dataclass(frozen=True, slots=True)
class ReadBlockRequest:
    """``G AA NN``: read ``count`` (1..16) registers from ``addr`` up, as reads. Answered by
    :class:`ReadBlockReply`."""

    seq: int
    addr: int
    count: int


@dataclass(frozen=True, slots=True)
class WriteBlockRequest:
    """``P AA DD...``: write ``values`` (1..16 bytes) to the registers from ``addr`` up, all
    or nothing. Answered by :class:`WriteBlockReply`."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MaskedWriteRequest:
    """``M AA MM DD``: one atomic read-modify-write of register ``addr``: the bits ``mask``
    take those of ``data``. Answered by :class:`MaskedWriteReply`."""

    seq: int
    addr: int
    mask: int
    data: int


@dataclass(frozen=True, slots=True)
class IdentifyReply:
    """``i TEXT``: the device's one-line identity (1..48 printable ASCII bytes).

    A device that says who it is and when it last started over ends the text with
    `` id=ID epoch=EPOCH`` (:func:`identify_text`); :attr:`device_id` and :attr:`epoch` read
    them, and are None for a text without that ending (a device that cannot say).
    """

    seq: int
    text: str

    @property
    def device_id(self) -> str | None:
        """The device's id (1..16 of ``0-9A-Z``), or None when the text does not say it."""
        return split_identify_text(self.text)[1]

    @property
    def epoch(self) -> str | None:
        """The device's reset epoch (1..16 of ``0-9A-Z``), or None when the text does not
        say it."""
        return split_identify_text(self.text)[2]


@dataclass(frozen=True, slots=True)
class ReadReply:
    """``r AA DD``: register ``addr`` holds ``data``."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class WriteReply:
    """``w AA DD``: register ``addr`` holds ``data`` after the write."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ResetReply:
    """``z``: every register holds its reset value."""

    seq: int


@dataclass(frozen=True, slots=True)
class DumpReply:
    """``d`` and 32 hex digits: the 16 addresses from ``addr`` (``d AA`` and 32 hex digits
    when ``addr`` is not 0), lowest first; an address that is no register reads 00."""

    seq: int
    values: tuple[int, ...]
    addr: int = 0


@dataclass(frozen=True, slots=True)
class ReadBlockReply:
    """``g AA DD...``: the registers from ``addr`` up hold ``values``."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WriteBlockReply:
    """``p AA DD...``: the registers from ``addr`` up hold ``values`` after the write."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MaskedWriteReply:
    """``m AA DD``: register ``addr`` holds ``data`` after the masked write."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """``e CODE``: the request was refused and not executed; ``code`` is in :data:`ERROR_CODES`.

    A device answers a frame it could not read with the frame's sequence number when that
    could be read, else with sequence number 0 (which no request uses).
    """

    seq: int
    code: str


Request: TypeAlias = (
    IdentifyRequest | ReadRequest | WriteRequest | ResetRequest | DumpRequest
    | ReadBlockRequest | WriteBlockRequest | MaskedWriteRequest
)
Reply: TypeAlias = (
    IdentifyReply | ReadReply | WriteReply | ResetReply | DumpReply | ErrorReply
    | ReadBlockReply | WriteBlockReply | MaskedWriteReply
)
Frame: TypeAlias = Request | Reply

_REQUESTS: Final = (IdentifyRequest, ReadRequest, WriteRequest, ResetRequest, DumpRequest,
                    ReadBlockRequest, WriteBlockRequest, MaskedWriteRequest)
#: The reply type that answers each request type (an ErrorReply answers any of them).
_ANSWER: Final[dict[type[Frame], type[Frame]]] = {
    IdentifyRequest: IdentifyReply,
    ReadRequest: ReadReply,
    WriteRequest: WriteReply,
    ResetRequest: ResetReply,
    DumpRequest: DumpReply,
    ReadBlockRequest: ReadBlockReply,
    WriteBlockRequest: WriteBlockReply,
    MaskedWriteRequest: MaskedWriteReply,
}

# --- the identify text's extension: who the device is, and when it last started over -----------

#: The characters of a device id and a reset epoch in the identify text's extension.
_ID_CHARACTERS: Final = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_id(text: str) -> bool:
    """Whether ``text`` is a device id or a reset epoch: 1..16 characters of 0-9 and A-Z."""
    return 1 <= len(text) <= MAX_ID and set(text) <= _ID_CHARACTERS


def split_identify_text(text: str) -> tuple[str, str | None, str | None]:
    """An identify text's description, device id and reset epoch.

    The text says the last two when it ends with `` id=ID epoch=EPOCH`` after a description
    of at least one character, ID and EPOCH each 1..16 characters of ``0-9`` and ``A-Z``
    (``docs/protocol.md``). Any other text is a description only: a device that cannot say.

    Returns:
        ``(description, device_id, epoch)``; ``(text, None, None)`` without the extension.
    """
    head, sep, epoch = text.rpartition(" epoch=")
    description, sep_id, device_id = head.rpartition(" id=")
    if not (sep and sep_id and description and _is_id(device_id) and _is_id(epoch)):
        return text, None, None
    return description, device_id, epoch


#: The identify page that says which register map the device serves (``I 01``).
MAP_PAGE: Final = 1
#: The characters a map's name keeps in the map page's text (a run of others becomes ``-``),
#: and those of a digest (16 of them).
_MAP_NAME_KEEPS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789_.-")
_DIGEST_CHARACTERS: Final = frozenset("0123456789ABCDEF")


def _is_digest(text: str) -> bool:
    return len(text) == 16 and set(text) <= _DIGEST_CHARACTERS


def map_text(digest: str, name: str) -> str:
    """The text a device answers to ``I 01``: ``map=DIGEST NAME``, DIGEST the map's
    :meth:`~regdev.devices._regmap.RegisterMap.digest` (16 upper-case hex digits), NAME its
    name for people (characters other than letters, digits, ``_``, ``.`` and ``-`` made
    ``-``, cut to fit the 48 bytes of a text: 27 characters), or nothing after the digest
    for a map without a name.

    Raises:
        LocalProtocolError: ``digest`` is not 16 upper-case hex digits.
    """
    if not isinstance(digest, str) or not _is_digest(digest):
        raise LocalProtocolError(f"a map digest is 16 upper-case hex digits, got {digest!r}")
    kept: list[str] = []
    for char in name:
        if char in _MAP_NAME_KEEPS:
            kept.append(char)
        elif not kept or kept[-1] != "\0":
            kept.append("\0")  # a run of others: one `-`
    shown = "".join(kept).replace("\0", "-").strip("-")[:MAX_TEXT - 21]
    return f"map={digest}" + (f" {shown}" if shown else "")


def split_map_text(text: str) -> tuple[str, str] | None:
    """The digest and name of a ``map=DIGEST NAME`` text (:func:`map_text`), or None when
    the text is not of that form."""
    head, _, name = text.partition(" ")
    digest = head.removeprefix("map=")
    if not head.startswith("map=") or not _is_digest(digest):
        return None
    return digest, name


def identify_text(description: str, device_id: str, epoch: str) -> str:
    """The identify text of a device that says who it is and when it last started over:
    ``f"{description} id={device_id} epoch={epoch}"``.

    Args:
        description: 1 or more printable ASCII characters other than ``$`` and ``*``.
        device_id: the device's id, 1..16 characters of ``0-9`` and ``A-Z``; the same for
            the device's whole life.
        epoch: its reset epoch, 1..16 characters of ``0-9`` and ``A-Z``; a new value at every
            reset and every start, never one it had before.

    Raises:
        LocalProtocolError: a part is not of that form, or the text is over :data:`MAX_TEXT`
            characters (the message says by how many).
    """
    for name, value in (("device id", device_id), ("epoch", epoch)):
        if not isinstance(value, str) or not _is_id(value):
            raise LocalProtocolError(f"the {name} must be 1..16 characters of 0-9 and A-Z, "
                                     f"got {value!r}")
    if not isinstance(description, str) or not description:
        raise LocalProtocolError(f"the description must be 1 or more characters, got "
                                 f"{description!r}")
    text = f"{description} id={device_id} epoch={epoch}"
    raw = text.encode("ascii") if text.isascii() else b""
    if not raw or not set(raw) <= _TEXT_BYTES:
        raise LocalProtocolError(f"identify text must be printable ASCII characters other "
                                 f"than `$` and `*`, got {text!r}")
    if len(raw) > MAX_TEXT:
        raise LocalProtocolError(
            f"identify text {text!r} is {len(raw)} characters, over {MAX_TEXT}: shorten the "
            f"description to at most {len(description) - (len(raw) - MAX_TEXT)} characters")
    return text


# --- encoding ---------------------------------------------------------------------------------

_HEX2: Final = {f"{i:02X}".encode(): i for i in range(256)}
_TEXT_BYTES: Final = frozenset(range(0x20, 0x7F)) - {ord("$"), ord("*")}
_PRINTABLE: Final = frozenset(range(0x20, 0x7F))
_CODE_LETTERS: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _byte(name: str, value: object) -> int:
    if type(value) is not int or not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"`{name}` must be an int 0..255, got {value!r}")
    return value


def _hex(values: tuple[int, ...]) -> str:
    return "".join(f"{_byte('values', v):02X}" for v in values)


def _payload(frame: Frame) -> str:
    seq = _byte("seq", frame.seq)
    match frame:
        case IdentifyRequest(page=page):
            return f"{seq:02X} I" + (f" {_byte('page', page):02X}" if page else "")
        case ResetRequest():
            return f"{seq:02X} Z"
        case DumpRequest(addr=addr):
            return f"{seq:02X} D" + (f" {_byte('addr', addr):02X}" if addr else "")
        case ResetReply():
            return f"{seq:02X} z"
        case DumpReply(values=values, addr=addr):
            if len(values) != 16:
                raise LocalProtocolError(f"a dump has 16 values, got {len(values)}")
            at = f"{_byte('addr', addr):02X} " if addr else ""
            return f"{seq:02X} d {at}" + _hex(values)
        case ReadBlockRequest(addr=addr, count=count):
            if type(count) is not int or not 1 <= count <= MAX_BLOCK:
                raise LocalProtocolError(f"a block has 1..{MAX_BLOCK} registers, got {count!r}")
            return f"{seq:02X} G {_byte('addr', addr):02X} {count:02X}"
        case ReadBlockReply(addr=addr, values=values) | WriteBlockRequest(
            addr=addr, values=values
        ) | WriteBlockReply(addr=addr, values=values):
            letter = {ReadBlockReply: "g", WriteBlockRequest: "P",
                      WriteBlockReply: "p"}[type(frame)]
            if not 1 <= len(values) <= MAX_BLOCK:
                raise LocalProtocolError(
                    f"a block has 1..{MAX_BLOCK} values, got {len(values)}")
            return f"{seq:02X} {letter} {_byte('addr', addr):02X} {_hex(values)}"
        case MaskedWriteRequest(addr=addr, mask=mask, data=data):
            return (f"{seq:02X} M {_byte('addr', addr):02X} {_byte('mask', mask):02X} "
                    f"{_byte('data', data):02X}")
        case IdentifyReply(text=text):
            raw = text.encode("ascii") if isinstance(text, str) and text.isascii() else b""
            if not 1 <= len(raw) <= MAX_TEXT or not set(raw) <= _TEXT_BYTES:
                raise LocalProtocolError(
                    f"identify text must be 1..{MAX_TEXT} printable ASCII characters other "
                    f"than `$` and `*`, got {text!r}")
            return f"{seq:02X} i {text}"
        case ErrorReply(code=code):
            if (not isinstance(code, str) or not code.isascii() or not 1 <= len(code) <= 8
                    or not set(code.encode("ascii")) <= _CODE_LETTERS):
                raise LocalProtocolError(f"an error code is 1..8 letters A-Z, got {code!r}")
            return f"{seq:02X} e {code}"
    raise LocalProtocolError(f"not a frame: {frame!r}")


def encode(frame: Frame) -> bytes:
    """The bytes of one frame on the wire, ``$`` through LF.

    Args:
        frame: any request or reply; ``seq``, ``addr``, ``data`` and dump values in 0..255.

    Returns:
        The frame, at most :data:`MAX_FRAME` bytes.

    Raises:
        LocalProtocolError: a field is out of range or the identify text or error code is not
            allowed on the wire.
    """
    letter = _SHORT_LETTERS.get(type(frame))
    if letter is not None:  # the frames of one-byte fields, from tables
        return _encode_short(frame.seq, letter, frame.addr,  # type: ignore[union-attr]
                             getattr(frame, "data", None))
    payload = _payload(frame).encode("ascii")
    return b"$%s*%02X\n" % (payload, crc8(payload))


# --- the frames of one-byte fields, from tables -----------------------------------------------
# A host's read and write and the replies ``r``, ``w`` and ``m`` have the payload ``SS L AA``
# (7 bytes) or ``SS L AA DD`` (10 bytes): they are encoded by joining bytes from tables. Their
# checksum too: CRC-8 with no initial value and no final XOR is linear, crc8(a ^ b) ==
# crc8(a) ^ crc8(b) for bytes a and b of one length, so a payload's checksum is the XOR of
# the checksums of its parts, each in its place among zero bytes (a test checks every field
# value against crc8).

#: The two upper-case hex digits of each byte value.
_HEX: Final = tuple(b"%02X" % value for value in range(256))


def _crc_at(size: int, at: int, part: bytes) -> int:
    """crc8 of ``part`` at offset ``at`` among ``size`` zero bytes."""
    return crc8(bytes(at) + part + bytes(size - at - len(part)))


#: The letter of each frame of the form ``SS L AA`` or ``SS L AA DD`` (fields of one byte).
_SHORT_LETTERS: Final[dict[type[Frame], int]] = {
    ReadRequest: ord("R"), WriteRequest: ord("W"), ReadReply: ord("r"), WriteReply: ord("w"),
    MaskedWriteReply: ord("m")}
#: The payload's size by letter: 7 bytes for ``SS R AA``, 10 for the others (``SS L AA DD``).
_SIZE: Final = {letter: 7 if letter == ord("R") else 10 for letter in b"RWrwm"}
#: The pieces of the bytes: ``$SS `` by sequence number; ``L AA`` by letter, then address;
#: `` DD`` by data; ``*CC`` and LF by checksum.
_HEAD: Final = tuple(b"$%s " % digits for digits in _HEX)
_FIELD: Final = {letter: tuple(b"%c %s" % (letter, digits) for digits in _HEX)
                 for letter in b"RWrwm"}
_DATA: Final = tuple(b" " + digits for digits in _HEX)
_END: Final = tuple(b"*%s\n" % digits for digits in _HEX)
#: The checksum's parts: the sequence number's, in a payload of 7 and of 10 bytes; the
#: letter's and address's (with the spaces), by letter, then address; the data's.
_SEQ_CRC: Final = {size: tuple(_crc_at(size, 0, digits) for digits in _HEX) for size in (7, 10)}
_FIELD_CRC: Final = {
    letter: tuple(_crc_at(_SIZE[letter], 2, (b" %c %s " % (letter, digits))[:_SIZE[letter] - 2])
                  for digits in _HEX)
    for letter in b"RWrwm"}
_DATA_CRC: Final = tuple(_crc_at(10, 8, digits) for digits in _HEX)


def _head_crc(seq: int, letter: int, addr: int) -> int:
    """The checksum of ``SS L AA`` (letter ``R``), or of ``SS L AA DD`` but for its data's
    part (:data:`_DATA_CRC`)."""
    return _SEQ_CRC[_SIZE[letter]][seq] ^ _FIELD_CRC[letter][addr]


def _encode_short(seq: int, letter: int, addr: int, data: int | None) -> bytes:
    """``$SS L AA*CC\\n``, or ``$SS L AA DD*CC\\n`` when ``data`` is not None: what
    :func:`encode` gives for these frames (the same bytes, the same errors), from tables
    rather than text and a CRC loop."""
    if not (type(seq) is int and type(addr) is int and 0 <= seq <= 0xFF and 0 <= addr <= 0xFF):
        _byte("seq", seq)  # raises for the first field out of range, in the general words
        _byte("addr", addr)
    if data is None:
        return _HEAD[seq] + _FIELD[letter][addr] + _END[_head_crc(seq, letter, addr)]
    if type(data) is not int or not 0 <= data <= 0xFF:
        _byte("data", data)
    crc = _head_crc(seq, letter, addr) ^ _DATA_CRC[data]
    return _HEAD[seq] + _FIELD[letter][addr] + _DATA[data] + _END[crc]


def _syntax(line: bytes, why: str, seq: int | None) -> RemoteProtocolError:
    shown = repr(line[:MAX_FRAME])
    return RemoteProtocolError(f"bad frame {shown}: {why}", "SYNTAX", seq)


def decode(line: bytes) -> Frame:
    """Decode one frame: ``$`` through the checksum, with or without the CR and LF after it.

    Args:
        line: the frame's bytes, starting at ``$``.

    Returns:
        The frame.

    Raises:
        RemoteProtocolError: the bytes are not a frame (``code`` ``"CKSUM"`` for a checksum
            mismatch, ``"SYNTAX"`` otherwise; ``seq`` set when it could be read). The checks
            run in the order of rule 4 of ``docs/protocol.md``: the frame's ends (``$``, then
            ``*`` and two hex digits), the checksum, then the sequence number, letter and
            fields; so a frame of any length with a wrong checksum is ``"CKSUM"``.
    """
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    seq = _HEX2.get(line[1:3])
    if len(line) + 1 > MAX_FRAME:
        raise _syntax(line, f"longer than {MAX_FRAME} bytes", seq)
    if line[:1] != b"$" or len(line) < 4 or line[-3] != 0x2A:  # "*"
        raise _syntax(line, "expected `$`, the fields, `*` and two hex digits", seq)
    payload = line[1:-3]
    check = _HEX2.get(line[-2:])
    if check is None:
        raise _syntax(line, "the checksum is not two upper-case hex digits", seq)
    if crc8(payload) != check:
        raise RemoteProtocolError(
            f"bad frame {line!r}: checksum {check:02X}, expected {crc8(payload):02X}",
            "CKSUM", seq)
    if (seq is None or len(payload) < 4 or payload[2] != 0x20
            or (len(payload) > 4 and payload[4] != 0x20)):
        raise _syntax(line, "expected a two-digit sequence number, a space and a letter", seq)
    letter = payload[3]
    fields = payload[5:]
    frame = _decode_fields(seq, letter, fields, len(payload) > 4)
    if frame is None:
        raise _syntax(line, f"bad fields for `{chr(letter)}`", seq)
    return frame


def _values(digits: bytes) -> tuple[int, ...] | None:
    """Bytes as contiguous pairs of upper-case hex digits; None unless 1 or more, all valid."""
    if not digits or len(digits) % 2:
        return None
    values = [_HEX2.get(digits[i:i + 2], -1) for i in range(0, len(digits), 2)]
    return None if -1 in values else tuple(values)


def _decode_fields(seq: int, letter: int, fields: bytes, has_fields: bool) -> Frame | None:
    if not has_fields:
        if letter == 0x49:  # I
            return IdentifyRequest(seq)
        if letter == 0x5A:  # Z
            return ResetRequest(seq)
        if letter == 0x44:  # D
            return DumpRequest(seq)
        return ResetReply(seq) if letter == 0x7A else None  # z
    if letter == 0x52:  # R
        addr = _HEX2.get(fields)
        return ReadRequest(seq, addr) if addr is not None else None
    if letter in b"Wrw":
        addr, data = _HEX2.get(fields[:2]), _HEX2.get(fields[3:5])
        if addr is None or data is None or len(fields) != 5 or fields[2] != 0x20:
            return None
        if letter == 0x57:  # W
            return WriteRequest(seq, addr, data)
        return ReadReply(seq, addr, data) if letter == 0x72 else WriteReply(seq, addr, data)
    if letter == 0x44:  # D AA
        addr = _HEX2.get(fields)
        return DumpRequest(seq, addr) if addr else None  # `D 00` is spelt `D`
    if letter == 0x49:  # I 01: the only page there is (`I 00` is spelt `I`)
        return IdentifyRequest(seq, MAP_PAGE) if _HEX2.get(fields) == MAP_PAGE else None
    if letter == 0x64:  # d [AA ]
        addr = 0
        if len(fields) == 35 and fields[2] == 0x20:
            addr = _HEX2.get(fields[:2], 0)
            if not addr:
                return None
            fields = fields[3:]
        values = _values(fields)
        return DumpReply(seq, values, addr) if values and len(values) == 16 else None
    if letter == 0x47:  # G AA NN
        addr, count = _HEX2.get(fields[:2]), _HEX2.get(fields[3:5])
        if (addr is None or count is None or len(fields) != 5 or fields[2] != 0x20
                or not 1 <= count <= MAX_BLOCK):
            return None
        return ReadBlockRequest(seq, addr, count)
    if letter in b"gPp":
        addr = _HEX2.get(fields[:2])
        values = _values(fields[3:])
        if addr is None or fields[2:3] != b" " or values is None or len(values) > MAX_BLOCK:
            return None
        if letter == 0x67:  # g
            return ReadBlockReply(seq, addr, values)
        return (WriteBlockRequest if letter == 0x50 else WriteBlockReply)(seq, addr, values)
    if letter == 0x4D:  # M AA MM DD
        addr, mask, data = _HEX2.get(fields[:2]), _HEX2.get(fields[3:5]), _HEX2.get(fields[6:8])
        if (addr is None or mask is None or data is None or len(fields) != 8
                or fields[2] != 0x20 or fields[5] != 0x20):
            return None
        return MaskedWriteRequest(seq, addr, mask, data)
    if letter == 0x6D:  # m AA DD
        addr, data = _HEX2.get(fields[:2]), _HEX2.get(fields[3:5])
        if addr is None or data is None or len(fields) != 5 or fields[2] != 0x20:
            return None
        return MaskedWriteReply(seq, addr, data)
    if letter == 0x69:  # i
        ok = 1 <= len(fields) <= MAX_TEXT and set(fields) <= _TEXT_BYTES
        return IdentifyReply(seq, fields.decode("ascii")) if ok else None
    if letter == 0x65:  # e
        ok = 1 <= len(fields) <= 8 and set(fields) <= _CODE_LETTERS
        return ErrorReply(seq, fields.decode("ascii")) if ok else None
    return None


def _block_size(frame: Frame) -> int | None:
    """How many registers a block frame moves (None for other frames), so that a block
    reply must carry as many values as its request asked for."""
    if isinstance(frame, ReadBlockRequest):
        return frame.count
    if isinstance(frame, (ReadBlockReply, WriteBlockRequest, WriteBlockReply)):
        return len(frame.values)
    return None


# --- the state machine ------------------------------------------------------------------------


class Role(enum.Enum):
    """Which end of the line a :class:`Connection` is."""

    __hash__ = object.__hash__  # see _move

    HOST = "host"
    DEVICE = "device"


HOST: Final = Role.HOST
DEVICE: Final = Role.DEVICE


class State(enum.Enum):
    """Where a :class:`Connection` is in the request/reply exchange."""

    __hash__ = object.__hash__  # see _move

    IDLE = "idle"
    AWAITING_REPLY = "awaiting-reply"  # host: a request is out, its reply not yet in
    MUST_REPLY = "must-reply"  # device: a request is in, its reply not yet out


class Action(enum.Enum):
    """What happens to a :class:`Connection`: a frame sent or received, or a give-up."""

    __hash__ = object.__hash__  # see _move

    SEND_REQUEST = "send a request"
    SEND_REPLY = "send a reply"
    SEND_ERROR = "send an error reply"
    RECEIVE_REQUEST = "receive a request"
    RECEIVE_REPLY = "receive the awaited reply"
    ABANDON = "abandon the awaited reply"


_S = State
#: Every allowed (role, state, action) and the state it leads to. Anything not here is
#: refused: a local action with LocalProtocolError; a request reaching a host with
#: RemoteProtocolError. Replies that change nothing are dropped without an error: a reply the
#: host is not awaiting (stale), and any reply reaching a device (its own echo).
TRANSITIONS: Final[dict[tuple[Role, State, Action], State]] = {
    (HOST, _S.IDLE, Action.SEND_REQUEST): _S.AWAITING_REPLY,
    (HOST, _S.AWAITING_REPLY, Action.RECEIVE_REPLY): _S.IDLE,
    (HOST, _S.AWAITING_REPLY, Action.ABANDON): _S.IDLE,
    (DEVICE, _S.IDLE, Action.RECEIVE_REQUEST): _S.MUST_REPLY,
    (DEVICE, _S.MUST_REPLY, Action.SEND_REPLY): _S.IDLE,
    (DEVICE, _S.MUST_REPLY, Action.SEND_ERROR): _S.IDLE,
    # A device answers a frame it could not read (RemoteProtocolError) while idle.
    (DEVICE, _S.IDLE, Action.SEND_ERROR): _S.IDLE,
}



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
        while True:
            start = buffer.find(b"$")
            if start < 0:
                self.discarded += len(buffer)
                buffer.clear()
                return NEED_DATA
            if start:
                self.discarded += start
                del buffer[:start]
            end = buffer.find(b"\n", 1, MAX_FRAME)
            cut = buffer.find(b"$", 1, end if end >= 0 else MAX_FRAME)
            if cut >= 0:
                line = bytes(buffer[:cut])
                self._drop(cut)
                raise _syntax(line, "cut short by a new `$` (a byte was lost)",
                              _HEX2.get(line[1:3]))
            if end < 0:
                if len(buffer) < MAX_FRAME:
                    return NEED_DATA
                line = bytes(buffer[:MAX_FRAME])
                self._drop(MAX_FRAME)
                raise _syntax(line, f"no LF within {MAX_FRAME} bytes",
                              _HEX2.get(line[1:3]))
            line = bytes(buffer[:end])
            try:
                frame = decode(line)
            except RemoteProtocolError:
                self._drop(end + 1)
                raise
            del buffer[:end + 1]
            if self._accept(frame, line):
                return frame

    def _drop(self, count: int) -> None:
        self.discarded += count
        del self._buffer[:count]

    def _accept(self, frame: Frame, line: bytes) -> bool:
        """Apply a received frame to the state; False when it is dropped (a stale reply at
        a host, any reply at a device)."""
        is_request = isinstance(frame, _REQUESTS)
        if self.role is DEVICE:
            if not is_request:
                self.discarded += len(line) + 1  # its own echo, or another device's reply
                return False
            self._move(Action.RECEIVE_REQUEST, local=False)
            self._pending = frame if isinstance(frame, _REQUESTS) else None
            return True
        if is_request:
            raise _syntax(line, "a request reached the host (does the line echo?)", frame.seq)
        pending = self._pending
        if pending is None or frame.seq != pending.seq:
            self.stale += 1
            return False
        answers = isinstance(frame, ErrorReply) or (
            isinstance(frame, _ANSWER[type(pending)])
            and getattr(frame, "addr", None) == getattr(pending, "addr", None)
            and _block_size(frame) == _block_size(pending))
        if not answers:
            raise _syntax(line, f"does not answer the request {encode(pending)!r}", frame.seq)
        self._move(Action.RECEIVE_REPLY, local=False)
        self._pending = None
        return True

    def __repr__(self) -> str:
        return (f"Connection({self.role.value}, state={self._state.value}, "
                f"buffered={len(self._buffer)})")
