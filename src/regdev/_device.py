"""The register device: 16 registers of 8 bits, in process or behind a transport.

:class:`Device` is the one small base class every backend implements (the in-process
:class:`RegisterFile` here, the serial backend elsewhere). The gate talks only to it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

from ._errors import RegisterRangeError

__all__ = ["DATA_MAX", "REGISTER_COUNT", "Device", "RegisterFile", "check_access"]

#: Number of registers; valid addresses are 0..REGISTER_COUNT-1 (0..15).
REGISTER_COUNT = 16
#: Largest data value of one 8-bit register (0..255).
DATA_MAX = 0xFF


def check_access(addr: object, data: object = 0) -> None:
    """Refuse an address outside 0..15 or data outside 0..255 (defence in depth).

    Args:
        addr: register address, must be an ``int`` (not ``bool``) in 0..15.
        data: data value, must be an ``int`` (not ``bool``) in 0..255.

    Raises:
        RegisterRangeError: either value is not an int in its range.
    """
    if type(addr) is not int or not 0 <= addr < REGISTER_COUNT:
        raise RegisterRangeError(f"address {addr!r} is outside 0..{REGISTER_COUNT - 1}")
    if type(data) is not int or not 0 <= data <= DATA_MAX:
        raise RegisterRangeError(f"data {data!r} is outside 0..{DATA_MAX}")


class Device(ABC):
    """A 16-register, 8-bit device. Every method may block for at most the backend's timeout.

    Implementations raise only :class:`~regdev.DeviceError` subclasses (and
    :class:`~regdev.TransportError` for a port that cannot be used).
    """

    @abstractmethod
    def read(self, addr: int) -> int:
        """Return the value (0..255) of register ``addr`` (0..15)."""

    @abstractmethod
    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` (0..15); return the value read back."""

    @abstractmethod
    def reset(self) -> None:
        """Set every register to its reset value."""

    @abstractmethod
    def snapshot(self) -> list[int]:
        """Return all 16 register values, address 0 first."""

    def identify(self) -> str:
        """Return a one-line description of the device."""
        return type(self).__name__

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the device's resources (a port, a socket). Idempotent."""


class RegisterFile(Device):
    """The in-process register file: 16 registers of 8 bits with reset values. Thread-safe.

    Args:
        reset_values: 16 values in 0..255 taken at construction and by :meth:`reset`;
            all 0 when omitted.

    Raises:
        RegisterRangeError: ``reset_values`` is not 16 ints in 0..255.
    """

    def __init__(self, reset_values: Sequence[int] | None = None) -> None:
        values = list(reset_values) if reset_values is not None else [0] * REGISTER_COUNT
        if len(values) != REGISTER_COUNT:
            raise RegisterRangeError(
                f"reset_values has {len(values)} entries; a register file has {REGISTER_COUNT}"
            )
        for value in values:
            check_access(0, value)
        self._reset_values = tuple(values)
        self._registers = list(values)
        self._lock = threading.Lock()
        #: Number of writes applied since construction (for tests and statistics).
        self.write_count = 0

    def read(self, addr: int) -> int:
        """Return register ``addr`` (0..15).

        Raises:
            RegisterRangeError: ``addr`` is not an int in 0..15.
        """
        check_access(addr)
        with self._lock:
            return self._registers[addr]

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` (0..15) and return the value stored.

        Raises:
            RegisterRangeError: ``addr`` or ``data`` is out of range or not an int.
        """
        check_access(addr, data)
        with self._lock:
            self._registers[addr] = data
            self.write_count += 1
            return data

    def reset(self) -> None:
        """Restore every register to its reset value."""
        with self._lock:
            self._registers[:] = self._reset_values

    def snapshot(self) -> list[int]:
        """Return a copy of all 16 registers, address 0 first."""
        with self._lock:
            return list(self._registers)

    def identify(self) -> str:
        """Return ``"regdev register file, 16 x 8-bit (in process)"``."""
        return f"regdev register file, {REGISTER_COUNT} x 8-bit (in process)"
