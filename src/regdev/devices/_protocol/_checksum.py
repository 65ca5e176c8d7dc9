"""The frame checksum: CRC-8/SMBUS of the bytes between ``$`` and ``*``."""

from __future__ import annotations


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


# --- the checksum of the frames of one-byte fields, from tables --------------------------------
# A host's read and write and the replies ``r``, ``w`` and ``m`` have the payload ``SS L AA``
# (7 bytes) or ``SS L AA DD`` (10 bytes). CRC-8 with no initial value and no final XOR is
# linear, crc8(a ^ b) == crc8(a) ^ crc8(b) for bytes a and b of one length, so such a
# payload's checksum is the XOR of the checksums of its parts, each in its place among zero
# bytes (a test checks every field value against crc8): the writers encode these frames with
# it, and the readers check them with it, without the loop of :func:`crc8`.

#: The two upper-case hex digits of each byte value.
_HEX = tuple(b"%02X" % value for value in range(256))


def _crc_at(size: int, at: int, part: bytes) -> int:
    """crc8 of ``part`` at offset ``at`` among ``size`` zero bytes."""
    return crc8(bytes(at) + part + bytes(size - at - len(part)))


#: The payload's size by letter: 7 bytes for ``SS R AA``, 10 for the others (``SS L AA DD``).
_SIZE = {letter: 7 if letter == ord("R") else 10 for letter in b"RWrwm"}
#: The checksum's parts: the sequence number's, in a payload of 7 and of 10 bytes; the
#: letter's and address's (with the spaces), by letter, then address; the data's.
_SEQ_CRC = {size: tuple(_crc_at(size, 0, digits) for digits in _HEX) for size in (7, 10)}
_FIELD_CRC = {
    letter: tuple(_crc_at(_SIZE[letter], 2, (b" %c %s " % (letter, digits))[:_SIZE[letter] - 2])
                  for digits in _HEX)
    for letter in b"RWrwm"}
_DATA_CRC = tuple(_crc_at(10, 8, digits) for digits in _HEX)


def _head_crc(seq: int, letter: int, addr: int) -> int:
    """The checksum of ``SS L AA`` (letter ``R``), or of ``SS L AA DD`` but for its data's
    part (:data:`_DATA_CRC`)."""
    return _SEQ_CRC[_SIZE[letter]][seq] ^ _FIELD_CRC[letter][addr]


def short_crc(seq: int, letter: int, addr: int, data: int | None) -> int:
    """crc8 of the payload ``SS L AA`` (``data`` None) or ``SS L AA DD``, from tables.

    Args:
        seq, addr, data: the fields, 0..255 (unchecked: the caller has).
        letter: the frame's letter, one of ``RWrwm`` as a byte value (``R`` without data).

    Returns:
        The checksum, 0..255: ``crc8(b"%02X %c %02X %02X" % (seq, letter, addr, data))``.
    """
    if data is None:
        return _SEQ_CRC[7][seq] ^ _FIELD_CRC[letter][addr]
    return _SEQ_CRC[10][seq] ^ _FIELD_CRC[letter][addr] ^ _DATA_CRC[data]
