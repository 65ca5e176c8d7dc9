"""The exceptions regdev raises on purpose, all rooted at :class:`RegdevError`.

The tree::

    RegdevError
    ├── SchemaError            a tool schema is malformed or uses an unsupported keyword
    │                          (raised when a tool is declared or compiled, never per call)
    ├── ProtocolError          the serial wire protocol was broken
    │   ├── LocalProtocolError     by this side (misuse of the codec)
    │   └── RemoteProtocolError    by the peer (garbage, bad checksum, over-long frame)
    ├── TransportError         the request was not sent, so nothing was executed: the port
    │   │                      could not be opened, read or written, or the line could not
    │   │                      be synchronised first (the serial backend reopens the port
    │   │                      on the next transaction)
    │   └── LineElsewhere      the serial line is driven by another process of the fleet
    │                          (it holds the line's lease): not sent
    ├── PolicyError            a policy (file or Python) is invalid, or names a session or
    │                          tool that does not exist (raised when the policy is loaded)
    ├── MapError               a register map (SystemRDL or its compiled JSON form) cannot be
    │                          read or describes what regdev does not support (file:line)
    ├── AuditError             the audit database could not be opened, read or written
    │   │                      (wraps ``sqlite3.Error`` and ``OSError``)
    │   └── AuditInUse         another writer (process or AuditLog) has the database open
    ├── ValueRefused           a typed value's write does not convert at the scale factor
    │                          the device holds (checked before anything is written)
    ├── ReplayFileError        a replay file cannot be read, or a line of it is not a replay
    │                          record (``regdev.agents._replay``; raised before anything runs)
    └── DeviceError            the device failed an operation: it ran it, or may have, and
        │                      did not answer as it should (a value other than the one
        │                      written, not a byte); the subclasses say more
        ├── RegisterRangeError     an address that is no register, data outside 0..255, or
        │                          data the register refuses (read-only, reserved bits):
        │                          refused by the register file, not executed
        ├── DeviceTimeout          the request was sent and no valid reply came within the
        │   │                      timeout: whether the device executed it is unknown
        │   └── ReplyLost          the request was sent, then the port failed before the
        │                          reply: unknown too, as after a timeout
        ├── DeviceBusy             not executed, and the same request may succeed later: the
        │                          device answered BUSY (or CKSUM, SYNTAX: the request was
        │                          damaged on the line), or the call was queued behind a hung
        │                          one and cancelled
        └── DeviceRefused          the device refused the request for good (an error code
                                   such as ADDR): not executed

A model's tool call never raises: the gate turns every refusal into an observation. These
exceptions are for Python callers who use the parts directly (the register file, the schema
compiler, the serial backend). Backend exceptions (``serial.SerialException``, ``OSError``)
are mapped to these at the transport and never leak past it; ``sqlite3.Error`` and ``OSError``
from the audit database are mapped to :class:`AuditError` in ``_audit.py``.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "AuditInUse",
    "DeviceBusy",
    "DeviceError",
    "DeviceRefused",
    "DeviceTimeout",
    "LineElsewhere",
    "LocalProtocolError",
    "MapError",
    "PolicyError",
    "ProtocolError",
    "RegdevError",
    "RegisterRangeError",
    "RemoteProtocolError",
    "ReplyLost",
    "SchemaError",
    "TransportError",
    "ValueRefused",
]


class RegdevError(Exception):
    """Base class of every exception regdev raises on purpose."""


class SchemaError(RegdevError):
    """A tool schema is malformed or uses a keyword outside the supported subset.

    The message is one line: the reason, then the place, e.g. ``keyword `pattern` is not
    supported - at `/0/inputSchema/properties/a/pattern```; the pointer is shown with control
    characters, non-ASCII and backticks escaped, and the whole document as ``(root)``.

    Attributes:
        reason: what is wrong, without the place, e.g. ``"keyword `pattern` is not supported"``.
        pointer: JSON Pointer (RFC 6901) to the offending place, e.g.
            ``/properties/addr/pattern``; ``""`` is the whole document.
    """

    def __init__(self, reason: str, pointer: str = "") -> None:
        self.reason = reason
        self.pointer = pointer
        super().__init__(f"{reason} - at {_show_pointer(pointer)}")

    def at(self, prefix: str) -> SchemaError:
        """The same error, located inside a larger document: ``prefix`` goes before the pointer.

        Args:
            prefix: the JSON Pointer of this error's document in the larger one, e.g. ``/1``.

        Returns:
            A new :class:`SchemaError` with the same reason and ``prefix + pointer``.
        """
        return SchemaError(self.reason, prefix + self.pointer)


def _show_pointer(pointer: str) -> str:
    """A JSON Pointer for a one-line message: escaped, in backticks; ``""`` as ``(root)``."""
    if not pointer:
        return "(root)"
    shown = pointer.encode("unicode_escape").decode("ascii").replace("`", "\\x60")
    if len(shown) > 300:  # keep both ends: where it starts, and the keyword at the end
        shown = f"{shown[:100]}...{shown[-197:]}"
    return f"`{shown}`"


class ProtocolError(RegdevError):
    """The serial wire protocol was broken."""


class LocalProtocolError(ProtocolError):
    """This side misused the protocol codec (a bug in the caller, not the peer)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that break the protocol (garbage, bad checksum, over-long frame).

    The codec has already dropped the offending bytes when it raises this, so the link is
    usable again: call ``next_event()`` once more to go on with the bytes after them.

    Attributes:
        code: the error code a device answers such a frame with (``docs/protocol.md``):
            ``"CKSUM"`` for a checksum mismatch, ``"SYNTAX"`` for anything else.
        seq: the frame's sequence number (1..255) when it could be read, else None.
    """

    def __init__(self, message: str, code: str = "SYNTAX", seq: int | None = None) -> None:
        self.code = code
        self.seq = seq
        super().__init__(message)


class TransportError(RegdevError):
    """The request was not sent: the port could not be opened, read or written (wraps the
    backend's own exception), or the line could not be synchronised before it.

    Nothing was executed (a frame cut short is never executed), so the call may be made again.
    Once a request (or an earlier attempt of the same transaction) went out, a failure is
    :class:`DeviceTimeout` or :class:`ReplyLost` instead, never this.
    """


class LineElsewhere(TransportError):
    """The request was not sent: its device is on a serial line that another process holds
    the lease of (``docs/postgresql.md``), or whose lease could not be taken or confirmed.
    The message names the line, the owner and when its lease expires."""


class PolicyError(RegdevError, ValueError):
    """A policy is invalid: the message is one line naming the file (if any) and the field,
    e.g. ``policy.toml: `sessions.viewer.scopes[0]`: input should be 'read' or 'write'``."""


class MapError(RegdevError, ValueError):
    """A register map cannot be read, or describes something regdev does not support.

    The message is one line naming where: ``example.rdl:12:5: ...`` for SystemRDL (the
    compiler's first error, or the construct regdev refuses), ``map.json: `registers[2].reset`:
    ...`` for the compiled JSON form, or the register and field for a map built in Python.
    """


class AuditError(RegdevError):
    """The audit database could not be opened, read or written (the message names the path).

    Attributes:
        reason: the storage error alone, without the path (safe to show a model), e.g.
            ``"disk I/O error"``; empty when there is none.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        self.reason = reason
        super().__init__(message)


class AuditInUse(AuditError):
    """Another writer holds the audit database: one :class:`~regdev.AuditLog` writes a
    database at a time (the idempotency keys each writer indexes in memory would go stale).

    Attributes:
        holder: what the holder wrote into the lock file: ``"<pid> <command line>"``, or
            ``""`` when it had not written it yet.
    """

    def __init__(self, message: str, holder: str = "") -> None:
        self.holder = holder
        super().__init__(message, "the audit database is in use by another writer")


class ValueRefused(RegdevError):
    """A write of a typed value refused before anything was written, where the refusal
    depends on what the device holds (the scale factor of a SunSpec value): the engineering
    value is outside what the factor converts, or not a whole number of its steps.

    Attributes:
        code: the verdict code, ``resolution`` (at execute: the value does not convert at
            the factor the device holds).
    """

    def __init__(self, message: str, code: str) -> None:
        self.code = code
        super().__init__(message)


class DeviceError(RegdevError):
    """The device failed an operation: it ran it, or may have, and did not answer as it should.

    Raised as such when the device executed the request but its answer is wrong (a write
    acknowledged with another value than the one written, a value that is not a byte); the
    subclasses say more about what happened to the request.
    """


class RegisterRangeError(DeviceError, ValueError):
    """The register file refused a request, not executed: an address that is not one of its
    registers (outside 0..15 for the default map), data outside 0..255, or data the register
    refuses (a write to a read-only register, reserved bits set)."""


class DeviceTimeout(DeviceError):
    """The request was sent and no valid reply came within the timeout (seconds): the outcome
    is unknown, so a write or reset may or may not have been executed; read back."""


class ReplyLost(DeviceTimeout):
    """The request was sent, then the port failed (disconnected, I/O error) before its reply.

    As after a timeout, a write or reset may or may not have been executed: read back. The
    port is reopened by the next transaction.
    """


class DeviceBusy(DeviceError):
    """The request was not executed, and the same request may succeed later.

    The device answered ``BUSY``, or ``CKSUM`` or ``SYNTAX`` (the request was damaged on the
    line); or a :class:`~regdev.TimeoutDevice` cancelled the call while it was still queued
    behind an earlier one that had not finished.

    Attributes:
        code: the device's error code as sent on the wire (``"BUSY"``, ``"CKSUM"``,
            ``"SYNTAX"``); empty when the call was cancelled before reaching the device.
    """

    def __init__(self, message: str, code: str = "") -> None:
        self.code = code
        super().__init__(message)


class DeviceRefused(DeviceError):
    """The device refused the request for good (sending it again will not help): not executed.

    Attributes:
        code: the device's error code as sent on the wire, e.g. ``"ADDR"``.
    """

    def __init__(self, message: str, code: str = "") -> None:
        self.code = code
        super().__init__(message)
