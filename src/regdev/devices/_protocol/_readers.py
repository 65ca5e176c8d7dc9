"""Bytes to frames: :func:`decode`, one frame from its line, checked in the order of rule 4
of ``docs/protocol.md``."""

from __future__ import annotations

from typing import Any, Final

from ...core._errors import RemoteProtocolError
from ._checksum import _DATA_CRC, _FIELD_CRC, _SEQ_CRC, crc8
from ._events import (
    _CODE_LETTERS,
    _TEXT_BYTES,
    MAP_PAGE,
    MAX_BLOCK,
    MAX_FRAME,
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

#: The byte value of each pair of upper-case hex digits.
_HEX2: Final = {f"{i:02X}".encode(): i for i in range(256)}


#: A line's shape: each upper-case hex digit as ``H``, ``H`` itself as NUL (so that only a
#: hex digit makes an ``H``), any other byte as it is.
_SHAPE: Final = bytes.maketrans(b"0123456789ABCDEFH", b"H" * 16 + b"\0")
#: The frames of one-byte fields (``_checksum.short_crc``), by their shape (without LF).
_SHORT_SHAPES: Final[dict[bytes, Any]] = {  # (Any: the frame types, of 2 or 3 fields)
    b"$HH R HH*HH": ReadRequest, b"$HH W HH HH*HH": WriteRequest,
    b"$HH r HH HH*HH": ReadReply, b"$HH w HH HH*HH": WriteReply,
    b"$HH m HH HH*HH": MaskedWriteReply}
_SHORT_LENGTHS: Final = frozenset(len(shape) for shape in _SHORT_SHAPES)


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
    # A frame of one-byte fields, ``$SS L AA DD*CC`` or ``$SS R AA*CC`` (a host's usual
    # reply, a device's usual request), is read in one step: its shape (hex digits as `H`)
    # by one look-up, its fields by table, its checksum from the checksums of its parts
    # (``_checksum.short_crc``). Any other line, or one of these that does not check, takes
    # the steps below (which give every error).
    if len(line) in _SHORT_LENGTHS:
        kind = _SHORT_SHAPES.get(line.translate(_SHAPE))
        if kind is not None:
            number, letter, at = _HEX2[line[1:3]], line[4], _HEX2[line[6:8]]
            if kind is ReadRequest:
                if _SEQ_CRC[7][number] ^ _FIELD_CRC[letter][at] == _HEX2[line[9:11]]:
                    return ReadRequest(number, at)
            else:
                value = _HEX2[line[9:11]]
                if (_SEQ_CRC[10][number] ^ _FIELD_CRC[letter][at] ^ _DATA_CRC[value]
                        == _HEX2[line[12:14]]):
                    short: Frame = kind(number, at, value)
                    return short
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
