"""The register device: registers described by a register map (8 bits wide by default; 16,
32 or 64 as the map says), in process or behind a transport.

:class:`Device` is the one small base class every backend implements (the in-process
:class:`RegisterFile` here, the serial backend elsewhere). The gate talks only to it.
:class:`TimeoutDevice` wraps any device to bound how long a caller waits for it.

Every device has a :class:`~regdev.RegisterMap` (:attr:`Device.regmap`): by default the
16 unnamed read-write registers of :meth:`RegisterMap.default`. The register file honours
its map (reset values, read-only registers, reserved bits, write-1-to-clear, clear-on-read;
see ``_regmap.py``), and refuses what the map forbids itself, after the gate has (defence in
depth).

Every device says who it is and when it last started over: :meth:`Device.identity`, a
:class:`DeviceIdentity` of its id and its reset epoch. Idempotency keys are scoped to both, so
a write stored under a key is replayed only to the device it was applied to, and only while
that device has not been reset since, by any path: the in-process register file draws a new
epoch at every reset, and a device on a serial line says its epoch in its identify reply
(``docs/protocol.md``). A device that cannot say its epoch gets no replays.
"""

from __future__ import annotations

import queue
import re
import secrets
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Self

from ..core._errors import DeviceBusy, DeviceRefused, DeviceTimeout, MapError, RegisterRangeError
from ..core._limits import seconds_problem
from ..core._text import escape_text
from ._regmap import Register, RegisterMap

__all__ = ["DATA_MAX", "MAX_BLOCK", "REGISTER_COUNT", "Device", "DeviceIdentity",
           "RegisterFile", "TimeoutDevice", "check_access", "check_block", "check_epoch",
           "check_timeout", "new_epoch"]

#: Number of registers of the default map; its addresses are 0..REGISTER_COUNT-1 (0..15).
REGISTER_COUNT = 16
#: Largest data value of one 8-bit register (0..255).
DATA_MAX = 0xFF
#: Most registers one block read or block write moves (one frame on the serial line).
MAX_BLOCK = 16


#: A reset epoch: 1..16 characters of 0-9 and A-Z (what fits the wire protocol's identify text).
_EPOCH = re.compile(r"[0-9A-Z]{1,16}")


class DeviceIdentity(NamedTuple):
    """Who a device is, and when it last started over.

    Attributes:
        device: the device's id, the same for its whole life (across resets, power cycles and
            restarts of regdev), and unique among the devices one audit database sees: a
            serial number said by the device, or a name regdev gives (``RegisterFile:...``
            for an in-process register file, ``serial:PORT`` for a device on a port that does
            not say its id).
        epoch: its reset epoch, 1..16 characters of ``0-9`` and ``A-Z``: a new value every
            time its registers start over (a reset by any path, a power cycle, a restart),
            never a value it had before. None when the device cannot say: then no
            idempotency key is ever replayed to it (``docs/safety.md``).
    """

    device: str
    epoch: str | None


def new_epoch() -> str:
    """A fresh reset epoch: 16 random upper-case hex digits (64 bits from ``secrets``), so a
    device's epochs do not repeat (two equal among a billion resets: about 1 chance in 4e19)."""
    return secrets.token_hex(8).upper()


def check_epoch(epoch: object) -> str:
    """Return ``epoch`` when it is a reset epoch: a str of 1..16 characters of 0-9 and A-Z.

    Raises:
        ValueError: it is not.
    """
    if type(epoch) is not str or _EPOCH.fullmatch(epoch) is None:
        raise ValueError(f"a reset epoch must be 1..16 characters of 0-9 and A-Z, "
                         f"got {epoch!r}")
    return epoch


def check_access(addr: object, data: object = 0, regmap: RegisterMap | None = None) -> None:
    """Refuse an address that is not a holding register, or data the register cannot hold
    (defence in depth).

    Args:
        addr: register address, an ``int`` (not ``bool``): a holding register of ``regmap``
            (0..15 for the default map).
        data: data value, must be an ``int`` (not ``bool``) in 0..2**width-1 of the register
            (0..255 for an 8-bit register, 0..65535 for a 16-bit one).
        regmap: the device's map; None for the default map.

    Raises:
        RegisterRangeError: either value is not an int in its range.
    """
    top = DATA_MAX
    if regmap is None or regmap.is_default:
        if type(addr) is not int or not 0 <= addr < REGISTER_COUNT:
            raise RegisterRangeError(f"address {addr!r} is outside 0..{REGISTER_COUNT - 1}")
    else:
        register = regmap.at(addr) if type(addr) is int else None
        if register is None:
            raise RegisterRangeError(f"address {addr!r} is not a register of this device "
                                     f"(registers are at {_addresses(regmap)})")
        top = register.top
    if type(data) is not int or not 0 <= data <= top:
        raise RegisterRangeError(f"data {data!r} is outside 0..{top}")


def check_block(addr: object, count: object, regmap: RegisterMap | None = None) -> None:
    """Refuse a block of ``count`` registers from ``addr`` unless every address in it is a
    register and ``count`` is 1..:data:`MAX_BLOCK`.

    Raises:
        RegisterRangeError: the block is out of range.
    """
    if type(count) is not int or not 1 <= count <= MAX_BLOCK:
        raise RegisterRangeError(f"a block has 1..{MAX_BLOCK} registers, got {count!r}")
    check_access(addr, 0, regmap)
    assert type(addr) is int
    for each in range(addr + 1, addr + count):
        check_access(each, 0, regmap)


def _addresses(regmap: RegisterMap) -> str:
    """The map's addresses for a message: ``0..7`` when contiguous, else listed."""
    if regmap.contiguous:
        return f"0..{regmap.last}"
    shown = ", ".join(str(a) for a in regmap.addresses[:12])
    return shown + (", ..." if len(regmap) > 12 else "")


def check_timeout(timeout: object) -> None:
    """Refuse a timeout that is not a number of seconds in 0.001..86400 (one millisecond to
    one day, :data:`~regdev.core._limits.MIN_SECONDS` and ``MAX_SECONDS``).

    Shorter, no device call could keep it (a refusal would state a wait of 5e-324 s); longer,
    it is a hang, not a time-out, and past ``threading.TIMEOUT_MAX`` it overflows the lock
    wait after the call was handed to the device; ``inf`` or NaN is no time at all.

    Raises:
        ValueError: ``timeout`` is not an int or float in that range (``bool`` is not).
    """
    problem = seconds_problem(timeout)
    if problem is not None:
        raise ValueError(f"timeout {problem}")


class Device(ABC):
    """A device of 8-bit registers, described by :attr:`regmap`. Every method may block for
    at most the backend's timeout.

    Implementations raise only :class:`~regdev.DeviceError` subclasses (and
    :class:`~regdev.TransportError` for a port that cannot be used).

    A device is a context manager: ``with open_device(url) as device: ...`` closes it at the
    end of the block (:meth:`close`), whether the block raised or not.

    Args:
        regmap: the register map the device honours (:attr:`regmap`); None for the default
            map (16 unnamed read-write registers, reset 0). A backend passes its map here.
    """

    def __init__(self, regmap: RegisterMap | None = None) -> None:
        self._regmap: RegisterMap = regmap if regmap is not None else RegisterMap.default()

    @property
    def regmap(self) -> RegisterMap:
        """The register map this device honours: the one given to :class:`Device`, or the
        default map (16 unnamed read-write registers, reset 0) when none was (or when a
        subclass did not call ``Device.__init__``)."""
        found: RegisterMap | None = getattr(self, "_regmap", None)
        return found if found is not None else RegisterMap.default()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def read(self, addr: int) -> int:
        """Return the value (0..2**width-1: 0..255 for an 8-bit register) of holding register
        ``addr`` (a register of the map)."""

    @abstractmethod
    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..2**width-1 of the register: 0..255 for an 8-bit one) to holding
        register ``addr``; return the value read back."""

    @abstractmethod
    def reset(self) -> None:
        """Set every register to its reset value."""

    @abstractmethod
    def snapshot(self) -> Sequence[int | None]:
        """Return every register's value, in the map's address order (address 0 first for
        the default map's 16), without the side effects of a read (no clear-on-read).

        None for a register the device cannot show without reading it, when a read would
        clear its clear-on-read bits (a bridge to a chip, ``docs/firmware.md``): its value is
        unknown, never a made-up 0. The in-process register file always has every value.
        """

    def reset_leaves(self) -> str | None:
        """What :meth:`reset` leaves as it was, in words; None (this default) when a reset
        sets every register to its reset value."""
        return None

    def read_block(self, addr: int, count: int) -> list[int]:
        """Read ``count`` (1..16) registers from ``addr`` up, as reads (clear-on-read bits
        clear). This default reads them one by one; a backend that can should override it
        with one transaction.

        Raises:
            RegisterRangeError: an address of the block is not a register (nothing read).
        """
        check_block(addr, count, self.regmap)
        return [self.read(each) for each in range(addr, addr + count)]

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` (1..16 values 0..255) to the registers from ``addr`` up, all or
        nothing: every value is checked before any is written. Returns the registers' values
        after the write.

        A backend that cannot do this as one transaction refuses it: this default raises
        :class:`~regdev.DeviceRefused` (nothing written), never writes one by one.
        """
        raise DeviceRefused(f"{type(self).__name__} cannot write a block of registers as one "
                            "transaction; nothing was written", "BLOCK")

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        """One atomic read-modify-write of register ``addr``: the bits ``mask`` take those
        of ``data``, the others keep their value (``new = (old & ~mask) | (data & mask)``,
        write-1-to-clear bits in ``mask`` clearing where ``data`` has a 1). Returns the value
        after.

        No other write may come between the read and the write. A backend that cannot
        promise that refuses: this default raises :class:`~regdev.DeviceRefused` (nothing
        written), never reads and writes apart.
        """
        raise DeviceRefused(f"{type(self).__name__} cannot write bits of a register "
                            "atomically (a masked write); nothing was written", "MASK")

    def read_table(self, table: str, addr: int, count: int) -> list[int]:
        """Read ``count`` consecutive registers of ``table`` (``"holding"``, ``"input"``,
        ``"coil"``, ``"discrete"``) from ``addr`` up, in one transaction (no torn read), as
        reads (clear-on-read bits clear). Each is 0..2**width-1 (a coil 0..1).

        This default reads holding registers with :meth:`read_block` (or :meth:`read` for
        one; at most :data:`MAX_BLOCK`) and refuses any other table; a backend with tables
        (Modbus) overrides it.

        Raises:
            RegisterRangeError: an address is not a register of ``table`` (nothing read).
            DeviceRefused: the device has no such table, or cannot read that many at once.
        """
        if table != "holding":
            raise DeviceRefused(f"{type(self).__name__} has holding registers only, no "
                                f"{table} table; nothing was read", "TABLE")
        if count == 1:
            return [self.read(addr)]
        if type(count) is int and count > MAX_BLOCK:
            raise DeviceRefused(f"{type(self).__name__} reads at most {MAX_BLOCK} registers "
                                "in one transaction; nothing was read", "BLOCK")
        return self.read_block(addr, count)

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` to consecutive registers of ``table`` (holding registers or
        coils) from ``addr`` up, in one transaction, all or nothing; return the values after.

        This default writes holding registers with :meth:`write_block` (or :meth:`write` for
        one) and refuses any other table; a backend with tables (Modbus) overrides it.

        Raises:
            RegisterRangeError: an address is not a register of ``table``, or a value does
                not fit its register (nothing written).
            DeviceRefused: the table is read-only or absent, or the device cannot write that
                many at once (nothing written).
        """
        if table != "holding":
            raise DeviceRefused(f"{type(self).__name__} has holding registers only, no "
                                f"{table} table; nothing was written", "TABLE")
        values = list(data)
        if len(values) == 1:
            return [self.write(addr, values[0])]
        return self.write_block(addr, values)

    def identify(self) -> str:
        """Return a one-line description of the device."""
        return type(self).__name__

    def map_mismatch(self) -> str | None:
        """Why the device is not one of :attr:`regmap`'s (one phrase naming both sides), or
        None when nothing says so. Asked once, when a command connects (every command with
        ``--port``): a host must not drive one chip with another chip's map.

        By default the map's identity registers (:meth:`RegisterMap.identity`, a chip ID) are
        read: each must hold its reset value. A backend whose device says which map it serves
        compares that first (:class:`~regdev.devices._serial.SerialDevice`).

        Raises:
            DeviceError, TransportError: reading an identity register failed.
        """
        for register in self.regmap.identity():  # (an input register's: by read_table)
            value = (self.read(register.addr) if register.table == "holding"
                     else self.read_table(register.table, register.addr, 1)[0])
            if value != register.reset:
                name = self.regmap.name
                which = f"the map `{escape_text(name)}`" if name else "the map"
                return (f"its identity register {register.label} holds 0x{value:02X}, where "
                        f"{which} says 0x{register.reset:02X} (another chip)")
        return None

    def state_id(self) -> str:
        """Who the device is: the ``device`` of :meth:`identity`.

        Two objects with the same ``state_id`` reach the same device (for example a device on
        a serial port, which outlives this process). The default is unique to this object (a
        random UUID taken on first use).
        """
        state_id: str | None = getattr(self, "_default_state_id", None)
        if state_id is None:
            state_id = self._default_state_id = f"{type(self).__name__}:{uuid.uuid4().hex}"
        return state_id

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        """Who the device is and its reset epoch, for scoping idempotency keys.

        A key stored for a write is replayed only while the device says the same id and the
        same epoch as when the write was sent (asked again, with ``refresh``, just before the
        replay is answered). The default is :meth:`state_id` and no epoch: a device that
        does not track its resets cannot say it was not reset since, so no key is replayed
        to it. Override this (and :meth:`known_identity`) to say an epoch.

        Args:
            refresh: ask the device now (a round trip for a remote device). False may answer
                what was learnt from the device earlier, provided nothing was reset through
                this object since.

        Raises:
            DeviceError, TransportError: the device could not be asked (as :meth:`read`).
        """
        return DeviceIdentity(self.state_id(), None)

    def known_identity(self) -> DeviceIdentity | None:
        """What :meth:`identity` would answer from what is known, without asking the device
        (no I/O); None when nothing is known yet. The audit log names each call's device with
        it. The default calls :meth:`identity`; a device whose ``identity`` does I/O overrides
        this."""
        return self.identity()

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the device's resources (a port, a socket). Idempotent."""


class RegisterFile(Device):
    """The in-process register file: the registers of a map, with their behaviour. Thread-safe.

    It honours its map: registers start at (and :meth:`reset` restores) their reset values; a
    write to a read-only register, or one that sets a reserved bit, is refused
    (:class:`~regdev.RegisterRangeError`, nothing written); read-only bits keep their value;
    write-1-to-clear bits clear where a 1 is written; write-only bits read as 0;
    clear-on-read bits clear after a read returns them. :meth:`hardware_set` sets bits as the
    device's hardware would (a status flag, a counter).

    It says who it is and when it last started over (:meth:`identity`): its id, and a reset
    epoch drawn at construction and again at every :meth:`reset` (:func:`new_epoch`), so an
    idempotency key is never replayed to it after a reset, whoever called it.

    Args:
        reset_values: one value in 0..2**width-1 per register of the map (address order), taken at
            construction and by :meth:`reset`; the map's reset values when omitted.
        state_id: its id (what :meth:`state_id` returns, and the ``device`` of
            :meth:`identity`). None (the default): ``"RegisterFile:"`` and 16 random hex
            digits, unique to this object, since its registers live only as long as it does.
        epoch: the reset epoch it starts in (1..16 characters of 0-9 and A-Z); None (the
            default) draws a new one. Pass the id and epoch an earlier object reported only
            when this one stands for the same registers, not reset since (a test of a
            restart, a model of a device that keeps its state): idempotency keys stored
            through the earlier one are then replayed to it.
        regmap: the register map; the default map (16 read-write registers, reset 0) when
            omitted. Registers of any width (8, 16, 32, 64 bits) at any address, in the
            holding table only.

    Raises:
        MapError: the map has registers in another table than holding (input registers,
            coils, discrete inputs are Modbus's: serve them with ``firmware-sim --modbus-tcp``).
        RegisterRangeError: ``reset_values`` is not one int in 0..2**width-1 per register.
        ValueError: ``state_id`` is an empty string or not a string, or ``epoch`` is not a
            reset epoch.
    """

    def __init__(self, reset_values: Sequence[int] | None = None, *,
                 state_id: str | None = None, epoch: str | None = None,
                 regmap: RegisterMap | None = None) -> None:
        regmap = regmap if regmap is not None else RegisterMap.default()
        count = len(regmap)
        values = list(reset_values) if reset_values is not None else [
            each.reset or 0 for each in regmap.registers]
        if len(values) != count:
            raise RegisterRangeError(
                f"reset_values has {len(values)} entries; a register file has {count}"
            )
        for register, value in zip(regmap.registers, values, strict=True):
            if register.table != "holding":
                raise MapError(f"register {register.label} is in the {register.table} table: "
                               "the in-process register file has holding registers only")
            if type(value) is not int or not 0 <= value <= register.top:
                raise RegisterRangeError(f"data {value!r} is outside 0..{register.top}")
        if state_id is not None and (type(state_id) is not str or not state_id):
            raise ValueError(f"state_id must be a non-empty string, got {state_id!r}")
        self._identity = DeviceIdentity(state_id or f"RegisterFile:{secrets.token_hex(8)}",
                                        new_epoch() if epoch is None else check_epoch(epoch))
        super().__init__(regmap)
        self._default = regmap.is_default
        #: The register at each address, and the plain ones (every bit read-write, no side
        #: effects: a write stores what it writes) with their largest value: the fast path.
        self._spec: dict[int, Register] = {r.addr: r for r in regmap.registers}
        self._plain: dict[int, int] = {addr: spec.top for addr, spec in self._spec.items()
                                       if spec.access == "rw" and not spec.fields}
        self._reset_values = {register.addr: value
                              for register, value in zip(regmap.registers, values, strict=True)}
        self._registers = dict(self._reset_values)
        self._lock = threading.Lock()
        #: Number of writes applied since construction (for tests and statistics).
        self.write_count = 0

    def _register(self, addr: object) -> Register:
        """The register at ``addr``; RegisterRangeError naming it when there is none."""
        spec = self._spec.get(addr) if type(addr) is int else None
        if spec is None:
            check_access(addr, 0, self._regmap)  # raises, naming the address
        assert spec is not None
        return spec

    def read(self, addr: int) -> int:
        """Return register ``addr``, as a read returns it (write-only bits 0); clear-on-read
        bits clear.

        Raises:
            RegisterRangeError: ``addr`` is not an int naming a register (0..15 for the
                default map).
        """
        # As in write(): one path for a plain register of any map.
        if type(addr) is int and addr in self._plain:
            with self._lock:
                return self._registers[addr]
        if self._default:
            check_access(addr)  # raises, naming the address
        spec = self._register(addr)
        with self._lock:
            return self._read(addr, spec)

    def _read(self, addr: int, spec: Register) -> int:
        """One read, lock held."""
        value = self._registers[addr]
        if addr in self._plain:
            return value
        shown, self._registers[addr] = spec.read_effect(value)
        return shown

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..2**width-1: 0..255 for an 8-bit register) to register ``addr``
        and return the value it holds after (as a read would show it, without clearing
        anything).

        Raises:
            RegisterRangeError: ``addr`` is no register, ``data`` does not fit it, or the
                register refuses it (read-only, reserved bits set); nothing is written.
        """
        # A plain read-write register (no fields) of any map, the default map's every one,
        # stores what is written: one path, decided per register when the file was made.
        top = self._plain.get(addr) if type(addr) is int else None
        if top is not None and type(data) is int and 0 <= data <= top:
            with self._lock:
                self._registers[addr] = data
                self.write_count += 1
                return data
        if self._default:
            check_access(addr, data)  # raises, naming the value out of range
        return self.write_masked(addr, self._register(addr).top, data)

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        """One atomic read-modify-write: the bits ``mask`` of register ``addr`` take those of
        ``data`` (write-1-to-clear bits clear where ``data`` has a 1), every other bit keeps
        its value; under the register file's lock, so no other write comes between. Returns
        the value after, as a read would show it (without clearing anything).

        Raises:
            RegisterRangeError: ``addr`` is no register, ``mask`` or ``data`` does not fit it
                (0..255 for an 8-bit register), or the register refuses the write (read-only,
                a reserved bit set in ``mask``); nothing is written.
        """
        spec = self._register(addr)
        for name, value in (("mask", mask), ("data", data)):
            if type(value) is not int or not 0 <= value <= spec.top:
                raise RegisterRangeError(f"{name} {value!r} is outside 0..{spec.top}")
        refused = spec.refuse_write(data, mask)
        if refused is not None:
            raise RegisterRangeError(refused)
        with self._lock:
            new = self._registers[addr] = spec.written(self._registers[addr], data, mask)
            self.write_count += 1
            return new & spec.readable_mask

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` (1..16 values 0..255) to the registers ``addr``, ``addr + 1``, ...,
        all or nothing: every address and value is checked first, then all are written
        under the lock. Returns the values after, as :meth:`write` does.

        Raises:
            RegisterRangeError: an address of the block is no register, a value is not an int
                0..255, or a register refuses its value; nothing is written.
        """
        values = list(data)
        check_block(addr, len(values), self._regmap)
        return self._write_run(addr, values)

    def _write_run(self, addr: int, values: list[int]) -> list[int]:
        """Write ``values`` from ``addr`` up, all or nothing, under one hold of the lock
        (every address a register: checked by the caller)."""
        if self._default:  # plain read-write bytes: checked as write() checks, then stored
            for value in values:
                if type(value) is not int or not 0 <= value <= DATA_MAX:
                    check_access(addr, value)  # raises, naming the value
            with self._lock:
                for at, value in enumerate(values, addr):
                    self._registers[at] = value
                self.write_count += len(values)
                return list(values)
        specs = [self._register(addr + index) for index in range(len(values))]
        for spec, value in zip(specs, values, strict=True):
            check_access(spec.addr, value, self._regmap)
            refused = spec.refuse_write(value)
            if refused is not None:
                raise RegisterRangeError(refused)
        with self._lock:
            out = []
            for spec, value in zip(specs, values, strict=True):
                new = self._registers[spec.addr] = spec.written(
                    self._registers[spec.addr], value)
                out.append(new & spec.readable_mask)
            self.write_count += len(values)
            return out

    def read_block(self, addr: int, count: int) -> list[int]:
        """Read ``count`` (1..16) registers from ``addr`` up, as :meth:`read` does, under one
        hold of the lock.

        Raises:
            RegisterRangeError: an address of the block is not a register (nothing read).
        """
        check_block(addr, count, self._regmap)
        return self._read_run(addr, count)

    def _read_run(self, addr: int, count: int) -> list[int]:
        """Read ``count`` registers from ``addr`` up under one hold of the lock."""
        specs = [self._register(addr + index) for index in range(count)]
        with self._lock:
            return [self._read(spec.addr, spec) for spec in specs]

    def read_table(self, table: str, addr: int, count: int) -> list[int]:
        """Read ``count`` (1 or more) consecutive holding registers from ``addr`` up under one
        hold of the lock (no torn read), as :meth:`read` does; the register file has no other
        table.

        Raises:
            RegisterRangeError: ``count`` is not an int >= 1, or an address is no register.
            DeviceRefused: ``table`` is not ``"holding"``; nothing read.
        """
        if table != "holding":
            return super().read_table(table, addr, count)
        if type(count) is not int or count < 1:
            raise RegisterRangeError(f"count must be an int >= 1, got {count!r}")
        return self._read_run(addr, count)

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        """Write ``data`` (1 or more values) to consecutive holding registers from ``addr`` up,
        all or nothing under one hold of the lock, as :meth:`write_block` does (without its
        16); the register file has no other table.

        Raises:
            RegisterRangeError: ``data`` is empty, an address is no register, or a value is
                refused; nothing is written.
            DeviceRefused: ``table`` is not ``"holding"``; nothing written.
        """
        if table != "holding":
            return super().write_table(table, addr, data)
        values = list(data)
        if not values:
            raise RegisterRangeError("a write needs at least one value")
        for each in range(addr, addr + len(values)):
            self._register(each)  # raises, naming an address that is no register
        return self._write_run(addr, values)

    def hardware_set(self, addr: int, bits: int) -> int:
        """Set ``bits`` of register ``addr`` as the device's hardware would (a status flag,
        an error bit), whatever software may write; reserved bits stay 0. Returns the value
        after. For simulations and tests: this is not a tool call.

        Raises:
            RegisterRangeError: ``addr`` is no register or ``bits`` does not fit it.
        """
        spec = self._register(addr)
        check_access(addr, bits, self._regmap)
        with self._lock:
            new = self._registers[addr] = (self._registers[addr] | bits) & spec.field_mask
            return new

    def reset(self) -> None:
        """Restore every register to its reset value, and begin a new reset epoch."""
        with self._lock:
            self._registers.update(self._reset_values)
            self._identity = DeviceIdentity(self._identity.device, new_epoch())

    def snapshot(self) -> list[int]:
        """Return a copy of every register's value, in the map's address order (address 0
        first for the default map's 16), as a read shows it but without clearing anything."""
        with self._lock:
            if self._default:
                return list(self._registers.values())
            values = self._registers
            return [values[r.addr] & r.readable_mask for r in self._regmap.registers]

    def identify(self) -> str:
        """Return ``"regdev register file, 16 x 8-bit (in process)"`` (the number of
        registers of its map, and their width: ``8..32-bit`` when they differ)."""
        widths = sorted({register.width for register in self._regmap.registers})
        shown = str(widths[0]) if len(widths) == 1 else f"{widths[0]}..{widths[-1]}"
        return f"regdev register file, {len(self._regmap)} x {shown}-bit (in process)"

    def map_mismatch(self) -> str | None:
        """None: the register file is made from its map."""
        return None

    def state_id(self) -> str:
        """The ``state_id`` given at construction, else ``"RegisterFile:"`` and 16 random hex
        digits."""
        return self._identity.device

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        """Its id and its current reset epoch (known in process: ``refresh`` changes
        nothing)."""
        return self._identity

    def known_identity(self) -> DeviceIdentity:
        """The same as :meth:`identity`."""
        return self._identity


class TimeoutDevice(Device):
    """Another device whose every call a caller waits for at most ``timeout`` seconds.

    This is the gate's ``timeout`` (see :class:`~regdev.Gate`). One worker thread runs the
    wrapped device's calls one at a time, in order. A caller that has waited ``timeout``
    seconds gets:

    * :class:`~regdev.DeviceBusy` if its call had not started (the device was busy with an
      earlier one): the call is cancelled and never runs, so nothing was applied, and the
      same call may succeed later;
    * :class:`~regdev.DeviceTimeout` if it had started: it cannot be stopped (Python cannot
      interrupt a blocked call), so it runs to its end in the worker and its result is
      dropped; a write may or may not be applied. The caller is told so and is never told it
      succeeded.

    So at most one thread is ever busy with a stuck call, and nothing piles up behind it: the
    calls queued behind it time out and are cancelled in turn. A backend with its own
    transaction timeout (the serial bridge) should have it shorter than this one, so that this
    is only a backstop.

    Args:
        device: the device to call.
        timeout: seconds a caller waits for one call, queueing included: a number in
            0.001..86400 (:func:`check_timeout`).

    Raises:
        ValueError: ``timeout`` is not such a number.
    """

    def __init__(self, device: Device, timeout: float) -> None:
        check_timeout(timeout)
        super().__init__(device.regmap)
        self.device = device
        self.timeout = float(timeout)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._work, daemon=True,
                                        name=f"regdev-device {type(device).__name__}")
        self._worker.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                if job.cancelled:
                    continue
                job.started = True
            try:
                job.result = job.function(*job.args)
            except BaseException as error:  # handed to the caller, who re-raises it
                job.error = error
            job.done.set()

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        job = _Job(function, args)
        self._jobs.put(job)
        if not job.done.wait(self.timeout):
            with self._lock:
                started = job.started
                job.cancelled = not started
            if not started:
                raise DeviceBusy(f"the device was busy for {self.timeout:g} s with an earlier "
                                 "call; this call was cancelled and not applied")
            if not job.done.is_set():
                raise DeviceTimeout(f"the device call did not finish within {self.timeout:g} "
                                    "s; a write may still be applied: read the register back")
        if job.error is not None:
            raise job.error
        return job.result

    def read(self, addr: int) -> int:
        """Return register ``addr`` (0..15), waiting at most ``timeout`` seconds."""
        result: int = self._call(self.device.read, addr)
        return result

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` to register ``addr``, waiting at most ``timeout`` seconds."""
        result: int = self._call(self.device.write, addr, data)
        return result

    def read_block(self, addr: int, count: int) -> list[int]:
        """Read a block of registers, waiting at most ``timeout`` seconds."""
        result: list[int] = self._call(self.device.read_block, addr, count)
        return result

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        """Write a block of registers, waiting at most ``timeout`` seconds."""
        result: list[int] = self._call(self.device.write_block, addr, data)
        return result

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        """One masked write, waiting at most ``timeout`` seconds."""
        result: int = self._call(self.device.write_masked, addr, mask, data)
        return result

    def read_table(self, table: str, addr: int, count: int) -> list[int]:
        """Read registers of one table in one transaction, waiting at most ``timeout``
        seconds."""
        result: list[int] = self._call(self.device.read_table, table, addr, count)
        return result

    def write_table(self, table: str, addr: int, data: Sequence[int]) -> list[int]:
        """Write registers of one table in one transaction, waiting at most ``timeout``
        seconds."""
        result: list[int] = self._call(self.device.write_table, table, addr, data)
        return result

    def reset(self) -> None:
        """Reset the device, waiting at most ``timeout`` seconds."""
        self._call(self.device.reset)

    def snapshot(self) -> Sequence[int | None]:
        """The wrapped device's :meth:`~Device.snapshot`, waiting at most ``timeout``
        seconds."""
        result: Sequence[int | None] = self._call(self.device.snapshot)
        return result

    def reset_leaves(self) -> str | None:
        """The wrapped device's :meth:`~Device.reset_leaves`, waiting at most ``timeout``
        seconds (it may ask the device who it is)."""
        result: str | None = self._call(self.device.reset_leaves)
        return result

    def identify(self) -> str:
        """The wrapped device's description."""
        return self.device.identify()

    def map_mismatch(self) -> str | None:
        """The wrapped device's :meth:`~Device.map_mismatch`, waiting at most ``timeout``
        seconds."""
        result: str | None = self._call(self.device.map_mismatch)
        return result

    @property
    def regmap(self) -> RegisterMap:
        """The wrapped device's register map."""
        return self.device.regmap

    def state_id(self) -> str:
        """The wrapped device's :meth:`~Device.state_id`: the registers are its."""
        return self.device.state_id()

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        """The wrapped device's :meth:`~Device.identity`, waiting at most ``timeout`` seconds
        (it may ask the device)."""
        result: DeviceIdentity = self._call(lambda: self.device.identity(refresh=refresh))
        return result

    def known_identity(self) -> DeviceIdentity | None:
        """The wrapped device's :meth:`~Device.known_identity` (no I/O, so not queued)."""
        return self.device.known_identity()

    def close(self) -> None:
        """Stop the worker once its queue is done (without waiting for a stuck call)."""
        self._jobs.put(None)


class _Job:
    __slots__ = ("args", "cancelled", "done", "error", "function", "result", "started")

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function = function
        self.args = args
        self.done = threading.Event()
        self.started = False
        self.cancelled = False
        self.result: Any = None
        self.error: BaseException | None = None
