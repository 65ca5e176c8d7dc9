"""The exceptions regdev raises on purpose, all rooted at :class:`RegdevError`.

The tree::

    RegdevError
    ├── SchemaError            a tool schema is malformed or uses an unsupported keyword
    │                          (raised when a tool is declared or compiled, never per call)
    ├── ProtocolError          the serial wire protocol was broken
    │   ├── LocalProtocolError     by this side (misuse of the codec)
    │   └── RemoteProtocolError    by the peer (garbage, bad checksum, over-long frame)
    ├── TransportError         the port could not be opened, read or written, and the
    │                          request was not sent: nothing was executed (the serial
    │                          backend reopens the port on the next transaction)
    ├── PolicyError            a policy (file or Python) is invalid, or names a session or
    │                          tool that does not exist (raised when the policy is loaded)
    ├── AuditError             the audit database could not be opened, read or written
    │                          (wraps ``sqlite3.Error`` and ``OSError``)
    └── DeviceError            the device refused or failed an operation
        ├── RegisterRangeError     address outside 0..15 or data outside 0..255
        ├── DeviceTimeout          the request was sent and no valid reply came within the
        │   │                      timeout: whether the device executed it is unknown
        │   └── ReplyLost          the request was sent, then the port failed before the
        │                          reply: unknown too, as after a timeout
        └── DeviceRefused          the device answered with an error code: not executed

A model's tool call never raises: the gate turns every refusal into an observation. These
exceptions are for Python callers who use the parts directly (the register file, the schema
compiler, the serial backend). Backend exceptions (``serial.SerialException``, ``OSError``)
are mapped to these at the transport and never leak past it; ``sqlite3.Error`` and ``OSError``
from the audit database are mapped to :class:`AuditError` in ``_audit.py``.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "DeviceError",
    "DeviceRefused",
    "DeviceTimeout",
    "LocalProtocolError",
    "PolicyError",
    "ProtocolError",
    "RegdevError",
    "RegisterRangeError",
    "RemoteProtocolError",
    "ReplyLost",
    "SchemaError",
    "TransportError",
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
    """The port could not be opened, read or written (wraps the backend's own exception).

    Raised by a transaction only when its request was not sent (or not completely: a frame
    cut short is never executed), so nothing was executed and the call may be made again.
    A port that fails after the request went out raises :class:`ReplyLost` instead.
    """


class PolicyError(RegdevError, ValueError):
    """A policy is invalid: the message is one line naming the file (if any) and the field,
    e.g. ``policy.toml: `sessions.viewer.scopes[0]`: input should be 'read' or 'write'``."""


class AuditError(RegdevError):
    """The audit database could not be opened, read or written (the message names the path).

    Attributes:
        reason: the storage error alone, without the path (safe to show a model), e.g.
            ``"disk I/O error"``; empty when there is none.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        self.reason = reason
        super().__init__(message)


class DeviceError(RegdevError):
    """The device refused or failed an operation."""


class RegisterRangeError(DeviceError, ValueError):
    """An address outside 0..15 or a data value outside 0..255 reached the register file."""


class DeviceTimeout(DeviceError):
    """No valid reply within the transaction timeout (seconds): the outcome is unknown.

    The request was sent (or, when the message says so, held back because the line could not
    be synchronised first); a write or reset may or may not have been executed.
    """


class ReplyLost(DeviceTimeout):
    """The request was sent, then the port failed (disconnected, I/O error) before its reply.

    As after a timeout, a write or reset may or may not have been executed: read back. The
    port is reopened by the next transaction.
    """


class DeviceRefused(DeviceError):
    """The device answered with an error code instead of an acknowledgement: not executed.

    Attributes:
        code: the device's error code as sent on the wire, e.g. ``"ADDR"``.
        transient: True when the same request may succeed if sent again: the device was busy
            (``BUSY``), or the request was damaged on the line (``CKSUM``, ``SYNTAX``).
    """

    def __init__(self, message: str, code: str = "", transient: bool = False) -> None:
        self.code = code
        self.transient = transient
        super().__init__(message)
