"""Frames to bytes: :func:`encode`, one frame's bytes on the wire, ``$`` through LF."""

from __future__ import annotations

from typing import Final

from ...core._errors import LocalProtocolError
from ._checksum import _DATA_CRC, _HEX, _head_crc, crc8, short_crc  # noqa: F401 (a test reads _DATA_CRC, _head_crc here)
from ._events import (
    _CODE_LETTERS,
    _TEXT_BYTES,
    MAX_BLOCK,
    MAX_TEXT,
    DumpReply,
    DumpRequest,
    ErrorReply,
    Frame,
    IdentifyReply,
    IdentifyRequest,
    MaskedWriteReply,
    MaskedWriteRequest,
    ReadBlockReply,
    ReadBlockRequest,
    ReadReply,
    ReadRequest,
    ResetReply,
    ResetRequest,
    WriteBlockReply,
    WriteBlockRequest,
    WriteReply,
    WriteRequest,
)


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
# (7 bytes) or ``SS L AA DD`` (10 bytes): they are encoded by joining bytes from tables, and
# their checksum is :func:`~._checksum.short_crc`'s, from the checksums of their parts.

#: The letter of each frame of the form ``SS L AA`` or ``SS L AA DD`` (fields of one byte).
_SHORT_LETTERS: Final[dict[type[Frame], int]] = {
    ReadRequest: ord("R"), WriteRequest: ord("W"), ReadReply: ord("r"), WriteReply: ord("w"),
    MaskedWriteReply: ord("m")}
#: The pieces of the bytes: ``$SS `` by sequence number; ``L AA`` by letter, then address;
#: `` DD`` by data; ``*CC`` and LF by checksum.
_HEAD: Final = tuple(b"$%s " % digits for digits in _HEX)
_FIELD: Final = {letter: tuple(b"%c %s" % (letter, digits) for digits in _HEX)
                 for letter in b"RWrwm"}
_DATA: Final = tuple(b" " + digits for digits in _HEX)
_END: Final = tuple(b"*%s\n" % digits for digits in _HEX)


def _encode_short(seq: int, letter: int, addr: int, data: int | None) -> bytes:
    """``$SS L AA*CC\\n``, or ``$SS L AA DD*CC\\n`` when ``data`` is not None: what
    :func:`encode` gives for these frames (the same bytes, the same errors), from tables
    rather than text and a CRC loop."""
    if not (type(seq) is int and type(addr) is int and 0 <= seq <= 0xFF and 0 <= addr <= 0xFF):
        _byte("seq", seq)  # raises for the first field out of range, in the general words
        _byte("addr", addr)
    if data is None:
        return _HEAD[seq] + _FIELD[letter][addr] + _END[short_crc(seq, letter, addr, None)]
    if type(data) is not int or not 0 <= data <= 0xFF:
        _byte("data", data)
    return (_HEAD[seq] + _FIELD[letter][addr] + _DATA[data]
            + _END[short_crc(seq, letter, addr, data)])
