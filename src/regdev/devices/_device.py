"""The register device: 16 registers of 8 bits, in process or behind a transport.

:class:`Device` is the one small base class every backend implements (the in-process
:class:`RegisterFile` here, the serial backend elsewhere). The gate talks only to it.
:class:`TimeoutDevice` wraps any device to bound how long a caller waits for it.

Every device says who it is and when it last started over: :meth:`Device.identity`, a
:class:`DeviceIdentity` of its id and its reset epoch. Idempotency keys are scoped to both, so
a write stored under a key is replayed only to the device it was applied to, and only while
that device has not been reset since, by any path: the in-process register file draws a new
epoch at every reset, and a device on a serial line says its epoch in its identify reply
(``docs/protocol.md``). A device that cannot say its epoch gets no replays.
"""

from __future__ import annotations

import math
import queue
import re
import secrets
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..core._errors import DeviceBusy, DeviceTimeout, RegisterRangeError

__all__ = ["DATA_MAX", "REGISTER_COUNT", "Device", "DeviceIdentity", "RegisterFile",
           "TimeoutDevice", "check_access", "check_epoch", "check_timeout", "new_epoch"]

#: Number of registers; valid addresses are 0..REGISTER_COUNT-1 (0..15).
REGISTER_COUNT = 16
#: Largest data value of one 8-bit register (0..255).
DATA_MAX = 0xFF


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


def check_timeout(timeout: object) -> None:
    """Refuse a timeout that is not a finite number of seconds in (0, threading.TIMEOUT_MAX].

    A longer wait overflows the platform's lock timeout (``OverflowError`` from
    ``threading``), and ``inf`` or NaN is no time at all.

    Raises:
        ValueError: ``timeout`` is not an int or float in that range (``bool`` is not).
    """
    if (type(timeout) not in (int, float) or not math.isfinite(timeout)  # type: ignore[arg-type]
            or not 0 < timeout <= threading.TIMEOUT_MAX):  # type: ignore[operator]
        raise ValueError(f"timeout must be a positive number of seconds, at most "
                         f"{threading.TIMEOUT_MAX:g} (threading.TIMEOUT_MAX), got {timeout!r}")


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
    """The in-process register file: 16 registers of 8 bits with reset values. Thread-safe.

    It says who it is and when it last started over (:meth:`identity`): its id, and a reset
    epoch drawn at construction and again at every :meth:`reset` (:func:`new_epoch`), so an
    idempotency key is never replayed to it after a reset, whoever called it.

    Args:
        reset_values: 16 values in 0..255 taken at construction and by :meth:`reset`;
            all 0 when omitted.
        state_id: its id (what :meth:`state_id` returns, and the ``device`` of
            :meth:`identity`). None (the default): ``"RegisterFile:"`` and 16 random hex
            digits, unique to this object, since its registers live only as long as it does.
        epoch: the reset epoch it starts in (1..16 characters of 0-9 and A-Z); None (the
            default) draws a new one. Pass the id and epoch an earlier object reported only
            when this one stands for the same registers, not reset since (a test of a
            restart, a model of a device that keeps its state): idempotency keys stored
            through the earlier one are then replayed to it.

    Raises:
        RegisterRangeError: ``reset_values`` is not 16 ints in 0..255.
        ValueError: ``state_id`` is an empty string or not a string, or ``epoch`` is not a
            reset epoch.
    """

    def __init__(self, reset_values: Sequence[int] | None = None, *,
                 state_id: str | None = None, epoch: str | None = None) -> None:
        values = list(reset_values) if reset_values is not None else [0] * REGISTER_COUNT
        if len(values) != REGISTER_COUNT:
            raise RegisterRangeError(
                f"reset_values has {len(values)} entries; a register file has {REGISTER_COUNT}"
            )
        for value in values:
            check_access(0, value)
        if state_id is not None and (type(state_id) is not str or not state_id):
            raise ValueError(f"state_id must be a non-empty string, got {state_id!r}")
        self._identity = DeviceIdentity(state_id or f"RegisterFile:{secrets.token_hex(8)}",
                                        new_epoch() if epoch is None else check_epoch(epoch))
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
        if type(addr) is not int or not 0 <= addr < REGISTER_COUNT:
            check_access(addr)  # raises, naming the address
        with self._lock:
            return self._registers[addr]

    def write(self, addr: int, data: int) -> int:
        """Write ``data`` (0..255) to register ``addr`` (0..15) and return the value stored.

        Raises:
            RegisterRangeError: ``addr`` or ``data`` is out of range or not an int.
        """
        if type(addr) is not int or not 0 <= addr < REGISTER_COUNT \
                or type(data) is not int or not 0 <= data <= DATA_MAX:
            check_access(addr, data)  # raises, naming the value out of range
        with self._lock:
            self._registers[addr] = data
            self.write_count += 1
            return data

    def reset(self) -> None:
        """Restore every register to its reset value, and begin a new reset epoch."""
        with self._lock:
            self._registers[:] = self._reset_values
            self._identity = DeviceIdentity(self._identity.device, new_epoch())

    def snapshot(self) -> list[int]:
        """Return a copy of all 16 registers, address 0 first."""
        with self._lock:
            return list(self._registers)

    def identify(self) -> str:
        """Return ``"regdev register file, 16 x 8-bit (in process)"``."""
        return f"regdev register file, {REGISTER_COUNT} x 8-bit (in process)"

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
        timeout: seconds a caller waits for one call, queueing included: a finite number
            > 0 and at most ``threading.TIMEOUT_MAX`` (the longest wait the platform's locks
            take, about 292 years on Linux).

    Raises:
        ValueError: ``timeout`` is not such a number.
    """

    def __init__(self, device: Device, timeout: float) -> None:
        check_timeout(timeout)
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

    def reset(self) -> None:
        """Reset the device, waiting at most ``timeout`` seconds."""
        self._call(self.device.reset)

    def snapshot(self) -> list[int]:
        """Return all 16 registers, waiting at most ``timeout`` seconds."""
        result: list[int] = self._call(self.device.snapshot)
        return result

    def identify(self) -> str:
        """The wrapped device's description."""
        return self.device.identify()

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
