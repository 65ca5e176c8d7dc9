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
